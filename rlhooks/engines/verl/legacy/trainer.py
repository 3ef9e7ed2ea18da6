"""RLHooksRayPPOTrainer: verl's legacy RayPPOTrainer with the rlhooks hook points in its step.

One step of ``fit()``::

    collect (rlhooks.core.StepDriver, over a VerlRollout):
        sampler -> DataProto -> on_batch_sampled
        -> generation + verl's reward (rollout manager / reward loop)
        -> rlhooks reward functions, when configured (the driver scores; the total goes into
           token_level_scores) -> on_rewards_computed
        -> filters -> accumulate generation batches until train_batch_size groups -> trim
    train (verl):   balance -> old log-probs -> ref -> values -> advantages -> critic/actor update
                    -> checkpoint -> weight sync

With ``algorithm.use_kl_in_reward`` the old and reference log-probs and the KL penalty are
computed per generation batch, before the filters (the DAPO recipe's order), so a filter on
``seq_final_reward`` sees the penalized reward; the trained batch reuses those log-probs.
    finish (rlhooks): on_step_end -> merged metrics to rlhooks backends -> tables
                      and the same merged metrics to verl's Tracking logger

Validation results go to ``on_validation_end`` (per source: adapter.validation_per_source); a
plugin's ``run.request_stop(reason)`` ends the loop after the step with a checkpoint of it.
What stays verl's: validation, the checkpoint files (the save order, the resume decision and the
rotation are rlhooks's, see ``checkpoints.py``; an ``rlhooks.pt`` next to ``data.pt`` seals each),
profiling, timing / throughput / data metrics, ``rollout_data_dir`` dumps, ``on_batch_end``.
The training part calls verl's own methods; the lines around them follow verl 0.9.1's fit().
"""

from __future__ import annotations

import math

import uuid
from collections.abc import Iterable, Iterator
from pprint import pprint
from typing import Any

import numpy as np
import structlog
import torch
from omegaconf import OmegaConf
from tqdm import tqdm

from rlhooks.core import batch as cols
from rlhooks.core.batch import Batch
from rlhooks.core.data import declared_columns
from rlhooks.core.driver import StepDriver
from rlhooks.core.errors import ConfigError, ConfigIssue
from rlhooks.core.manager import RunManager
from rlhooks.engines.verl import checkpoints, compat
from rlhooks.engines.verl.config import rlhooks_config
from rlhooks.engines.verl.legacy import adapter
from verl import DataProto
from verl.trainer.ppo.core_algos import AdvantageEstimator, agg_loss
from verl.trainer.ppo.metric_utils import (
    compute_data_metrics,
    compute_throughout_metrics,
    compute_timing_metrics,
    compute_variance_proxy_metrics,
)
from verl.trainer.ppo.ray_trainer import (
    RayPPOTrainer,
    apply_kl_penalty,
    compute_advantage,
    compute_response_mask,
    compute_spec_decode_metrics,
)
from verl.trainer.ppo.reward import extract_reward
from verl.trainer.ppo.utils import Role, create_rl_dataset
from verl.utils.checkpoint.checkpoint_manager import should_save_ckpt_esi
from verl.utils.debug import marked_timer
from verl.utils.metric import reduce_metrics
from verl.utils.skip.skip_manager import SkipManager

log = structlog.get_logger("rlhooks.verl")

#: file next to verl's data.pt holding every stateful rlhooks component (sampler included)
STATE_FILE = checkpoints.STATE_FILE

__all__ = ["STATE_FILE", "RLHooksRayPPOTrainer", "RayPPOTrainerWithSampling", "VerlRollout"]


class DataExhausted(Exception):
    """The dataloader ran out of epochs in the middle of collecting a step."""


#: non-tensor key numbering a step's collected trajectory rows, to find them again after
#: verl's balance_batch has reordered the trained DataProto
TRAJ_KEY = "rlhooks_traj"


