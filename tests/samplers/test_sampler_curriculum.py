"""TimeCurriculumSampler and RewardCurriculumSampler: percentiles, gates, intervals, logs, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
import structlog
from .sampler_helpers import Stream, run_with_feedback, source_of, trajectories

from rlhooks import ConfigError, DatasetColumns
from rlhooks.core.data import DataError
from rlhooks.plugins.samplers.curriculum import (
    RewardCurriculumOptions,
    RewardCurriculumSampler,
    TimeCurriculumOptions,
    TimeCurriculumSampler,
)


def rank_in_curriculum(s, data: DatasetColumns, idx: np.ndarray) -> np.ndarray:
    """Complexity rank (0 = easiest) of the drawn logicif rows."""
    rank = np.empty(len(data), dtype=np.int64)
    rank[s._cur_rows] = np.arange(len(s._cur_rows))
    return rank[idx[source_of(data, idx) == "logicif"]]


def const(value: float):
    return lambda src, idx: np.full(len(idx), value)


# -- defaults -------------------------------------------------------------------------------

def test_spec_defaults() -> None:
    t = TimeCurriculumOptions()
    assert (t.complexity_source, t.initial_complexity_percentile, t.final_complexity_percentile,
            t.complexity_warmup_steps) == ("logicif", 30, 100, 100)
    r = RewardCurriculumOptions(reward_threshold=0.5)
    assert (r.complexity_source, r.initial_complexity_percentile, r.final_complexity_percentile, r.num_intervals,
            r.reward_alpha, r.min_batches_per_level, r.check_frequency, r.focus_new_intervals,
            r.interval_decay) == ("logicif", 30, 100, 10, 0.1, 10, 3, False, 0.5)
    # the adaptive-weight options are shared by all samplers
    assert (t.adaptive_weights, t.alpha, t.update_frequency, t.temperature, t.max_source_ratio) == (False, 0.1, 5, 1.0, 3.0)
    assert (r.sampling_strategy, r.source_weights, r.adaptive_weights) == ("weighted", {}, False)
    with pytest.raises(TypeError, match="reward_threshold"):
        RewardCurriculumOptions()


# -- time curriculum ---------------------------------------------------------------------------

def test_time_curriculum_linear_progress_reaches_final_at_warmup(data: DatasetColumns) -> None:
    s = TimeCurriculumSampler({"complexity_warmup_steps": 10}, data, batch_size=100, seed=0)
    stream = Stream(s)
    n = 2000
    assert s.percentile == 30 and s.num_items == 600
    for t in range(1, 13):
        idx = stream.take(100)
        ranks = rank_in_curriculum(s, data, idx)
        assert ranks.max() < s.num_items  # every curriculum row drawn is among the easiest num_items
        m = s.on_rewards_computed(t, trajectories(data, idx, const(0.5)))
        expected = 30 + 70 * min(t, 10) / 10
        assert m["curriculum/percentile"] == pytest.approx(expected)
        assert m["curriculum/num_items"] == math.floor(expected * n / 100 + 1e-9)
    assert s.percentile == 100 and s.num_items == n
    # after the warmup the hardest rows are reachable: 3 passes of 50 logicif rows/batch cover the top 10%
    ranks = np.concatenate([rank_in_curriculum(s, data, stream.take(100)) for _ in range(40)])
    assert ranks.max() >= 1900


def test_time_curriculum_progress_mid_way_and_zero_warmup(data: DatasetColumns) -> None:
    s = TimeCurriculumSampler({"complexity_warmup_steps": 100}, data, batch_size=10)
    run_with_feedback(s, data, 50, const(0.0))
    assert s.percentile == pytest.approx(65.0)
    z = TimeCurriculumSampler({"complexity_warmup_steps": 0}, data, batch_size=10)
    assert z.percentile == 100 and z.num_items == 2000


def test_time_curriculum_restricts_only_the_curriculum_source(data: DatasetColumns) -> None:
    s = TimeCurriculumSampler({"initial_complexity_percentile": 10}, data, batch_size=100)
    idx = Stream(s).take(1000)
    comp = data.complexity[idx]
    src = source_of(data, idx)
    assert comp[src == "logicif"].max() <= np.sort(data.complexity[s._cur_rows])[199]
    assert comp[src == "iftrain"].max() > 0.9  # the other source samples from all its rows


def test_time_curriculum_final_percentile_below_100(data: DatasetColumns) -> None:
    s = TimeCurriculumSampler({"initial_complexity_percentile": 20, "final_complexity_percentile": 80,
                               "complexity_warmup_steps": 2}, data, batch_size=100)
    run_with_feedback(s, data, 5, const(0.0))
    assert s.percentile == 80 and s.num_items == 1600
    ranks = np.concatenate([rank_in_curriculum(s, data, Stream(s).take(100)) for _ in range(50)])
    assert ranks.max() < 1600 and ranks.max() > 1500


def test_time_curriculum_log_lines(data: DatasetColumns) -> None:
    with structlog.testing.capture_logs() as logs:
        s = TimeCurriculumSampler({}, data, batch_size=8)
    assert [e["event"] for e in logs][-2:] == [
        "[TimeCurriculumSampler] Complexity curriculum for 'logicif'",
        "[TimeCurriculumSampler] Progress: 30% → 100% over 100 updates",
    ]
    with structlog.testing.capture_logs() as logs:
        run_with_feedback(s, data, 100, const(0.0))
    lines = [e["event"] for e in logs]
    assert "[TimeCurriculumSampler] Complexity: 50% (1006/2000 items)" in lines  # first update past 50% (t=29)
    assert lines[-1] == "[TimeCurriculumSampler] Complexity: 100% (2000/2000 items)"
    assert len(lines) == 7  # one line per 10% crossed: 40, 50, ..., 90 and 100 (at the warmup step)


def test_time_curriculum_with_adaptive_weights(data: DatasetColumns) -> None:
    s = TimeCurriculumSampler({"adaptive_weights": True, "update_frequency": 1, "temperature": 0.1}, data, batch_size=40)
    run_with_feedback(s, data, 3, lambda src, i: np.where(src == "logicif", 0.0, 1.0))
    assert s.weights["logicif"] == pytest.approx(0.75)


# -- reward curriculum ---------------------------------------------------------------------------

def test_reward_curriculum_levels_up_exactly_when_the_gate_opens(data: DatasetColumns) -> None:
    opts = {"reward_threshold": 0.5, "reward_alpha": 0.5, "min_batches_per_level": 4, "check_frequency": 2}
    s = RewardCurriculumSampler(opts, data, batch_size=20)
    stream = Stream(s)
    rewards = [0.2] * 6 + [0.9] * 10
    ema, level, at_level, expected_ups = None, 0, 0, []
    for b, r in enumerate(rewards, 1):
        run_with_feedback(s, data, 1, const(r), stream)
        ema = r if ema is None else 0.5 * r + 0.5 * ema
        at_level += 1
        if b % 2 == 0 and at_level >= 4 and ema >= 0.5:
            level, at_level = level + 1, 0
            expected_ups.append(b)
        assert s.level == level, f"after feedback batch {b}"
        assert s._cur_ema == pytest.approx(ema)
    # the EMA first reaches 0.5 at batch 7 (0.55); the next check (every 2 batches) is batch 8
    assert expected_ups == [8, 12, 16]


def test_reward_curriculum_threshold_is_inclusive(data: DatasetColumns) -> None:
    s = RewardCurriculumSampler({"reward_threshold": 0.5, "min_batches_per_level": 0, "check_frequency": 1},
                                data, batch_size=10)
    run_with_feedback(s, data, 1, const(0.4999))
    assert s.level == 0
    s2 = RewardCurriculumSampler({"reward_threshold": 0.5, "min_batches_per_level": 0, "check_frequency": 1},
                                 data, batch_size=10)
    run_with_feedback(s2, data, 1, const(0.5))
    assert s2.level == 1


def test_min_batches_and_check_frequency_effects(data: DatasetColumns) -> None:
    s = RewardCurriculumSampler({"reward_threshold": 0.0, "min_batches_per_level": 10, "check_frequency": 3},
                                data, batch_size=10)
    ups = []
    for b in range(1, 40):
        before = s.level
        run_with_feedback(s, data, 1, const(1.0), Stream(s))
        if s.level != before:
            ups.append(b)
    assert ups == [12, 24, 36]  # first multiple of 3 with >= 10 batches at the level
    s = RewardCurriculumSampler({"reward_threshold": 0.0, "min_batches_per_level": 0, "check_frequency": 5},
                                data, batch_size=10)
    run_with_feedback(s, data, 14, const(1.0))
    assert s.level == 2


def test_reward_alpha_effect(data: DatasetColumns) -> None:
    s = RewardCurriculumSampler({"reward_threshold": 9.0, "reward_alpha": 0.3}, data, batch_size=10)
    stream = Stream(s)
    run_with_feedback(s, data, 1, const(1.0), stream)
    run_with_feedback(s, data, 1, const(0.0), stream)
    assert s._cur_ema == pytest.approx(0.7)


def test_num_intervals_and_final_level(data: DatasetColumns) -> None:
    s = RewardCurriculumSampler({"reward_threshold": 0.0, "num_intervals": 4, "min_batches_per_level": 0,
                                 "check_frequency": 1, "initial_complexity_percentile": 20,
                                 "final_complexity_percentile": 80}, data, batch_size=20)
    assert s.bounds.tolist() == [400, 700, 1000, 1300, 1600]
    assert s.interval_sizes.tolist() == [400, 300, 300, 300, 300]
    stream = Stream(s)
    for b in range(1, 8):
        idx = stream.take(20)
        assert rank_in_curriculum(s, data, idx).max() < s.num_items
        m = s.on_rewards_computed(b, trajectories(data, idx, const(1.0)))
        assert m["curriculum/level"] == min(b, 4)
    assert s.num_items == 1600 and s.percentile == 80


def test_interval_weights_spec_example(data: DatasetColumns) -> None:
    s = RewardCurriculumSampler({"reward_threshold": 0.0, "min_batches_per_level": 0, "check_frequency": 1,
                                 "focus_new_intervals": True, "interval_decay": 0.5}, data, batch_size=70)
    run_with_feedback(s, data, 2, const(1.0))
    assert s.level == 2
    w = s.interval_weights()
    assert np.allclose(w, [0.25 / 1.75, 0.5 / 1.75, 1 / 1.75])
    assert [round(x * 100) for x in w[::-1]] == [57, 29, 14]  # newest first, as in the spec
    # drawn composition within the curriculum source follows the weights (35 logicif rows per batch)
    stream = Stream(s)
    bounds = s.bounds
    per_interval = np.zeros(3, dtype=np.int64)
    for _ in range(20):
        ranks = rank_in_curriculum(s, data, stream.take(70))
        per_interval += np.bincount(np.searchsorted(bounds, ranks, side="right"), minlength=3)[:3]
    share = per_interval / per_interval.sum()
    # tolerance: deterministic largest remainder -> within 1 row per batch of the exact shares
    assert np.abs(per_interval - 700 * w).max() <= 1.0 + 1e-9, share


def test_interval_decay_effect_and_focus_off(data: DatasetColumns) -> None:
    opts = {"reward_threshold": 0.0, "min_batches_per_level": 0, "check_frequency": 1, "num_intervals": 2,
            "initial_complexity_percentile": 50}
    s = RewardCurriculumSampler({**opts, "focus_new_intervals": True, "interval_decay": 1.0}, data, batch_size=10)
    run_with_feedback(s, data, 1, const(1.0))
    assert np.allclose(s.interval_weights(), [0.5, 0.5])
    off = RewardCurriculumSampler(opts, data, batch_size=10)
    run_with_feedback(off, data, 1, const(1.0))
    assert np.allclose(off.interval_weights(), [1000 / 1500, 500 / 1500])  # uniform over unlocked rows


def test_reward_curriculum_logs(data: DatasetColumns) -> None:
    with structlog.testing.capture_logs() as logs:
        s = RewardCurriculumSampler({"reward_threshold": 0.125, "min_batches_per_level": 0, "check_frequency": 1},
                                    data, batch_size=10)
    lines = [e["event"] for e in logs]
    i = lines.index("[RewardCurriculumSampler] Complexity source: 'logicif'")
    assert lines[i + 1:i + 3] == ["[RewardCurriculumSampler] Initial: 30%, Final: 100%",
                                  "[RewardCurriculumSampler] Intervals: 11 (1 initial + 10 progressive)"]
    assert lines[i + 3].startswith("  Interval 0 (Initial 30%): 600 samples, [0.")
    assert lines[i + 4].startswith("  Interval 1: 140 samples, [0.")
    with structlog.testing.capture_logs() as logs:
        run_with_feedback(s, data, 1, const(0.128))
    assert [e["event"] for e in logs] == [
        "=" * 80,
        "[RewardCurriculumSampler] LEVEL UP! 0 → 1",
        "[RewardCurriculumSampler] Batch 1: Reward 0.128 >= 0.125",
        "[RewardCurriculumSampler] Samples: 600 → 740",
        "=" * 80,
    ]


def test_nan_rewards_do_not_poison_the_gate(data: DatasetColumns) -> None:
    s = RewardCurriculumSampler({"reward_threshold": 0.5, "min_batches_per_level": 0, "check_frequency": 1},
                                data, batch_size=10)
    run_with_feedback(s, data, 1, lambda src, i: np.where(i % 2 == 0, np.nan, 0.7))
    assert s._cur_ema == pytest.approx(0.7) and s.level == 1


def test_reward_curriculum_metrics(data: DatasetColumns) -> None:
    s = RewardCurriculumSampler({"reward_threshold": 0.9}, data, batch_size=10)
    m = run_with_feedback(s, data, 1, const(0.3)) and s.on_rewards_computed(2, trajectories(data, Stream(s).take(10), const(0.3)))
    assert m["curriculum/level"] == 0 and m["curriculum/percentile"] == 30 and m["curriculum/num_items"] == 600
    assert m["curriculum/reward_ema"] == pytest.approx(0.3) and "sampler/weight/logicif" in m


# -- bad input -------------------------------------------------------------------------------------

@pytest.mark.parametrize("cls", [TimeCurriculumSampler, RewardCurriculumSampler])
def test_curriculum_rows_without_complexity(cls) -> None:
    comp = np.random.default_rng(0).random(100)
    comp[[7, 9, 50]] = np.nan  # rows 7 and 9 are logicif (odd), row 50 is iftrain
    data = DatasetColumns.from_arrays(np.tile(np.array(["iftrain", "logicif"], object), 50), comp)
    with pytest.raises(DataError, match=r"2 of 50 rows of curriculum source 'logicif' .* \(first at row 7\)"):
        cls({"reward_threshold": 0.1} if cls is RewardCurriculumSampler else {}, data, batch_size=4)


def test_curriculum_without_complexity_column_or_source() -> None:
    data = DatasetColumns.from_arrays(["iftrain", "logicif"] * 5)
    with pytest.raises(DataError, match="no extra_info.complexity_score column"):
        TimeCurriculumSampler({}, data, batch_size=2)
    other = DatasetColumns.from_arrays(["a", "b"] * 5, np.zeros(10))
    with pytest.raises(DataError, match=r"complexity_source 'logicif' is not a sampled source: sources found"):
        TimeCurriculumSampler({}, other, batch_size=2)
    with pytest.raises(DataError, match="excluded because source_weights does not name it"):
        TimeCurriculumSampler({"complexity_source": "b", "source_weights": {"a": 1.0}}, other, batch_size=2)


@pytest.mark.parametrize("cls,extra", [(TimeCurriculumSampler, {}), (RewardCurriculumSampler, {"reward_threshold": 0.1})])
def test_initial_above_final_percentile(data: DatasetColumns, cls, extra) -> None:
    with pytest.raises(ConfigError, match=r"initial_complexity_percentile \(90\) must be <= final_complexity_percentile \(50\)"):
        cls({**extra, "initial_complexity_percentile": 90, "final_complexity_percentile": 50}, data, batch_size=2)


@pytest.mark.parametrize("key,value", [("initial_complexity_percentile", 0), ("final_complexity_percentile", 101),
                                       ("num_intervals", 0), ("interval_decay", 0.0), ("reward_alpha", 2.0),
                                       ("check_frequency", 0), ("min_batches_per_level", -1),
                                       ("reward_threshold", float("nan"))])
def test_bad_curriculum_option_values(data: DatasetColumns, key: str, value: object) -> None:
    with pytest.raises(ConfigError, match=rf"sampler\.{key} \(RewardCurriculumSampler\)"):
        RewardCurriculumSampler({"reward_threshold": 0.1, key: value}, data, batch_size=2)


def test_tiny_curriculum_source_warns_about_empty_intervals() -> None:
    data = DatasetColumns.from_arrays(["iftrain", "logicif", "iftrain", "logicif", "logicif"], [0.1, 0.2, 0.3, 0.4, 0.5])
    with structlog.testing.capture_logs() as logs:
        s = RewardCurriculumSampler({"reward_threshold": 0.0, "min_batches_per_level": 0, "check_frequency": 1,
                                     "focus_new_intervals": True}, data, batch_size=4)
    assert any("intervals are empty" in e["event"] for e in logs)
    run_with_feedback(s, data, 12, const(1.0))
    assert s.level == 10 and s.num_items == 3  # levels over empty intervals add nothing, sampling still works
    assert len(Stream(s).take(40)) == 40
