"""MultiSourceSampler: composition, adaptive weights, feedback, logs and bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
import structlog
from .sampler_helpers import Stream, run_with_feedback, source_of, trajectories, two_sources

from rlhooks import Batch, ConfigError, DatasetColumns
from rlhooks.core.data import DataError
from rlhooks.plugins.samplers.multi_source import MultiSourceOptions, MultiSourceSampler


def counts(data: DatasetColumns, idx: np.ndarray) -> dict[str, int]:
    names, c = np.unique(source_of(data, idx), return_counts=True)
    return dict(zip(names.tolist(), c.tolist()))


def low_if(src: np.ndarray, _idx: np.ndarray, low: str = "iftrain") -> np.ndarray:
    return np.where(src == low, 0.2, 0.8)


# -- defaults -------------------------------------------------------------------------------

def test_spec_defaults() -> None:
    o = MultiSourceOptions()
    assert (o.sampling_strategy, o.source_weights, o.adaptive_weights) == ("weighted", {}, False)
    assert (o.alpha, o.update_frequency, o.temperature, o.max_source_ratio) == (0.1, 5, 1.0, 3.0)


# -- composition ----------------------------------------------------------------------------

def test_fixed_weights_give_exact_batch_composition(data: DatasetColumns) -> None:
    s = MultiSourceSampler({"source_weights": {"iftrain": 3.0, "logicif": 1.0}}, data, batch_size=64, seed=0)
    stream = Stream(s)
    for _ in range(20):
        assert counts(data, stream.take(64)) == {"iftrain": 48, "logicif": 16}


def test_three_way_split_long_run_share_within_one_row() -> None:
    data = two_sources(names=("a", "b", "c"))
    s = MultiSourceSampler({}, data, batch_size=100, seed=1)  # no source_weights: every source, weight 1
    stream = Stream(s)
    total = {"a": 0, "b": 0, "c": 0}
    for b in range(1, 31):
        for k, v in counts(data, stream.take(100)).items():
            total[k] += v
        # tolerance: largest remainder with carried rounding error stays within 1 row of the exact share
        assert max(abs(v - b * 100 / 3) for v in total.values()) < 1.0 + 1e-9


def test_rows_within_a_source_are_drawn_without_replacement() -> None:
    data = two_sources(n_each=300)
    s = MultiSourceSampler({}, data, batch_size=50, seed=2)
    idx = Stream(s).take(600)  # one full pass over each source
    assert len(np.unique(idx)) == 600
    assert not np.array_equal(idx[:50], np.sort(idx[:50]))  # shuffled within the batch


def test_proportional_strategy_uses_source_sizes() -> None:
    ds = np.array(["big"] * 3000 + ["small"] * 1000, dtype=object)
    data = DatasetColumns.from_arrays(ds)
    s = MultiSourceSampler({"sampling_strategy": "proportional", "source_weights": {"big": 1.0, "small": 5.0}},
                           data, batch_size=40, seed=0)
    assert s.weights == {"big": 0.75, "small": 0.25}
    assert counts(data, Stream(s).take(40)) == {"big": 30, "small": 10}


def test_weighted_strategy_normalizes_source_weights(data: DatasetColumns) -> None:
    s = MultiSourceSampler({"source_weights": {"iftrain": 2.0, "logicif": 6.0}}, data, batch_size=8)
    assert s.weights == {"iftrain": 0.25, "logicif": 0.75}


def test_len_and_epochs() -> None:
    data = two_sources(n_each=50)
    s = MultiSourceSampler({}, data, batch_size=30, seed=0)
    assert len(s) == 100
    first = list(s)
    assert len(first) == 100 and len(set(first)) == 100  # one epoch = one pass over each source here
    second = list(s)
    assert len(second) == 100 and second != first


def test_same_seed_same_indices_other_seed_differs(data: DatasetColumns) -> None:
    a = Stream(MultiSourceSampler({}, data, batch_size=32, seed=5)).take(200)
    b = Stream(MultiSourceSampler({}, data, batch_size=32, seed=5)).take(200)
    c = Stream(MultiSourceSampler({}, data, batch_size=32, seed=6)).take(200)
    assert np.array_equal(a, b) and not np.array_equal(a, c)


# -- adaptive weights ------------------------------------------------------------------------

def test_adaptive_weights_move_to_low_reward_source_and_respect_ratio(data: DatasetColumns) -> None:
    s = MultiSourceSampler({"adaptive_weights": True, "temperature": 0.3, "update_frequency": 1}, data,
                           batch_size=100, seed=0)
    batches = run_with_feedback(s, data, 6, low_if)
    w = s.weights
    assert w["iftrain"] > w["logicif"]
    assert w["iftrain"] / w["logicif"] <= 3.0 + 1e-9
    assert math.isclose(w["iftrain"], 0.75)  # softmax of (0.2, 0.8)/0.3 is ~0.88 -> clamped to the 75% bound
    assert counts(data, batches[-1]) == {"iftrain": 75, "logicif": 25}


def test_adaptive_off_keeps_fixed_weights(data: DatasetColumns) -> None:
    s = MultiSourceSampler({"adaptive_weights": False, "update_frequency": 1}, data, batch_size=50)
    run_with_feedback(s, data, 6, low_if)
    assert s.weights == {"iftrain": 0.5, "logicif": 0.5}
    assert s.reward_ema["iftrain"] < s.reward_ema["logicif"]  # EMAs are still tracked (metrics)


def test_temperature_effect(data: DatasetColumns) -> None:
    def final_weight(temp: float) -> float:
        s = MultiSourceSampler({"adaptive_weights": True, "temperature": temp, "update_frequency": 1,
                                "max_source_ratio": 100.0}, data, batch_size=40)
        run_with_feedback(s, data, 2, low_if)
        return s.weights["iftrain"]

    hot, cold = final_weight(10.0), final_weight(0.3)
    assert 0.5 < hot < cold
    assert math.isclose(hot, 1 / (1 + math.exp(-0.6 / 10.0)))  # softmax(-ema/T) with EMAs 0.2 and 0.8


def test_max_source_ratio_effect(data: DatasetColumns) -> None:
    s = MultiSourceSampler({"adaptive_weights": True, "temperature": 0.05, "update_frequency": 1,
                            "max_source_ratio": 1.5}, data, batch_size=40)
    run_with_feedback(s, data, 2, low_if)
    assert math.isclose(s.weights["iftrain"] / s.weights["logicif"], 1.5)


def test_update_frequency_effect(data: DatasetColumns) -> None:
    s = MultiSourceSampler({"adaptive_weights": True, "update_frequency": 4}, data, batch_size=20)
    stream = Stream(s)
    for b in range(1, 9):
        run_with_feedback(s, data, 1, low_if, stream)
        changed = s.weights["iftrain"] != 0.5
        assert changed == (b >= 4), f"weights after feedback batch {b}"


def test_alpha_effect_on_ema(data: DatasetColumns) -> None:
    s = MultiSourceSampler({"alpha": 0.25}, data, batch_size=20)
    stream = Stream(s)
    run_with_feedback(s, data, 1, lambda src, i: np.full(len(i), 1.0), stream)
    assert s.reward_ema["iftrain"] == 1.0  # the first observation initializes the EMA
    run_with_feedback(s, data, 1, lambda src, i: np.full(len(i), 3.0), stream)
    assert math.isclose(s.reward_ema["iftrain"], 0.25 * 3.0 + 0.75 * 1.0)


def test_feedback_steers_the_very_next_batch(data: DatasetColumns) -> None:
    """Lazy iteration: a batch is composed when its first index is pulled, after earlier feedback."""
    s = MultiSourceSampler({"adaptive_weights": True, "update_frequency": 1, "temperature": 0.01}, data, batch_size=20)
    it = iter(s)
    first = np.array([next(it) for _ in range(20)])
    assert counts(data, first) == {"iftrain": 10, "logicif": 10}
    s.on_rewards_computed(1, trajectories(data, first, low_if))
    second = np.array([next(it) for _ in range(20)])
    assert counts(data, second) == {"iftrain": 15, "logicif": 5}


def test_metrics_returned(data: DatasetColumns) -> None:
    s = MultiSourceSampler({"adaptive_weights": True}, data, batch_size=20)
    idx = Stream(s).take(20)
    m = s.on_rewards_computed(1, trajectories(data, idx, low_if))
    assert m["sampler/weight/iftrain"] == 0.5 and m["sampler/reward_ema/iftrain"] == pytest.approx(0.2)
    assert m["sampler/reward_ema/logicif"] == pytest.approx(0.8) and m["sampler/nan_rewards"] == 0


# -- bad feedback ------------------------------------------------------------------------------

def test_nan_rewards_are_ignored_and_counted(data: DatasetColumns) -> None:
    s = MultiSourceSampler({"adaptive_weights": True, "update_frequency": 1}, data, batch_size=20)
    idx = Stream(s).take(20)
    batch = trajectories(data, idx, lambda src, i: np.where(i % 3 == 0, np.nan, np.where(src == "iftrain", 1.0, 2.0)))
    n_nan = int(np.isnan(batch["reward"]).sum())
    assert n_nan > 0
    with structlog.testing.capture_logs() as logs:
        m = s.on_rewards_computed(1, batch)
    assert m["sampler/nan_rewards"] == n_nan and m["sampler/nan_rewards_total"] == n_nan
    assert s.reward_ema == {"iftrain": 1.0, "logicif": 2.0}
    assert np.isfinite(list(s.weights.values())).all()
    assert any("NaN/inf rewards" in e["event"] for e in logs)
    # a batch of only NaN leaves the EMAs untouched
    m = s.on_rewards_computed(2, trajectories(data, idx, lambda src, i: np.full(len(i), np.nan)))
    assert s.reward_ema == {"iftrain": 1.0, "logicif": 2.0} and m["sampler/nan_rewards_total"] == n_nan + 40


def test_feedback_rows_of_unknown_sources_are_ignored(data: DatasetColumns) -> None:
    s = MultiSourceSampler({}, data, batch_size=4)
    batch = Batch({"data_source": np.array(["iftrain", "elsewhere"], dtype=object), "reward": np.array([1.0, 9.0])})
    s.on_rewards_computed(1, batch)
    assert s.reward_ema == {"iftrain": 1.0}


def test_empty_feedback_batch(data: DatasetColumns) -> None:
    s = MultiSourceSampler({}, data, batch_size=4)
    m = s.on_rewards_computed(1, Batch({"data_source": np.zeros(0, object), "reward": np.zeros(0)}))
    assert m["sampler/nan_rewards"] == 0 and s.reward_ema == {}


# -- logs ----------------------------------------------------------------------------------------

def test_init_and_adjustment_log_lines() -> None:
    data = two_sources(n_each=400)
    with structlog.testing.capture_logs() as logs:
        s = MultiSourceSampler({"adaptive_weights": True, "temperature": 0.3, "source_weights":
                                {"iftrain": 1.0, "logicif": 1.0}}, data, batch_size=512)
    lines = [e["event"] for e in logs]
    assert lines == [
        "[MultiSourceSampler] Strategy: weighted, Mode: adaptive, Sources: 2, Batch size: 512",
        "  iftrain: 400 samples (weight: 0.500)",
        "  logicif: 400 samples (weight: 0.500)",
        "[MultiSourceSampler] Adaptive: alpha=0.1, update_freq=5, temp=0.3",
        "[MultiSourceSampler] Weight bounds: [25.0%, 75.0%]",
    ]
    with structlog.testing.capture_logs() as logs:
        run_with_feedback(s, data, 5, lambda src, i: np.where(src == "iftrain", 10.25, 8.73))
    lines = [e["event"] for e in logs]
    assert lines == [
        "[MultiSourceSampler] Batch 5 - Weight adjustment:",
        "  iftrain: reward_ema= 10.25, weight=0.250 (25.0%)",
        "  logicif: reward_ema=  8.73, weight=0.750 (75.0%)",
        "  Actual max/min ratio: 3.00x",
    ]
    assert all(e["log_level"] == "info" for e in logs)


def test_fixed_mode_log_lines(data: DatasetColumns) -> None:
    with structlog.testing.capture_logs() as logs:
        MultiSourceSampler({}, data, batch_size=512)
    assert [e["event"] for e in logs] == [
        "[MultiSourceSampler] Strategy: weighted, Mode: fixed, Sources: 2, Batch size: 512",
        "  iftrain: 2000 samples (weight: 0.500)",
        "  logicif: 2000 samples (weight: 0.500)",
    ]


# -- bad input ----------------------------------------------------------------------------------

def test_missing_data_source_values() -> None:
    with pytest.raises(DataError, match=r"2 rows have no data_source \(first at row 1\)"):
        DatasetColumns.from_arrays(["a", None, "b", ""])
    codes = np.array([0, 1, 0, 1], dtype=np.int8)
    data = DatasetColumns(codes, ("", "a"))
    with pytest.raises(DataError, match=r"2 rows of .* have no usable data_source \(value '', first at row 0\)"):
        MultiSourceSampler({}, data, batch_size=2)


def test_source_weights_key_no_row_has(data: DatasetColumns) -> None:
    with pytest.raises(DataError) as err:
        MultiSourceSampler({"source_weights": {"iftrain": 1.0, "logicfi": 1.0}}, data, batch_size=2)
    msg = str(err.value)
    assert "'logicfi'" in msg and "iftrain (2000 rows), logicif (2000 rows)" in msg


def test_unlisted_sources_are_excluded_with_a_warning() -> None:
    data = two_sources(n_each=100, names=("a", "b", "c"))
    with structlog.testing.capture_logs() as logs:
        s = MultiSourceSampler({"source_weights": {"a": 1.0, "b": 1.0}}, data, batch_size=10)
    warn = [e for e in logs if e["log_level"] == "warning"]
    assert len(warn) == 1 and "c (100 rows)" in warn[0]["event"] and "excluded" in warn[0]["event"]
    assert s.excluded_sources == ("c",) and len(s) == 200
    assert set(source_of(data, Stream(s).take(400)).tolist()) == {"a", "b"}


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_non_positive_or_non_finite_weights(data: DatasetColumns, bad: float) -> None:
    # NaN/inf are refused by the config layer already, naming the key; 0 and -1 by the sampler's validator
    expected = (r"sampler\.source_weights\['logicif'\] \(MultiSourceSampler\): must be a finite number"
                if not np.isfinite(bad) else r"sampler\.source_weights \(MultiSourceSampler\): every weight must be")
    with pytest.raises(ConfigError, match=expected):
        MultiSourceSampler({"source_weights": {"iftrain": 1.0, "logicif": bad}}, data, batch_size=2)
    with pytest.raises(ValueError, match="every weight must be"):
        MultiSourceOptions(source_weights={"iftrain": bad})


def test_empty_source_named_in_weights() -> None:
    data = DatasetColumns(np.zeros(10, dtype=np.int8), ("a", "ghost"))  # 'ghost' is known but has no rows
    with pytest.raises(DataError, match=r"source 'ghost' has no rows\. Sources found in .*: a \(10 rows\)"):
        MultiSourceSampler({"source_weights": {"a": 1.0, "ghost": 1.0}}, data, batch_size=2)


def test_empty_dataset_and_bad_batch_size(data: DatasetColumns) -> None:
    with pytest.raises(DataError, match="has no rows"):
        MultiSourceSampler({}, DatasetColumns(np.zeros(0, np.int8), ()), batch_size=2)
    with pytest.raises(DataError, match="batch_size must be an integer >= 1"):
        MultiSourceSampler({}, data, batch_size=0)


@pytest.mark.parametrize("key,value,msg", [
    ("alpha", 0.0, "must be in (0, 1]"), ("alpha", 1.5, "must be in (0, 1]"),
    ("update_frequency", 0, "must be an integer >= 1"), ("temperature", 0.0, "finite number > 0"),
    ("max_source_ratio", 0.5, "finite number >= 1"), ("sampling_strategy", "random", "must be one of"),
])
def test_bad_option_values(data: DatasetColumns, key: str, value: object, msg: str) -> None:
    with pytest.raises(ConfigError) as err:
        MultiSourceSampler({key: value}, data, batch_size=2)
    assert f"sampler.{key}" in str(err.value) and msg in str(err.value)


def test_feedback_means_with_unordered_sources_match_a_loop(data: DatasetColumns) -> None:
    """Source labels in any order and dtype (here numpy str, shuffled) map to the right EMAs."""
    rng = np.random.default_rng(4)
    src = rng.choice(np.array(["iftrain", "logicif", "other"]), 500)
    reward = rng.normal(size=500)
    reward[::17] = np.nan
    s = MultiSourceSampler({}, data, batch_size=4)
    s.on_rewards_computed(1, Batch({"data_source": src, "reward": reward}))
    for name in ("iftrain", "logicif"):
        vals = [r for x, r in zip(src.tolist(), reward.tolist()) if x == name and math.isfinite(r)]
        assert s.reward_ema[name] == pytest.approx(sum(vals) / len(vals))
    assert set(s.reward_ema) == {"iftrain", "logicif"}


def test_per_batch_counts_within_two_rows_of_the_weights() -> None:
    """docs/how-to/samplers.md: running totals within one row of the exact share, a single batch within two."""
    names = tuple(f"s{i}" for i in range(7))
    data = two_sources(n_each=300, names=names)
    weights = dict(zip(names, [1.0, 2.0, 3.0, 0.5, 0.7, 1.3, 2.9]))
    s = MultiSourceSampler({"source_weights": weights}, data, batch_size=37, seed=0)
    share = np.array(list(weights.values())) / sum(weights.values())
    stream, total = Stream(s), np.zeros(len(names))
    for b in range(1, 41):
        c = counts(data, stream.take(37))
        got = np.array([c.get(n, 0) for n in names])
        total += got
        assert np.abs(got - 37 * share).max() < 2.0
        assert np.abs(total - b * 37 * share).max() < 1.0 + 1e-9


def test_feedback_rows_without_a_usable_source_name_are_ignored(data: DatasetColumns) -> None:
    s = MultiSourceSampler({}, data, batch_size=4)
    src = np.array(["iftrain", None, np.nan, "logicif"], dtype=object)
    m = s.on_rewards_computed(1, Batch({"data_source": src, "reward": np.array([1.0, 5.0, 6.0, 2.0])}))
    assert s.reward_ema == {"iftrain": 1.0, "logicif": 2.0} and m["sampler/nan_rewards"] == 0


def test_huge_finite_rewards_never_poison_the_weights(data: DatasetColumns) -> None:
    # sums of rewards near the float limit overflow; such a source mean is skipped, and the softmax
    # over extreme EMAs stays a distribution (it gave NaN weights before)
    s = MultiSourceSampler({"adaptive_weights": True, "update_frequency": 1, "temperature": 0.01}, data, batch_size=20)
    idx = Stream(s).take(20)
    s.on_rewards_computed(1, trajectories(data, idx, lambda src, i: np.where(src == "iftrain", 1e308, -1e308)))
    w = np.array(list(s.weights.values()))
    assert np.isfinite(w).all() and (w >= 0).all() and math.isclose(w.sum(), 1.0)
    assert s.reward_ema == {}  # both per-source sums overflowed: nothing observed
    s.on_rewards_computed(2, trajectories(data, idx, lambda src, i: np.where(src == "iftrain", 1e306, -1e306)))
    assert s.reward_ema == pytest.approx({"iftrain": 1e306, "logicif": -1e306})
    w = s.weights
    assert np.isfinite(list(w.values())).all() and math.isclose(sum(w.values()), 1.0)
    assert w["logicif"] == pytest.approx(0.75) and w["iftrain"] == pytest.approx(0.25)  # max_source_ratio 3  # the lower-reward source still gets the larger weight