class VerlRollout:
    """The core driver's view of verl: draw, generate (verl's reward included), place rlhooks
    rewards, select and concat DataProtos."""

    def __init__(self, trainer: RLHooksRayPPOTrainer, timing_raw: dict[str, float]):
        self.trainer = trainer
        self.timing_raw = timing_raw

    def sample(self, step: int) -> tuple[DataProto, Batch]:
        return self.trainer._sample_prompts(step)

    def select_prompts(self, payload: DataProto, rows: np.ndarray) -> DataProto:
        return adapter.select_rows(payload, rows)

    def generate(self, step: int, payload: DataProto) -> tuple[DataProto, Batch]:
        return self.trainer._generate(step, payload, self.timing_raw)

    def place_rewards(self, payload: DataProto, reward: np.ndarray) -> DataProto:
        """The total at each response's last valid token, as verl's reward managers place theirs.

        Written by assignment only, never in place: under verl's next DataProto (a NeoProto-backed
        view, verl PR #7557) tensors read from ``.batch`` are copies, so ``copy_``/``add_`` would
        be lost and rlhooks rewards silently read back as 0.
        """
        scores = payload.batch["token_level_scores"]
        last = (payload.batch["response_mask"].sum(-1).long() - 1).clamp(min=0)
        placed = torch.zeros_like(scores)
        placed[torch.arange(len(payload)), last] = torch.as_tensor(reward, dtype=scores.dtype)
        if self.trainer.config.algorithm.use_kl_in_reward:
            # the in-reward KL penalty was applied (_final_rewards): rewards = scores - beta * kl is
            # linear in the scores, so shifting by the change of scores keeps the same penalty
            payload.batch["token_level_rewards"] = payload.batch["token_level_rewards"] + (placed - scores)
        else:
            payload.batch["token_level_rewards"] = placed
        payload.batch["token_level_scores"] = placed
        return payload

    def select(self, payload: DataProto, rows: np.ndarray) -> DataProto:
        return adapter.select_rows(payload, rows)

    def concat(self, payloads: list[DataProto]) -> DataProto:
        return adapter.concat(payloads)

    @property
    def prompt_multiple(self) -> int:
        """Adaptive generation batches are a multiple of this: their n responses split evenly over the
        rollout workers (world size) and over the agent loop workers (``DataProto.chunk`` in
        ``AgentLoopManager.generate_sequences`` refuses unequal chunks)."""
        rollout = self.trainer.config.actor_rollout_ref.rollout
        world = int(getattr(self.trainer.actor_rollout_wg, "world_size", 1) or 1)
        agent = rollout.get("agent") if hasattr(rollout, "get") else None
        agent_workers = int((agent.get("num_workers") if agent is not None else None) or 1)
        rows = math.lcm(world, agent_workers)
        return rows // math.gcd(rows, int(rollout.n))


