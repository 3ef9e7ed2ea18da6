"""One entry for a scored batch (issue 39 item 5): every engine hands its scored trajectories to
``StepDriver.scored`` (learning state -> on_rewards_computed -> filters), none restates that order; on verl's
async V1 buffer the groups verl evicts as too stale go through the same call, once, never judged by the filters."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("verl.trainer.ppo.v1", reason="needs verl[verl-core]")

from rlhooks import Batch, hookimpl  # noqa: E402
from rlhooks.host import RunManager, StepDriver, load_config  # noqa: E402

pytestmark = pytest.mark.verl

ENGINES = Path(__file__).resolve().parents[2] / "rlhooks" / "engines"
#: the RunManager calls that make up a scored batch's order: StepDriver.scored's alone
STEP_ORDER = {"update_learning", "rewards_computed", "apply_filters"}
#: each engine's module and the StepDriver entry it reaches a scored batch through
ENTRIES = {"sim/engine.py": "collect", "verl/legacy/trainer.py": "collect", "verl/v1/trainer.py": "scored"}


def _calls(path: Path) -> set[str]:
    return {n.func.attr for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)}


def test_every_engine_reaches_a_scored_batch_through_the_step_driver_and_none_restates_its_order():
    sources = sorted(ENGINES.rglob("*.py"))
    assert len(sources) > 20
    restating = {str(p.relative_to(ENGINES)): sorted(_calls(p) & STEP_ORDER) for p in sources if _calls(p) & STEP_ORDER}
    assert restating == {}, "call StepDriver.scored (or collect) instead"
    for module, entry in ENTRIES.items():
        assert entry in _calls(ENGINES / module), module
    # the replay buffer hands each poll's scored groups to the trainer's groups_scored, which calls scored;
    # the async trainers add staleness columns to it
    from rlhooks.engines.verl.v1.async_trainers import _AsyncHooks

    assert "groups_scored" in _calls(ENGINES / "verl" / "v1" / "replay_buffer.py")
    assert "groups_scored" in vars(_AsyncHooks)


class Seen:
    def __init__(self) -> None:
        self.scored: list[Batch] = []

    @hookimpl
    def on_rewards_computed(self, step, batch):
        self.scored.append(batch)


#: group -> (the step its prompt was dispatched at, its rows' rewards); at step 5 with max_off_policy_threshold 2,
#: c and d are stale; b's rewards are constant (dapo drops it); d was judged (kept) at an earlier poll
GROUPS = {"a": (5, [0.0, 1.0]), "b": (5, [1.0, 1.0]), "c": (2, [0.0, 1.0]), "d": (2, [1.0, 0.0])}


def _async_buffer(tmp_path):
    from rlhooks.engines.verl.v1.async_trainers import RLHooksPPOTrainerColocateAsync, RLHooksReplayBufferAsync

    cfg = load_config({"run": {"name": "entry", "out_dir": str(tmp_path), "n": 2, "train_batch_size": 2},
                       "filters": [{"name": "dapo", "metric": "seq_reward"}]})
    seen = Seen()
    trainer = object.__new__(RLHooksPPOTrainerColocateAsync)  # its __init__ needs Ray and workers
    trainer.global_steps, trainer.adapter_functions = 5, ()
    trainer.rl = RunManager(cfg, extra_plugins=[("seen", seen)])
    trainer.driver = StepDriver(trainer.rl)
    trainer._step_metrics, trainer._filter_counts, trainer._staleness = {}, {}, {}
    trainer._step_counts = {"generated": 0.0, "kept": 0.0, "dispatches": 0.0, "scored": 0.0}
    # the arguments verl's _build_replay_buffer gives a custom sampler
    rb = RLHooksReplayBufferAsync(trainer_mode="colocate_async", trainer_config={}, max_off_policy_threshold=2,
                                  max_off_policy_strategy="drop", sampler_kwargs={}, refill_fn=lambda n: n)
    rb.trainer = trainer
    for uid, (step, rewards) in GROUPS.items():
        rb.prompt_global_steps["train"][uid] = step
        rb.finished_keys["train"].add(uid)
        for i in range(len(rewards)):
            rb.partitions["train"][f"{uid}_0_{i}"] = {}
    rb._dapo_classification_cache["train"]["d"] = None

    def scored(partition_id, keys, *, keep=False):  # what the buffer reads from TransferQueue for those keys
        uid = np.array([k.split("_")[0] for k in keys], dtype=object)
        reward = np.array([GROUPS[u][1][int(k.rsplit("_", 1)[1])] for u, k in zip(uid, keys)])
        return Batch({"uid": uid, "reward": reward, "policy_version": np.array([GROUPS[u][0] for u in uid])})

    rb.scored = scored
    return rb, trainer, seen


def test_async_stale_groups_reach_the_plugins_once_with_the_rest_and_are_never_judged(tmp_path):
    rb, trainer, seen = _async_buffer(tmp_path)
    stale, dropped, failed, counts = rb._terminal_eviction_reasons(5, "train")  # verl's own
    assert (stale, dropped, failed, dict(counts)) == ({"c", "d"}, {"b"}, set(), {1.0: 1})
    # one scored batch: the newly finished groups, the stale unseen one included (d was shown before)
    assert len(seen.scored) == 1 and sorted(set(seen.scored[0]["uid"])) == ["a", "b", "c"]
    assert seen.scored[0]["policy_lag"].tolist() == [0, 0, 0, 0, 2, 2]  # trained_version 4 - policy_version
    # the filters judged a and b only; both stale groups count as evictions
    assert trainer._filter_counts["filter/dropped_constant"] == 1.0
    assert (trainer._step_counts["generated"], trainer._step_counts["kept"]) == (2.0, 1.0)
    assert trainer._staleness["staleness/evicted_groups"] == 2.0
    # verl asks again without evicting (separate_async's get_sampleable_count): nothing is reported twice
    assert rb._terminal_eviction_reasons(5, "train")[:3] == ({"c", "d"}, {"b"}, set())
    assert len(seen.scored) == 1 and trainer._staleness["staleness/evicted_groups"] == 2.0
    assert rb.judged_groups() == {"a": None, "b": 1.0, "d": None}  # rlhooks.pt's verdicts: stale c never judged
