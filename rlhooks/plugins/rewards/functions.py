"""Built-in reward functions for ``<reasoning>...</reasoning><answer>...</answer>`` responses.

Each is a plain function ``fn(response: str, target: str, **info) -> float`` (extra keyword
arguments are accepted and ignored), usable in ``rewards:`` by name, from Python, and through
``rlhooks.engines.verl.reward_function.compute_score`` as verl's custom reward function.
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


# -- score_batch: the rules above over whole columns (pyarrow's string kernels, RE2), equal row for row ------------
# A row the kernels cannot decide with certainty (leading whitespace, several <answer> tags, text around a number,
# a number with letters, ...) is scored by the per-row function: the vectorized path is an exact shortcut for the
# common shapes, never a second implementation of the edge cases.

#: str.isspace()'s characters (Python 3.11: bidirectional WS/B/S or category Zs), as an RE2 class body
_SPACE = r"\t\n\x0b\x0c\r\x1c-\x1f \x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}"
#: X's first character after <reasoning>: not blank and not the start of a </reasoning> (then X is not blank and
#: the first </reasoning> is the one extract_answer picks)
_X_START = "^<reasoning>[^" + _SPACE + "<]"
#: some </reasoning> before an <answer>
_X_END = "</reasoning>(?s:.)*<answer>"
#: Z at the end: a non-blank first character, no further tag, </answer> last
_Z = "<answer>(?P<z>[^" + _SPACE + "<][^<]*)</answer>$"
#: text that is a number in the sense of _as_number when it has only these characters (no space, letter, exponent)
_PLAIN = r"^[0-9,+\-$%.]+$"
#: _as_number of a plain text without its commas: an optional leading $, a float literal, an optional trailing %
_NUMERIC = r"^\$?(?P<v>[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+))%?$"
#: the first number right after the <answer> tag (check_numbers' _NUMBER, in ASCII digits)
_FIRST_NUMBER = r"<answer>(?P<n>[-+]?[0-9][0-9,]*(?:\.[0-9]+)?|[-+]?\.[0-9]+)"


def _arrow(values: np.ndarray) -> Any:
    import pyarrow as pa

    return pa.array(values.tolist(), type=pa.large_string())


def _mask(array: Any) -> np.ndarray:
    return np.asarray(array.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)


def _tail(rs: Any) -> tuple[np.ndarray, Any, np.ndarray]:
    """(rows with exactly one <answer> that end ``<answer>Z</answer>``, Z non-blank and tag-free; Z there, else
    null; rows with any <answer>)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    z = pc.struct_field(pc.extract_regex(rs, _Z), "z")
    ends = _mask(pc.is_valid(z))
    one = ends & ~_mask(pc.match_substring_regex(rs, "<answer>(?s:.)*<answer>"))
    tagged = ends.copy()
    if not ends.all():
        tagged[~ends] = _mask(pc.match_substring_regex(pc.filter(rs, pa.array(~ends)), "<answer>"))
    return one, z, tagged


def _answers(rs: Any) -> tuple[np.ndarray, Any, np.ndarray]:
    """(rows whose answer is known, their answers as an arrow array of every row (null elsewhere), rows that need
    extract_answer): a row is known when it has exactly one <answer>, starts <reasoning> + a non-blank character,
    closes </reasoning> before <answer> and ends ``<answer>Z</answer>`` with Z non-blank and tag-free; a row
    without <answer> or </answer> has none."""
    import pyarrow as pa
    import pyarrow.compute as pc

    known, z, tagged = _tail(rs)
    known = known.copy()
    known[known] = _mask(pc.match_substring_regex(pc.filter(rs, pa.array(known)), _X_START))
    known[known] = _mask(pc.match_substring_regex(pc.filter(rs, pa.array(known)), _X_END))
    unsure = ~known & tagged
    if unsure.any():  # without </answer>: no answer
        unsure[unsure] = _mask(pc.match_substring_regex(pc.filter(rs, pa.array(unsure)), "</answer>"))
    return known, z, unsure


