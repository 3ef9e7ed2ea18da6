"""The simulator's dataset: a generated multi-source arithmetic/logic set, or a user's parquet file.

Layout (verl's RL parquet layout, so the same file can feed a real verl run):

| column | type | meaning |
|---|---|---|
| ``prompt`` | list of ``{"role", "content"}`` (chat format, one user message) | the question |
| ``data_source`` | str | source name |
| ``ability`` | str | ``"math"`` or ``"logic"`` |
| ``reward_model`` | struct ``{style: "rule", ground_truth: str}`` | the answer |
| ``extra_info`` | struct ``{index: int, complexity_score: float, solution: str, split: str}`` | |

A user's file needs ``prompt`` (chat list or plain string), ``data_source`` and the answer as
``reward_model.ground_truth`` or a top-level ``answer`` column; ``extra_info.complexity_score`` is
optional (rows without it get the median difficulty) and ``extra_info.solution`` too (worked steps
the simulated learner writes into its reasoning).
"""

from __future__ import annotations

from pathlib import Path

import attrs
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import structlog

from rlhooks.core.data import DataError, DatasetColumns, complexity_scores, source_codes
from rlhooks.core.rundir import claim, open_atomic

log = structlog.get_logger("rlhooks.sim")

SYSTEM_HINT = (
    "Think step by step inside <reasoning>...</reasoning>, then give only the final number "
    "inside <answer>...</answer>."
)

#: built-in source profiles, in the order they are generated
SOURCE_PROFILES: dict[str, str] = {
    "arith_add": "sums of 2-4 numbers with 1-4 digits; mostly easy (complexity 0.05-0.5)",
    "arith_mul": "products of two numbers with 1-3 digits; medium (complexity 0.2-0.8)",
    "chain": "2-6 step chains of + - * on small numbers; hard, wide spread (complexity 0.15-1.0)",
    "logic": "how many of 2-8 statements (comparisons, parity) are true; spread (complexity 0.1-0.9)",
}


def _fmt(values: np.ndarray) -> np.ndarray:
    """int array -> object array of decimal strings."""
    return np.asarray(values).astype(np.int64).astype(str).astype(object)


def _jitter(rng: np.random.Generator, n: int, scale: float = 0.04) -> np.ndarray:
    return rng.normal(0.0, scale, n)


