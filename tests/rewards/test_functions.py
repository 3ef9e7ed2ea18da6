"""Every scoring rule of the four built-in reward functions, pinned."""

from __future__ import annotations

import numpy as np
import pytest

from rlhooks.plugins.rewards.functions import (
    BUILTIN_FUNCTIONS,
    check_answer,
    check_numbers,
    extract_answer,
    format_approx,
    format_exact,
)

GOOD = "<reasoning>6 times 7</reasoning>\n<answer>42</answer>"


def fmt(answer: str, reasoning: str = "think") -> str:
    return f"<reasoning>{reasoning}</reasoning><answer>{answer}</answer>"


@pytest.mark.parametrize(
    ("response", "score"),
    [
        (GOOD, 3.0),
        ("  \n" + GOOD + "\n\n", 3.0),  # surrounding whitespace allowed
        ("<reasoning>a\nb</reasoning> some text\n<answer>x\ny</answer>", 3.0),  # newlines inside
        ("<reasoning></reasoning><answer>42</answer>", 0.0),  # empty reasoning
        ("<reasoning>x</reasoning><answer>  </answer>", 0.0),  # blank answer
        ("Sure! " + GOOD, 0.0),  # text before
        (GOOD + " done", 0.0),  # text after
        ("<answer>42</answer><reasoning>x</reasoning>", 0.0),  # wrong order
        ("<reasoning>x</reasoning><answer>1</answer><answer>2</answer>", 0.0),  # two answers
        ("<reasoning>x<answer>42</answer>", 0.0),  # unclosed reasoning
        ("", 0.0),
    ],
)
def test_format_exact(response, score):
    assert format_exact(response, "") == score


@pytest.mark.parametrize(
    ("response", "score"),
    [
        (GOOD, 2.5),  # all five checks
        ("", -2.5),  # none
        ("  " + GOOD, 2.5),  # starts with <reasoning> after whitespace
        ("x" + GOOD, 1.5),  # not at the start: -0.5 instead of +0.5
        ("<reasoning>a</reasoning><reasoning>b</reasoning><answer>1</answer>", 0.5),  # two of each reasoning tag
        ("<reasoning>a</reasoning>", 0.5),  # no answer tags: 3 x 0.5 - 2 x 0.5
        ("<answer>1</answer>", -0.5),  # 2 answer checks pass, 3 reasoning checks fail
    ],
)
def test_format_approx(response, score):
    assert format_approx(response, "") == score


@pytest.mark.parametrize(
    ("answer", "target", "score"),
    [
        ("42", "42", 3.0),  # exact
        (" 42 ", "42", 1.5),  # normalized: trimmed
        ("Paris.", "paris", 1.5),  # normalized: case and trailing period
        ("New   York", "new york", 1.5),  # normalized: whitespace collapsed
        ("44", "42", 0.5),  # |2| <= 4.2 (10%)
        ("46.2", "42", 0.5),  # exactly 10% counts as within
        ("48", "42", 0.25),  # |6| <= 8.4 (20%)
        ("50.4", "42", 0.25),  # exactly 20%
        ("51", "42", -1.0),  # beyond 20%
        ("-44", "-42", 0.5),  # negative targets: relative to |target|
        ("1,050", "1000", 0.5),  # thousands commas
        ("$1000", "1000", 0.5),  # currency sign: numerically equal but not a string match
        ("0.0", "0", 0.5),  # numerically equal to a zero target
        ("0.1", "0", -1.0),  # any miss of a zero target is wrong
        ("London", "Paris", -1.0),  # wrong, not numbers
        ("42", "forty-two", -1.0),
        ("nan", "5", -1.0),  # non-finite numbers never count as close
    ],
)
def test_check_answer(answer, target, score):
    assert check_answer(fmt(answer), target) == score


def test_check_answer_without_a_formatted_answer_scores_zero():
    assert check_answer("The answer is 42", "42") == 0.0
    assert check_answer("<answer>42</answer>", "42") == 0.0  # format_exact rejects it too


def test_check_answer_accepts_numeric_ground_truth():
    assert check_answer(fmt("42"), 42) == 3.0
    assert check_answer(fmt("0.5"), 0.5) == 3.0