class RLHooksRayPPOTrainer(RayPPOTrainer):
    """verl's legacy PPO/GRPO trainer driven by rlhooks plugins.

    The rlhooks config is the ``rlhooks:`` block of verl's config (see
    :mod:`rlhooks.engines.verl.config`). ``rlhooks_plugins`` registers extra hook objects
    (``(name, object)`` pairs), e.g. for tests or embedding applications.
    """

    def __init__(self, *args: Any, rlhooks_plugins: Iterable[tuple[str, Any]] = (), **kwargs: Any):
        _check_verl()
        self._rlhooks_plugins = list(rlhooks_plugins)
        config = kwargs["config"] if "config" in kwargs else args[0]
        if config.algorithm.adv_estimator == AdvantageEstimator.REMAX:
            raise ConfigError([ConfigIssue(
                "algorithm.adv_estimator",
                "remax is not supported by the rlhooks trainer (its greedy baseline generation is not wired "
                "into the accumulation loop); use verl's own trainer for ReMax, or another estimator",
            )], "verl config")
        self._epoch = 0
        #: the step whose actor update produced the rollout's weights (0: initial weights)
        self._policy_version = 0
        self._batches: Iterator[dict[str, Any]] | None = None
        #: (rows, metrics) of each generation batch whose log-probs were computed before filtering
        self._generation_metrics: list[tuple[int, dict[str, Any]]] = []
        super().__init__(*args, **kwargs)  # calls _create_dataloader, which builds the rlhooks run

    # -- set-up ---------------------------------------------------------------------------------
    def _create_dataloader(self, train_dataset, val_dataset, collate_fn, train_sampler):
        """verl's dataloaders over a row-indexed train dataset, with the rlhooks sampler injected."""
        if train_dataset is None:
            train_dataset = create_rl_dataset(
                self.config.data.train_files, self.config.data, self.tokenizer, self.processor,
                max_samples=self.config.data.get("train_max_samples", -1),
            )
        if not isinstance(train_dataset, adapter.RowIndexedDataset):
            train_dataset = adapter.RowIndexedDataset(train_dataset)
        gen_batch_size = self.config.data.get("gen_batch_size", None) or self.config.data.train_batch_size
        steps = self.config.trainer.total_training_steps or (
            len(train_dataset) // gen_batch_size * self.config.trainer.total_epochs
        )
        self.rl = RunManager(rlhooks_config(self.config, steps=max(int(steps), 1)), extra_plugins=self._rlhooks_plugins)
        self.driver = StepDriver(self.rl)
        # the prompt-level learning state (dataset columns) only for what reads it: verl alone takes any dataset
        needs = [f"the rlhooks sampler {c.name!r} ({c.path})" for c in [self.rl.config.sampler] if c is not None]
        needs += [f"the prompt filter {c.name!r} ({c.path})" for c in self.rl.config.prompt_filters]
        declared = declared_columns(self.rl.config.sampler.obj) if self.rl.config.sampler is not None else ()
        columns = adapter.dataset_columns(train_dataset, needed_by=" and ".join(needs), columns=declared) if needs else None
        if columns is not None:
            self.rl.attach_data(columns)
        if self.rl.config.sampler is not None:
            if train_sampler is not None:
                log.info("the rlhooks sampler replaces verl's train sampler", sampler=self.rl.config.sampler.name,
                         replaced=type(train_sampler).__name__)
            train_sampler = self.rl.build_sampler(columns, batch_size=gen_batch_size)
            if self.config.data.get("dataloader_num_workers", 0):
                log.warning(
                    "data.dataloader_num_workers > 0: the dataloader prefetches, so the sampler draws a few "
                    "generation batches before it sees their rewards; set data.dataloader_num_workers=0 for "
                    "a reward-driven sampler to react at once",
                    num_workers=self.config.data.dataloader_num_workers,
                )
        super()._create_dataloader(train_dataset, val_dataset, collate_fn, train_sampler)

    # -- the training loop ------------------------------------------------------------------------
    def fit(self):
        # not verl's: verl's fit is restated step by step around StepDriver.collect (fingerprinted, compat.py)
        if self._dump_executor._shutdown:
            self._init_dump_executor()
        from verl.utils.tracking import Tracking

        self.tracking = logger = Tracking(
            project_name=self.config.trainer.project_name,
            experiment_name=self.config.trainer.experiment_name,
            default_backend=self.config.trainer.logger,
            config=OmegaConf.to_container(self.config, resolve=True),
        )
        self.global_steps = 0
        self._epoch = 0
        self._saved_folder: str | None = None
        self._load_checkpoint()
        self.checkpoint_manager.update_weights(self.global_steps)
        self._policy_version = self.global_steps  # the resumed step's weights (0 from scratch)
        SkipManager.init(self.config)

        initial_val = None
        if self.config.trainer.get("val_before_train", True):
            val_metrics = initial_val = self._validate()
            assert val_metrics, f"{val_metrics=}"
            pprint(f"Initial validation metrics: {val_metrics}")
            logger.log(data=val_metrics, step=self.global_steps)
            if self.config.trainer.get("val_only", False):
                self._shutdown_dump_executor()
                return

        # disable=None: no bar frames in piped or redirected output
        progress_bar = tqdm(total=self.total_training_steps, initial=self.global_steps, desc="Training Progress",
                            disable=None)
        self.global_steps += 1
        SkipManager.set_step(self.global_steps)
        self.max_steps_duration = 0
        last_val_metrics = None
        profile_steps = self.config.global_profiler.steps
        prev_profile, curr_profile = False, bool(profile_steps and self.global_steps in profile_steps)

        with self.rl.running():
            if initial_val:  # on_validation_end of the initial validation, once plugins have started
                returned = self._validation_end(self.global_steps - 1, initial_val)
                if returned:
                    logger.log(data=returned, step=self.global_steps - 1)
                if self.global_steps == 1:  # a fresh run: the starting accuracy reaches the backends as step 0
                    self.rl.log_metrics(0, {**initial_val, **returned})
            while self.global_steps <= self.total_training_steps:
                step = self.global_steps
                is_last_step = step >= self.total_training_steps
                metrics: dict[str, Any] = {}
                timing_raw: dict[str, float] = {}
                self._generation_metrics = []
                with marked_timer("start_profile", timing_raw):
                    continuous = self.config.global_profiler.profile_continuous_steps
                    self._start_profiling(not prev_profile and curr_profile if continuous else curr_profile)
                self._curr_step_profile = curr_profile

                with marked_timer("step", timing_raw):
                    # 1. rlhooks: sample -> on_batch_sampled -> generate+reward -> on_rewards_computed
                    #    -> filters -> accumulate generation batches -> trim
                    try:
                        collected = self.driver.collect(step, VerlRollout(self, timing_raw))
                    except DataExhausted:
                        log.warning("the dataloader ran out of epochs before the step was complete; stopping",
                                    step=step, epochs=self.config.trainer.total_epochs)
                        break
                    batch = collected.payload
                    # 2. verl: old log-probs, ref, values, advantages, critic/actor update, checkpoint
                    if batch is not None:
                        batch.non_tensor_batch[TRAJ_KEY] = np.arange(len(batch))
                        batch = self._train_on(batch, metrics, timing_raw, is_last_step)
                    else:
                        log.warning("no group survived the filters this step; nothing to train on", step=step)

                if self.config.trainer.test_freq > 0 and (is_last_step or step % self.config.trainer.test_freq == 0):
                    with marked_timer("testing", timing_raw, color="green"):
                        val_metrics = self._validate()
                        if is_last_step:
                            last_val_metrics = val_metrics
                    metrics.update(val_metrics)
                    metrics.update(self._validation_end(step, val_metrics))

                with marked_timer("stop_profile", timing_raw):
                    next_profile = bool(profile_steps and step + 1 in profile_steps)
                    run_command = bool(curr_profile and profile_steps and (step == max(profile_steps) or is_last_step))
                    continuous = self.config.global_profiler.profile_continuous_steps
                    self._stop_profiling(curr_profile and not next_profile if continuous else curr_profile,
                                         run_command=run_command)
                    prev_profile, curr_profile = curr_profile, next_profile

                self.max_steps_duration = max(self.max_steps_duration, timing_raw["step"])
                metrics.update(collected.metrics)
                metrics.update(_row_weighted_mean(self._generation_metrics))
                if batch is not None:
                    metrics.update(self._verl_step_metrics(batch, timing_raw))
                metrics.update({"training/global_step": step, "training/epoch": self._epoch})

                # 3. rlhooks: on_step_end -> merged metrics to rlhooks backends (+ tables); verl logs the same
                trained = _trained_batch(collected.batch, batch) if batch is not None else collected.batch
                merged = self.driver.finish_step(step, trained, metrics)
                stop = self.rl.stop_requested  # a plugin's run.request_stop(reason): checkpoint this step, end
                if stop and self._saved_folder is None:
                    with marked_timer("save_checkpoint", timing_raw, color="green"):
                        self._save_checkpoint()
                if self._saved_folder is not None:  # checkpointed this step: the state after on_step_end
                    self._write_rlhooks_state(self._saved_folder)
                    self.rl.checkpoint_saved(step, self._saved_folder)
                    checkpoints.reseal(self._saved_folder)  # the plugins' own files join the seal's list
                    self._saved_folder = None
                logger.log(data=merged, step=step)

                progress_bar.update(1)
                self.global_steps += 1
                SkipManager.set_step(self.global_steps)
                if stop:
                    if hasattr(self.actor_rollout_wg, "async_calls_finalize_fn_exec"):
                        self.actor_rollout_wg.async_calls_finalize_fn_exec(blocking=True)
                    log.warning(f"stopping after step {step} as a plugin requested: {self.rl.context.stop_reason}",
                                step=step, stopped_by=self.rl.context.stopped_by)
                    progress_bar.close()
                    break
                if is_last_step:
                    if hasattr(self.actor_rollout_wg, "async_calls_finalize_fn_exec"):
                        self.actor_rollout_wg.async_calls_finalize_fn_exec(blocking=True)
                    pprint(f"Final validation metrics: {last_val_metrics}")
                    progress_bar.close()
                    break
                if batch is not None and hasattr(self.train_dataset, "on_batch_end"):
                    self.train_dataset.on_batch_end(batch=batch)
        self._shutdown_dump_executor()

    def _validation_end(self, step: int, val_metrics: dict[str, Any]) -> dict[str, float]:
        """``on_validation_end`` with verl's validation metrics and the same per data source."""
        return self.rl.validation_end(step, val_metrics, adapter.validation_per_source(val_metrics))

    # -- 1. collecting a step's batch (called by the core driver through VerlRollout) --------------
    def _next_batch_dict(self) -> dict[str, Any]:
        """The next dataloader batch, across epochs (one step may use several)."""
        while True:
            if self._batches is None:
                if self._epoch >= self.config.trainer.total_epochs:
                    raise DataExhausted
                self._batches = iter(self.train_dataloader)
            try:
                return next(self._batches)
            except StopIteration:
                self._batches = None
                self._epoch += 1

    def _sample_prompts(self, step: int) -> tuple[DataProto, Batch]:
        if hasattr(self.actor_rollout_wg, "async_calls_finalize_fn_exec"):
            self.actor_rollout_wg.async_calls_finalize_fn_exec(blocking=False)
        batch = DataProto.from_single_dict(self._next_batch_dict())
        batch.meta_info["temperature"] = self.config.actor_rollout_ref.rollout.temperature
        batch.non_tensor_batch["uid"] = np.array([str(uuid.uuid4()) for _ in range(len(batch))], dtype=object)
        return batch, adapter.prompt_batch(batch)

    def _generate(self, step: int, batch: DataProto, timing_raw: dict[str, float]) -> tuple[DataProto, Batch]:
        """verl's generation and reward for one generation batch; rows become trajectories."""
        rows = batch.non_tensor_batch.pop(adapter.ROW_KEY, None)  # not a generation input
        gen_batch = self._get_gen_batch(batch)
        gen_batch.meta_info["global_steps"] = step
        n = self.config.actor_rollout_ref.rollout.n
        gen_batch = gen_batch.repeat(repeat_times=n, interleave=True)
        with marked_timer("gen", timing_raw, color="red"):
            profile = getattr(self, "_curr_step_profile", False)
            if profile:
                self.llm_server_manager.start_profile()
            gen_output = self.async_rollout_manager.generate_sequences(gen_batch)
            self.checkpoint_manager.sleep_replicas()
            if profile:
                self.llm_server_manager.stop_profile()
            _accumulate_timing(timing_raw, gen_output.meta_info.pop("timing", {}))
        batch = batch.repeat(repeat_times=n, interleave=True).union(gen_output)
        adapter.tag_trajectories(batch, n, self._policy_version)
        if rows is not None:
            batch.non_tensor_batch[adapter.ROW_KEY] = np.repeat(np.asarray(rows, dtype=np.int64), n)
        if "response_mask" not in batch.batch.keys():
            batch.batch["response_mask"] = compute_response_mask(batch)

        with marked_timer("reward", timing_raw, color="yellow"):
            if self.use_rm and "rm_scores" not in batch.batch.keys():
                batch = batch.union(self._compute_reward_colocate(batch))
            reward_tensor, extras = extract_reward(batch)
            batch.batch["token_level_scores"] = reward_tensor
            batch.non_tensor_batch.update({k: np.asarray(v) for k, v in extras.items()})
        batch = self._final_rewards(batch, timing_raw)
        return batch, adapter.trajectory_batch(batch, self.tokenizer)

    def _final_rewards(self, batch: DataProto, timing_raw: dict[str, float]) -> DataProto:
        """``token_level_rewards`` of one generation batch, before the filters see it (the DAPO recipe's order).

        With ``algorithm.use_kl_in_reward`` the KL penalty needs the old and reference log-probs, so
        they are computed here for every generated row and the penalty applied, as the recipe's
        fit() does; filters can then use ``seq_final_reward``, and the trained batch keeps these
        log-probs (they are not computed twice). The KL controller is updated once per generation
        batch, as in the recipe.
        """
        if not self.config.algorithm.use_kl_in_reward:
            batch.batch["token_level_rewards"] = batch.batch["token_level_scores"]
            return batch
        metrics: dict[str, Any] = {}
        batch = self._policy_log_probs(batch, metrics, timing_raw)
        batch, kl_metrics = apply_kl_penalty(batch, kl_ctrl=self.kl_ctrl_in_reward,
                                             kl_penalty=self.config.algorithm.kl_penalty)
        metrics.update(kl_metrics)
        self._generation_metrics.append((len(batch), metrics))
        return batch

    # -- 2. training on the collected batch, as verl 0.9.1's fit() does ----------------------------
    def _train_on(self, batch: DataProto, metrics: dict, timing_raw: dict, is_last_step: bool) -> DataProto:
        if self.config.trainer.balance_batch:
            self._balance_batch(batch, metrics=metrics)
        _set_token_counts(batch)  # of the trained batch (concatenated, trimmed, balanced): throughput metrics
        batch = self._log_probs(batch, metrics, timing_raw)
        with marked_timer("adv", timing_raw, color="brown"):
            batch = self._advantages(batch, metrics)
        if self.use_critic:
            with marked_timer("update_critic", timing_raw, color="pink"):
                metrics.update(reduce_metrics(self._update_critic(batch).meta_info["metrics"]))
        if self.config.trainer.critic_warmup > self.global_steps:
            self.checkpoint_manager.update_weights(self.global_steps)
        else:
            with marked_timer("update_actor", timing_raw, color="red"):
                actor_output = self._update_actor(batch)
            esi_close = should_save_ckpt_esi(
                max_steps_duration=self.max_steps_duration, redundant_time=self.config.trainer.esi_redundant_time
            )
            save_freq = self.config.trainer.save_freq
            if save_freq > 0 and (is_last_step or self.global_steps % save_freq == 0 or esi_close):
                with marked_timer("save_checkpoint", timing_raw, color="green"):
                    self._save_checkpoint()
            with marked_timer("update_weights", timing_raw, color="red"):
                self.checkpoint_manager.update_weights(self.global_steps)
            self._policy_version = self.global_steps  # not during critic warm-up: the actor did not change
            metrics.update(reduce_metrics(actor_output.meta_info["metrics"]))
        rollout_data_dir = self.config.trainer.get("rollout_data_dir", None)
        if rollout_data_dir:
            extras = {k: batch.non_tensor_batch[k] for k in batch.meta_info.get("reward_extra_keys", [])}
            self._log_rollout_data(batch, extras, timing_raw, rollout_data_dir)
        return batch

    def _log_probs(self, batch: DataProto, metrics: dict, timing_raw: dict) -> DataProto:
        if "old_log_probs" not in batch.batch.keys():  # else computed per generation batch (KL in reward)
            batch = self._policy_log_probs(batch, metrics, timing_raw)
        if self.use_critic:
            with marked_timer("values", timing_raw, color="cyan"):
                batch = batch.union(self._compute_values(batch))
        return batch

    def _policy_log_probs(self, batch: DataProto, metrics: dict, timing_raw: dict) -> DataProto:
        """Old (proximal) log-probs, or the rollout's in bypass mode, and the reference log-probs."""
        # verl's actor worker emits the "mfu" metric that _compute_old_log_prob reads only for a batch
        # carrying its token counts (TrainingWorker._postprocess_output); per generation batch too
        _set_token_counts(batch)
        rollout_corr = self.config.algorithm.get("rollout_correction", None)
        if rollout_corr and rollout_corr.get("bypass_mode", False):
            from verl.trainer.ppo.rollout_corr_helper import apply_bypass_mode

            apply_bypass_mode(batch=batch, rollout_corr_config=rollout_corr,
                              policy_loss_config=self.config.actor_rollout_ref.actor.policy_loss)
        else:
            with marked_timer("old_log_prob", timing_raw, color="blue"):
                old_log_prob, mfu = self._compute_old_log_prob(batch)
                actor_config = self.config.actor_rollout_ref.actor
                entropy = agg_loss(
                    loss_mat=old_log_prob.batch["entropys"], loss_mask=batch.batch["response_mask"],
                    loss_agg_mode=actor_config.loss_agg_mode, loss_scale_factor=actor_config.loss_scale_factor,
                )
                metrics.update({"actor/entropy": entropy.detach().item(), "perf/mfu/actor_infer": mfu})
                old_log_prob.batch.pop("entropys")
                if "routed_experts" in batch.batch.keys() and "routed_experts" in old_log_prob.batch.keys():
                    raise ValueError(  # verl 0.9.1 fit()'s check
                        "Detected conflicting router replay configuration: router_replay.mode='R2' and "
                        "enable_rollout_routing_replay=True cannot be enabled simultaneously. The "
                        "enable_rollout_routing_replay option is only used in R3 mode; it should not be set "
                        "when using R2 mode."
                    )
                batch = batch.union(old_log_prob)
                if "rollout_log_probs" in batch.batch.keys():
                    from verl.utils.debug.metrics import calculate_debug_metrics

                    metrics.update(calculate_debug_metrics(batch))
        assert "old_log_probs" in batch.batch.keys(), f'"old_log_probs" not in {batch.batch.keys()=}'
        if self.use_reference_policy:
            with marked_timer(str(Role.RefPolicy), timing_raw, color="olive"):
                batch = batch.union(self._compute_ref_log_prob(batch))
        return batch

    def _advantages(self, batch: DataProto, metrics: dict) -> DataProto:
        algo = self.config.algorithm  # an in-reward KL penalty was applied per generation batch (_final_rewards)
        rollout_corr = algo.get("rollout_correction", None)
        if rollout_corr is not None and "rollout_log_probs" in batch.batch and not rollout_corr.get("bypass_mode", False):
            from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_add_to_batch

            batch, is_metrics = compute_rollout_correction_and_add_to_batch(batch, rollout_corr)
            metrics.update(is_metrics)
        return compute_advantage(
            batch, adv_estimator=algo.adv_estimator, gamma=algo.gamma, lam=algo.lam,
            num_repeat=self.config.actor_rollout_ref.rollout.n,
            norm_adv_by_std_in_grpo=algo.get("norm_adv_by_std_in_grpo", True), config=algo,
        )

    def _verl_step_metrics(self, batch: DataProto, timing_raw: dict) -> dict[str, Any]:
        """verl's own data, timing, throughput and variance metrics of the trained batch."""
        metrics = dict(compute_data_metrics(batch=batch, use_critic=self.use_critic))
        gdpo_keys = self.config.algorithm.get("gdpo_reward_keys", None)
        if gdpo_keys and self.config.algorithm.adv_estimator in ("gdpo", AdvantageEstimator.GDPO):
            for key in (k for k in gdpo_keys if k in batch.non_tensor_batch):
                vals = np.asarray(batch.non_tensor_batch[key], dtype=np.float32)
                metrics.update({f"gdpo/{key}/mean": float(vals.mean()), f"gdpo/{key}/std": float(vals.std()),
                                f"gdpo/{key}/max": float(vals.max()), f"gdpo/{key}/min": float(vals.min())})
        metrics.update(compute_timing_metrics(batch=batch, timing_raw=timing_raw))
        n_gpus = self.resource_pool_manager.get_n_gpus()
        metrics.update(compute_throughout_metrics(batch=batch, timing_raw=timing_raw, n_gpus=n_gpus))
        metrics.update(compute_variance_proxy_metrics(batch=batch, gradient_norm=metrics.get("actor/grad_norm")))
        nt = batch.non_tensor_batch
        metrics.update(compute_spec_decode_metrics(
            nt.get("spec_num_draft_tokens"), nt.get("spec_num_accepted_tokens"), nt.get("spec_num_verify_steps")
        ))
        return metrics

    # -- checkpoints: verl's files, rlhooks's save order and resume rules (checkpoints.py) ----------
    def _save_checkpoint(self):
        # not verl's: restated in an order where a kill never leaves the tracker on an incomplete
        # checkpoint, nor rotation without a complete one (checkpoints.CheckpointWriter)
        if getattr(self, "_checkpoint_writer", None) is None:
            self._checkpoint_writer = checkpoints.CheckpointWriter.from_config(self.config.trainer, use_critic=self.use_critic)
        workers = {"actor": self.actor_rollout_wg, **({str(Role.Critic): self.critic_wg} if self.use_critic else {})}
        # data.pt holds the dataloader state, the sampler's included; rlhooks.pt is written mid-step, before
        # on_step_end, and fit() rewrites it once the step has ended (plugins that adjust in on_step_end,
        # e.g. selective_rollout's p); this one covers a crash between
        self._saved_folder = str(self._checkpoint_writer.save(
            self.global_steps, workers, self.train_dataloader.state_dict(), self._rlhooks_state()))

    def _rlhooks_state(self) -> dict[str, Any]:
        return {"components": self.rl.state_dict(), "epoch": self._epoch,
                checkpoints.OWNER_KEY: checkpoints.owner_of(self.config, self.rl.run_dir.name)}  # resumed only by it

    def _write_rlhooks_state(self, folder: str) -> None:
        checkpoints.write_state(folder, self._rlhooks_state())  # keeps the seal's list of files

    def _load_checkpoint(self):
        def restore(state: dict[str, Any]) -> None:
            # Also restores the sampler when verl skips data.pt at an epoch boundary: with dynamic
            # sampling, steps and dataloader batches are not aligned.
            self._epoch = int(state.get("epoch", 0))
            self._batches = None

        return checkpoints.load_with_plan(self, super()._load_checkpoint, restore)[1]


