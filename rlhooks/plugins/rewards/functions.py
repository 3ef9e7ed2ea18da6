"""Built-in reward functions for ``<reasoning>...</reasoning><answer>...</answer>`` responses.

Each is a plain function ``fn(response: str, target: str, **info) -> float`` (extra keyword
arguments are accepted and ignored), usable in ``rewards:`` by name, from Python, and through
``rlhooks.engines.verl.reward_function.compute_score`` as verl's custom reward function.
Each carries ``reward_range = (low, high)``, which the reward monitor uses for coverage, and a
``score_batch(responses, targets)``, equal to the function row by row: below ``COLUMNS_FROM`` rows it scores
each distinct (response, target) pair once (the functions are pure; a simulated group often repeats one
response 8 times), from there it scans the columns (see "score_batch" below).

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
import numbers
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
    # verl ground truths are often numbers, numpy's too (a parquet column): 42 -> "42", 42.0 and np.float64(42.0) ->
    # "42.0" (numpy 2's repr would be "np.float64(42.0)"); anything else is a caller error.
    if isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)):
        return str(int(value)) if isinstance(value, numbers.Integral) else repr(float(value))
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


# -- score_batch: the rules above over whole columns, equal row for row ---------------------------------------------
# The responses' UTF-8 bytes go into one buffer (an arrow large_string array); numpy finds every '<' there, the tag it
# starts and its row, and decides the common shapes from each row's tag counts and positions. The tags are ASCII, so
# a tag's byte position is a character boundary and counting tags in bytes is str.count. A row the scan cannot decide
# with certainty (leading whitespace, several <answer> tags, text after </answer>, a byte >= 0x80 where blankness or
# a digit matters, an answer or target that is not a plain number, ...) is scored by the per-row function: the scan
# is an exact shortcut for the common shapes, never a second implementation of the edge cases. No Python loop runs
# over the rows.

_RS, _RE, _AS, _AE = 1, 2, 3, 4  # tag kinds: <reasoning>, </reasoning>, <answer>, </answer>; 0: a '<' of no tag
_TAGS = ((_RS, REASONING_START), (_RE, REASONING_END), (_AS, ANSWER_START), (_AE, ANSWER_END))
#: by kind (0: no tag): each tag's first 8 bytes and its last 8 as little-endian words, and its length; and the kind
#: of a tag by its second and third bytes (they tell the four apart)
_HEAD, _TAIL, _LENGTH = np.zeros(5, np.uint64), np.zeros(5, np.uint64), np.full(5, 8)
_BY_PAIR = np.zeros(1 << 16, np.int8)
for _kind, _tag in _TAGS:
    _b = _tag.encode()
    _HEAD[_kind], _TAIL[_kind] = int.from_bytes(_b[:8], "little"), int.from_bytes(_b[-8:], "little")
    _LENGTH[_kind], _BY_PAIR[int.from_bytes(_b[1:3], "little")] = len(_b), _kind
#: zero bytes after a column's last row, so that the scan reads 8 bytes from any byte of a row, and the byte after
#: <reasoning> at any row's start, without a bounds check
_PAD = 16


def _bytes_where(test: Callable[[int], bool]) -> np.ndarray:
    return np.array([test(b) for b in range(256)])


#: a byte that is a whole character and not str.isspace(): certainly not blank (a byte >= 0x80 belongs to a
#: character that may be blank, such as U+00A0 or U+3000)
_INK = _bytes_where(lambda b: b < 128 and not chr(b).isspace())
#: text of only these characters is a number in the sense of _as_number or none, decided here (no space, letter,
#: exponent or Unicode digit)
_PLAIN = _bytes_where(lambda b: b > 0 and chr(b) in "0123456789,+-$%.")
#: _as_number of a plain text without its commas when that is not a float literal: one inside an optional leading $
#: and trailing %
_NUMERIC = r"^\$?(?P<v>[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+))%?$"
#: one whole _NUMBER match in ASCII digits (Python's \d is every Unicode digit)
_ONE_NUMBER = r"^[-+]?(?:[0-9][0-9,]*(?:\.[0-9]+)?|\.[0-9]+)$"


def _utf8(values: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(offsets, data): value i's UTF-8 bytes are data[offsets[i]:offsets[i + 1]], and _PAD zero bytes follow the last;
    None unless every value is text (a str, or bytes in UTF-8: what the per-row functions decode them to) that UTF-8
    can hold (not a lone surrogate). A number or None is not text: a number target keeps its own meaning."""
    import pyarrow as pa

    texts = values.tolist()
    texts.append("\0" * _PAD)
    try:
        array = pa.array(texts, type=pa.large_string())
    except (pa.ArrowException, UnicodeEncodeError):
        return None
    if array.null_count:
        return None
    _, offsets, data = array.buffers()
    return np.frombuffer(offsets, np.int64)[:len(values) + 1], np.frombuffer(data, np.uint8)


