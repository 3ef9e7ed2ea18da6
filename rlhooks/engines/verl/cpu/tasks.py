"""The tiny learner's tasks and tokenizer, built locally (nothing downloaded).

Three arithmetic families from the simulator's ``arith_*`` sources, small enough for a model of
~76k parameters: questions in the simulator's wording (``What is 3 + 5?``) and answers in the
format the built-in reward functions score,
``<reasoning>3 + 5 = 8</reasoning><answer>8</answer>``. The dataset is a parquet file in verl's
RL layout (``prompt`` chat list, ``data_source``, ``reward_model.ground_truth``,
``extra_info.index/complexity_score``), so verl's ``RLHFDataset`` reads it as any other.

The tokenizer (``tokenizers`` WordLevel) has one token per character of the tasks' alphabet,
the two words of the question and the four answer tags; its decoder concatenates, so text
round-trips exactly and the reward functions see what the model wrote.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rlhooks.core.errors import RLHooksError


class PrepareError(RLHooksError):
    """``prepare`` would replace files it did not write, or write through a link."""


#: source -> description; each is every pair of its operand ranges
SOURCES: dict[str, str] = {
    "add_small": "a + b with a, b in 0..9 (100 items; complexity 0.1-0.3 by the size of the sum)",
    "add_carry": "a + b with a in 10..39, b in 1..9 (270 items; 0.35 without a carry, 0.65 with one)",
    "mul_small": "a * b with a, b in 2..9 (64 items; 0.6-1.0 by the size of the product)",
}
TAGS = ("<reasoning>", "</reasoning>", "<answer>", "</answer>")
SPECIAL = ("<pad>", "<eos>", "<unk>")
WORDS = ("What", "is")
CHARS = tuple("0123456789+-*=? ")
CHAT_TEMPLATE = "{% for message in messages %}{{ message['content'] }}{% endfor %}"


def _pairs(source: str) -> tuple[np.ndarray, np.ndarray, str]:
    if source == "add_small":
        a, b = np.meshgrid(np.arange(10), np.arange(10), indexing="ij")
        return a.ravel(), b.ravel(), "+"
    if source == "add_carry":
        a, b = np.meshgrid(np.arange(10, 40), np.arange(1, 10), indexing="ij")
        return a.ravel(), b.ravel(), "+"
    if source == "mul_small":
        a, b = np.meshgrid(np.arange(2, 10), np.arange(2, 10), indexing="ij")
        return a.ravel(), b.ravel(), "*"
    raise ValueError(f"unknown tiny-learner source {source!r}; known: {', '.join(SOURCES)}")


def items(sources: tuple[str, ...] = tuple(SOURCES)) -> dict[str, np.ndarray]:
    """Every item of the sources, in a fixed order: columns source, question, solution, answer."""
    cols: dict[str, list] = {"source": [], "question": [], "solution": [], "answer": [], "complexity": []}
    for source in sources:
        a, b, op = _pairs(source)
        result = a + b if op == "+" else a * b
        expr = np.char.add(np.char.add(a.astype(str), f" {op} "), b.astype(str))
        cols["source"].append(np.full(len(a), source, dtype=object))
        cols["question"].append(np.char.add(np.char.add("What is ", expr), "?").astype(object))
        cols["solution"].append(np.char.add(np.char.add(expr, " = "), result.astype(str)).astype(object))
        cols["answer"].append(result.astype(str).astype(object))
        if source == "add_small":
            complexity = 0.1 + 0.2 * result / 18
        elif source == "add_carry":
            complexity = np.where(a % 10 + b >= 10, 0.65, 0.35)
        else:
            complexity = 0.6 + 0.4 * result / 81
        cols["complexity"].append(np.asarray(complexity, dtype=float))
    return {k: np.concatenate(v) for k, v in cols.items()}


def response_text(solution: str, answer: str) -> str:
    """A correct response in the format the built-in reward functions score."""
    return f"<reasoning>{solution}</reasoning><answer>{answer}</answer>"


def make_tokenizer():
    """A character-level fast tokenizer over the tasks' alphabet (a transformers tokenizer)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate((*SPECIAL, *TAGS, *WORDS, *CHARS))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    alternatives = "|".join([*(t.replace("/", "\\/") for t in TAGS), *WORDS, "."])
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(alternatives), behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>",
                                   padding_side="left")  # prompts are left padded, as verl pads them
    fast.chat_template = CHAT_TEMPLATE
    return fast


#: schema metadata marking a prompt file ``write_dataset`` wrote (so ``prepare`` may replace it)
MARKER = {b"rlhooks": b"cpu-learner-tasks"}


def _table(sources: tuple[str, ...]):
    import pyarrow as pa

    data = items(sources)
    rows = len(data["source"])
    complexity = data["complexity"]
    return pa.table({
        "data_source": data["source"].tolist(),
        "prompt": [[{"role": "user", "content": q}] for q in data["question"]],
        "ability": ["math"] * rows,
        "reward_model": [{"style": "rule", "ground_truth": a} for a in data["answer"]],
        "extra_info": [{"index": i, "complexity_score": float(c), "solution": s}
                       for i, (c, s) in enumerate(zip(complexity, data["solution"]))],
    })


