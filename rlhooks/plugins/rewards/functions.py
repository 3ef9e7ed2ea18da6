"""Built-in reward functions for ``<reasoning>...</reasoning><answer>...</answer>`` responses.

Each is a plain function ``fn(response: str, target: str, **info) -> float`` (extra keyword
arguments are accepted and ignored), usable in ``rewards:`` by name, from Python, and through
``rlhooks.plugins.rewards.verl_adapter.compute_score`` as verl's custom reward function.
Each carries ``reward_range = (low, high)``, which the reward monitor uses for coverage, and a
``score_batch(responses, targets)`` that scores each distinct (response, target) pair once (the
functions are pure; a simulated group often repeats one response 8 times).

Scoring rules (pinned by tests/rewards/test_functions.py):

format_exact   3.0 when the whole response is, apart from leading/trailing whitespace,
               ``<reasoning>X</reasoning>Y<answer>Z</answer>`` with X and Z not blank, Y and Z
               free of further ``<answer>`` tags (exactly one answer block; Y may otherwise
               be anything, newlines included); else 0.0.
format_approx  five checks, +0.5 when met and -0.5 when not, range [-2.5, 2.5]:
               exactly one ``<reasoning>``; the response starts with ``<reasoning>`` after
               leading whitespace; exactly one ``</reasoning>``; exactly one ``<answer>``;
               exactly one ``</answer>``.
check_answer   the answer is Z of a response format_exact accepts; no such answer -> 0.0.
               3.0  Z == target (exact string match);
               1.5  equal after normalization (trim, collapse whitespace, case-fold, drop a
                    trailing period);
               0.5  both numbers and |Z - target| <= 10% of |target| (boundary included);
               0.25 both numbers and |Z - target| <= 20% of |target| (boundary included);
               -1.0 otherwise (wrong, or not a number).
               Numbers may contain thousands commas, a leading ``$`` or a trailing ``%``.
check_numbers  1.5 when the first number after ``<answer>`` (optional sign, digits, optional
               decimals; commas ignored) equals the target as a number; else 0.0 (also when
               there is no number or the target is not a number).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np


__all__ = [
    "format_exact", "format_approx", "check_answer", "check_numbers", "BUILTIN_FUNCTIONS", "extract_answer",
]

REASONING_START, REASONING_END = "<reasoning>", "</reasoning>"
ANSWER_START, ANSWER_END = "<answer>", "</answer>"

# The format is checked with str.find / rfind, not with one regex: the equivalent regex
#   \A\s*<reasoning>(.+?)</reasoning>(?:(?!<answer>).)*?<answer>((?:(?!</?answer>).)+)</answer>\s*\Z
# backtracks quadratically (a 240 KB response of repeated </reasoning> tags took ~50 s).
_NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?|[-+]?\.\d+")
_WS = re.compile(r"\s+")
_NON_SPACE = re.compile(r"\S")  # str.strip()'s whitespace (both use Unicode isspace), found without a copy


def _text(value: Any, what: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    raise TypeError(f"{what} must be a string, got {type(value).__name__}: {value!r:.80}")


def _target(value: Any) -> str:
    # verl ground truths are often numbers; anything else is a caller error.
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return repr(value) if isinstance(value, float) else str(value)
    return _text(value, "target")


def extract_answer(response: str) -> str | None:
    """The ``<answer>`` content of a response format_exact accepts, else None.

    Linear time: ``<reasoning>X</reasoning>Y<answer>Z</answer>`` with only whitespace around,
    Y and Z free of ``<answer>`` (so Z follows the last ``<answer>``), Z free of ``</answer>``,
    and X ending at the first ``</reasoning>`` that leaves Y without ``<answer>``.
    """
    r = response if type(response) is str else _text(response, "response")
    start = _first_non_space(r)
    if not r.startswith(REASONING_START, start):
        return None
    last = r.rfind(ANSWER_START)
    if last < 0:
        return None
    z0 = last + len(ANSWER_START)
    end = r.find(ANSWER_END, z0)
    tail = end + len(ANSWER_END)
    if end <= z0 or (tail < len(r) and not r[tail:].isspace()):
        return None
    x0 = start + len(REASONING_START)
    prev = r.rfind(ANSWER_START, 0, last)  # Y must start after an earlier <answer>
    q = r.find(REASONING_END, max(x0 + 1, prev - len(REASONING_END) + 1))
    if q < 0 or q + len(REASONING_END) > last:
        return None
    if _NON_SPACE.search(r, x0, q) is None or _NON_SPACE.search(r, z0, end) is None:  # X or Z blank
        return None
    return r[z0:end]


def _first_non_space(r: str) -> int:
    """``len(r) - len(r.lstrip())`` without copying ``r`` (a response usually starts with its first tag)."""
    if r[:1].isspace():
        m = _NON_SPACE.search(r)
        return len(r) if m is None else m.start()
    return 0


def _normalize(s: str) -> str:
    s = _WS.sub(" ", s.strip()).casefold()
    return s[:-1].rstrip() if s.endswith(".") else s


def _as_number(s: str) -> float | None:
    t = s.strip().replace(",", "")
    t = t.removeprefix("$").removesuffix("%").strip()
    try:
        v = float(t)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def format_exact(response: str, target: str = "", **info: Any) -> float:
    """3.0 for a properly formatted response, else 0.0 (see the module docstring)."""
    return 3.0 if extract_answer(response) is not None else 0.0


format_exact.reward_range = (0.0, 3.0)  # type: ignore[attr-defined]


def format_approx(response: str, target: str = "", **info: Any) -> float:
    """Partial format credit in [-2.5, 2.5]: five tag checks, +-0.5 each."""
    r = _text(response, "response")
    checks = (
        r.count(REASONING_START) == 1,
        r.startswith(REASONING_START, _first_non_space(r)),
        r.count(REASONING_END) == 1,
        r.count(ANSWER_START) == 1,
        r.count(ANSWER_END) == 1,
    )
    return float(sum(0.5 if ok else -0.5 for ok in checks))


format_approx.reward_range = (-2.5, 2.5)  # type: ignore[attr-defined]


def check_answer(response: str, target: str, **info: Any) -> float:
    """Answer correctness in [-1.0, 3.0]: exact 3.0, normalized 1.5, 10% 0.5, 20% 0.25, wrong -1.0."""
    answer = extract_answer(response)
    tgt = _target(target)
    if answer is None:
        return 0.0
    if answer == tgt:
        return 3.0
    if _normalize(answer) == _normalize(tgt):
        return 1.5
    a, t = _as_number(answer), _as_number(tgt)
    if a is None or t is None:
        return -1.0
    diff = abs(a - t)
    tol = abs(t) * (1 + 1e-9)  # the boundary is inside, also after float rounding (46.2 vs 42)
    if diff <= 0.1 * tol:
        return 0.5
    if diff <= 0.2 * tol:
        return 0.25
    return -1.0


check_answer.reward_range = (-1.0, 3.0)  # type: ignore[attr-defined]


def check_numbers(response: str, target: str, **info: Any) -> float:
    """1.5 when the first number after ``<answer>`` equals the target numerically, else 0.0."""
    r = _text(response, "response")
    a = r.find(ANSWER_START)
    # the first number after the first <answer> (a regex "<answer>.*?number" is quadratic)
    m = _NUMBER.search(r, a + len(ANSWER_START)) if a >= 0 else None
    if m is None:  # before parsing the target: a long target costs its length
        return 0.0
    tgt = _as_number(_target(target))
    if tgt is None:
        return 0.0
    guess = _as_number(m.group(0))
    return 1.5 if guess is not None and guess == tgt else 0.0


check_numbers.reward_range = (0.0, 1.5)  # type: ignore[attr-defined]


def _distinct_pairs(responses: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(first row of each distinct (response, target) pair, each row's pair number); None unless
    every response and target is text (a number target keeps its own per-row meaning). One dict of the
    pairs (hashing each string once: cheaper than factorizing both columns and the pair codes)."""
    rs, ts = responses.tolist(), targets.tolist()
    if not all(type(x) is str for x in rs) or not all(type(x) is str for x in ts):
        return None
    index: dict[tuple[str, str], int] = {}
    inverse = np.fromiter((index.setdefault(p, len(index)) for p in zip(rs, ts)), np.int64, len(rs))
    # pairs are numbered in order of first appearance: a pair's first row is where a new highest number appears
    first = np.flatnonzero(np.r_[True, inverse[1:] > np.maximum.accumulate(inverse)[:-1]]) if len(rs) else inverse
    return first, inverse


def _score_distinct(fn: Callable[..., float]) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    def score_batch(responses: np.ndarray, targets: np.ndarray) -> np.ndarray:
        responses = np.asarray(responses, dtype=object)
        targets = np.asarray(targets, dtype=object)
        if not len(responses):
            return np.zeros(0)
        pairs = _distinct_pairs(responses, targets)
        if pairs is None:
            return np.fromiter((fn(r, t) for r, t in zip(responses.tolist(), targets.tolist())), np.float64, len(responses))
        first, inverse = pairs
        values = np.fromiter((fn(responses[i], targets[i]) for i in first.tolist()), np.float64, len(first))
        return values[inverse]

    score_batch.__doc__ = f"{fn.__name__} per row, each distinct (response, target) pair scored once."
    return score_batch


for _fn in (format_exact, format_approx, check_answer, check_numbers):
    _fn.score_batch = _score_distinct(_fn)  # type: ignore[attr-defined]


#: name -> function, in the order the verl adapter applies them by default
BUILTIN_FUNCTIONS = {
    "format_exact": format_exact,
    "format_approx": format_approx,
    "check_answer": check_answer,
    "check_numbers": check_numbers,
}