@pytest.mark.parametrize(
    ("response", "target", "score"),
    [
        (fmt("42"), "42", 1.5),
        (fmt("The result is 42 apples"), "42", 1.5),  # first number after <answer>
        (fmt("42.0"), "42", 1.5),  # numerically equal
        (fmt("1,234"), "1234", 1.5),
        (fmt("-3.5"), "-3.5", 1.5),
        (fmt("7 then 42"), "42", 0.0),  # only the first number counts
        (fmt("none"), "42", 0.0),  # no number
        ("<reasoning>42</reasoning> no answer tag", "42", 0.0),
        ("<answer> 42", "42", 1.5),  # only needs the opening tag
        (fmt("42"), "forty-two", 0.0),  # non-numeric target
    ],
)
def test_check_numbers(response, target, score):
    assert check_numbers(response, target) == score


def test_ranges_are_declared_and_respected():
    responses = [GOOD, "", "x", fmt("41"), fmt("abc"), "<answer>1</answer><answer>", fmt("1.1")]
    for name, fn in BUILTIN_FUNCTIONS.items():
        lo, hi = fn.reward_range
        for r in responses:
            for t in ("42", "1", "abc"):
                assert lo <= fn(r, t) <= hi, (name, r, t)


def test_extra_keyword_info_is_accepted():
    assert format_exact(GOOD, "42", data_source="gsm8k", index=3) == 3.0


def test_non_string_response_is_a_clear_type_error():
    with pytest.raises(TypeError, match="response must be a string, got NoneType"):
        format_exact(None, "42")


def test_extract_answer():
    assert extract_answer(GOOD) == "42" and extract_answer("no tags") is None


def test_score_batch_scores_each_distinct_pair_once_and_equals_per_row_scores():
    from rlhooks.plugins.rewards.functions import BUILTIN_FUNCTIONS, _score_distinct

    good = "<reasoning>7 * 6 = 42</reasoning><answer>42</answer>"
    responses = np.array([good, good, "<answer>41</answer>", good, b"<reasoning>r</reasoning><answer>42</answer>"], dtype=object)
    for targets in (np.array(["42", "42", "42", "41", "42"], dtype=object),  # text: deduplicated
                    np.array([42, 42.0, "42", 41, "42"], dtype=object)):      # numbers: scored per row
        for fn in BUILTIN_FUNCTIONS.values():
            assert fn.score_batch(responses, targets).tolist() == [fn(r, t) for r, t in zip(responses, targets)], fn
    calls = []
    counted = _score_distinct(lambda r, t: calls.append((r, t)) or float(len(r)))
    assert counted(np.array(["a", "bb", "a", "a"], dtype=object), np.array(["x", "x", "x", "y"], dtype=object)).tolist() == [1, 2, 1, 1]
    assert sorted(calls) == [("a", "x"), ("a", "y"), ("bb", "x")]
    assert counted(np.zeros(0, object), np.zeros(0, object)).shape == (0,)


def _batch_vs_per_row(responses: list, targets: list) -> dict[str, tuple[int, list]]:
    """Per function, the rows where score_batch differs from the per-row function: (how many, the first three as
    (response, target, batch score, per-row score)); empty when they agree everywhere."""
    rs, ts = np.array(responses, dtype=object), np.array(targets, dtype=object)
    out = {}
    for name, fn in BUILTIN_FUNCTIONS.items():
        want = [fn(r, t) for r, t in zip(responses, targets)]
        got = fn.score_batch(rs, ts).tolist()
        assert len(got) == len(want), name
        bad = [(r, t, g, w) for r, t, g, w in zip(responses, targets, got, want) if g != w]
        if bad:
            out[name] = (len(bad), bad[:3])
    return out


def test_score_batch_over_columns_equals_the_per_row_rules_on_odd_text():
    """The column scan decides only rows it can be sure of: random responses from tags (also cut in two, and
    across rows), every kind of whitespace Python's isspace knows, NUL, Unicode digits, signs, commas, $ and %,
    score as per row."""
    rng = np.random.default_rng(7)
    parts = ["<reasoning>", "</reasoning>", "<answer>", "</answer>", "<", "<ans", "wer>", "answer>", "</reason", "ing>",
             "r", "x y", " ", "\n", "\t", "\xa0", "\u2003", "\u3000", "\x1c", "\x85", "\x00", "42", "4,2", "-4", "+.5",
             "5.", "..", "9" * 30, "٣", "４", "1e3", "$", "%", ",", ".", "+", "-", "E", "é", "€", "The answer is 7"]
    shapes = ["<reasoning>{a}</reasoning>{b}<answer>{c}</answer>{d}", "{a}<reasoning>{b}</reasoning><answer>{c}</answer>",
              "<reasoning>{a}</reasoning><answer>{b}</answer>{c}<answer>{d}</answer>", "{a}{b}{c}{d}",
              "<reasoning>{a}</reasoning>{b}<answer>{c}{d}"]
    def piece() -> str:
        return "".join(rng.choice(parts, rng.integers(0, 3)).tolist())
    responses, targets = [], []
    for i in range(3000):  # above COLUMNS_FROM: the columns are scanned
        shape = shapes[i % len(shapes)] if i % 7 else shapes[0]
        responses.append(shape.format(a=piece() or "think", b=piece(), c=piece() or "42", d=piece() if i % 3 == 0 else ""))
        targets.append(str(rng.choice(["42", "4,2", "-4", "0.5", "5", "$42", "42%", "٣", "x", "42.", " 42", "1e3", "46.2", "0",
                                       "", "$", ".", "+.5", "5.", "1,2,3", "9" * 30, "-0"])))
    assert not _batch_vs_per_row(responses, targets)


