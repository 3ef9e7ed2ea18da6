"""The built-in reward functions against one compiled-regex pass over the same responses.

Each function's ``score_batch`` over 4,096 distinct responses (``<reasoning>...</reasoning><answer>N</answer>``,
~300 characters, a tenth malformed) and their targets, against the least a rule-based reward does: one
``re.compile(r"<answer>(.*?)</answer>", re.S).search`` per response (issue 40: within 3x of it).
"""

from __future__ import annotations

import re

import numpy as np

from benchmarks.harness import Result, median_time
from rlhooks.plugins.rewards.functions import BUILTIN_FUNCTIONS

ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)


def responses(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    words = np.array(["so", "then", "add", "the", "carry", "we", "get", "multiply", "which", "gives"])
    out, targets = [], []
    for i in range(n):
        target = int(rng.integers(0, 10**6))
        reasoning = " ".join(words[rng.integers(0, len(words), 40)]) + f" step {i}"
        answer = target if rng.random() < 0.6 else target + int(rng.integers(1, 1000))
        text = f"<reasoning>{reasoning}</reasoning><answer>{answer:,}</answer>"
        if rng.random() < 0.1:
            text = text.replace("</answer>", "")  # malformed
        out.append(text)
        targets.append(str(target))
    return np.asarray(out, dtype=object), np.asarray(targets, dtype=object)


def regex_pass(rs: np.ndarray) -> list:
    search = ANSWER.search
    return [search(r) for r in rs.tolist()]


def run(quick: bool = False) -> list[Result]:
    n = 512 if quick else 4096
    repeat = 3 if quick else 15
    rs, ts = responses(n)
    ref = median_time(lambda: regex_pass(rs), repeat=repeat)
    out = []
    for name, fn in BUILTIN_FUNCTIONS.items():
        t = median_time(lambda fn=fn: fn.score_batch(rs, ts), repeat=repeat)
        out.append(Result(
            case=f"reward function {name}.score_batch, {n:,} distinct responses (ref: one compiled-regex search each)",
            rlhooks_s=t, reference_s=ref, rows=n, target="<= 3x the regex pass's time", met=t <= 3 * ref,
            margin=f"{t / ref:.1f}x the regex pass's time",
        ))
    return out
