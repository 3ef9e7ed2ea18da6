"""rlhooks on verl V1's asynchronous trainers (``colocate_async``, ``separate_async``): verl's async
lifecycle, the rlhooks hooks.

``RLHooksPPOTrainerColocateAsync`` and ``RLHooksPPOTrainerSeparateAsync`` are the rlhooks V1 trainer
(``RLHooksPPOTrainerSync``: sampler, prompt filters, ``on_batch_sampled``, filters in the replay buffer,
``on_step_end``, ``rlhooks.pt``) combined with verl's ``PPOTrainerColocateAsync`` / ``PPOTrainerSeparateAsync``
by inheritance. The only methods verl's sync trainer defines (``SYNC_LIFECYCLE``) are taken from verl's
async trainer, so the weights are updated and generation resumes at step end, generation is paused at
sample end, and the warm-up batches are dispatched, all as verl does; everything else verl's async class
defines (separate_async: its own ``__init__`` checks, ``_setup`` with the standalone rollout, the
version-aware old log-probs, the hybrid switch) is reached through the MRO. ``tests/verl/test_verl_async.py``
checks both compositions against verl's source.

``RLHooksReplayBufferAsync`` is the rlhooks replay buffer over verl's ``ReplayBufferAsync``. Staleness
(core/staleness.py): verl evicts groups spanning more than ``max_off_policy_threshold`` versions; here
those groups are taken out *before* the rlhooks filters judge the newly finished ones, then reach the
learning state and ``on_rewards_computed`` (they were generated and scored) and count in
``staleness/evicted_groups`` and ``filter/stale_evicted_groups``, never in a filter's counts. Groups carry
``trained_version = global_steps - 1`` and ``policy_lag``, when scored and when trained.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
from verl.trainer.ppo.v1.replay_buffer import ReplayBufferAsync
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_colocate_async import PPOTrainerColocateAsync
from verl.trainer.ppo.v1.trainer_separate_async import PPOTrainerSeparateAsync

from rlhooks.core import batch as cols
from rlhooks.core.batch import Batch
from rlhooks.core.errors import ConfigError, ConfigIssue
from rlhooks.core.manager import merge_metrics
from rlhooks.core.staleness import eviction_metrics, lag_metrics
from rlhooks.engines.verl.v1 import ASYNC_TRAINER_MODES
from rlhooks.engines.verl.v1.batches import group_order
from rlhooks.engines.verl.v1.replay_buffer import RLHooksReplayBuffer
from rlhooks.engines.verl.v1.trainer import RLHooksPPOTrainerSync

#: the lifecycle methods verl's PPOTrainerSync defines over PPOTrainer; an async variant takes its mode's own
SYNC_LIFECYCLE = ("on_init_end", "on_step_end", "on_sample_end")


def with_staleness(batch: Batch, global_steps: int) -> Batch:
    """``trained_version`` (the weights step ``global_steps`` updates) and ``policy_lag`` from the batch's
    ``policy_version`` (V1: ``min_global_steps``); unchanged when the rollout reported no version."""
    if cols.POLICY_VERSION not in batch or not len(batch):
        return batch
    trained = np.full(len(batch), int(global_steps) - 1, dtype=np.int64)
    lag = np.maximum(trained - np.asarray(batch[cols.POLICY_VERSION], dtype=np.int64), 0)
    return batch.with_columns(**{cols.TRAINED_VERSION: trained, cols.POLICY_LAG: lag})


class _AsyncHooks:
    """What the rlhooks V1 trainer adds in an asynchronous mode: staleness columns and metrics."""

    def on_step_begin(self):
        super().on_step_begin()
        self._staleness: dict[str, float] = {}

    def groups_scored(self, batch: Batch) -> np.ndarray:
        return super().groups_scored(with_staleness(batch, self.global_steps))

    def groups_evicted_stale(self, batch: Batch, unseen: np.ndarray) -> None:
        """Groups verl's replay buffer evicts as too stale, counted as evictions and never judged by the
        filters; the rows of ``unseen`` groups (not scored before: a group judged while fresh was) go to
        the learning state and on_rewards_computed, as every generated group does."""
        step = self.global_steps
        batch = with_staleness(batch, step).with_meta(step=step)
        for k, v in eviction_metrics(batch, np.ones(len(batch), dtype=bool)).items():
            self._staleness[k] = self._staleness.get(k, 0.0) + v
        new = batch.select(np.asarray(unseen, dtype=bool))
        if len(new):
            for k, v in self.rl.update_learning(step, new).items():
                self._step_metrics[k] = self._step_metrics.get(k, 0.0) + v
            merge_metrics(self._step_metrics, self.rl.rewards_computed(step, new))

    def _trained_batch(self, batch, verl_data: Any = None) -> Batch:
        return with_staleness(super()._trained_batch(batch, verl_data), self.global_steps)

    def _filter_metrics(self, trained: Batch, metrics: dict[str, Any]) -> dict[str, float]:
        out = super()._filter_metrics(trained, metrics)
        staleness = dict(getattr(self, "_staleness", {}))
        staleness.setdefault("staleness/evicted_groups", 0.0)
        if self.rl.filters:
            out["filter/stale_evicted_groups"] = staleness["staleness/evicted_groups"]
        out.update(staleness)
        out.update(lag_metrics(trained))
        return out


@register_trainer(ASYNC_TRAINER_MODES["colocate_async"])
class RLHooksPPOTrainerColocateAsync(_AsyncHooks, RLHooksPPOTrainerSync, PPOTrainerColocateAsync):
    """verl's ``colocate_async`` trainer driven by rlhooks plugins."""

    VERL_TRAINER_MODE = "colocate_async"  # verl's async-only paths: TQ checkpoint, re-issued in-flight prompts

    on_init_end = PPOTrainerColocateAsync.on_init_end
    on_step_end = PPOTrainerColocateAsync.on_step_end
    on_sample_end = PPOTrainerColocateAsync.on_sample_end