def check_target(path: str | Path, sources: tuple[str, ...] = tuple(SOURCES)) -> None:
    """``path`` may receive the prompts: absent, or a file ``write_dataset`` wrote (its schema marker, or
    the same rows as an earlier rlhooks wrote without one); a PrepareError saying what to do otherwise."""
    import pyarrow.parquet as pq


    path = Path(path)
    if path.is_symlink():
        raise PrepareError(f"{path} is a symbolic link: prepare does not write through or replace links. Remove "
                           f"the link, or prepare into another directory")
    if not path.exists():
        return
    if not path.is_file():
        raise PrepareError(f"{path} exists and is not a file: prepare writes the prompts there. Prepare into "
                           f"another directory, or move it away")
    try:
        if (pq.read_schema(path).metadata or {}).get(b"rlhooks") == MARKER[b"rlhooks"]:
            return
        expected = _table(sources)
        meta = pq.read_metadata(path)  # a user's dataset may be large: compare its shape before reading rows
        if meta.num_rows == expected.num_rows and meta.schema.to_arrow_schema().names == expected.schema.names \
                and pq.read_table(path).equals(expected):
            return
    except Exception:  # noqa: BLE001 - not a parquet file, or another one: either way not ours
        pass
    raise PrepareError(f"{path} exists and prepare did not write it (it is not the tiny learner's prompts); "
                       f"prepare never replaces data it did not write. Prepare into another directory, or move "
                       f"{path} away if it is yours to move")


def write_dataset(path: str | Path, sources: tuple[str, ...] = tuple(SOURCES)) -> Path:
    """The RL prompts as a parquet file in verl's RL layout (every item of each source once); written to a
    temporary file and renamed, so a link planted at ``path`` is replaced, never written through."""
    import os

    import pyarrow.parquet as pq

    path = Path(path)
    check_target(path, sources)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        pq.write_table(_table(sources).replace_schema_metadata(MARKER), tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


#: the layout the CPU learner reads (verl's RL layout), for error messages
LAYOUT = ("verl's RL layout: prompt = a list of chat messages ({role, content}), reward_model = a struct with "
          "ground_truth, data_source = a string per row (see docs/how-to/cpu-learner.md)")


def check_prompts(path: str | Path, prompt_key: str = "prompt") -> list[str]:
    """One line per problem that would make the CPU learner fail with a traceback or train on garbage,
    read from the parquet schema (no rows are scanned): each names the file, the column and the layout.

    A ``prompt`` column of plain strings is refused, not wrapped: the file goes to verl's own
    RLHFDataset (as on a GPU), which applies the chat template to a list of messages; wrapping would mean
    training on a rewritten copy of the user's data. The message gives the one-line conversion."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    try:
        schema = pq.read_schema(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several kinds for a file that is not parquet
        return [f"{path} is not a parquet file ({' '.join(str(exc).split())[:200]}); expected {LAYOUT}"]
    problems = []
    names = schema.names

    def missing(column: str) -> str:
        return f"{path} has no {column!r} column (columns: {', '.join(names) or 'none'}); expected {LAYOUT}"

    if prompt_key not in names:
        problems.append(missing(prompt_key))
    else:
        kind = schema.field(prompt_key).type
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            first = pq.read_table(path, columns=[prompt_key]).column(0)
            example = repr(first[0].as_py())[:60] if len(first) else "none"
            problems.append(
                f"{path}: column {prompt_key!r} holds plain strings (row 0: {example}), not chat messages; the CPU "
                f"learner refuses it rather than train on it. Convert it with pandas: "
                f"df[{prompt_key!r}] = [[{{'role': 'user', 'content': p}}] for p in df[{prompt_key!r}]]"
            )
        elif not (pa.types.is_list(kind) or pa.types.is_large_list(kind)) or not pa.types.is_struct(kind.value_type) \
                or {"role", "content"} - {f.name for f in kind.value_type}:
            problems.append(f"{path}: column {prompt_key!r} is {kind}; expected {LAYOUT}")
    if "reward_model" not in names:
        problems.append(missing("reward_model"))
    else:
        kind = schema.field("reward_model").type
        if not pa.types.is_struct(kind) or "ground_truth" not in {f.name for f in kind}:
            problems.append(f"{path}: column 'reward_model' is {kind}, without ground_truth; expected {LAYOUT}")
    if "data_source" not in names:
        problems.append(missing("data_source"))
    return problems


def prompt_file_issues(cfg) -> list:
    """:func:`check_prompts` of a verl config's train and validation files that exist, as config issues."""
    from rlhooks.core.errors import ConfigIssue

    issues = []
    for key in ("train_files", "val_files"):
        files = cfg.data.get(key) or []
        for f in [files] if isinstance(files, str) else list(files):
            path = Path(str(f)).expanduser()
            if path.is_file():
                issues += [ConfigIssue(f"verl.data.{key}", p) for p in check_prompts(path, cfg.data.get("prompt_key", "prompt"))]
    return issues
