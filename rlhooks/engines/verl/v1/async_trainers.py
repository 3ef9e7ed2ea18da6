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
those groups are kept out of the rlhooks filters, reach the learning state and ``on_rewards_computed``
with the newly finished ones (``StepDriver.scored``'s ``evicted`` rows: generated and scored), and count in
``staleness/evicted_groups`` and ``filter/stale_evicted_groups``, never in a filter's counts. Groups carry
``trained_version = global_steps - 1`` and ``policy_lag``, when scored and when trained.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from verl.trainer.ppo.v1.replay_buffer import ReplayBufferAsync
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_colocate_async import PPOTrainerColocateAsync
from verl.trainer.ppo.v1.trainer_separate_async import PPOTrainerSeparateAsync

from rlhooks.core import batch as cols
from rlhooks.core.batch import Batch
from rlhooks.core.errors import ConfigError, ConfigIssue
from rlhooks.core.staleness import eviction_metrics, lag_metrics
from rlhooks.engines.verl.v1 import ASYNC_TRAINER_MODES
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

    def groups_scored(self, batch: Batch, evicted: np.ndarray | None = None) -> np.ndarray:
        return super().groups_scored(with_staleness(batch, self.global_steps), evicted)

    def groups_evicted_stale(self, batch: Batch) -> None:
        """Groups verl's replay buffer evicts as too stale (each reported once), counted as evictions and never
        judged by the filters; those not shown to the plugins before reach them through ``groups_scored``."""
        batch = with_staleness(batch, self.global_steps)
        for k, v in eviction_metrics(batch, np.ones(len(batch), dtype=bool)).items():
            self._staleness[k] = self._staleness.get(k, 0.0) + v

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
    """verl's async replay buffer; stale groups are evicted before the rlhooks filters judge the rest.

    verl's ``_terminal_eviction_reasons`` runs as verl wrote it: it asks ``_stale_terminal_keys`` (kept here
    for ``_dapo_filtered_keys``), then ``_dapo_filtered_keys``, whose rlhooks filters judge only the others."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._stale: dict[str, set[str]] = {}

    def _stale_terminal_keys(self, global_steps: int, partition_id: str) -> set[str]:
        stale = super()._stale_terminal_keys(global_steps, partition_id)
        self._stale[partition_id] = set(stale)
        return stale

    def _stale_now(self, partition_id: str) -> set[str]:
        return self._stale.pop(partition_id, set())


__all__ = ["RLHooksPPOTrainerColocateAsync", "RLHooksPPOTrainerSeparateAsync", "RLHooksReplayBufferAsync",
           "SYNC_LIFECYCLE", "check_hybrid_engine", "with_staleness"]
