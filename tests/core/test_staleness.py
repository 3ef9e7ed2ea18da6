"""Staleness as data: the lag columns, lag/eviction metrics, eviction before the filters, and the
learning state's rule for evidence earned by an older policy (core/staleness.py, core/learning.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import rlhooks
from rlhooks import Batch, BatchError, LearningState, hookimpl
from rlhooks.core.staleness import eviction_metrics, lag_metrics, stale_rows
from rlhooks.host import RunManager, StepDriver, load_config
from rlhooks.plugins.filters.selective_rollout import SelectiveRollout

N = 4


def test_the_columns_are_on_the_plugin_api() -> None:
    assert (rlhooks.TRAINED_VERSION, rlhooks.POLICY_LAG) == ("trained_version", "policy_lag")
    assert {"TRAINED_VERSION", "POLICY_LAG"} <= set(rlhooks.__all__)


def _groups(lags: list[int], sources: list[str]) -> Batch:
    """One group of N rows per entry: its lag and source."""
    g = len(lags)
    lag = np.repeat(np.asarray(lags, dtype=np.int64), N)
    return Batch({"uid": np.repeat(np.arange(g), N), "index": np.repeat(np.arange(g), N),
                  "data_source": np.repeat(np.asarray(sources, dtype=object), N),
                  "policy_version": 9 - lag, "trained_version": np.full(g * N, 9), "policy_lag": lag})


def test_lag_metrics_per_step_and_per_source() -> None:
    batch = _groups([0, 2, 1, 3], ["a", "b", "a", "openai/gsm8k"])
    assert lag_metrics(batch) == {
        "staleness/lag_mean": 1.5, "staleness/lag_max": 3.0,
        "source/a/lag_mean": 0.5, "source/a/lag_max": 1.0,
        "source/b/lag_mean": 2.0, "source/b/lag_max": 2.0,
        "source/openai/gsm8k/lag_mean": 3.0, "source/openai/gsm8k/lag_max": 3.0,
    }
    assert lag_metrics(Batch({"uid": [1, 1], "reward": [0.0, 1.0]})) == {}  # a synchronous engine: no lag column


def test_eviction_follows_verls_drop_rule_and_counts_groups_per_source() -> None:
    batch = _groups([0, 2, 1, 3], ["a", "b", "a", "b"])
    # verl: a group spanning more than max_off_policy_threshold versions (lag + 1 > threshold) is dropped
    assert stale_rows(batch, 2)[::N].tolist() == [False, True, False, True]
    assert stale_rows(batch, 4)[::N].tolist() == [False] * 4
    assert not stale_rows(batch, None).any()
    with pytest.raises(ValueError, match="max_off_policy_threshold must be >= 1"):
        stale_rows(batch, 0)
    assert eviction_metrics(batch, stale_rows(batch, 2)) == {
        "staleness/evicted_groups": 2.0, "source/b/stale_evicted_groups": 2.0}
    # a group's lag is its oldest row's (a partial rollout spans versions)
    mixed = batch.with_columns(policy_lag=np.array([0, 0, 0, 3] + [0] * 12))
    assert stale_rows(mixed, 2)[::N].tolist() == [True, False, False, False]
    with pytest.raises(BatchError, match="negative lag"):
        stale_rows(batch.with_columns(policy_lag=-batch["policy_lag"]), 2)


# -- the driver: evicted groups skip the filters and are not counted as filtered -----------------

class AsyncEngine:
    """Group p was generated p % 3 updates ago; lag 1 groups have a spread (2 of N right), lag 0 and
    lag 2 groups are all wrong. The replay buffer evicts groups spanning more than 2 versions (lag 2)."""

    def __init__(self, threshold: int | None = 2):
        self.next, self.threshold = 0, threshold

    def sample(self, step):
        ids = np.arange(self.next, self.next + 6)
        self.next += 6
        return ids, Batch({"index": ids})

    def select_prompts(self, payload, rows):
        return payload[rows]

    def generate(self, step, payload):
        ids = np.repeat(payload, N)
        lag = ids % 3
        reward = (np.tile(np.arange(N), len(payload)) < np.array([0, 2, 0])[lag]).astype(float)
        return ids, Batch({"uid": ids, "index": ids, "data_source": np.where(ids % 2, "odd", "even").astype(object),
                           "reward": reward, "policy_version": step - 1 - lag,
                           "trained_version": np.full(len(ids), step - 1), "policy_lag": lag})

    def evict_stale(self, step, batch):
        return None if self.threshold is None else stale_rows(batch, self.threshold)

    def place_rewards(self, payload, reward):
        return payload

    def select(self, payload, rows):
        return payload[rows]

    def concat(self, payloads):
        return np.concatenate(payloads)


class Seen:
    def __init__(self) -> None:
        self.scored: list[Batch] = []

    @hookimpl
    def on_rewards_computed(self, step, batch):
        self.scored.append(batch)


def _driver(tmp_path: Path, filters: list) -> tuple[StepDriver, Seen]:
    cfg = load_config({"run": {"name": "async", "out_dir": str(tmp_path), "n": N, "train_batch_size": 4,
                               "max_num_gen_batches": 5}, "filters": filters, "backends": []})
    seen = Seen()
    return StepDriver(RunManager(cfg, extra_plugins=[("seen", seen)])), seen


def test_stale_groups_are_evicted_before_the_filters_and_not_counted_as_filtered(tmp_path):
    driver, seen = _driver(tmp_path, [{"name": "dapo", "metric": "seq_reward"}])
    collected = driver.collect(3, AsyncEngine())
    m = collected.metrics
    # batch 1: prompts 0-5, lags 0,1,2,0,1,2: 2 and 5 evicted; of 0,1,3,4 DAPO drops 0 and 3 (all wrong).
    # batch 2: prompts 6-11: 8 and 11 evicted; 6, 9 dropped; 7, 10 kept: 4 groups trained.
    # The evicted groups are all wrong too: had DAPO judged them, it would have dropped 8.
    assert m["filter/generated_groups"] == 12 and m["filter/stale_evicted_groups"] == 4
    assert m["filter/dropped_constant"] == 4 and m["filter/kept_groups"] == 4 and m["filter/trained_groups"] == 4
    assert m["filter/generated_groups"] == m["filter/stale_evicted_groups"] + m["filter/dropped_constant"] + m["filter/kept_groups"]
    assert m["filter/kept_ratio"] == 0.5  # of the 8 groups the filter judged, not of the 12 generated
    assert m["staleness/evicted_groups"] == 4 and m["source/even/stale_evicted_groups"] == 2
    assert m["source/odd/stale_evicted_groups"] == 2
    # every scored group reached on_rewards_computed; only the fresh enough ones trained
    assert sum(b.groups.n_groups for b in seen.scored) == 12
    assert collected.batch["index"][::N].tolist() == [1, 4, 7, 10]
    assert m["staleness/lag_mean"] == 1.0 and m["staleness/lag_max"] == 1.0


def test_without_eviction_or_filters_lag_is_still_reported(tmp_path):
    driver, _ = _driver(tmp_path, [])
    collected = driver.collect(3, AsyncEngine(threshold=None))
    m = collected.metrics
    assert "filter/stale_evicted_groups" not in m and "staleness/evicted_groups" not in m
    assert m["staleness/lag_max"] == 2.0 and m["staleness/lag_mean"] == 0.75  # prompts 0-3: lags 0, 1, 2, 0
    driver, _ = _driver(tmp_path, [])
    m = driver.collect(3, AsyncEngine(threshold=1)).metrics  # no filters: the eviction count stays
    assert m["filter/stale_evicted_groups"] == 8 and set(m) >= {"train/num_gen_batches", "staleness/evicted_groups"}


def test_an_engine_evicting_part_of_a_group_gets_a_clear_error(tmp_path):
    class Broken(AsyncEngine):
        def evict_stale(self, step, batch):
            mask = np.zeros(len(batch), dtype=bool)
            mask[1] = True
            return mask

    driver, _ = _driver(tmp_path, [])
    with pytest.raises(rlhooks.RLHooksError, match=r"evict_stale\(\) \(Broken\) evicted part of a group"):
        driver.collect(1, Broken())


# -- the learning state: stale evidence counts less and never overrides newer --------------------

def _group(row: int, values: list[float], lag: int | None, uid: int = 0) -> Batch:
    cols = {"uid": np.full(len(values), uid), "index": np.full(len(values), row), "acc": np.asarray(values)}
    if lag is not None:
        cols["policy_lag"] = np.full(len(values), lag)
    return Batch(cols)


def test_lag_zero_is_exactly_the_synchronous_state() -> None:
    rng = np.random.default_rng(0)
    a, b = LearningState(50), LearningState(50)
    for step in range(1, 8):
        rows = rng.integers(0, 50, 12)
        acc = (rng.random(12 * N) < 0.5).astype(float)
        cols = {"uid": np.repeat(np.arange(12), N), "index": np.repeat(rows, N), "acc": acc}
        a.update(Batch(cols), step)
        b.update(Batch({**cols, "policy_lag": np.zeros(12 * N, np.int64)}), step)
    for name in ("times_sampled", "last_step", "last_mean", "pass_ema", "last_abs_adv", "zero_var_run"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


def test_stale_evidence_moves_the_pass_rate_ema_by_the_discounted_weight() -> None:
    s = LearningState(4, ema_alpha=0.3, lag_discount=0.5)
    s.update(_group(1, [1, 1, 0, 0], lag=3), step=4)  # first evidence sets the EMA whatever its lag
    assert s.pass_rate([1])[0] == 0.5
    s.update(_group(1, [1, 1, 1, 1], lag=2), step=6)  # weight 0.3 * 0.5 ** 2 = 0.075
    assert s.pass_rate([1])[0] == pytest.approx(0.925 * 0.5 + 0.075, abs=1e-3)  # float16 storage
    s.update(_group(1, [0, 0, 0, 0], lag=0), step=7)  # a fresh group: the synchronous weight
    assert s.pass_rate([1])[0] == pytest.approx(0.7 * (0.925 * 0.5 + 0.075), abs=1e-3)
    with pytest.raises(ValueError, match="lag_discount must be in"):
        LearningState(4, lag_discount=1.5)
    with pytest.raises(BatchError, match="negative lag"):
        s.update(_group(1, [0, 1, 0, 1], lag=-1), step=8)


def test_older_evidence_arriving_late_does_not_override_the_newer_record() -> None:
    s = LearningState(4)
    s.update(_group(2, [1, 0, 1, 0], lag=0), step=6)  # generated at step 6, has a spread
    s.update(_group(2, [0, 0, 0, 0], lag=2), step=7)  # generated at step 5, arrives later: all wrong
    assert s.times_sampled[2] == 2 and s.last_step[2] == 6 and s.zero_var_run[2] == 0 and s.last_mean[2] == 0.5
    # selective rollout reads the run: the late stale all-fail group does not get the prompt skipped
    assert SelectiveRollout().keep_probability(s.columns([2])["learning/zero_var_run"]).tolist() == [1.0]
    s.update(_group(2, [0, 0, 0, 0], lag=1), step=8)  # generated at step 7: newer, so it counts as the latest
    assert s.last_step[2] == 7 and s.zero_var_run[2] == -1
    # two groups of one row in one batch: the newer generation is the record, whatever the order
    t = LearningState(4)
    both = Batch.concat([_group(3, [1, 1, 1, 1], lag=0, uid=0), _group(3, [0, 0, 0, 0], lag=3, uid=1)])
    t.update(both, step=9)
    assert t.times_sampled[3] == 2 and t.last_step[3] == 9 and t.zero_var_run[3] == 1


def test_the_discount_is_a_run_option_saved_with_the_state(tmp_path) -> None:
    cfg = load_config({"run": {"name": "d", "out_dir": str(tmp_path), "learning_lag_discount": 0.25}})
    assert cfg.run.learning_lag_discount == 0.25
    with pytest.raises(rlhooks.ConfigError, match="learning_lag_discount"):
        load_config({"run": {"name": "d", "out_dir": str(tmp_path), "learning_lag_discount": 2}})
    s = LearningState(3, lag_discount=0.25)
    assert s.state_dict()["lag_discount"] == 0.25
    LearningState(3, lag_discount=0.25).load_state_dict(s.state_dict())
