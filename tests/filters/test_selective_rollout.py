"""selective_rollout (GRESO): the skip rule, its floor, self-tuning, reproducible draws, contract, config."""

from __future__ import annotations

import numpy as np
import pytest

from rlhooks import Batch, ConfigError
from rlhooks.host import load_config
from rlhooks.core.batch import BatchError
from rlhooks.plugins.filters.selective_rollout import SelectiveRollout, SelectiveRolloutOptions
from rlhooks.testing import PromptFilterContract


class TestSelectiveRolloutContract(PromptFilterContract):
    plugin_class = SelectiveRollout

    @pytest.fixture
    def component_options(self):
        return {"p_easy": 0.4, "seed": 3}

    @pytest.fixture
    def entry_point_name(self):
        return "selective_rollout"


def prompts(runs, step=1, draw=1, index=None):
    runs = np.asarray(runs, dtype=np.int8)
    idx = np.arange(len(runs)) if index is None else np.asarray(index)
    return Batch({"index": idx, "learning/zero_var_run": runs}, meta={"step": step, "generation": 1, "draw": draw})


def test_keep_probability_is_p_to_the_run_with_a_floor():
    f = SelectiveRollout(SelectiveRolloutOptions(p_easy=0.5, p_hard=0.25, min_keep=0.01))
    got = f.keep_probability(np.array([0, 1, 2, 3, -1, -2, 20, -20]))
    np.testing.assert_allclose(got, [1, 0.5, 0.25, 0.125, 0.25, 0.0625, 0.01, 0.01])
    only_hard = SelectiveRollout(SelectiveRolloutOptions(skip_easy=False))
    assert only_hard.keep_probability(np.array([5, -1])).tolist() == [1.0, 0.5]


def test_skip_rate_follows_the_rule_over_many_prompts():
    f = SelectiveRollout(SelectiveRolloutOptions(seed=1))
    n = 20000
    runs = np.repeat([0, 1, 2, -1], n // 4)
    keep = f.select(prompts(runs, index=np.arange(n))).keep
    for run, p in ((0, 1.0), (1, 0.5), (2, 0.25), (-1, 0.5)):
        assert abs(keep[runs == run].mean() - p) < 0.02, (run, keep[runs == run].mean())


def test_draws_depend_on_step_and_draw_not_on_call_order():
    f = SelectiveRollout(SelectiveRolloutOptions(seed=1))
    runs = np.full(200, 1)
    a = f.select(prompts(runs, step=3)).keep
    f.select(prompts(runs, step=9))
    assert np.array_equal(a, f.select(prompts(runs, step=3)).keep)
    assert not np.array_equal(a, f.select(prompts(runs, step=3, draw=2)).keep)
    assert not np.array_equal(a, SelectiveRollout(SelectiveRolloutOptions(seed=2)).select(prompts(runs, step=3)).keep)


def trajectories(all_pass, all_fail, mixed, size=4):
    acc = [np.ones(size)] * all_pass + [np.zeros(size)] * all_fail + [np.array([1.0, 0.0] * (size // 2))] * mixed
    uid = np.repeat(np.arange(len(acc)), size)
    return Batch({"uid": uid, "index": uid, "acc": np.concatenate(acc)})


def test_self_tuning_moves_p_toward_the_target_share_of_zero_variance_groups():
    f = SelectiveRollout(SelectiveRolloutOptions(adjust_step=0.05))
    f.select(prompts([1, -1]))  # prompts with a record were seen: the step counts for tuning
    f.on_rewards_computed(1, trajectories(all_pass=5, all_fail=5, mixed=10))  # 25% each: above 8.3% / 16.7%
    m = f.on_step_end(1)
    assert f.p_easy == pytest.approx(0.45) and f.p_hard == pytest.approx(0.45)
    assert m["selective_rollout/all_pass_ratio"] == 0.25
    f.select(prompts([1]))
    f.on_rewards_computed(2, trajectories(all_pass=0, all_fail=0, mixed=10))  # below target: skip less
    f.on_step_end(2)
    assert f.p_easy == pytest.approx(0.5) and f.p_hard == pytest.approx(0.5)
    g = SelectiveRollout(SelectiveRolloutOptions(adjust_step=0.05))
    g.on_rewards_computed(1, trajectories(all_pass=10, all_fail=0, mixed=0))  # no prompt had a record yet
    g.on_step_end(1)
    assert g.p_easy == 0.5


def test_p_stays_within_its_bounds_and_state_round_trips():
    f = SelectiveRollout(SelectiveRolloutOptions(adjust_step=0.5, min_p=0.1, max_p=0.9))
    for step in range(5):
        f.select(prompts([1]))
        f.on_rewards_computed(step, trajectories(all_pass=10, all_fail=10, mixed=0))
        f.on_step_end(step)
    assert f.p_easy == 0.1 and f.p_hard == 0.1
    g = SelectiveRollout()
    g.load_state_dict(f.state_dict())
    assert (g.p_easy, g.p_hard, g.seed) == (f.p_easy, f.p_hard, f.seed)


def test_as_a_trajectory_filter_it_says_where_it_belongs():
    with pytest.raises(BatchError, match="prompt_filters:"):
        SelectiveRollout().select(Batch({"index": np.arange(3), "uid": np.arange(3)}))


def test_config_section_and_option_errors():
    cfg = load_config({"prompt_filters": [{"name": "selective_rollout", "p_easy": 0.3}]})
    (comp,) = cfg.prompt_filters
    assert comp.path == "prompt_filters[0]" and comp.options.p_easy == 0.3 and comp.on_error == "raise"
    with pytest.raises(ConfigError) as err:
        load_config({"prompt_filters": [{"name": "selective_rollout", "p_easy": 1.5, "min_p": 0.9, "max_p": 0.2}]})
    assert "prompt_filters[0]" in str(err.value) and "p_easy" in str(err.value)
    with pytest.raises(ConfigError, match="selective_rolout"):
        load_config({"prompt_filters": ["selective_rolout"]})
