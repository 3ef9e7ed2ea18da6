"""learnability and dump_ucb samplers: the rlhooks sampler contract, what they prefer, exact resume."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from rlhooks import Batch
from rlhooks.core.data import DatasetColumns
from rlhooks.core.learning import LearningState
from rlhooks.plugins.samplers.learnability import LearnabilitySampler, UCBSampler
from rlhooks.testing import SamplerContract


class TestLearnabilityPromptContract(SamplerContract):
    plugin_class = LearnabilitySampler

    @pytest.fixture
    def component_options(self):
        return {"level": "prompt", "floor": 0.2}

    @pytest.fixture
    def entry_point_name(self):
        return "learnability"


class TestLearnabilitySourceContract(TestLearnabilityPromptContract):
    @pytest.fixture
    def component_options(self):
        return {"level": "source"}


class TestUCBContract(SamplerContract):
    plugin_class = UCBSampler

    @pytest.fixture
    def component_options(self):
        return {"window": 20}

    @pytest.fixture
    def entry_point_name(self):
        return "dump_ucb"


def dataset(n_per_source=200, sources=("easy", "mixed")):
    return DatasetColumns.from_arrays(np.repeat(list(sources), n_per_source))


def feedback(rows, p_of_row, data, step, rng, n=8):
    """A trajectory batch: each row one group of n responses, right with probability p_of_row(row)."""
    rows = np.asarray(rows)
    acc = (rng.random((len(rows), n)) < np.asarray([p_of_row(r) for r in rows])[:, None]).astype(float).ravel()
    idx = np.repeat(rows, n)
    return Batch({"uid": np.repeat(np.arange(len(rows)) + step * 10_000, n), "index": idx,
                  "data_source": data.data_source[idx], "reward": acc, "acc": acc})


class _Run:
    def __init__(self, learning):
        self.learning, self.seed = learning, 0


def test_prompt_level_prefers_rows_the_policy_solves_sometimes():
    data = DatasetColumns.from_arrays(np.repeat(["s"], 400))
    p = np.where(np.arange(400) < 200, 1.0, 0.5)  # rows 0..199 always solved, the rest half the time
    learning = LearningState(400, source_codes=data.source_codes, source_names=data.source_names)
    s = LearnabilitySampler({"level": "prompt", "floor": 0.1}, data, batch_size=40, seed=0)
    s.on_run_start(_Run(learning))
    rng = np.random.default_rng(0)
    learning.update(feedback(np.arange(400), lambda r: p[r], data, 0, rng), 0)  # the driver's update
    drawn = np.concatenate([s.draw_batch() for _ in range(5)])
    assert (drawn >= 200).mean() > 0.85  # accept 1.0 vs floor 0.1: ~91% from the learnable half


def test_source_level_weights_the_learnable_source_up():
    data = dataset()
    s = LearnabilitySampler({"level": "source", "floor": 0.05, "max_source_ratio": 10.0}, data, batch_size=40, seed=0)
    rng = np.random.default_rng(0)
    rows = s.draw_batch()
    s.on_rewards_computed(1, feedback(rows, lambda r: 1.0 if r < 200 else 0.5, data, 1, rng))
    w = s.weights  # rows not seen yet count 0.25: "easy" is only a little below "mixed"
    assert 0.5 < w["mixed"] / (w["mixed"] + w["easy"]) < 0.6, w
    # no shared state: the sampler keeps its own learning state from on_rewards_computed
    s.on_rewards_computed(2, feedback(np.arange(400), lambda r: 1.0 if r < 200 else 0.5, data, 2, rng))
    w = s.weights  # every row seen: mean p(1-p) ~0.22 vs 0 -> weights (0.05 + 0.22) : 0.05
    assert w["mixed"] > 4 * w["easy"], w


def test_ucb_prefers_the_source_with_larger_advantages_and_explores_the_unseen():
    data = dataset(sources=("flat", "lively", "new"))
    s = UCBSampler({"window": 50, "max_source_ratio": 50.0}, data, batch_size=30, seed=0)
    rng = np.random.default_rng(1)
    rows = np.concatenate([np.arange(0, 20), np.arange(200, 220)])  # "new" (rows 400+) never fed back
    s.on_rewards_computed(1, feedback(rows, lambda r: 1.0 if r < 200 else 0.5, data, 1, rng))
    w = s.weights
    assert w["new"] > w["lively"] > w["flat"], w
    s.on_rewards_computed(2, feedback(np.arange(400, 420), lambda r: 1.0, data, 2, rng))
    w = s.weights
    assert w["lively"] > w["flat"] and w["lively"] > w["new"], w
    ucb = s.ucb()
    assert np.all(np.isfinite(ucb))


def test_learnability_resume_with_a_shared_state_is_exact():
    """Run, save sampler + learning state, restore both in fresh objects, continue == uninterrupted."""
    data = dataset()
    p = lambda r: 1.0 if r < 150 else (0.0 if r < 200 else 0.6)

    def build():
        learning = LearningState(len(data), source_codes=data.source_codes, source_names=data.source_names)
        s = LearnabilitySampler({"level": "prompt"}, data, batch_size=16, seed=5)
        s.on_run_start(_Run(learning))
        return s, learning

    def steps(s, learning, first, last, rng):
        out = []
        for step in range(first, last):
            rows = s.draw_batch()
            out.append(rows)
            batch = feedback(rows, p, data, step, rng)
            learning.update(batch, step)
            s.on_rewards_computed(step, batch)
        return out

    s, learning = build()
    full = steps(s, learning, 1, 11, np.random.default_rng(3))
    s, learning = build()
    rng = np.random.default_rng(3)
    head = steps(s, learning, 1, 6, rng)
    saved = pickle.dumps((s.state_dict(), learning.state_dict()))
    s2, learning2 = build()
    sampler_state, learning_state = pickle.loads(saved)
    s2.load_state_dict(sampler_state)
    learning2.load_state_dict(learning_state)
    tail = steps(s2, learning2, 6, 11, rng)
    assert all(np.array_equal(a, b) for a, b in zip(full, head + tail))


def test_option_errors_name_the_option():
    from rlhooks import ConfigError
    from rlhooks.host import load_config

    with pytest.raises(ConfigError, match="floor"):
        load_config({"sampler": {"name": "learnability", "floor": 0}})
    with pytest.raises(ConfigError, match="temperature"):
        load_config({"sampler": {"name": "dump_ucb", "temperature": -1}})