def _numbers(texts: Any) -> tuple[np.ndarray, np.ndarray]:
    """(plain: rows whose _as_number is decided here, value: _as_number where plain, NaN for None)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    plain = _mask(pc.match_substring_regex(texts, _PLAIN))
    bare = pc.replace_substring(texts, ",", "")
    try:  # the usual column: every text a float literal once its commas are gone
        number = pc.cast(bare, pa.float64())
    except pa.ArrowInvalid:  # else the literal inside an optional $ ... %, null where there is none
        number = pc.cast(pc.struct_field(pc.extract_regex(bare, _NUMERIC), "v"), pa.float64())
    value = np.array(number.to_numpy(zero_copy_only=False), dtype=np.float64)
    value[~np.isfinite(value)] = np.nan  # null (no number) and, as in _as_number, not finite
    return plain, value


def _per_row(fn: Callable[..., float], out: np.ndarray, rows: np.ndarray, responses: np.ndarray, targets: np.ndarray) -> None:
    idx = np.flatnonzero(rows)
    if len(idx):
        out[idx] = [fn(r, t) for r, t in zip(responses[idx].tolist(), targets[idx].tolist())]


def _format_exact_batch(responses: np.ndarray, targets: np.ndarray, rs: Any) -> np.ndarray:
    known, _, unsure = _answers(rs)
    out = np.where(known, 3.0, 0.0)
    _per_row(format_exact, out, unsure, responses, targets)
    return out


def _format_approx_batch(responses: np.ndarray, targets: np.ndarray, rs: Any) -> np.ndarray:
    import pyarrow.compute as pc

    out = np.zeros(len(responses))
    for tag in (REASONING_START, REASONING_END, ANSWER_START, ANSWER_END):
        once = np.asarray(pc.count_substring_regex(rs, tag).to_numpy(zero_copy_only=False)) == 1
        out += np.where(once, 0.5, -0.5)
    starts = _mask(pc.starts_with(rs, REASONING_START))
    out += np.where(starts, 0.5, -0.5)
    spaced = ~starts & _mask(pc.match_substring_regex(rs, "^[" + _SPACE + "]"))  # leading whitespace: per row
    _per_row(format_approx, out, spaced, responses, targets)
    return out


def _check_answer_batch(responses: np.ndarray, targets: np.ndarray, rs: Any) -> np.ndarray:
    import pyarrow as pa
    import pyarrow.compute as pc

    known, z, unsure = _answers(rs)
    ts = _arrow(targets)
    exact = known & _mask(pc.equal(z, ts))
    rest = known & ~exact
    out = np.where(exact, 3.0, 0.0)
    if rest.any():
        pick = pa.array(rest)
        zr, tr = pc.filter(z, pick), pc.filter(ts, pick)
        z_plain, a = _numbers(zr)
        t_plain, t = _numbers(tr)
        plain = z_plain & t_plain  # only [0-9,+-$%.]: _normalize drops a trailing '.' and nothing else
        dotted = _mask(pc.ends_with(zr, ".")) | _mask(pc.ends_with(tr, "."))  # else equal after _normalize: equal
        same = np.zeros(len(dotted), dtype=bool)
        if dotted.any():
            zd, td = pc.filter(zr, pa.array(dotted)), pc.filter(tr, pa.array(dotted))
            same[dotted] = _mask(pc.equal(pc.replace_substring_regex(zd, r"\.$", ""), pc.replace_substring_regex(td, r"\.$", "")))
        both = ~np.isnan(a) & ~np.isnan(t)
        with np.errstate(invalid="ignore"):
            diff, tol = np.abs(a - t), np.abs(t) * (1 + 1e-9)
            graded = np.where(diff <= 0.1 * tol, 0.5, np.where(diff <= 0.2 * tol, 0.25, -1.0))
        rows = np.flatnonzero(rest)
        out[rows[plain]] = np.where(same, 1.5, np.where(both, graded, -1.0))[plain]
        unsure[rows[~plain]] = True
    _per_row(check_answer, out, unsure, responses, targets)
    return out


def _check_numbers_batch(responses: np.ndarray, targets: np.ndarray, rs: Any) -> np.ndarray:
    import pyarrow as pa
    import pyarrow.compute as pc

    known, z, tagged = _tail(rs)
    # one <answer>, its Z starting with a number in ASCII text (Python's \d is every Unicode digit): decided here;
    # any other row with an <answer>: per row
    known = known.copy()
    out = np.zeros(len(responses))
    if known.any():
        zs = pc.filter(z, pa.array(known))
        n = pc.struct_field(pc.extract_regex(zs, "^" + _FIRST_NUMBER.removeprefix("<answer>")), "n")
        sure = _mask(pc.is_valid(n)) & _mask(pc.string_is_ascii(zs))
        t_plain, t = _numbers(pc.filter(_arrow(targets), pa.array(known)))
        guess = np.asarray(pc.cast(pc.replace_substring(n, ",", ""), pa.float64()).to_numpy(zero_copy_only=False),
                           dtype=np.float64)  # a number as _NUMBER matches it: a float once its commas are gone
        sure &= t_plain
        rows = np.flatnonzero(known)
        out[rows] = np.where(sure & ~np.isnan(guess) & (guess == t), 1.5, 0.0)
        known[rows[~sure]] = False
    _per_row(check_numbers, out, ~known & tagged, responses, targets)
    return out


#: from this many rows, score_batch runs the string kernels (each compiles its RE2 pattern: 10-80 us a call; fewer
#: rows are scored per distinct pair)
COLUMNS_FROM = 1024


def _score_columns(fn: Callable[..., float], columns: Callable[..., np.ndarray]
                   ) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    distinct = _score_distinct(fn)

    def score_batch(responses: np.ndarray, targets: np.ndarray) -> np.ndarray:
        responses = np.asarray(responses, dtype=object)
        targets = np.asarray(targets, dtype=object)
        if len(responses) < COLUMNS_FROM:
            return distinct(responses, targets)
        import pyarrow as pa

        # text only (a number target keeps its own meaning; bytes are decoded per row)
        if set(map(type, responses.tolist())) != {str} or set(map(type, targets.tolist())) != {str}:
            return distinct(responses, targets)
        try:
            return columns(responses, targets, _arrow(responses))
        except pa.ArrowException:  # text arrow does not hold (a lone surrogate): per row
            return distinct(responses, targets)

    score_batch.__doc__ = f"{fn.__name__} per row, over the columns (string kernels; per row where they cannot decide)."
    return score_batch


for _fn, _columns in ((format_exact, _format_exact_batch), (format_approx, _format_approx_batch),
                      (check_answer, _check_answer_batch), (check_numbers, _check_numbers_batch)):
    _fn.score_batch = _score_columns(_fn, _columns)  # type: ignore[attr-defined]


#: name -> function, in the order the verl adapter applies them by default
BUILTIN_FUNCTIONS = {
    "format_exact": format_exact,
    "format_approx": format_approx,
    "check_answer": check_answer,
    "check_numbers": check_numbers,
}