#: the dynamic-sampling document's name for this trainer (``from verl.trainer.ppo import
#: RayPPOTrainerWithSampling as RayPPOTrainer`` becomes ``from rlhooks.engines.verl import ...``)
RayPPOTrainerWithSampling = RLHooksRayPPOTrainer


def _check_verl() -> None:
    """The verl code the shim relies on is a reviewed version's (fingerprints), else one clear error."""
    compat.check_verl(trainer="legacy")


def _set_token_counts(batch: DataProto) -> None:
    """The meta_info verl's fit() sets before the log-prob pass: tokens per row (and image lengths)."""
    batch.meta_info["global_token_num"] = torch.sum(batch.batch["attention_mask"], dim=-1).tolist()
    batch.meta_info["images_seqlens"] = [
        s for mm in batch.non_tensor_batch.get("multi_modal_inputs", ()) if "image_grid_thw" in mm
        for s in mm["images_seqlens"].tolist()
    ]


def _row_weighted_mean(parts: list[tuple[int, dict[str, Any]]]) -> dict[str, float]:
    """Metrics of several generation batches as one step's: each key's mean weighted by rows."""
    total = sum(rows for rows, _ in parts)
    out: dict[str, float] = {}
    for rows, metrics in parts:
        for k, v in metrics.items():
            out[k] = out.get(k, 0.0) + float(v) * rows / max(total, 1)
    return out


def _trained_batch(collected: Batch, trained: DataProto) -> Batch:
    """The collected Batch (rows in collection order) plus the columns known only after
    training: ``advantage`` and ``final_reward`` (after a KL penalty), read from the trained
    DataProto, whose rows verl's balance_batch may have reordered."""
    order = np.asarray(trained.non_tensor_batch[TRAJ_KEY], dtype=np.int64)
    t = trained.batch
    after: dict[str, np.ndarray] = {}
    if "advantages" in t.keys():
        after[cols.ADVANTAGE] = adapter.sequence_mean(t["advantages"], t["response_mask"])
    if "token_level_rewards" in t.keys():
        after[cols.FINAL_REWARD] = adapter.sequence_sum(t["token_level_rewards"])
    columns = {}
    for name, values in after.items():
        in_collected_order = np.empty(len(order), dtype=np.float64)
        in_collected_order[order] = values
        columns[name] = in_collected_order
    return collected.with_columns(**columns)


def _accumulate_timing(timing_raw: dict[str, float], new: dict[str, float]) -> None:
    # several generation batches per step: their rollout timings add up
    for k, v in new.items():
        timing_raw[k] = timing_raw.get(k, 0.0) + v
