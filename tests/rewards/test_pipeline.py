"""The weighted combination of configured reward functions (core RewardPipeline) and the verl adapter."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import structlog
import structlog.testing

from rlhooks import ConfigError, RewardFunction
from rlhooks.host import RunManager, load_config
from rlhooks.core.errors import UnknownComponentError
from rlhooks.core.rewards import RewardEntry, RewardPipeline
from rlhooks.plugins.rewards import functions as F
from rlhooks.engines.verl.reward_function import compute_score

RESPONSES = [
    "<reasoning>r</reasoning><answer>42</answer>",  # right, well formed
    "<reasoning>r</reasoning><answer>44</answer>",  # within 10%
    "the answer is 42",  # no format
    "<reasoning>r</reasoning><answer>abc</answer>",  # wrong
]
TARGETS = ["42", "42", "42", "42"]


def expected_total(weights: dict[str, float]) -> np.ndarray:
    return np.array([sum(w * getattr(F, name)(r, t) for name, w in weights.items()) for r, t in zip(RESPONSES, TARGETS)])


def test_weighted_combination_from_yaml(tmp_path):
    cfg = load_config({
        "run": {"out_dir": str(tmp_path)},
        "rewards": [{"name": "check_answer", "weight": 2.0}, "format_exact", {"name": "format_approx", "weight": -0.5},
                    "check_numbers"],
    })
    pipe = RunManager(cfg).rewards
    assert pipe.names == ["check_answer", "format_exact", "format_approx", "check_numbers"]
    res = pipe.score(RESPONSES, TARGETS)
    weights = {"check_answer": 2.0, "format_exact": 1.0, "format_approx": -0.5, "check_numbers": 1.0}
    np.testing.assert_allclose(res.total, expected_total(weights))
    np.testing.assert_array_equal(res.components["check_answer"], [3.0, 0.5, 0.0, -1.0])
    np.testing.assert_array_equal(res.components["format_exact"], [3.0, 3.0, 0.0, 3.0])
    assert res.errors == {} and res.metrics() == {}


def parse_int_reward(response: str, target: str, **info) -> float:
    """A real user reward function that raises on responses that are not integers."""
    return 1.0 if int(response) == int(target) else 0.0


def test_a_function_raising_on_one_sample_is_isolated_and_counted():
    pipe = RewardPipeline([
        RewardEntry("parse_int", parse_int_reward, weight=2.0, error_score=-1.0),
        RewardEntry("format_exact", F.format_exact),
    ])
    res = pipe.score(["3", "three", "4"], ["3", "3", "3"])
    np.testing.assert_array_equal(res.components["parse_int"], [1.0, -1.0, 0.0])  # the bad row gets error_score
    np.testing.assert_array_equal(res.total, [2.0, -2.0, 0.0])
    assert res.errors == {"parse_int": 1}
    assert res.metrics() == {"rewards/errors/parse_int": 1.0}


def test_error_score_and_weight_come_from_config(tmp_path):
    cfg = load_config({"run": {"out_dir": str(tmp_path)},
                       "rewards": [{"name": "format_exact", "weight": 0.5, "error_score": -3}]})
    entry = RunManager(cfg).rewards.entries[0]
    assert (entry.weight, entry.error_score) == (0.5, -3.0)
    res = RunManager(cfg).rewards.score([RESPONSES[0], None], ["42", "42"])  # None raises TypeError in the function
    assert res.components["format_exact"].tolist() == [3.0, -3.0] and res.errors == {"format_exact": 1}


def test_unknown_reward_function_name_is_a_config_error_with_did_you_mean():
    with pytest.raises(ConfigError) as e:
        load_config({"rewards": ["format_exakt"]})
    msg = str(e.value)
    assert "rewards[0] (format_exakt)" in msg and "Did you mean 'format_exact'" in msg


@pytest.mark.parametrize(("options", "needle"), [
    ({"weight": "heavy"}, "rewards[0].weight (check_answer): expected a number"),
    ({"scale": 2}, "option 'scale' is not known"),
])
def test_bad_reward_options(options, needle):
    with pytest.raises(ConfigError) as e:
        load_config({"rewards": [{"name": "check_answer", **options}]})
    assert needle in str(e.value)


# -- verl adapter ----------------------------------------------------------------------------


def test_compute_score_defaults_to_all_four_with_weight_one():
    r = RESPONSES[0]
    out = compute_score("gsm8k", r, "42", {"index": 0})
    comps = {name: fn(r, "42") for name, fn in F.BUILTIN_FUNCTIONS.items()}
    assert out == {"score": sum(comps.values()), **comps, "acc": 1.0, "reward_errors": 0.0,
                   **{f"reward_errors/{name}": 0.0 for name in comps}}
    assert out["score"] == 3.0 + 2.5 + 3.0 + 1.5


def test_compute_score_selects_functions_and_weights_through_kwargs():
    r = RESPONSES[1]
    out = compute_score("gsm8k", r, 42, None, functions="check_answer, format_exact",
                        weights={"check_answer": 2.0})
    assert set(out) == {"score", "check_answer", "format_exact", "acc", "reward_errors",
                        "reward_errors/check_answer", "reward_errors/format_exact"}
    assert out["score"] == 2.0 * 0.5 + 3.0 and out["acc"] == 0.0  # within 10% is not correct
    out = compute_score("gsm8k", r, "42", functions=["format_approx"], weights=[3.0])
    assert out["score"] == 7.5


def test_compute_score_isolates_a_raising_function():
    out = compute_score("gsm8k", None, "42", functions=["format_exact", "check_numbers"], error_score=-2.0)
    assert out == {"score": -4.0, "format_exact": -2.0, "check_numbers": -2.0, "acc": 0.0, "reward_errors": 2.0,
                   "reward_errors/format_exact": 1.0, "reward_errors/check_numbers": 1.0}  # per function, for V1
    # per function, as error_score on each rewards: entry (rlhooks train on V1 passes them so)
    out = compute_score("gsm8k", None, "42", functions=["format_exact", "check_numbers"],
                        weights=[2.0, 1.0], error_score={"format_exact": -1.0})
    assert (out["score"], out["format_exact"], out["check_numbers"]) == (-2.0, -1.0, 0.0)
    with pytest.raises(ValueError, match=r"error_score for \['check_answer'\] but functions are"):
        compute_score("gsm8k", "x", "42", functions=["format_exact"], error_score={"check_answer": -1.0})


def test_compute_score_bad_kwargs():
    with pytest.raises(ValueError, match="weights for"):
        compute_score("s", "x", "1", functions=["format_exact"], weights={"check_answer": 1.0})
    with pytest.raises(ValueError, match="2 weights for 1 functions"):
        compute_score("s", "x", "1", functions=["format_exact"], weights=[1.0, 2.0])
    with pytest.raises(UnknownComponentError, match="Did you mean 'check_answer'"):
        compute_score("s", "x", "1", functions=["check_answr"])
    with pytest.raises(ValueError, match="observer plugin"):
        compute_score("s", "x", "1", functions=["source_metrics"])


def test_adapter_module_does_not_import_verl():
    import ast
    import inspect

    from rlhooks.engines.verl import reward_function as verl_adapter

    tree = ast.parse(inspect.getsource(verl_adapter))
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert "verl" not in imported


def _adapter_paths() -> dict[str, tuple[str, bool]]:
    """reward.custom_reward_function.path values naming the adapter -> (path, deprecated)."""
    import rlhooks

    root = Path(rlhooks.__file__).parent
    return {"file": (str(root / "engines" / "verl" / "reward_function.py"), False),
            "pkg": ("pkg://rlhooks.engines.verl.reward_function", False),
            "old-file": (str(root / "plugins" / "rewards" / "verl_adapter.py"), True),
            "old-pkg": ("pkg://rlhooks.plugins.rewards.verl_adapter", True)}


@pytest.mark.verl
@pytest.mark.slow  # importing verl takes several seconds
@pytest.mark.parametrize("which", list(_adapter_paths()))
def test_adapter_works_through_verls_loader(which, monkeypatch):
    """verl loads custom_reward_function by file path or ``pkg://``; do that with verl's own helper. The path
    before issue 39 moved the module still loads the same compute_score, with a DeprecationWarning."""
    pytest.importorskip("verl")
    import sys
    import warnings

    from omegaconf import OmegaConf

    from rlhooks.engines.verl.v1 import adapter_functions
    try:
        from verl.trainer.ppo.reward import get_custom_reward_fn
    except ImportError:
        pytest.skip("verl.trainer.ppo.reward.get_custom_reward_fn not available in this verl")
    path, deprecated = _adapter_paths()[which]
    monkeypatch.delitem(sys.modules, "rlhooks.plugins.rewards.verl_adapter", raising=False)  # import it afresh
    cfg = OmegaConf.create({"reward": {"custom_reward_function": {
        "path": path, "name": "compute_score",
        "reward_kwargs": {"functions": ["check_answer"], "weights": [2.0]}}}})
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        fn = get_custom_reward_fn(cfg)
    moved = [w for w in seen if issubclass(w.category, DeprecationWarning) and "rlhooks.engines.verl.reward_function"
             in str(w.message)]
    assert len(moved) == int(deprecated), [str(w.message) for w in seen]
    assert fn is not None
    out = fn(data_source="gsm8k", solution_str=RESPONSES[0], ground_truth="42", extra_info={})
    assert out["score"] == 6.0 and out["check_answer"] == 3.0
    assert adapter_functions(cfg) == ("check_answer",)  # rlhooks train knows it as its adapter either way


class HalfBatchScorer(RewardFunction):
    """A real RewardFunction whose fast path is buggy (returns too few values)."""

    def __call__(self, response, target, **info):
        return float(len(response))

    def score_batch(self, responses, targets):
        return np.zeros(len(responses) // 2)


def test_wrong_length_score_batch_falls_back_to_per_row_scores_and_says_so_once():
    pipe = RewardPipeline([RewardEntry("half", HalfBatchScorer())])
    with structlog.testing.capture_logs() as logs:
        res = pipe.score(["a", "bb", "ccc", "dddd"], ["", "", "", ""])
        pipe.score(["a", "bb"], ["", ""])
    assert res.components["half"].tolist() == [1.0, 2.0, 3.0, 4.0] and res.errors == {}
    warned = [e["event"] for e in logs if "score_batch()" in e["event"]]
    assert warned == ["reward function 'half': score_batch() returned shape (2,) for 4 rows; rows were scored "
                      "one by one instead (slower)"]


class RaisingBatchScorer:
    def __call__(self, response, target, **info):
        return 1.0

    def score_batch(self, responses, targets):
        raise KeyError("tokenizer")


def test_a_raising_score_batch_is_named_not_silently_replaced():
    with structlog.testing.capture_logs() as logs:
        res = RewardPipeline([RewardEntry("fast", RaisingBatchScorer())]).score(["a", "b"], ["", ""])
    assert res.components["fast"].tolist() == [1.0, 1.0]
    assert any("reward function 'fast': score_batch() raised KeyError: 'tokenizer'" in e["event"] for e in logs)


def test_a_score_batch_failing_because_a_row_fails_is_not_blamed():
    class Strict(RewardFunction):  # the default score_batch: per row, so one bad row fails it
        def __call__(self, response, target, **info):
            return float(len(response))  # TypeError on None

    with structlog.testing.capture_logs() as logs:
        res = RewardPipeline([RewardEntry("strict", Strict())]).score(["ab", None], ["", ""])
    assert res.components["strict"].tolist() == [2.0, 0.0] and res.errors == {"strict": 1}
    assert not any("score_batch()" in e["event"] for e in logs)


class NanForLongAnswers(RewardFunction):
    """A real user reward function with a vectorized path that returns NaN for some rows."""

    def __call__(self, response, target, **info):
        return float("nan") if len(response) > 2 else 1.0

    def score_batch(self, responses, targets):
        lengths = np.array([len(r) for r in responses])
        return np.where(lengths > 2, np.nan, np.where(lengths > 1, np.inf, 1.0))


def test_non_finite_scores_are_counted_scored_error_score_and_named_once():
    pipe = RewardPipeline([RewardEntry("nanny", NanForLongAnswers(), weight=2.0, error_score=-1.0),
                           RewardEntry("format_exact", F.format_exact)])
    with structlog.testing.capture_logs() as logs:
        res = pipe.score(["a", "bb", "ccc", "d"], ["", "", "", ""])
        again = pipe.score(["ccc"], [""])
    assert res.components["nanny"].tolist() == [1.0, -1.0, -1.0, 1.0]  # NaN and inf rows get error_score
    assert np.isfinite(res.total).all() and res.total.tolist() == [2.0, -2.0, -2.0, 2.0]
    assert res.errors == {"nanny": 2} and res.nonfinite == {"nanny": 2}
    assert res.metrics() == {"rewards/errors/nanny": 2.0, "rewards/nonfinite_scores/nanny": 2.0}
    assert again.metrics() == {"rewards/errors/nanny": 1.0, "rewards/nonfinite_scores/nanny": 1.0}
    warned = [e["event"] for e in logs if "NaN or inf" in e["event"]]
    assert warned == ["reward function 'nanny' returned NaN or inf for 2 of 4 rows; such rows score error_score=-1.0 "
                      "and are counted in rewards/errors/nanny and rewards/nonfinite_scores/nanny"]


def test_raised_and_non_finite_rows_add_up_in_the_error_count():
    def picky(response, target, **info):
        if response == "boom":
            raise ValueError("boom")
        return float("nan") if response == "nan" else 0.5

    res = RewardPipeline([RewardEntry("picky", picky)]).score(["boom", "nan", "ok", "nan"], ["", "", "", ""])
    assert res.components["picky"].tolist() == [0.0, 0.0, 0.5, 0.0]
    assert res.errors == {"picky": 3} and res.nonfinite == {"picky": 2}


def test_score_batchs_own_array_is_not_overwritten():
    held = np.array([np.nan, 1.0])

    class Cached(RewardFunction):
        def __call__(self, response, target, **info):
            return 1.0

        def score_batch(self, responses, targets):
            return held

    RewardPipeline([RewardEntry("cached", Cached())]).score(["a", "b"], ["", ""])
    assert np.isnan(held[0])

