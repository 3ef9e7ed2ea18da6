"""verl's legacy trainer (``trainer.use_v1=false``, ``RayPPOTrainer``), and all that exists only for it:
the rlhooks restatement of its ``fit()`` (:mod:`.trainer`), the TaskRunner building it (:mod:`.runner`),
its DataProto <-> Batch adapter (:mod:`.adapter`) and its CPU learner (:mod:`.cpu_runner`,
:mod:`.cpu_trainer`, :mod:`.cpu_rollout`).

Reached only through ``trainers.REMOVABLE`` (this module's names below), so the day verl drops that trainer,
deleting this package, ``tests/verl/legacy/`` and its ``REMOVABLE`` entry removes it
(``tests/core/test_layout.py`` proves nothing else imports it). Importing this module does not import verl.
"""

from __future__ import annotations

from typing import Any

_TRAINER = "verl.trainer.ppo.ray_trainer:RayPPOTrainer."

#: verl code this package restates (fit), calls or overrides (compat.py fingerprints it)
RELIED_ON: tuple[str, ...] = (
    _TRAINER + "fit",  # restated step by step in RLHooksRayPPOTrainer.fit and its helpers
    _TRAINER + "__init__",  # sets the attributes the shim reads (use_rm, kl_ctrl_in_reward, _dump_executor, ...)
    _TRAINER + "init_workers",  # builds the worker groups, rollout and checkpoint managers the shim calls
    *(_TRAINER + name for name in (
        "_create_dataloader", "_validate", "_init_dump_executor", "_shutdown_dump_executor",
        "_start_profiling", "_stop_profiling", "_get_gen_batch", "_compute_reward_colocate",
        "_balance_batch", "_compute_old_log_prob", "_compute_ref_log_prob", "_compute_values",
        "_update_actor", "_update_critic", "_save_checkpoint", "_load_checkpoint", "_log_rollout_data",
    )),  # _save_checkpoint: restated in checkpoints.CheckpointWriter.save (the order changed, see there)
    # what a complete checkpoint is (the files the loader reads) and the rotation the shim replaces
    "verl.utils.checkpoint.fsdp_checkpoint_manager:FSDPCheckpointManager.save_checkpoint",
    "verl.utils.checkpoint.fsdp_checkpoint_manager:FSDPCheckpointManager.load_checkpoint",
    "verl.trainer.ppo.ray_trainer:apply_kl_penalty",
    "verl.trainer.ppo.ray_trainer:compute_advantage",
    "verl.trainer.ppo.ray_trainer:compute_response_mask",
    "verl.trainer.ppo.ray_trainer:compute_spec_decode_metrics",
    "verl.trainer.ppo.reward:extract_reward",
    "verl.trainer.ppo.core_algos:agg_loss",
    "verl.trainer.main_ppo_v0:TaskRunner.run",  # run by the rlhooks TaskRunner with the trainer class swapped
    # what the step hands batches to and reads back from
    "verl.experimental.agent_loop.agent_loop:AgentLoopManager.generate_sequences",
    "verl.workers.engine_workers:TrainingWorker._postprocess_output",  # when metrics["mfu"] exists
    "verl.checkpoint_engine:CheckpointEngineManager.update_weights",
    "verl.checkpoint_engine:CheckpointEngineManager.sleep_replicas",
    "verl.utils.checkpoint.checkpoint_manager:should_save_ckpt_esi",
    # the metric functions the shim calls
    *(f"verl.trainer.ppo.metric_utils:{name}" for name in (
        "compute_timing_metrics", "compute_throughout_metrics", "compute_variance_proxy_metrics")),
    "verl.utils.debug.metrics:calculate_debug_metrics",
    "verl.trainer.ppo.rollout_corr_helper:apply_bypass_mode",
    "verl.trainer.ppo.rollout_corr_helper:compute_rollout_correction_and_add_to_batch",
)

#: verl config defaults this trainer's meaning of verl's keys reads (besides compat's shared ones)
CONFIG_DEFAULTS: tuple[str, ...] = ("algorithm.filter_groups.metric",)

#: what ``rlhooks.engines.verl`` exports for this trainer (the dynamic-sampling document's name too)
TRAINER_NAMES = ("RLHooksRayPPOTrainer", "RayPPOTrainerWithSampling")


def trainer_class(name: str) -> type:
    from rlhooks.engines.verl.legacy import trainer

    return getattr(trainer, name)


def task_runner() -> Any:
    from rlhooks.engines.verl.legacy.runner import RLHooksTaskRunner

    return RLHooksTaskRunner


def build_cpu_trainer(cfg: Any, **kwargs: Any) -> Any:
    """The legacy CPU learner's trainer, workers initialized (``cpu_runner.build_trainer``)."""
    from rlhooks.engines.verl.legacy import cpu_runner

    return cpu_runner.build_trainer(cfg, **kwargs)


def run_cpu_learner(cfg: Any) -> None:
    from rlhooks.engines.verl.legacy import cpu_runner

    cpu_runner.run(cfg)