def _strings(offsets: np.ndarray, data: np.ndarray, valid: np.ndarray | None = None) -> Any:
    """An arrow large_string array of rows data[offsets[i]:offsets[i + 1]]; null where not valid."""
    import pyarrow as pa

    bitmap = None if valid is None else pa.py_buffer(np.packbits(valid, bitorder="little"))
    buffers = [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.Array.from_buffers(pa.large_string(), len(offsets) - 1, buffers)


def _offsets(lengths: np.ndarray) -> np.ndarray:
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def _gather(data: np.ndarray, begin: np.ndarray, stop: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, bytes) of the rows data[begin[i]:stop[i]], one after another."""
    offsets = _offsets(stop - begin)
    return offsets, data[np.repeat(begin - offsets[:-1], stop - begin) + np.arange(offsets[-1])]


def _count(mask: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Each row's number of true bytes in mask (over the rows' bytes; offsets from 0)."""
    total = np.zeros(len(mask) + 1, np.int64)
    np.cumsum(mask, out=total[1:])
    return np.diff(total[offsets])


def _as_floats(array: Any) -> np.ndarray:
    import pyarrow as pa
    import pyarrow.compute as pc

    return np.array(pc.cast(array, pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64)


def _bare(offsets: np.ndarray, data: np.ndarray, valid: np.ndarray) -> Any:
    """The rows without their commas (as _as_number drops them), null where not valid or then empty."""
    comma = data == ord(",")
    lengths = np.diff(offsets) - _count(comma, offsets)
    return _strings(_offsets(lengths), data[~comma], valid & (lengths > 0))


def _numbers(offsets: np.ndarray, data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(plain, value): whether a row has only [0-9,+-$%.] (then its _as_number is decided here) and _as_number there
    (NaN for None, and where not plain). The rows' bytes start at data[0]."""
    import pyarrow as pa
    import pyarrow.compute as pc

    data = data[:offsets[-1]]
    plain = _count(~np.take(_PLAIN, data), offsets) == 0
    bare = _bare(offsets, data, plain)
    try:  # the usual column: every text a float literal once its commas are gone
        value = _as_floats(bare)
    except pa.ArrowInvalid:  # else the literal inside an optional $ ... %, null where there is none
        value = _as_floats(pc.struct_field(pc.extract_regex(bare, _NUMERIC), "v"))
    value[~np.isfinite(value)] = np.nan  # null (no number) and, as in _as_number, not finite
    return plain, value


def _undot(offsets: np.ndarray, data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows without a trailing '.' (_normalize of a plain text, which has no space, letter or case)."""
    if not offsets[-1]:  # every row empty (e.g. no target given): nothing to drop, and no byte to read
        return offsets, data
    last = offsets[1:] - 1
    dot = (last >= offsets[:-1]) & (data[np.maximum(last, 0)] == ord("."))
    if not dot.any():
        return offsets, data
    keep = np.ones(offsets[-1], bool)
    keep[last[dot]] = False
    return _offsets(np.diff(offsets) - dot), data[:offsets[-1]][keep]


def _equal(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    import pyarrow.compute as pc

    return np.asarray(pc.equal(_strings(*a), _strings(*b)).to_numpy(zero_copy_only=False), dtype=bool)


def _matches(rows: tuple[np.ndarray, np.ndarray], pattern: str) -> np.ndarray:
    import pyarrow.compute as pc

    return np.asarray(pc.match_substring_regex(_strings(*rows), pattern).to_numpy(zero_copy_only=False), dtype=bool)


class _Tags:
    """Where the four tags are in each response: per row its byte range (start, end), its count of each tag
    (count[:, kind]), whether it starts with <reasoning> (lead) or with a byte certainly not blank (inked), its first
    <answer>'s byte position (answer; -1 without) and the next '<' after that (after)."""

    def __init__(self, offsets: np.ndarray, data: np.ndarray) -> None:
        n = len(offsets) - 1
        self.data, self.start, self.end = data, offsets[:-1], offsets[1:]
        # every '<' of the rows (the pad has none), then a sentinel: row i's are lt[lo[i]:hi[i]], and lt[lo[i]] is
        # always there
        lt = np.append(np.flatnonzero(data == ord("<")), offsets[-1])
        bounds = np.searchsorted(lt, offsets)
        lo, hi = bounds[:-1], bounds[1:]
        row = np.repeat(np.arange(n), hi - lo)
        # the tag a '<' starts: picked by its second and third bytes, then its first 8 bytes and its last 8 compared
        # whole (unaligned 8-byte words of the buffer), ending inside the row
        words = np.ndarray((len(data) - 7,), "<u8", data, strides=(1,))
        at = lt[:-1]
        first8 = words[at]
        tag = np.take(_BY_PAIR, (first8 >> np.uint64(8)) & np.uint64(0xFFFF))
        length = np.take(_LENGTH, tag)
        kind = np.append(tag * ((first8 == np.take(_HEAD, tag)) & (words[at + length - 8] == np.take(_TAIL, tag))
                                & (at + length <= self.end[row])), 0)
        self.count = np.bincount(row * 5 + kind[:-1], minlength=5 * n).reshape(n, 5)
        self.lead = (lo < hi) & (lt[lo] == self.start) & (kind[lo] == _RS)  # (an empty row's lt[lo] is a later row's)
        self.inked = (self.end > self.start) & np.take(_INK, data[self.start])
        # each row's first <answer> as an index of lt: the answers before the row's are counted (without one: the
        # next row's, or the sentinel)
        answers = np.append(np.flatnonzero(kind == _AS), len(lt) - 1)
        first = answers[np.cumsum(self.count[:, _AS]) - self.count[:, _AS]]
        self.answer = np.where(self.count[:, _AS] > 0, lt[first], -1)
        self.after = lt[np.minimum(first + 1, len(lt) - 1)]
        self._lt, self._kind, self._lo, self._hi, self._first = lt, kind, lo, hi, first

    def answers(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(known, z0, z1, unsure): extract_answer is data[z0:z1] on the known rows, certainly None on the rows
        neither known nor unsure, and needed on the unsure rows.

        Known: ``<reasoning>X</reasoning>Y<answer>Z</answer>`` from the row's first byte to its last, with one
        <answer> and one </answer>, a </reasoning> before the <answer>, X's first byte certainly not blank and not
        '<' (so the first </reasoning> closes X) and Z's first byte certainly not blank. None: no <answer>, no
        </answer>, or a first byte certainly not blank that does not start <reasoning>."""
        c, lt, kind, data = self.count, self._lt, self._kind, self.data
        z0, z1 = self.answer + len(ANSWER_START), self.end - len(ANSWER_END)
        x = data[self.start + len(REASONING_START)]  # X's first byte where the row starts with <reasoning> (else
        # another row's or the pad's)
        closes = np.r_[0, np.cumsum(kind == _RE)]  # closes[i]: the </reasoning> tags among lt[:i]
        last = self._hi - 1  # the row's last '<'
        known = (self.lead & (c[:, _AS] == 1) & (c[:, _AE] == 1) & (kind[last] == _AE) & (lt[last] == z1)
                 & (closes[self._first] > closes[self._lo]) & np.take(_INK, x) & (x != ord("<"))
                 & (z1 > z0) & np.take(_INK, data[z0]))
        none = (c[:, _AS] == 0) | (c[:, _AE] == 0) | (~self.lead & self.inked)
        return known, z0, z1, ~known & ~none


def _per_row(fn: Callable[..., float], out: np.ndarray, idx: np.ndarray, responses: np.ndarray, targets: np.ndarray
             ) -> None:
    if len(idx):
        out[idx] = [fn(r, t) for r, t in zip(responses[idx].tolist(), targets[idx].tolist())]


def _format_exact_batch(responses: np.ndarray, targets: np.ndarray, rs: tuple, ts: Any) -> np.ndarray:
    known, _, _, unsure = _Tags(*rs).answers()
    out = np.where(known, 3.0, 0.0)
    _per_row(format_exact, out, np.flatnonzero(unsure), responses, targets)
    return out


def _format_approx_batch(responses: np.ndarray, targets: np.ndarray, rs: tuple, ts: Any) -> np.ndarray:
    tags = _Tags(*rs)
    out = np.where(tags.lead, 0.5, -0.5)
    for kind, _ in _TAGS:
        out += np.where(tags.count[:, kind] == 1, 0.5, -0.5)
    spaced = ~tags.lead & ~tags.inked & (tags.end > tags.start)  # maybe leading whitespace: per row
    _per_row(format_approx, out, np.flatnonzero(spaced), responses, targets)
    return out


def _check_answer_batch(responses: np.ndarray, targets: np.ndarray, rs: tuple, ts: tuple) -> np.ndarray:
    tags = _Tags(*rs)
    known, z0, z1, unsure = tags.answers()
    rows = np.flatnonzero(known)
    z, t = _gather(tags.data, z0[rows], z1[rows]), _gather(ts[1], ts[0][rows], ts[0][rows + 1])
    exact = _equal(z, t)
    # only [0-9,+-$%.] in both: numbers decided here, and _normalize drops a trailing '.' and nothing else
    plain, value = _numbers(np.r_[z[0], z[0][-1] + t[0][1:]], np.r_[z[1], t[1]])  # both at once
    plain, a, b = plain[:len(rows)] & plain[len(rows):], value[:len(rows)], value[len(rows):]
    same = _equal(_undot(*z), _undot(*t))
    out = np.zeros(len(responses))
    with np.errstate(invalid="ignore"):  # NaN (not a number): no comparison holds, -1.0
        diff, tol = np.abs(a - b), np.abs(b) * (1 + 1e-9)
        graded = np.where(diff <= 0.1 * tol, 0.5, np.where(diff <= 0.2 * tol, 0.25, -1.0))
    out[rows] = np.where(exact, 3.0, np.where(same, 1.5, graded))
    unsure[rows[~exact & ~plain]] = True
    _per_row(check_answer, out, np.flatnonzero(unsure), responses, targets)
    return out


def _check_numbers_batch(responses: np.ndarray, targets: np.ndarray, rs: tuple, ts: tuple) -> np.ndarray:
    tags = _Tags(*rs)
    rows = np.flatnonzero(tags.answer >= 0)  # no <answer>: 0.0
    # from the first <answer> to the next '<' or the row's end: when that is one ASCII number, it is the first number
    # after <answer>; else (text or space first, Unicode digits, ...) per row
    text = _gather(tags.data, tags.answer[rows] + len(ANSWER_START), np.minimum(tags.after[rows], tags.end[rows]))
    sure = _matches(text, _ONE_NUMBER)
    guess = _as_floats(_bare(*text, sure))  # a float literal once its commas are gone
    t_plain, value = _numbers(*ts)
    sure &= t_plain[rows]
    out = np.zeros(len(responses))
    out[rows] = np.where(sure & (guess == value[rows]), 1.5, 0.0)
    _per_row(check_numbers, out, rows[~sure], responses, targets)
    return out


#: from this many rows, score_batch scans the columns; fewer are scored per distinct pair (a group often repeats a
#: response, and the scan's fixed cost is that of ~100-400 distinct rows scored one by one)
COLUMNS_FROM = 1024


def _score_columns(fn: Callable[..., float], columns: Callable[..., np.ndarray], uses_targets: bool
                   ) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    distinct = _score_distinct(fn)

    def score_batch(responses: np.ndarray, targets: np.ndarray) -> np.ndarray:
        responses = np.asarray(responses, dtype=object)
        targets = np.asarray(targets, dtype=object)
        if len(responses) < COLUMNS_FROM:
            return distinct(responses, targets)
        rs = _utf8(responses)
        ts = _utf8(targets) if uses_targets else None  # the format functions ignore the target
        if rs is None or (uses_targets and ts is None):  # not all text, or not all UTF-8 can hold
            return distinct(responses, targets)
        return columns(responses, targets, rs, ts)

    score_batch.__doc__ = f"{fn.__name__} per row, over the columns (a tag scan; per row where it cannot decide)."
    return score_batch


for _fn, _columns, _uses_targets in ((format_exact, _format_exact_batch, False),
                                    (format_approx, _format_approx_batch, False),
                                    (check_answer, _check_answer_batch, True),
                                    (check_numbers, _check_numbers_batch, True)):
    _fn.score_batch = _score_columns(_fn, _columns, _uses_targets)  # type: ignore[attr-defined]


#: name -> function, in the order the verl adapter applies them by default
BUILTIN_FUNCTIONS = {
    "format_exact": format_exact,
    "format_approx": format_approx,
    "check_answer": check_answer,
    "check_numbers": check_numbers,
}
