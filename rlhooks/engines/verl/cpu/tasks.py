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


def write_dataset(path: str | Path, sources: tuple[str, ...] = tuple(SOURCES)) -> Path:
    """The RL prompts as a parquet file in verl's RL layout (every item of each source once)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = items(sources)
    rows = len(data["source"])
    complexity = data["complexity"]
    table = pa.table({
        "data_source": data["source"].tolist(),
        "prompt": [[{"role": "user", "content": q}] for q in data["question"]],
        "ability": ["math"] * rows,
        "reward_model": [{"style": "rule", "ground_truth": a} for a in data["answer"]],
        "extra_info": [{"index": i, "complexity_score": float(c), "solution": s}
                       for i, (c, s) in enumerate(zip(complexity, data["solution"]))],
    })
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path
