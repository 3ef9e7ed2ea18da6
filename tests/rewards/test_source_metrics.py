"""SourceMetrics: per-source count / reward / acc for trained and generated rows, checked by hand."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

from rlhooks import Batch
from rlhooks.core.batch import _factorize_sorted, factorize
from rlhooks.plugins.rewards.source_metrics import SourceMetrics, SourceMetricsOptions


def batch(sources, rewards, acc=None):
    cols = {"uid": np.arange(len(sources)).astype(str), "data_source": np.array(sources, dtype=object),
            "reward": np.array(rewards, dtype=float)}
    meta = {}
    if acc is not None:
        cols["acc"] = np.array(acc, dtype=float)
        meta["reward_extra_keys"] = ["acc"]
    return Batch(cols, meta=meta)


def loop_reference(sources, rewards):
    """The spec's implementation: Counter and a dict of lists."""
    counts, vals = defaultdict(int), defaultdict(list)
    for s, r in zip(sources, rewards):
        counts[s] += 1
        if np.isfinite(r):
            vals[s].append(float(r))
    return dict(counts), {s: float(np.mean(v)) for s, v in vals.items() if v}


def test_trained_and_generated_metrics():
    sm = SourceMetrics()
    g1 = batch(["a", "a", "b", "b"], [1.0, 3.0, 0.0, 2.0], acc=[1, 1, 0, 1])
    g2 = batch(["b", "b", "c", "c"], [4.0, 4.0, 5.0, 7.0], acc=[1, 0, 1, 1])
    assert sm.on_rewards_computed(step=1, batch=g1) is None
    sm.on_rewards_computed(step=1, batch=g2)
    trained = batch(["a", "a", "c", "c"], [1.0, 3.0, 5.0, 7.0], acc=[1, 1, 1, 1])
    out = sm.on_step_end(step=1, batch=trained)
    assert out == {
        "source/a/count": 2, "source/a/reward": 2.0, "source/a/acc": 1.0,
        "source/c/count": 2, "source/c/reward": 6.0, "source/c/acc": 1.0,
        "source/b/count": 0,  # generated but nothing trained: count 0, no mean
        "source/a/generated_count": 2, "source/a/generated_reward": 2.0, "source/a/generated_acc": 1.0,
        "source/b/generated_count": 4, "source/b/generated_reward": 2.5, "source/b/generated_acc": 0.5,
        "source/c/generated_count": 2, "source/c/generated_reward": 6.0, "source/c/generated_acc": 1.0,
    }


def test_no_acc_extra_means_no_acc_metric_and_generated_can_be_turned_off():
    sm = SourceMetrics(SourceMetricsOptions(generated=False))
    sm.on_rewards_computed(step=1, batch=batch(["x"], [1.0]))
    out = sm.on_step_end(step=1, batch=batch(["x", "x"], [1.0, 2.0]))
    assert out == {"source/x/count": 2, "source/x/reward": 1.5}


def test_generated_totals_reset_between_steps():
    sm = SourceMetrics()
    sm.on_rewards_computed(step=1, batch=batch(["x"], [1.0]))
    sm.on_step_end(step=1, batch=batch(["x"], [1.0]))
    sm.on_rewards_computed(step=2, batch=batch(["y", "y"], [3.0, 5.0]))
    out = sm.on_step_end(step=2, batch=batch(["y"], [3.0]))
    assert "source/x/generated_count" not in out and out["source/y/generated_count"] == 2
    # a step whose generation batches never reached on_step_end (failed step) does not leak
    sm.on_rewards_computed(step=3, batch=batch(["z"], [1.0]))
    out = sm.on_step_end(step=4, batch=batch(["y"], [1.0]))
    assert "source/z/generated_count" not in out


def test_nonfinite_rewards_are_left_out_of_means():
    sm = SourceMetrics()
    out = sm.on_step_end(step=1, batch=batch(["a", "a", "a", "b"], [1.0, np.nan, 3.0, np.inf]))
    assert out == {"source/a/count": 3, "source/a/reward": 2.0, "source/b/count": 1}


def test_empty_trained_batch():
    sm = SourceMetrics()
    sm.on_rewards_computed(step=1, batch=batch(["a"], [1.0]))
    out = sm.on_step_end(step=1, batch=batch([], []))
    assert out == {"source/a/count": 0, "source/a/generated_count": 1, "source/a/generated_reward": 1.0}


