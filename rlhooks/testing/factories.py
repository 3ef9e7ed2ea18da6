"""Seeded builders of realistic test inputs: batches, datasets, metrics, tables, run contexts.

Used by the contract classes and handy in any plugin's own tests::

    from rlhooks.testing import make_trajectory_batch
    batch = make_trajectory_batch(n_groups=4, group_size=8, seed=0)

Everything is built with numpy from a seed, so a failing check reproduces exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rlhooks.core import batch as B
from rlhooks.core.batch import Batch
from rlhooks.core.config import Config, RunOptions
from rlhooks.core.data import DatasetColumns
from rlhooks.core.run import RunContext

DEFAULT_SOURCES: tuple[str, ...] = ("gsm8k", "math", "code")
#: strings that break naive text handling: empty, whitespace, unicode, control chars, markup
ODD_STRINGS: tuple[str, ...] = (
    "",
    " ",
    "\n\t\r",
    "0",
    "-1.5e-3",
    "The answer is \\boxed{42}.",
    "<think>x</think><answer>7</answer>",
    "日本語の答え: ４２ 🚀",
    "\u202eRTL override \u0000 null \ufeff bom",
    "{{not json]]",
    "x" * 100_000,
    "1 2 3 " * 5_000,
)


def make_dataset(
    n_rows: int = 120,
    sources: Sequence[str] = DEFAULT_SOURCES,
    *,
    seed: int = 0,
    complexity: bool = True,
    weights: Sequence[float] | None = None,
    columns: Sequence[str] = (),
) -> DatasetColumns:
    """A dataset's sampler columns: each row gets a source (every source present) and a complexity;
    ``columns`` (what a sampler declares in ``Sampler.columns``): float32 values in [0, 100), about
    one row in 20 NaN (a row without a value), in ``data.extra``."""
    rng = np.random.default_rng(seed)
    k = len(sources)
    if n_rows < k:
        raise ValueError(f"make_dataset: n_rows={n_rows} < {k} sources; every source needs a row")
    p = None if weights is None else np.asarray(weights, float) / np.sum(weights)
    codes = np.concatenate([np.arange(k), rng.choice(k, size=n_rows - k, p=p)])
    rng.shuffle(codes)
    names = np.asarray(sources, dtype=object)[codes]
    comp = rng.uniform(0.0, 1.0, n_rows).round(3) if complexity else None
    data = DatasetColumns.from_arrays(names, comp, origin="rlhooks.testing.make_dataset")
    for name in columns:
        values = rng.uniform(0.0, 100.0, n_rows).astype(np.float32)
        values[rng.random(n_rows) < 0.05] = np.nan
        data.extra[name] = values
    return data


def _text_columns(rng: np.random.Generator, n: int, prefix: str) -> np.ndarray:
    # A few odd strings mixed in so text handling is exercised, not only ASCII.
    pool = np.asarray([f"{prefix} {i}" for i in range(7)] + ["", "答え ４２ 🚀", "\\boxed{1}"], dtype=object)
    return pool[rng.integers(0, len(pool), n)] if n else np.zeros(0, dtype=object)


def make_prompt_batch(
    n_prompts: int = 8,
    *,
    seed: int = 0,
    sources: Sequence[str] = DEFAULT_SOURCES,
    dataset: DatasetColumns | None = None,
    indices: Sequence[int] | np.ndarray | None = None,
    step: int = 1,
    generation: int = 1,
    lazy_text: bool = True,
) -> Batch:
    """Prompt rows as ``on_batch_sampled`` receives them.

    With ``dataset`` (and optionally ``indices`` drawn by a sampler), ``index``/``data_source``/
    ``complexity`` are consistent with it, so samplers can be fed their own draws.
    """
    rng = np.random.default_rng(seed)
    if dataset is not None:
        idx = (
            np.asarray(indices, dtype=np.int64)
            if indices is not None
            else rng.integers(0, len(dataset), n_prompts).astype(np.int64)
        )
        src = np.asarray(dataset.source_names, dtype=object)[dataset.source_codes[idx]] if len(idx) else np.zeros(0, object)
        comp = (
            dataset.complexity[idx].astype(np.float64)
            if dataset.complexity is not None
            else np.full(len(idx), np.nan)
        )
    else:
        idx = np.asarray(indices, dtype=np.int64) if indices is not None else rng.permutation(max(n_prompts * 4, 1))[:n_prompts].astype(np.int64)
        src = np.asarray(sources, dtype=object)[rng.integers(0, len(sources), len(idx))] if len(idx) else np.zeros(0, object)
        comp = rng.uniform(0, 1, len(idx))
    n = len(idx)
    cols = {B.INDEX: idx, B.DATA_SOURCE: src, B.COMPLEXITY: comp}
    prompts = _text_columns(rng, n, "Question")
    targets = rng.integers(0, 100, n).astype(str).astype(object)
    text = {B.PROMPT: prompts, B.TARGET: targets}
    meta = {"step": step, "generation": generation}
    if lazy_text:
        return Batch(cols, lazy={k: (lambda v=v: v) for k, v in text.items()}, meta=meta, length=n)
    return Batch({**cols, **text}, meta=meta, length=n)


def make_trajectory_batch(
    n_groups: int = 4,
    group_size: int = 4,
    *,
    seed: int = 0,
    sources: Sequence[str] = DEFAULT_SOURCES,
    prompts: Batch | None = None,
    reward_functions: Sequence[str] = ("check_answer", "format_exact"),
    step: int = 1,
    generation: int = 1,
    lazy_text: bool = True,
    advantage: bool = False,
    uniform_groups: int = 1,
    identical_rewards: int = 0,
    identical_responses: int = 0,
) -> Batch:
    """Trajectory rows as ``on_rewards_computed`` receives them: ``group_size`` rows per uid, contiguous.

    Columns: uid, index, data_source, complexity, reward, final_reward, acc, score,
    ``reward_fn/<name>`` per reward function, prompt/response lengths, lazy prompt/response/target.
    ``uniform_groups`` groups (the first ones) get identical accuracy in all rows (all correct or all
    wrong), so group filters have something to drop. The next ``identical_rewards`` groups have the
    same value in every reward column (reward, final_reward, score, acc, reward_fn/*) in all rows,
    and the ``identical_responses`` groups after them the same response text and length too (and so
    the same rewards): what a filter deciding on responses, not rewards, drops. With ``prompts``
    (a prompt batch), the groups are those prompts' rows.
    """
    rng = np.random.default_rng(seed)
    if prompts is None:
        prompts = make_prompt_batch(n_groups, seed=seed, sources=sources, step=step, generation=generation, lazy_text=False)
    n_groups = len(prompts)
    n = n_groups * group_size
    rep = np.repeat(np.arange(n_groups), group_size)
    uid = np.asarray([f"s{step}g{generation}-{i:04d}" for i in range(n_groups)], dtype=object)[rep] if n else np.zeros(0, object)
    acc = (rng.uniform(0, 1, n) < rng.uniform(0.1, 0.9, n_groups)[rep]).astype(np.float64) if n else np.zeros(0)
    for g in range(min(uniform_groups, n_groups)):
        acc[rep == g] = float(g % 2 == 0)
    comps = {f"{B.REWARD_FN_PREFIX}{name}": acc if i == 0 else rng.choice([0.0, 0.5, 1.0], n) for i, name in enumerate(reward_functions)}
    reward = np.sum(list(comps.values()), axis=0) if comps else acc.copy()
    resp_len = rng.integers(1, 512, n).astype(np.int64)
    final_noise = rng.uniform(0, 0.05, n)
    # constant groups: every row takes its group's first row's values (drawn above, so the other
    # groups stay as they were without these options)
    first = uniform_groups
    same_rewards = np.flatnonzero((rep >= first) & (rep < first + identical_rewards + identical_responses))
    same_text = np.flatnonzero((rep >= first + identical_rewards) & (rep < first + identical_rewards + identical_responses))
    head = rep * group_size  # row of each row's group head
    for col in (acc, reward, final_noise, *comps.values()):
        col[same_rewards] = col[head[same_rewards]]
    resp_len[same_text] = resp_len[head[same_text]]
    cols: dict[str, Any] = {
        B.UID: uid,
        B.INDEX: prompts[B.INDEX][rep],
        B.DATA_SOURCE: prompts[B.DATA_SOURCE][rep],
        B.COMPLEXITY: (prompts[B.COMPLEXITY] if B.COMPLEXITY in prompts else np.full(n_groups, np.nan))[rep],
        B.REWARD: np.asarray(reward, dtype=np.float64),
        B.FINAL_REWARD: np.asarray(reward, dtype=np.float64) - final_noise,
        "acc": acc,
        "score": np.asarray(reward, dtype=np.float64),
        B.PROMPT_LENGTH: rng.integers(8, 256, n_groups).astype(np.int64)[rep],
        B.RESPONSE_LENGTH: resp_len,
        **comps,
    }
    if advantage:
        g = Batch({B.UID: uid}).groups
        r = cols[B.REWARD]
        with np.errstate(invalid="ignore", divide="ignore"):
            adv = (r - g.mean(r)[g.codes]) / (g.std(r)[g.codes] + 1e-6)
        cols[B.ADVANTAGE] = np.nan_to_num(adv)
    text = {
        B.PROMPT: (prompts[B.PROMPT] if B.PROMPT in prompts else _text_columns(rng, n_groups, "Question"))[rep],
        B.RESPONSE: _same_as_head(_text_columns(rng, n, "Answer"), same_text, head),
        B.TARGET: (prompts[B.TARGET] if B.TARGET in prompts else rng.integers(0, 100, n_groups).astype(str).astype(object))[rep],
    }
    meta = {
        "step": step,
        "generation": generation,
        "n": group_size,
        "reward_extra_keys": ["acc", "score"],
        "reward_functions": list(reward_functions),
    }
    if lazy_text:
        return Batch(cols, lazy={k: (lambda v=v: v) for k, v in text.items()}, meta=meta, length=n)
    return Batch({**cols, **text}, meta=meta, length=n)


def _same_as_head(values: np.ndarray, rows: np.ndarray, head: np.ndarray) -> np.ndarray:
    values[rows] = values[head[rows]]
    return values


def make_step_metrics(step: int = 1, *, seed: int = 0) -> dict[str, Any]:
    """Engine-style step metrics with mixed value types (Python and numpy scalars, an int, a NaN)."""
    rng = np.random.default_rng(seed + step)
    return {
        "actor/ppo_kl": float(rng.normal(0, 0.01)),
        "actor/entropy": np.float32(rng.uniform(0.5, 2.0)),
        "actor/pg_loss": np.float64(rng.normal()),
        "critic/score/mean": float(rng.uniform()),
        "response_length/mean": int(rng.integers(10, 500)),
        "train/num_gen_batches": np.int64(1 + step % 3),
        "timing_s/step": float(rng.uniform(1, 5)),
        "source/gsm8k/reward": float(rng.uniform()),
        "rewards/undefined_mean": float("nan"),
    }


def make_table_rows(n: int = 4, *, seed: int = 0) -> list[dict[str, Any]]:
    """Sample-table rows with every allowed value type and keys that differ between rows."""
    rng = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    for i in range(n):
        row: dict[str, Any] = {
            "step": 1,
            "uid": f"u{i}",
            "data_source": DEFAULT_SOURCES[i % len(DEFAULT_SOURCES)],
            "prompt": ["What is 6*7?", "", "日本語 🚀", "line1\nline2, \"quoted\""][i % 4],
            "response": "x" * int(rng.integers(0, 50)),
            "reward": float(rng.uniform()),
            "acc": bool(i % 2),
            "rank": i,
        }
        if i % 2:
            row["note"] = None  # keys may differ between rows
        rows.append(row)
    return rows


class RecordingRun(RunContext):
    """A RunContext whose emitted tables and histograms are recorded in ``tables`` / ``histograms``."""

    def __init__(self, config: Config, run_dir: Path):
        self.tables: list[tuple[int, str, list[dict[str, Any]]]] = []
        self.histograms: list[tuple[int, str, np.ndarray]] = []
        super().__init__(config, run_dir, self._record)

    def _record(self, hook: str, step: int, name: str, payload: Any) -> None:
        if hook == "log_table":
            self.tables.append((step, name, payload))
        else:
            self.histograms.append((step, name, payload))


def make_config(run_dir: str | Path, *, name: str = "contract", seed: int = 0, **run: Any) -> Config:
    """A minimal resolved Config (no components) whose run directory is ``run_dir``."""
    run_dir = Path(run_dir)
    return Config(run=RunOptions(name=name, seed=seed, out_dir=str(run_dir.parent), **run))


def make_validation_results(step: int = 1, *, sources: tuple[str, ...] = ("gsm8k", "lighteval/MATH"),
                            seed: int = 0) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """``(metrics, per_source)`` as an engine passes them to ``on_validation_end`` (verl's key names)."""
    rng = np.random.default_rng([seed, step])
    metrics: dict[str, float] = {}
    per_source: dict[str, dict[str, float]] = {}
    for source in sources:
        acc = float(rng.uniform())
        values = {"acc/mean@4": acc, "acc/std@4": float(rng.uniform(0, 0.5)), "acc/maj@4/mean": acc,
                  "reward/mean@4": 3.0 * acc}
        for name, v in values.items():
            section = "val-core" if name in ("acc/mean@4", "acc/maj@4/mean") else "val-aux"
            metrics[f"{section}/{source}/{name}"] = v
        per_source[source] = {"score": acc, **values}
    return metrics, per_source


def make_run_context(run_dir: str | Path, config: Config | None = None, **run: Any) -> RecordingRun:
    """A RunContext for ``on_run_start`` over an existing (created) run directory."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    return RecordingRun(config if config is not None else make_config(run_dir, **run), run_dir)


def batch_differences(expected: Batch, actual: Batch) -> list[str]:
    """How ``actual`` differs from ``expected`` (an identical batch built from the same seed).

    Every column is compared, lazy ones included (both are materialized), plus length and meta.
    An empty list means nothing was mutated.
    """
    problems = []
    if len(actual) != len(expected):
        problems.append(f"length changed from {len(expected)} to {len(actual)}")
        return problems
    want, have = set(expected.columns), set(actual.columns)
    problems += [f"column {c!r} was removed" for c in sorted(want - have)]
    problems += [
        f"column {c!r} was added in place (derive a new batch with batch.with_columns instead)"
        for c in sorted(have - want)
    ]
    for name in sorted(want & have):
        old, new = expected[name], actual[name]
        if new.dtype != old.dtype or new.shape != old.shape:
            problems.append(f"column {name!r} changed dtype/shape {old.dtype}{old.shape} -> {new.dtype}{new.shape}")
        elif old.size and not np.all(_elementwise_equal(old, new)):
            rows = np.flatnonzero(~_elementwise_equal(old, new))
            more = "..." if len(rows) > 5 else ""
            problems.append(f"column {name!r} was written to (rows {rows[:5].tolist()}{more})")
    if dict(actual.meta) != dict(expected.meta):
        problems.append(f"meta changed from {dict(expected.meta)!r} to {dict(actual.meta)!r}")
    return problems


def _elementwise_equal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "fc":
        return (a == b) | (np.isnan(a) & np.isnan(b))
    return np.asarray(a == b, dtype=bool)