def _arith_add(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    terms = rng.integers(2, 5, n)  # 2..4 terms
    digits = rng.integers(1, 5, n)  # 1..4 digits
    hi = 10 ** digits
    vals = rng.integers(1, hi[:, None], (n, 4))
    vals = np.where(np.arange(4)[None, :] < terms[:, None], vals, 0)
    total = vals.sum(1)
    s = [_fmt(vals[:, k]) for k in range(4)]
    expr = s[0] + " + " + s[1]
    for k in (2, 3):
        expr = np.where(terms > k, expr + " + " + s[k], expr)
    question = "What is " + expr + "?"
    solution = expr + " = " + _fmt(total)
    complexity = 0.05 + 0.09 * (digits - 1) + 0.06 * (terms - 2) + _jitter(rng, n, 0.03)
    return question, solution, total, np.clip(complexity, 0.0, 0.5)


def _arith_mul(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    da = rng.integers(1, 4, n)
    db = rng.integers(1, 4, n)
    a = rng.integers(2, 10 ** da)
    b = rng.integers(2, 10 ** db)
    prod = a * b
    expr = _fmt(a) + " * " + _fmt(b)
    question = "What is " + expr + "?"
    solution = expr + " = " + _fmt(prod)
    complexity = 0.2 + 0.1 * (da + db - 2) + _jitter(rng, n)
    return question, solution, prod, np.clip(complexity, 0.0, 1.0)


def _chain(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    steps = rng.integers(2, 7, n)  # 2..6 operations
    value = rng.integers(2, 20, n)
    question = "Start with " + _fmt(value) + "."
    solution = _fmt(value)
    ops = np.array([" + ", " - ", " * "], dtype=object)
    words = np.array(["add", "subtract", "multiply by"], dtype=object)
    for k in range(6):
        active = steps > k
        op = rng.integers(0, 3, n)
        operand = np.where(op == 2, rng.integers(2, 6, n), rng.integers(1, 30, n))
        new = np.select([op == 0, op == 1, op == 2], [value + operand, value - operand, value * operand])
        step_text = "; " + _fmt(value) + ops[op] + _fmt(operand) + " = " + _fmt(new)
        question = np.where(active, question + " Then " + words[op] + " " + _fmt(operand) + ".", question)
        solution = np.where(active, np.where(k == 0, solution + ops[op] + _fmt(operand) + " = " + _fmt(new), solution + step_text), solution)
        value = np.where(active, new, value)
    question = question + " What is the result?"
    complexity = 0.15 + 0.16 * (steps - 2) + _jitter(rng, n)
    return question, solution, value, np.clip(complexity, 0.0, 1.0)


def _logic(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    count = rng.integers(2, 9, n)  # 2..8 statements
    question = np.full(n, "How many of these statements are true?", dtype=object)
    solution = np.full(n, "", dtype=object)
    true_count = np.zeros(n, np.int64)
    for k in range(8):
        active = count > k
        kind = rng.integers(0, 2, n)
        a = rng.integers(1, 100, n)
        b = rng.integers(1, 100, n)
        truth = np.where(kind == 0, a > b, a % 2 == 0)
        text = np.where(kind == 0, _fmt(a) + " > " + _fmt(b), _fmt(a) + " is even")
        verdict = np.where(truth, " (true)", " (false)").astype(object)
        question = np.where(active, question + " [" + text + "]", question)
        sep = "" if k == 0 else "; "
        solution = np.where(active, solution + sep + text + verdict, solution)
        true_count += (active & truth).astype(np.int64)
    solution = solution + "; true count = " + _fmt(true_count)
    complexity = 0.1 + 0.11 * (count - 2) + _jitter(rng, n)
    return question, solution, true_count, np.clip(complexity, 0.0, 1.0)


_GENERATORS = {"arith_add": _arith_add, "arith_mul": _arith_mul, "chain": _chain, "logic": _logic}
_ABILITY = {"arith_add": "math", "arith_mul": "math", "chain": "math", "logic": "logic"}


def generate_table(rows_per_source: int = 500, seed: int = 0, sources: tuple[str, ...] | None = None) -> pa.Table:
    """The default multi-source dataset as an Arrow table in verl's layout (deterministic in ``seed``)."""
    sources = tuple(sources or SOURCE_PROFILES)
    unknown = [s for s in sources if s not in _GENERATORS]
    if unknown:
        raise DataError(f"unknown simulated source(s) {unknown}; built-in sources: {', '.join(SOURCE_PROFILES)}")
    if rows_per_source <= 0:
        raise DataError(f"simulate.rows_per_source must be > 0, got {rows_per_source}")
    parts = {k: [] for k in ("question", "solution", "answer", "complexity", "source")}
    for i, name in enumerate(sources):
        rng = np.random.default_rng([seed, i])
        q, sol, ans, cx = _GENERATORS[name](rng, rows_per_source)
        parts["question"].append(np.asarray(q, dtype=object))
        parts["solution"].append(np.asarray(sol, dtype=object))
        parts["answer"].append(_fmt(ans))
        parts["complexity"].append(np.round(cx, 4))
        parts["source"].append(np.full(rows_per_source, name, dtype=object))
    question = np.concatenate(parts["question"])
    n = len(question)
    content = question + " " + SYSTEM_HINT
    prompt = pa.array(
        [[{"role": "user", "content": c}] for c in content.tolist()],
        type=pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())])),
    )
    source = np.concatenate(parts["source"])
    reward_model = pa.StructArray.from_arrays(
        [pa.array(np.full(n, "rule", dtype=object), pa.string()), pa.array(np.concatenate(parts["answer"]), pa.string())],
        names=["style", "ground_truth"],
    )
    extra_info = pa.StructArray.from_arrays(
        [
            pa.array(np.arange(n, dtype=np.int64)),
            pa.array(np.concatenate(parts["complexity"]).astype(np.float64)),
            pa.array(np.concatenate(parts["solution"]), pa.string()),
            pa.array(np.full(n, "train", dtype=object), pa.string()),
        ],
        names=["index", "complexity_score", "solution", "split"],
    )
    return pa.table({
        "data_source": pa.array(source, pa.string()),
        "prompt": prompt,
        "ability": pa.array(np.vectorize(_ABILITY.get, otypes=[object])(source), pa.string()),
        "reward_model": reward_model,
        "extra_info": extra_info,
    })