#: rows next to the common shape, each on one side of a rule the column scan decides (or leaves to the per-row
#: function); in this order, so that some rows end in a cut tag that the next row completes
EDGES = [
    "<reasoning>x</reasoning><answer>42</answer>",
    "<reasoning>x</reasoning><answer>42</answer>\n", "<reasoning>x</reasoning><answer>42</answer>\u3000",  # blank after
    "<reasoning>x</reasoning><answer>42</answer> ok", "<reasoning>x</reasoning><answer>42</answer></answer>",
    "<reasoning>x</reasoning><answer></answer>", "<reasoning>x</reasoning><answer> 42</answer>",  # empty, blank first
    "<reasoning>x</reasoning><answer>\xa042</answer>", "<reasoning>x</reasoning><answer>\x0042</answer>",
    "<reasoning>x</reasoning><answer>é</answer>", "<reasoning>x</reasoning><answer>٣</answer>",  # not ASCII
    "<reasoning>x</reasoning><answer>4<2</answer>", "<reasoning>x</reasoning><answer><b>4</b></answer>",  # '<' in Z
    "<reasoning>x</reasoning><answer><reasoning></answer>",
    "<reasoning>x</reasoning><answer>1</answer><answer>2</answer>", "<reasoning>x</reasoning><answer>1<answer>2</answer>",
    "<reasoning></reasoning><answer>1</answer>", "<reasoning> </reasoning><answer>1</answer>",  # X empty, blank
    "<reasoning>\u3000</reasoning><answer>1</answer>", "<reasoning>é</reasoning><answer>1</answer>",
    "<reasoning></reasoning></reasoning><answer>1</answer>", "<reasoning><reasoning>a</reasoning><answer>1</answer>",
    "<reasoning>a</answer></reasoning><answer>1</answer>", "<reasoning>a<answer>0</answer></reasoning><answer>1</answer>",
    "<reasoning>a<answer>1</answer>", "<reasoning>a</reasoning>\n<answer>1</answer>", "<reasoning>a</rXasoning><answer>1</answer>",
    " <reasoning>a</reasoning><answer>1</answer>", "\u2003<reasoning>a</reasoning><answer>1</answer>",
    "é<reasoning>a</reasoning><answer>1</answer>", "x<reasoning>a</reasoning><answer>1</answer>",
    "<reasoning>a</reasoning><answer>1</answer", "<reasoning>a</reasoning><answer>1", "<reasoning>a</reasoning><answer>",
    "<reasoning>a</reasoning><answer>1</answer><ans", "wer>7</answer>", "<reasoning>a</reasoning><answer>1</ans",
    "wer>", "<reasoning>a</reasoning><answer>7</answer><", "answer>8", "<reasoni", "ng>a</reasoning><answer>1</answer>",
    "<answer>", "</answer>", "<reasoning>", "<", "", "<reasoning></reasoning><answer></answer>", "<<answer>>5",
    *("<reasoning>a</reasoning><answer>" + z + "</answer>" for z in (
        "1,234", "-3.5", "+.5", "-.5", ".5", "5.", "1,,2", "1.2.3", "$5", "5%", "$$5", "9" * 400, "1e3", "42 apples",
        "-,5", ".,5", "1.2,3", "--5", "4 2", "42.", "0.0", "-0", "٣", "４2", "2٣", "2.٣", "Paris.", "New   York",
        "46.2", "50.4", "37.8")),
    "<reasoning>a</reasoning><answer>42 apples", "<reasoning>a</reasoning><answer>-٣",
]
TARGETS = ["42", "1234", "1,234", "-3.5", "0.5", "5", "5.", "$5", "5%", "", "$", ".", "+", "1,2,3", "9" * 400, "٣",
           "paris", "new york", " 42", "42.", "1e3", "-0", "x"]