@pytest.mark.parametrize("seed", range(5))
def test_matches_loop_reference_on_random_batches(seed):
    rng = np.random.default_rng(seed)
    names = np.array(["gsm8k", "math", "logic/if", "日本"], dtype=object)
    sources = np.repeat(names[rng.integers(0, 4, 50)], rng.integers(1, 5, 50))
    rewards = rng.normal(size=len(sources))
    rewards[rng.random(len(sources)) < 0.05] = np.nan
    counts, means = loop_reference(sources, rewards)
    out = SourceMetrics().on_step_end(step=1, batch=batch(sources, rewards))
    assert {k: v for k, v in out.items() if k.endswith("/count")} == {f"source/{s}/count": c for s, c in counts.items()}
    for s, m in means.items():
        assert out[f"source/{s}/reward"] == pytest.approx(m)


def test_factorize_orders_by_first_appearance_for_any_number_of_labels():
    labels = np.array(["b", "a", "a", "b", "c", "a"], dtype=object)
    names, codes = factorize(labels)
    assert names.tolist() == ["b", "a", "c"] and codes.tolist() == [0, 1, 1, 0, 2, 1]
    sorted_names, sorted_codes = _factorize_sorted(labels)  # the fallback agrees
    assert sorted_names.tolist() == ["b", "a", "c"] and sorted_codes.tolist() == codes.tolist()
    rng = np.random.default_rng(0)
    many = np.array([f"src{i}" for i in rng.integers(0, 300, 5000)], dtype=object)  # 300 labels, short runs
    names, codes = factorize(many)
    assert np.array_equal(names[codes], many) and len(names) == len(set(many.tolist()))
    assert [names.tolist().index(x) for x in dict.fromkeys(many.tolist())] == list(range(len(names)))
    unhashable = np.empty(3, dtype=object)
    unhashable[:] = [[1], [2], [1]]
    names, codes = factorize(unhashable)  # falls back to sorting the labels' text
    assert codes.tolist() == [0, 1, 0]
    names, codes = factorize(np.zeros(0, dtype=object))
    assert len(names) == 0 and len(codes) == 0


def test_factorize_nan_and_mixed_type_labels():
    # NaN != NaN: the scan would never advance on it; mixed str/None/float cannot be sorted as is
    names, codes = factorize(np.array(["a", np.nan, None, "a", np.nan], dtype=object))
    assert names.tolist() == ["a", "nan", "None"] and codes.tolist() == [0, 1, 2, 0, 1]
    names, codes = factorize(np.array([2.0, np.nan, 2.0, np.nan]))
    assert codes.tolist() == [0, 1, 0, 1] and names[0] == 2.0 and np.isnan(names[1])
    out = SourceMetrics().on_step_end(step=1, batch=batch(np.array(["a", None, "a"], dtype=object), [1.0, 2.0, 3.0]))
    assert out == {"source/a/count": 2, "source/a/reward": 2.0, "source/None/count": 1, "source/None/reward": 2.0}


# -- on by default in both engines (run.source_metrics) -----------------------------------------


def test_engines_add_source_metrics_by_default_once_and_it_can_be_turned_off(tmp_path):
    from rlhooks.core.config import load_config
    from rlhooks.core.manager import RunManager
    from rlhooks.engines.sim.engine import load_sim_config

    def names(cfg):
        return [c.name for c in cfg.rewards]

    assert names(load_sim_config({"rewards": ["check_answer"]})) == ["check_answer", "source_metrics"]
    added = load_sim_config({}).rewards[-1]
    assert added.path == "run.source_metrics" and added.options.missing_source == "skip"
    # listed by the user: theirs (with its options), not a second instance
    cfg = load_sim_config({"rewards": [{"name": "source_metrics", "generated": False}]})
    assert names(cfg) == ["source_metrics"] and cfg.rewards[0].options.generated is False
    assert names(load_sim_config({"run": {"source_metrics": False}})) == []
    assert names(load_config({})) == []  # plain load_config (tests, tools): only what the file lists
    # the default instance registers once and emits source/<name>/... in a run
    m = RunManager(load_sim_config({"run": {"out_dir": str(tmp_path)}}))
    assert [c.name for c in m.components] == ["source_metrics"]


def test_default_instance_skips_batches_without_a_source_the_listed_one_fails():
    plain = Batch({"uid": np.array(["a", "b"]), "reward": np.array([1.0, 0.0])})
    default = SourceMetrics(SourceMetricsOptions(missing_source="skip"))
    assert default.on_rewards_computed(step=1, batch=plain) is None
    assert default.on_step_end(step=1, batch=plain) == {}
    assert default.on_step_end(step=2, batch=batch(["openai/gsm8k"], [1.0]))["source/openai/gsm8k/count"] == 1
    with pytest.raises(Exception, match="data_source"):
        SourceMetrics().on_step_end(step=1, batch=plain)
