"""Resume with groups in flight on verl's V1 asynchronous trainers, on the CPU learner (the helpers and the sync pair:
``test_v1_resume.py``).

* ``rlhooks_colocate_async`` (multi_source) and ``rlhooks_separate_async`` (time_curriculum), each a pair of runs:
  a checkpoint taken with groups in flight (verl saves TransferQueue and re-issues them); every prompt the run
  drew is accounted for across the checkpoint: judged once, trained at most once, and the restored state plus
  what the resumed step judged is the resumed run's state; the sampler goes on from its saved state.

Slow: four V1 runs (with a bench run beside them the pairs took colocate_async 91 + 82 s and separate_async
185 + 137 s, 2026-11-26).
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("verl.trainer.ppo.v1", reason="needs verl[verl-core]")
pytest.importorskip("transformers")

from .test_v1_resume import MULTI_SOURCE, TIME_CURRICULUM, _straight_and_resumed, learning_counts  # noqa: E402

pytestmark = [pytest.mark.verl, pytest.mark.slow]


# -- rlhooks_colocate_async and rlhooks_separate_async: a checkpoint with groups in flight ----------------------


@pytest.fixture(scope="module", params=["colocate_async", "separate_async"])
def async_runs(cpu_v1_ray, tmp_path_factory, request):
    from rlhooks.engines.verl.cpu import runner

    mode = {"colocate_async": ["trainer.v1.trainer_mode=rlhooks_colocate_async"],
            # the trainer and a standalone CPU rollout server apart, weights over the gloo checkpoint engine
            "separate_async": runner.separate_async_overrides(4)}[request.param]
    return _straight_and_resumed(tmp_path_factory, request.param, *mode,
                                 # 3 versions: nothing drawn in a 3-step run ages out, so each group is trained, dropped by
                                 # the filter, waiting in the buffer or generating at the end
                                 "trainer.v1.sampler.max_off_policy_threshold=3",
                                 # multi_source (adaptive weights) in one async mode, time_curriculum in the other
                                 sampler={"colocate_async": MULTI_SOURCE, "separate_async": TIME_CURRICULUM}[request.param])


def test_an_async_checkpoint_holds_groups_in_flight(async_runs):
    straight, _ = async_runs
    assert (straight.out / "ckpt" / "global_step_2" / "transfer_queue").is_dir()  # verl's async path is on
    from rlhooks.engines.verl.v1.trainer import prompt_uid

    drawn = {prompt_uid(i) for i in range(straight.state(2)["prompts_drawn"])}
    judged = {g[0] for s in (1, 2) for g in straight.generated(s)}
    assert drawn - judged  # drawn before the checkpoint, not finished and judged by then: in flight


def test_an_async_resume_continues_the_samplers_state(async_runs):
    straight, resumed = async_runs
    for run in async_runs:  # the sampler, fed by the replay buffer, reports every step
        assert all(any(k.startswith(("sampler/", "curriculum/")) for k in m) for m in run.metrics.values())
    # the feedback batches it counted go on from the checkpoint's (a lost state starts again from 0)
    at_checkpoint = straight.state(2)["components"]["sampler"]["feedback"]
    assert 0 < at_checkpoint < resumed.state(3)["components"]["sampler"]["feedback"]
    if "curriculum/level" in straight.metrics[2]:  # time_curriculum: its schedule is those batches
        assert at_checkpoint == straight.metrics[2]["curriculum/level"] < resumed.metrics[3]["curriculum/level"] < 50
        # the easiest 30% of add_carry at first, more with each batch, all of it only after the 50-batch warm-up
        percentile = [straight.metrics[s]["curriculum/percentile"] for s in sorted(straight.metrics)]
        assert 30 <= percentile[0] < percentile[-1] < 100 and percentile == sorted(percentile), percentile


def test_an_async_resume_neither_drops_nor_duplicates_a_group(async_runs):
    from rlhooks.engines.verl.v1.trainer import prompt_uid

    straight, resumed = async_runs
    assert all(m["staleness/evicted_groups"] == 0 for run in async_runs for m in run.metrics.values())
    at_checkpoint = straight.state(2)
    judged_before = {g[0] for s in (1, 2) for g in straight.generated(s)}
    trained_before = {u for s in (1, 2) for u in straight.trained_uids(s)}
    judged_after = {g[0] for g in resumed.generated(3)}
    trained_after = set(resumed.trained_uids(3))
    assert not judged_before & judged_after  # a group judged before the checkpoint is not judged again
    assert not trained_before & trained_after  # nor trained again
    assert trained_before <= judged_before and trained_after <= judged_before | judged_after
    # the groups kept before the checkpoint and not trained yet are still there, and train (or wait) after it
    buffered = {uid for uid, verdict in at_checkpoint["judged_groups"].items() if verdict is None} - trained_before
    waiting = set(resumed.state(3)["judged_groups"])
    assert buffered <= trained_after | waiting
    # every prompt drawn before the checkpoint: judged before it, or in flight and judged (or still generating) after
    drawn = {prompt_uid(i) for i in range(at_checkpoint["prompts_drawn"])}
    assert judged_after <= {prompt_uid(i) for i in range(resumed.state(3)["prompts_drawn"])}
    in_flight = drawn - judged_before
    assert in_flight & judged_after  # re-issued by verl, judged once in the resumed run
    # the restored learning state plus the rows the resumed step judged is the resumed run's learning state
    rows = np.array([g[2] for g in resumed.generated(3) if g[1].endswith("/0")], dtype=np.int64)
    expected = learning_counts(at_checkpoint) + np.bincount(rows, minlength=len(learning_counts(at_checkpoint)))
    assert np.array_equal(learning_counts(resumed.state(3)), np.minimum(expected, 65535))