def check_hybrid_engine(config: Any) -> None:
    """``actor_rollout_ref.hybrid_engine=false`` (rollout on the standalone pool only) is refused where verl's
    ``PPOTrainerSeparateAsync._setup`` passes ``flush=True`` to ``logging.Logger.info`` on that path (verl
    0.9.1): it raises TypeError after the workers started. Read from verl's source, so a fixed verl runs it."""
    import inspect

    if bool(config.actor_rollout_ref.get("hybrid_engine", True)):
        return
    if "flush=True" in inspect.getsource(PPOTrainerSeparateAsync._setup):
        raise ConfigError([ConfigIssue(
            "actor_rollout_ref.hybrid_engine",
            "is false: this verl's separate_async trainer fails on that path (PPOTrainerSeparateAsync._setup calls "
            "logger.info(..., flush=True), a TypeError, after the workers have started); leave it at verl's default "
            "true (the trainer's colocated replica then sleeps while training and serves validation)",
        )], "verl config")


@register_trainer(ASYNC_TRAINER_MODES["separate_async"])
class RLHooksPPOTrainerSeparateAsync(_AsyncHooks, RLHooksPPOTrainerSync, PPOTrainerSeparateAsync):
    """verl's ``separate_async`` trainer (rollout on its own resource pool) driven by rlhooks plugins."""

    VERL_TRAINER_MODE = "separate_async"  # also where verl reads parameter_sync_step (trainer.v1.<mode>)

    def __init__(self, config: Any, rlhooks_plugins: Any = ()):
        check_hybrid_engine(config)  # before verl starts any worker
        super().__init__(config, rlhooks_plugins)

    on_init_end = PPOTrainerSeparateAsync.on_init_end
    on_step_end = PPOTrainerSeparateAsync.on_step_end
    on_sample_end = PPOTrainerSeparateAsync.on_sample_end


class RLHooksReplayBufferAsync(RLHooksReplayBuffer, ReplayBufferAsync):
    """verl's async replay buffer; stale groups are evicted before the rlhooks filters judge the rest."""

    def _terminal_eviction_reasons(self, global_steps: int, partition_id: str) -> tuple[set[str], set[str], set[str], Counter]:
        if partition_id == "val" or self.trainer is None:
            return super()._terminal_eviction_reasons(global_steps, partition_id)
        stale = self._stale_terminal_keys(global_steps, partition_id)
        judged_before = stale & self._dapo_classification_cache[partition_id].keys()
        finished = self.finished_keys[partition_id]
        stale_finished = finished & stale
        finished -= stale_finished  # the filters judge only groups fresh enough to train
        try:
            dropped, counts = self._dapo_filtered_keys(partition_id)
        finally:
            finished |= stale_finished
        if stale:
            self._report_stale(partition_id, stale, judged_before)
        return stale, dropped - stale, set(self.failure_keys[partition_id]), counts

    def _report_stale(self, partition_id: str, uids: set[str], judged_before: set[str]) -> None:
        with self.trainer.rlhooks_time():  # the step's timing_s/rlhooks
            self._read_stale(partition_id, uids, judged_before)

    def _read_stale(self, partition_id: str, uids: set[str], judged_before: set[str]) -> None:
        keys = [key for key in self.partitions[partition_id] if key.split("_")[0] in uids]
        if not keys:
            return
        keys = [keys[i] for i in group_order(keys)]
        batch = self.scored(partition_id, keys)
        unseen = ~np.isin(np.asarray(batch[cols.UID], dtype=object), np.asarray(sorted(judged_before), dtype=object))
        self.trainer.groups_evicted_stale(batch, unseen)


__all__ = ["RLHooksPPOTrainerColocateAsync", "RLHooksPPOTrainerSeparateAsync", "RLHooksReplayBufferAsync",
           "SYNC_LIFECYCLE", "check_hybrid_engine", "with_staleness"]