def write_dataset(path: str | Path, rows_per_source: int = 500, seed: int = 0, sources: tuple[str, ...] | None = None) -> Path:
    path = Path(path)
    claim(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    table = generate_table(rows_per_source, seed, sources)
    with open_atomic(path) as fh:  # never through a link planted at path; whole or not at all
        pq.write_table(table, fh)
    return path


@attrs.define(eq=False)
class SimDataset:
    """What the simulator needs per row, as numpy columns (text as object arrays of str)."""

    columns: DatasetColumns  # data_source codes + complexity, what samplers get
    prompt: np.ndarray  # str per row
    target: np.ndarray  # ground truth str per row
    solution: np.ndarray  # worked steps per row, written into the reasoning
    numeric_target: np.ndarray  # float per row, NaN where the target is not a number
    difficulty: np.ndarray  # complexity min-max scaled to [0, 1]; median where missing
    origin: str = "<memory>"

    def __len__(self) -> int:
        return len(self.prompt)

    @property
    def source_names(self) -> tuple[str, ...]:
        return self.columns.source_names

    @property
    def source_codes(self) -> np.ndarray:
        return self.columns.source_codes

    @classmethod
    def from_table(cls, table: pa.Table, origin: str = "<memory>") -> SimDataset:
        names = set(table.column_names)
        problems = []
        if "data_source" not in names:
            problems.append("no 'data_source' column (the source name of each row)")
        if "prompt" not in names:
            problems.append("no 'prompt' column (a chat list [{role, content}] or a string per row)")
        target_col = None
        if "reward_model" in names and pa.types.is_struct(table.schema.field("reward_model").type) and \
                table.schema.field("reward_model").type.get_field_index("ground_truth") >= 0:
            target_col = table.column("reward_model").combine_chunks().field("ground_truth")
            target_name = "reward_model.ground_truth"
        elif "answer" in names:
            target_col = table.column("answer").combine_chunks()
            target_name = "answer"
        else:
            problems.append("no answer: expected a 'reward_model' struct with 'ground_truth' or an 'answer' column")
        if problems:
            raise DataError(
                f"{origin}: cannot simulate on this dataset: " + "; ".join(problems)
                + f". Columns found: {', '.join(sorted(names)) or '(none)'}. "
                "See 'The data' in the simulated-runs guide (docs/how-to/simulate.md) for the layout, or run without --data to use generated data."
            )
        if table.num_rows == 0:
            raise DataError(f"{origin}: the dataset has no rows; give a file with at least one row per source")
        codes, source_names = source_codes(table.column("data_source"), origin)
        complexity = None
        solution = None
        if "extra_info" in names and pa.types.is_struct(table.schema.field("extra_info").type):
            ext = table.column("extra_info").combine_chunks()
            etype = table.schema.field("extra_info").type
            if etype.get_field_index("complexity_score") >= 0:
                complexity = complexity_scores(ext.field("complexity_score"), origin).astype(np.float64)
            if etype.get_field_index("solution") >= 0:
                sol = ext.field("solution")
                _require_text(sol, "extra_info.solution", origin, nulls_ok=True)
                solution = sol.to_numpy(zero_copy_only=False).astype(object)
        columns = DatasetColumns(codes, source_names, None if complexity is None else complexity.astype(np.float32), origin)
        prompt = _prompt_text(table.column("prompt").combine_chunks(), origin)
        _require_text(target_col, target_name, origin, nulls_ok=True, numbers_ok=True)
        target = target_col.to_numpy(zero_copy_only=False).astype(object)
        missing = np.flatnonzero(np.equal(target, None))
        if len(missing):
            raise DataError(
                f"{origin}: {len(missing)} rows have no answer (first at row {int(missing[0])}); every row needs "
                "reward_model.ground_truth (or answer)"
            )
        if not (pa.types.is_string(target_col.type) or pa.types.is_large_string(target_col.type)):
            target = target.astype(str).astype(object)  # numbers as text (fixed width: never for long strings)
        if solution is None:
            solution = np.full(len(prompt), "Working through the problem step by step", dtype=object)
        else:
            solution = np.where(np.equal(solution, None), "Working through the problem step by step", solution)
        numeric = _to_float(target)
        if complexity is None or not np.isfinite(complexity).any():
            difficulty = np.full(len(prompt), 0.5)
        else:  # complexity_scores() made every non-finite score NaN: rows without a score
            c = complexity.copy()
            lo, hi = np.nanmin(c), np.nanmax(c)
            c[~np.isfinite(c)] = np.nanmedian(c)
            difficulty = (c - lo) / (hi - lo) if hi > lo else np.full(len(c), 0.5)
        return cls(columns, prompt, target, solution, numeric, difficulty, origin)

    @classmethod
    def from_parquet(cls, path: str | Path) -> SimDataset:
        path = Path(path)
        if not path.exists():
            raise DataError(f"dataset file {path} does not exist; pass a parquet file to --data or omit it")
        try:
            table = pq.read_table(path)
        except (pa.ArrowInvalid, OSError) as exc:
            raise DataError(f"{path}: not a readable parquet file: {exc}") from None
        return cls.from_table(table, origin=str(path))


def _require_text(col: pa.Array, name: str, origin: str, *, nulls_ok: bool = False, numbers_ok: bool = False) -> None:
    """DataError naming the file, the column and the first bad row unless ``col`` holds text per row."""
    tp = col.type
    ok = pa.types.is_string(tp) or pa.types.is_large_string(tp) or pa.types.is_null(tp) or (
        numbers_ok and (pa.types.is_integer(tp) or pa.types.is_floating(tp) or pa.types.is_decimal(tp)))
    if not ok:
        valid = np.flatnonzero(col.is_valid().to_numpy(zero_copy_only=False))
        first = int(valid[0]) if len(valid) else 0
        held = repr(col[first].as_py())[:60] if len(col) else "nothing"
        raise DataError(f"{origin}: column '{name}' has type {tp}; expected a string per row (row {first} holds {held})")
    if not nulls_ok and col.null_count:
        first = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
        raise DataError(f"{origin}: {col.null_count} rows have a null {name} (first at row {first})")


def _prompt_text(col: pa.Array, origin: str) -> np.ndarray:
    """Chat lists -> content of the last message; strings as they are."""
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        _require_text(col, "prompt", origin)
        return col.to_numpy(zero_copy_only=False).astype(object)
    if (pa.types.is_list(col.type) or pa.types.is_large_list(col.type)) and pa.types.is_struct(col.type.value_type) \
            and col.type.value_type.get_field_index("content") >= 0:
        if col.null_count:
            first = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
            raise DataError(f"{origin}: {col.null_count} rows have a null prompt (first at row {first})")
        offsets = col.offsets.to_numpy()
        lengths = np.diff(offsets)
        empty = np.flatnonzero(lengths == 0)
        if len(empty):
            raise DataError(f"{origin}: {len(empty)} rows have an empty prompt chat list (first at row {int(empty[0])})")
        content = col.flatten().field("content")
        last = offsets[1:] - offsets[0] - 1  # the last message of each row, in the flattened messages
        _require_text(content, "prompt[].content", origin, nulls_ok=True)
        contents = content.to_numpy(zero_copy_only=False).astype(object)[last]
        missing = np.flatnonzero(np.equal(contents, None))
        if len(missing):
            raise DataError(
                f"{origin}: {len(missing)} rows have a null content in their last prompt message "
                f"(column 'prompt[].content', first at row {int(missing[0])})"
            )
        return contents
    raise DataError(
        f"{origin}: column 'prompt' has type {col.type}; expected a string or a chat list of {{role, content}} structs"
    )


def _to_float(values: np.ndarray) -> np.ndarray:
    out = np.full(len(values), np.nan)
    for i, v in enumerate(values.tolist()):  # once per dataset row at load, not per step
        try:
            out[i] = float(v)
        except ValueError:
            pass
    return out
