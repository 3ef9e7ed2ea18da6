"""rlhooks's staleness columns and eviction rule agree with verl V1's own (real verl objects and source).

verl's asynchronous replay buffer (``ReplayBufferAsync``) records the step that dispatched each prompt
and drops a finished group when it spans more than ``max_off_policy_threshold`` policy versions; its
trainer logs ``trajectory_staleness_worst = (global_steps - 1) - min_global_steps``. rlhooks writes the
same facts as ``policy_lag = trained_version - policy_version`` (``policy_version = min_global_steps``)
and evicts with ``stale_rows``.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest

pytest.importorskip("verl")

from omegaconf import DictConfig  # noqa: E402
from verl.trainer.ppo.v1.replay_buffer import ReplayBufferAsync  # noqa: E402
from verl.trainer.ppo.v1.trainer_base import PPOTrainer  # noqa: E402

from rlhooks import Batch  # noqa: E402
from rlhooks.core.staleness import stale_rows  # noqa: E402

pytestmark = pytest.mark.verl


def test_rlhooks_evicts_exactly_the_groups_verls_async_replay_buffer_drops() -> None:
    dispatched = np.arange(1, 9)  # prompt p dispatched at step dispatched[p] (its weights: version step - 1)
    uids = [f"p{i}" for i in range(len(dispatched))]
    for threshold in (1, 2, 3, 5):
        buffer = ReplayBufferAsync("colocate_async", DictConfig({}), threshold, "drop", DictConfig({}))
        buffer.prompt_global_steps["train"].update(dict(zip(uids, dispatched.tolist())))
        buffer.finished_keys["train"].update(uids)
        for step in (8, 9, 12):  # the trainer's global_steps: it trains weights version step - 1
            verl_dropped = buffer._stale_terminal_keys(step, "train")
            lag = (step - 1) - (dispatched - 1)  # trained_version - policy_version
            batch = Batch({"uid": np.repeat(np.arange(len(uids)), 2), "policy_lag": np.repeat(lag, 2)})
            ours = {uids[i] for i in np.flatnonzero(stale_rows(batch, threshold)[::2])}
            assert ours == verl_dropped, (threshold, step)
    # the dropless strategy ("wait") evicts nothing; rlhooks's engines pass None for it
    waiting = ReplayBufferAsync("colocate_async", DictConfig({}), 1, "wait", DictConfig({}))
    waiting.prompt_global_steps["train"]["old"] = 1
    waiting.finished_keys["train"].add("old")
    assert waiting._stale_terminal_keys(9, "train") == set()


def test_policy_lag_is_verls_worst_case_trajectory_staleness() -> None:
    # read from verl's source: the metric rlhooks's policy_lag restates (policy_version = min_global_steps)
    source = inspect.getsource(PPOTrainer._compute_metrics)
    assert "trajectory_staleness_worst = (global_steps - 1) - min_global_steps" in source
    assert '"training/off_policy/trajectory_staleness_worst/mean"' in source
