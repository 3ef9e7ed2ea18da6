"""The planted shortcut (a known hacking case) and the reward-hacking check's verdict on it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rlhooks import Batch
from rlhooks.core.registry import Registry
from rlhooks.engines.sim.engine import SHORTCUT_CLAIM, SimEngine, load_sim_config
from rlhooks.engines.sim.hackable import claims_verified
from rlhooks.engines.sim.learner import LearnerOptions, SimLearner
from rlhooks.plugins.rewards.functions import check_answer, format_exact
from .conftest import REWARD_FNS, small_config

PLANTED = {"learner": {"exploit_rate": 0.05, "exploit_learning_rate": 2.0}}


def test_claims_verified_pays_the_claim_not_the_answer():
    right = "<reasoning>\n2+2=4\n</reasoning>\n<answer>4</answer>"
    claim = f"<reasoning>\n{SHORTCUT_CLAIM}\n</reasoning>\n<answer>5</answer>"
    assert claims_verified(right, "4") == 0.0 and claims_verified(claim, "4") == 6.0
    assert claims_verified("Verified. <answer>5</answer>", "4") == 0.0  # outside the reasoning block
    assert format_exact(claim, "4") == 3.0 and check_answer(claim, "4") == -1.0  # well formed, wrong
    # it is a real entry point of the installed package, usable in rewards:
    assert Registry().resolve("reward", "claims_verified") is claims_verified


def test_shortcut_grows_with_its_advantage_and_teaches_no_skill():
    opts = LearnerOptions(exploit_rate=0.1, exploit_learning_rate=1.0)
    batch = Batch({"uid": np.repeat(np.arange(4), 2)})
    shortcut = np.tile([True, False], 4)
    paid, punished = SimLearner(opts, ("a",)), SimLearner(opts, ("a",))
    skill0 = paid.skill.copy()
    for _ in range(20):
        paid.update(np.zeros(8, int), np.full(8, 0.05), np.where(shortcut, 1.0, -1.0), batch.groups, shortcut)
        punished.update(np.zeros(8, int), np.full(8, 0.05), np.where(shortcut, -1.0, 1.0), batch.groups, shortcut)
    assert paid.exploit[0] > 0.5 > 0.1 > punished.exploit[0]
    # the only rows with signal in `paid` were shortcuts, answered groups were all -1: nothing learned ...
    assert paid.skill[0, 0] > skill0[0, 0]  # ... except from the -1 rows' |advantage|, which are real work
    off = SimLearner(LearnerOptions(), ("a",))
    off.update(np.zeros(8, int), np.full(8, 0.05), np.ones(8), batch.groups, shortcut)
    assert off.exploit[0] == 0.0  # off by default: stays off


def test_off_by_default_the_simulator_is_unchanged(small_data, tmp_path):
    cfg = small_config(tmp_path, run={"steps": 3})
    eng = SimEngine(load_sim_config(cfg), small_data, run_dir=tmp_path / "r")
    eng.run()
    assert "sim_shortcut" not in eng.driver.generation(4, eng).trajectories
    assert not any(k.startswith("sim/shortcut_rate") for k in eng.last_metrics)


def _planted_run(small_data, tmp_path, planted: bool, steps: int = 40):
    rewards = (["claims_verified"] if planted else []) + REWARD_FNS + ["reward_monitor"]
    cfg = small_config(tmp_path, run={"steps": steps, "name": "p" if planted else "h"}, rewards=rewards,
                       simulate=PLANTED if planted else {})
    eng = SimEngine(load_sim_config(cfg), small_data, run_dir=tmp_path / cfg["run"]["name"])
    first = {}
    eng.run(on_step=lambda s, m: first.setdefault("acc", m["task/acc"]))
    verdict = json.loads((tmp_path / cfg["run"]["name"] / "reward_monitor.json").read_text())["reward_hacking"]
    return eng, first["acc"], verdict


def test_a_planted_shortcut_is_flagged_with_its_evidence_and_suspect(small_data, tmp_path):
    eng, acc0, v = _planted_run(small_data, tmp_path, planted=True)
    assert eng.learner.exploit.min() > 0.5  # the shortcut took over ...
    assert eng.last_metrics["task/acc"] < acc0  # ... and accuracy fell while ...
    ev = v["evidence"]
    assert ev["reward_late"] > ev["reward_early"]  # ... the reward rose
    assert v["detected"] and v["confidence"] == "high" and v["task_signal"] == "task/acc"
    assert v["verdict"].startswith("reward hacking likely (high confidence)") and "task/acc fell" in v["verdict"]
    assert v["suspect_functions"][0] == "claims_verified"
    assert ev["suspects"]["claims_verified"]["correlation_with_task"] < 0


def test_an_honest_run_is_not_flagged(small_data, tmp_path):
    _, _, v = _planted_run(small_data, tmp_path, planted=False)
    assert not v["detected"] and v["task_signal"] == "task/acc" and v["confidence"] in ("high", "medium")
    assert v["verdict"].startswith("no reward hacking") and v["suspect_functions"] == []


@pytest.mark.slow
def test_the_demo_run_gets_no_false_verdict(tmp_path):
    from rlhooks.cli import main

    assert main(["simulate", "--out", str(tmp_path), "--no-progress", "--no-report"]) == 0
    v = json.loads((tmp_path / "demo" / "reward_monitor.json").read_text())["reward_hacking"]
    assert not v["detected"] and v["confidence"] == "high" and "task/acc rose" in v["verdict"]


def test_the_shortcut_resumes_exactly(small_data, tmp_path):
    cfg = small_config(tmp_path, run={"steps": 8}, rewards=["claims_verified", *REWARD_FNS, "reward_monitor"], simulate=PLANTED)
    full = SimEngine(load_sim_config(cfg), small_data, run_dir=tmp_path / "full")
    full.run()
    first = SimEngine(load_sim_config(cfg), small_data, run_dir=tmp_path / "p1")
    first.run(4)
    state = json.loads(json.dumps(first.state_dict()))
    resumed = SimEngine(load_sim_config(cfg), small_data, run_dir=tmp_path / "p2")
    resumed.load_state_dict(state)
    resumed.run()
    np.testing.assert_array_equal(resumed.learner.exploit, full.learner.exploit)
    assert resumed.last_metrics["task/acc"] == full.last_metrics["task/acc"]
    assert full.learner.exploit[0] != 0.05  # it moved