@pytest.mark.parametrize("extra", [-1, 0, 1, 2000])  # both sides of COLUMNS_FROM (per distinct pair, scanned)
def test_score_batch_equals_the_per_row_rules_next_to_the_common_shape(extra):
    from rlhooks.plugins.rewards.functions import COLUMNS_FROM

    n = COLUMNS_FROM + extra
    responses = [EDGES[i % len(EDGES)] for i in range(n)]
    targets = [TARGETS[(i // len(EDGES) + i) % len(TARGETS)] for i in range(n)]  # every pair, over the cycles
    assert not _batch_vs_per_row(responses, targets)


def test_score_batch_decides_the_common_shapes_over_the_columns(monkeypatch):
    """Well-formed responses, an unclosed answer, text before the tags, no tags and "" are scored without the per-row
    functions; so are numbers as answers and targets (a text answer that is not the target is left to them)."""
    import rlhooks.plugins.rewards.functions as F

    per_row = []
    monkeypatch.setattr(F, "_per_row", lambda fn, out, idx, *_: per_row.extend(idx.tolist()))
    answers = ["42", "1,234", "-3.5", "7", "Paris"]
    rows = [f"<reasoning>step {i}, é \u3000</reasoning>\n<answer>{answers[i % 5]}</answer>" for i in range(1500)]
    rows += ["<reasoning>r</reasoning><answer>42", "Sure: <reasoning>r</reasoning><answer>42</answer>", "no tags", ""]
    targets = [answers[i % 3] for i in range(len(rows))]  # equal, not equal, numbers; 1,234 vs 1234
    for name, fn in BUILTIN_FUNCTIONS.items():
        fn.score_batch(np.array(rows, dtype=object), np.array(targets, dtype=object))
        paris = name.startswith("check")  # check_answer: "Paris" vs a number; check_numbers: no number first
        assert all(i % 5 == 4 and i < 1500 for i in per_row) and (paris or not per_row), (name, per_row[:5])
        per_row.clear()


def test_score_batch_over_columns_takes_text_only():
    """Bytes (in UTF-8 or not), number targets and lone surrogates in a batch of COLUMNS_FROM rows or more score as
    per row: the columns hold text that UTF-8 can hold; anything else is scored per distinct pair."""
    from rlhooks.plugins.rewards.functions import COLUMNS_FROM

    good = "<reasoning>r</reasoning><answer>42</answer>"
    for odd_response, odd_target in [(b"<reasoning>r</reasoning><answer>42</answer>", "42"), (b"\xff<answer>4", "4"),
                                     (good, 42), (good, 42.0), (good, b"42"), ("<answer>\ud800</answer>", "42"),
                                     (good, "\ud800"), (np.str_(good), np.str_("42"))]:
        responses = [good, "<reasoning>r</reasoning><answer>41</answer>"] * (COLUMNS_FROM // 2) + [odd_response]
        targets = ["42"] * COLUMNS_FROM + [odd_target]
        assert not _batch_vs_per_row(responses, targets)


def test_score_batch_over_columns_with_every_target_empty():
    """A dataset without ground truths: every decided row's target is empty (no byte to read for the trailing-'.' rule)."""
    from rlhooks.plugins.rewards.functions import COLUMNS_FROM

    good = "<reasoning>r</reasoning><answer>42</answer>"
    assert not _batch_vs_per_row([good] * COLUMNS_FROM, [""] * COLUMNS_FROM)
    assert not _batch_vs_per_row([good, "x"] * (COLUMNS_FROM // 2), [""] * COLUMNS_FROM)


@pytest.mark.parametrize("target", [np.float64(42.0), np.float32(42.0), np.int64(42), np.int32(41)])
def test_numpy_number_targets_score_as_the_python_number(target):
    """verl's ground truths often come from a parquet column: numpy 2's repr of np.float64(42.0) is
    'np.float64(42.0)', and np.int64 is no int; both read as the Python number, per row and over a batch."""
    good = "<reasoning>r</reasoning><answer>42</answer>"
    python = target.item()
    for fn in BUILTIN_FUNCTIONS.values():
        assert fn(good, target) == fn(good, python), (fn.__name__, target)
    assert not _batch_vs_per_row([good] * 1100, [target] * 1100)
    assert check_numbers(good, target) == (1.5 if python == 42 else 0.0)
