"""RLHooksPPOTrainerSync: verl's V1 sync trainer (``PPOTrainerSync``) with the rlhooks hooks.

Registered as trainer mode ``rlhooks_sync`` (``register_trainer``). verl's ``fit()`` and ``step()`` run
unchanged; rlhooks joins at these points of a V1 step::

    on_step_begin          the step's rlhooks metrics and prompt-stage counts start
    prepare_step / refill  _submit_batch_to_rollout: prompt filters (skipped prompts never reach the agent
                           loop, the sampler tops up) -> on_batch_sampled -> verl dispatches to the agent loop
    replay_buffer.sample   RLHooksReplayBuffer: the groups finished since the last poll -> StepDriver.scored
                           (learning state -> on_rewards_computed -> filters); verl evicts the dropped groups
                           and refills
    verl                   old log-probs, ref, values, advantages, critic/actor update, checkpoint in
                           checkpoints.CheckpointWriter's order (rlhooks.pt seals it, then the tracker)
    on_validate_end        on_validation_end with verl's validation metrics (the initial one as step 0),
                           what plugins return merged into them; a fresh run's initial validation goes to
                           the rlhooks backends as step 0 (log_metrics)
    _compute_metrics       verl's metrics, then on_step_end on the trained batch (read from TransferQueue)
                           -> rlhooks backends and tables; the merged dict is what verl's logger logs;
                           rlhooks.pt rewritten (on_save_checkpoint); a plugin's stop: this step's
                           checkpoint, then verl's loop ends (total_training_steps lowered to this step)

The rlhooks sampler is the sampler of verl's own StatefulDataLoader (``_init_dataloader``), over the train
dataset wrapped so each prompt carries its row (``rlhooks_row``); its state is in verl's ``data.pt`` and
in ``rlhooks.pt``. Reward functions run in verl's reward-loop workers through the rlhooks adapter
(``reward.custom_reward_function``); their per-function scores and error counts come back as reward extras.
"""

from __future__ import annotations

import inspect
import os
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import structlog
import transfer_queue as tq
from omegaconf import OmegaConf, open_dict
from torchdata.stateful_dataloader import StatefulDataLoader
from verl.trainer.ppo.utils import Role
from verl.trainer.ppo.v1.replay_buffer import DAPO_FILTERED_REWARD_COUNTS_KEY
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils import tensordict_utils as tu

from rlhooks.core import batch as cols
from rlhooks.core import interrupt
from rlhooks.core.batch import Batch
from rlhooks.core.data import declared_columns
from rlhooks.core.driver import StepDriver
from rlhooks.core.errors import ConfigError, ConfigIssue
from rlhooks.core.manager import RunManager, merge_metrics
from rlhooks.engines.verl import adapter, checkpoints, compat, driver
from rlhooks.engines.verl.config import BLOCK, rlhooks_config
from rlhooks.engines.verl.v1 import (  # noqa: F401 (ADAPTER_MODULE, adapter_functions: also imported from here)
    ADAPTER_MODULE,
    BASE_TRAINER_MODE,
    REPLAY_BUFFER_NAME,
    REPLAY_BUFFER_PATH,
    TRAINER_MODE,
    adapter_functions,
    check_v1_settings,
)
from rlhooks.engines.verl.v1.batches import (
    adapter_error_counts,
    fetched,
    prompt_batch,
    scored_batch,
    scored_fields,
    token_means,
    token_sums,
)
from rlhooks.engines.verl.v1.replay_buffer import RLHooksReplayBuffer

log = structlog.get_logger("rlhooks.verl")

@register_trainer(TRAINER_MODE)
class RLHooksPPOTrainerSync(PPOTrainerSync):
    """verl's V1 sync trainer driven by rlhooks plugins (the ``rlhooks:`` block of verl's config).

    ``rlhooks_plugins`` registers extra hook objects (``(name, object)`` pairs), e.g. for tests.
    """

    def __init__(self, config: Any, rlhooks_plugins: Iterable[tuple[str, Any]] = ()):
        compat.check_verl(trainer="v1")
        check_v1_settings(config)  # as rlhooks train does, for a config built another way
        self._rlhooks_plugins = list(rlhooks_plugins)
        self._step_metrics: dict[str, float] = {}
        self._saved_folder: str | None = None
        self._checkpoint_writer: checkpoints.CheckpointWriter | None = None
        self._val_metrics: dict[str, Any] | None = None
        self._prompts_drawn = 0  # uids: prompt_uid(n) for the run's n-th prompt; restored on resume
        super().__init__(config)  # builds the replay buffer: verl's custom sampler
        if not isinstance(self.replay_buffer, RLHooksReplayBuffer):
            raise ConfigError([ConfigIssue(
                "trainer.v1.sampler.custom_sampler",
                f"is {type(self.replay_buffer).__name__}: the rlhooks trainer needs the rlhooks replay buffer, which "
                f"runs the rlhooks filters and on_rewards_computed (path={REPLAY_BUFFER_PATH}, name={REPLAY_BUFFER_NAME}, "
                f"or a subclass of it); leave the key unset and rlhooks train sets it",
            )], "verl config")
        self.adapter_functions = adapter_functions(config)

    # verl's V1 code branches on the mode's *name* (``trainer_mode != "sync"``: TransferQueue checkpoints,
    # re-issued in-flight prompts, gen_batch_size forced to 1, persisted prompt data). This trainer is verl's
    # sync trainer under another registered name, so verl sees "sync" (an async subclass names its verl
    # mode in VERL_TRAINER_MODE); the registered name is kept aside.
    VERL_TRAINER_MODE = BASE_TRAINER_MODE

    @property
    def trainer_mode(self) -> str:
        return self.VERL_TRAINER_MODE

    @trainer_mode.setter
    def trainer_mode(self, name: str) -> None:
        self.registered_mode = name

    # -- set-up --------------------------------------------------------------------------------
    def _init_dataloader(self):
        """verl's datasets and dataloaders; the train dataloader then rebuilt from verl's over a row-indexed dataset
        with the rlhooks sampler (verl's create_rl_sampler builds only random/sequential samplers)."""
        super()._init_dataloader()
        self.rl = RunManager(rlhooks_config(self.config, steps=max(int(self.total_training_steps), 1)),
                             extra_plugins=self._rlhooks_plugins)
        self.driver = StepDriver(self.rl)
        scored = adapter_functions(self.config)
        if self.rl.rewards and list(scored) != self.rl.rewards.names:
            # rlhooks train maps rewards: onto verl's reward loop (main.select_v1_rewards); a config built
            # another way must do the same, or the listed functions would silently not score
            raise ConfigError([ConfigIssue(
                f"{BLOCK}.rewards",
                f"names reward functions ({', '.join(self.rl.rewards.names)}), but verl's reward loop scores "
                + (f"{list(scored)} through the rlhooks adapter" if scored else
                   f"with reward.custom_reward_function={OmegaConf.select(self.config, 'reward.custom_reward_function')}")
                + f"; on verl's V1 trainer the functions run in verl's reward-loop workers: set "
                f"reward.custom_reward_function.path=pkg://{ADAPTER_MODULE}, .name=compute_score and "
                f".reward_kwargs=rlhooks.engines.verl.main.adapter_reward_kwargs(config) (rlhooks train does this)",
            )], "verl config")
        filters = bool(self.rl.filters)
        if filters and self.config.data.get("gen_batch_size", None) != 1:
            # what verl's _init_dataloader does for algorithm.filter_groups: refills are counted in prompts
            log.warning(f"data.gen_batch_size={self.config.data.get('gen_batch_size', None)} is overridden to 1: the "
                        "rlhooks filters refill single prompts, as verl's V1 does for algorithm.filter_groups")
            with open_dict(self.config):
                self.config.data.gen_batch_size = 1
        gen_batch_size = self.config.data.get("gen_batch_size", None) or self.config.data.train_batch_size
        dataset = adapter.RowIndexedDataset(self.train_dataset)
        needs = [f"the rlhooks sampler {c.name!r} ({c.path})" for c in [self.rl.config.sampler] if c is not None]
        needs += [f"the prompt filter {c.name!r} ({c.path})" for c in self.rl.config.prompt_filters]
        declared = declared_columns(self.rl.config.sampler.obj) if self.rl.config.sampler is not None else ()
        columns = adapter.dataset_columns(dataset, needed_by=" and ".join(needs), columns=declared) if needs else None
        if columns is not None:
            self.rl.attach_data(columns)
        sampler = None
        if self.rl.config.sampler is not None:
            sampler = self.rl.build_sampler(columns, batch_size=gen_batch_size)
            if self.config.data.get("dataloader_num_workers", 0):
                log.warning("data.dataloader_num_workers > 0: the dataloader prefetches, so the sampler draws a few "
                            "prompts before it sees their rewards; set data.dataloader_num_workers=0 for a "
                            "reward-driven sampler to react at once", num_workers=self.config.data.dataloader_num_workers)
        self.train_dataset = dataset
        # verl's loader can't change its dataset or sampler once built (torch's DataLoader refuses): rebuilt
        # with verl's own arguments, read from it; verl's sampler (over a dataset of the same length) kept
        # when rlhooks has none
        self.train_dataloader = rebuilt_loader(self.train_dataloader, dataset, sampler=sampler, batch_size=gen_batch_size)
        self.train_dataloader_it = None
        groups = self.config.algorithm.get("filter_groups", None) or {}
        if filters and int(groups.get("max_num_gen_batches", 0) or 0) > 0:
            log.warning("algorithm.filter_groups.max_num_gen_batches / run.max_num_gen_batches is ignored on verl's V1 "
                        "trainer, as verl's own V1 replay buffer ignores it; "
                        "algorithm.filter_groups.max_inflight_gen_batches bounds concurrent generation")
        # what scored groups are read with from TransferQueue, decided once (batches.scored_fields): the
        # plugins' columns; the reward from the score extra where verl's naive reward manager wrote it there
        self.scored_columns = self.rl.batch_columns()
        reward = self.config.get("reward", None) or {}
        self.reward_in_extras = (OmegaConf.select(reward, "reward_manager.name", default="naive") == "naive"
                                 and not OmegaConf.select(reward, "reward_model.enable", default=False))
        self.replay_buffer.attach(
            self, filters=filters, train_batch_size=self.config.data.train_batch_size, gen_batch_size=gen_batch_size,
            max_inflight_gen_batches=int(groups.get("max_inflight_gen_batches", 1) or 1),
            sync_refill_failed_groups=bool(self.config.trainer.v1.sampler.get("sync_refill_failed_groups", False)),
        )

    def fit(self, agent_loop_manager):
        with self.rl.running():  # the initial validation (val_before_train) runs inside: plugins have started
            super().fit(agent_loop_manager)

    # -- validation: on_validation_end (verl's on_validate_end has no metrics: _validate's are kept) ----
    def _validate(self, *args: Any, **kwargs: Any):
        self._val_metrics = val = super()._validate(*args, **kwargs)
        return val

    def on_validate_end(self):
        """``on_validation_end`` with verl's validation metrics (the initial validation as the resumed step,
        0 from scratch); what plugins return is merged into the same dict, which verl logs."""
        super().on_validate_end()
        val, self._val_metrics = self._val_metrics, None
        if val is None:
            return
        step = self.global_steps
        val.update(self.rl.validation_end(step, val, adapter.validation_per_source(val)))
        if not self._steps_begun and step == 0:
            # the initial validation (val_before_train) of a fresh run is no step's: verl logs it to its own
            # logger only, so the rlhooks backends get it as step 0, the run's starting accuracy (a resumed
            # run's starting accuracy is in its metrics.jsonl already)
            self.rl.log_metrics(step, val)

    # -- a step --------------------------------------------------------------------------------
    #: a step has begun: a validation before it is the initial one (val_before_train)
    _steps_begun = False

    def on_step_begin(self):
        super().on_step_begin()
        self._steps_begun = True
        self._step_metrics = {}
        self._step_counts = {"generated": 0.0, "kept": 0.0, "dispatches": 0.0, "scored": 0.0}
        self._filter_counts: dict[str, float] = {}
        self.rl.prompt_stage.begin_step()

    #: the scored-batch columns the plugins read (None: all) and whether the reward is read from the extras
    scored_columns: frozenset[str] | None = None
    reward_in_extras = False
    #: rlhooks's seconds since the last step's metrics, the last step's end, nesting of rlhooks_time
    _rlhooks_seconds = _rlhooks_step_end_seconds = 0.0
    _rlhooks_timing_depth = 0

    @contextmanager
    def rlhooks_time(self, what: str = "rlhooks") -> Iterator[None]:
        """Counts the time inside toward the step's ``timing_s/rlhooks`` (outermost use only: nesting
        counts once); ``what`` names it in the ``RLHOOKS_V1_TRACE`` file."""
        self._rlhooks_timing_depth += 1
        start = time.perf_counter()
        try:
            yield
        finally:
            self._rlhooks_timing_depth -= 1
            if not self._rlhooks_timing_depth:
                took = time.perf_counter() - start
                self._rlhooks_seconds += took
                trace_interval(took, what)

    def _submit_batch_to_rollout(self, batch):
        """The prompts verl is about to hand the agent loop: prompt filters (with top-ups from the sampler),
        then on_batch_sampled, then verl's dispatch."""
        with self.rlhooks_time("dispatch"):
            batch = self._prompts_for_rollout(batch)
            self.replay_buffer.remember_dispatched(batch)  # rows and sources: judging does not read them back
        return super()._submit_batch_to_rollout(batch)

    def _prompts_for_rollout(self, batch):
        step = self.global_steps
        counts = getattr(self, "_step_counts", None)
        if counts is not None:
            counts["dispatches"] += 1
        prompts = prompt_batch(batch).with_meta(step=step, generation=int(counts["dispatches"]) if counts else 1)
        stage = self.rl.prompt_stage
        if stage.active:
            batch, prompts = stage.select(step, prompts.meta.get("generation", 1), _PromptSource(self), batch, prompts)
            tu.assign_non_tensor_data(batch, "global_steps", step)
        merge_metrics(self._step_metrics, self.rl.batch_sampled(step, prompts))
        return batch

    def groups_scored(self, batch: Batch, evicted: np.ndarray | None = None) -> np.ndarray:
        """Called by the replay buffer with the groups finished since its last poll (before any filter):
        ``StepDriver.scored`` (the learning state, on_rewards_computed, the filters on the groups not ``evicted``
        as too stale); returns the rows' keep mask."""
        step = self.global_steps
        self._step_counts["scored"] += 1  # the batch's "generation": the n-th set of groups scored this step
        batch = batch.with_meta(step=step, generation=int(self._step_counts["scored"]))
        judged = self.driver.scored(step, batch, evicted=evicted)
        judged.add_to(self._step_metrics, self._step_metrics)
        for k, v in adapter_error_counts(batch, self.adapter_functions).items():
            self._step_metrics[k] = self._step_metrics.get(k, 0.0) + v
        for k, v in judged.filter_metrics.items():
            self._filter_counts[k] = self._filter_counts.get(k, 0.0) + float(v)
        uid = np.asarray(batch[cols.UID])
        fresh = slice(None) if evicted is None else ~np.asarray(evicted, dtype=bool)  # the groups judged
        groups = len(np.unique(uid[fresh]))
        self._step_counts["generated"] += groups
        self._step_counts["kept"] += groups - len(np.unique(uid[fresh][~judged.keep[fresh]]))  # kept whole or not at all
        return judged.keep

    def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
        """verl's metrics of the trained batch, then on_step_end with the trained batch and the rlhooks
        metrics merged in: the dict verl's logger logs next is the merged one.

        rlhooks's cost (docs/how-to/async.md, "What rlhooks costs a step"): ``timing_s/rlhooks`` is its work
        since the last step's metrics (prompt stage, on_batch_sampled, reading scored groups from TransferQueue,
        learning state, on_rewards_computed, filters, stale evictions: all inside verl's ``timing_s/step``,
        in verl's timing_raw so verl names it); ``timing_s/rlhooks_step_end`` the previous step's end (trained
        batch read back, on_step_end, backends, tables), which runs after verl's step timer;
        ``timing/rlhooks_share`` both over the step's wall time."""
        timing_raw["rlhooks"], self._rlhooks_seconds = self._rlhooks_seconds, 0.0
        with verl_metric_read() as verl_read:  # the per-token fields verl reads for its own metrics
            super()._compute_metrics(batch, metrics, timing_raw, global_steps=global_steps, epoch=epoch)
        end_start = time.perf_counter()
        step_end = self._rlhooks_step_end_seconds
        metrics["timing_s/rlhooks_step_end"] = step_end
        wall = float(timing_raw.get("step", 0.0)) + step_end
        metrics["timing/rlhooks_share"] = (timing_raw["rlhooks"] + step_end) / wall if wall > 0 else 0.0
        table = metrics.pop(DAPO_FILTERED_REWARD_COUNTS_KEY, None)  # a dict; verl logs it as a table
        trained = self._trained_batch(batch, verl_read.pop("data", None))
        metrics.update(self._step_metrics)
        metrics.update(self._filter_metrics(trained, metrics))
        metrics.update(self.rl.prompt_stage.metrics())
        merged = self.driver.finish_step(global_steps, trained, metrics)
        metrics.clear()
        metrics.update(merged)
        if table is not None:
            metrics[DAPO_FILTERED_REWARD_COUNTS_KEY] = table
        self._rlhooks_step_end_seconds = time.perf_counter() - end_start  # logged with the next step
        trace_interval(self._rlhooks_step_end_seconds, "step_end")
        stop = self.rl.stop_requested  # a plugin's run.request_stop(reason): checkpoint this step, end
        if stop and self._saved_folder is None:
            self._save_checkpoint()
        if self._saved_folder is not None:  # checkpointed this step: the state after on_step_end
            self._write_rlhooks_state(self._saved_folder)
            self.rl.checkpoint_saved(global_steps, self._saved_folder)
            checkpoints.reseal(self._saved_folder)  # the plugins' own files join the seal's list
            self._saved_folder = None
        if stop:
            self._end_after_this_step(global_steps)

    def _end_after_this_step(self, step: int) -> None:
        """verl's fit() loops while ``global_steps <= total_training_steps`` and adds 1 after logging this
        step: the loop ends there, through on_train_end, as at the end of the data."""
        log.warning(f"stopping after step {step} as a plugin requested: {self.rl.context.stop_reason}",
                    step=step, stopped_by=self.rl.context.stopped_by)
        self.total_training_steps = min(int(self.total_training_steps), step)

    def _filter_metrics(self, trained: Batch, metrics: dict[str, Any]) -> dict[str, float]:
        """The legacy path's step metrics, from V1's replay buffer: generation dispatches, and with filters
        the groups generated, kept, trained and discarded as surplus."""
        counts = self._step_counts
        out = {"train/num_gen_batches": counts["dispatches"]}
        if not self.rl.filters:
            return out
        trained_groups = float(len(np.unique(np.asarray(trained[cols.UID])))) if len(trained) else 0.0
        out.update(self._filter_counts)
        out.update({
            "filter/generated_groups": counts["generated"],
            "filter/kept_groups": counts["kept"],
            "filter/kept_ratio": counts["kept"] / counts["generated"] if counts["generated"] else 0.0,
            "filter/discarded_surplus": float(metrics.get("training/filter_groups/discarded_surplus_samples", 0.0)),
            "filter/trained_groups": trained_groups,
        })
        return out

    def _trained_batch(self, batch, verl_data: Any = None) -> Batch:
        """The trained (non-padding) trajectories, with ``advantage`` and ``final_reward``: the fields judging
        read, kept by the replay buffer (read again only for groups judged before a resume); the per-token
        fields from what verl's ``_compute_metrics`` read of ``batch`` (``verl_data``, rows in ``batch.keys``
        order), else read when a plugin reads their column, for its rows."""
        real = np.fromiter((not tag.get("is_padding", False) for tag in batch.tags), bool, len(batch.keys))
        keys = np.asarray(batch.keys, dtype=object)[real].tolist()
        tags = [tag for tag, r in zip(batch.tags, real) if r]
        if not keys:
            return Batch({}, length=0)
        partition = batch.partition_id
        buffer = self.replay_buffer
        present = getattr(buffer, "_stored_fields", None)
        if present is None:
            present = set(tq.kv_batch_get(keys=keys[:1], partition_id=partition).keys())
        values = buffer.judged_values(partition, keys)
        if values is None:
            values = tq.kv_batch_get(keys=keys, partition_id=partition,
                                     select_fields=scored_fields(self.scored_columns, present, reward_in_extras=self.reward_in_extras))
        buffer.forget(partition, keys)
        fetch = buffer.fetcher(partition)
        trained = scored_batch(values, keys, self.tokenizer, self.adapter_functions, fetch=fetch, stored=present, tags=tags)
        final_field = "token_level_rewards" if "token_level_rewards" in present else "rm_scores"
        lazy = {}
        if verl_data is not None and len(verl_data) == len(batch.keys):
            held = set(verl_data.keys())
            if "advantages" in held:  # mean over the response (its valid tokens: the jagged row's length)
                lazy[cols.ADVANTAGE] = _rows_of(verl_data.get("advantages"), real, token_means)
            if final_field in held:
                lazy[cols.FINAL_REWARD] = _rows_of(verl_data.get(final_field), real, token_sums)
        # otherwise the per-token fields (4 bytes a token each) are read when a plugin reads their column
        if cols.ADVANTAGE not in lazy and "advantages" in present:
            lazy[cols.ADVANTAGE] = fetched(fetch, keys, "advantages", token_means)
        if cols.FINAL_REWARD not in lazy:
            lazy[cols.FINAL_REWARD] = fetched(fetch, keys, final_field, token_sums)
        return trained.with_columns(_lazy=lazy)

    # -- checkpoints: verl's files, rlhooks's save order and resume rules (checkpoints.py) ----------
    def _save_checkpoint(self):
        """verl's V1 ``_save_checkpoint`` (fingerprinted) in checkpoints.CheckpointWriter's order: a kill never
        leaves the tracker on an incomplete checkpoint, nor rotation without a complete one. verl's async
        modes' TransferQueue state is written before the seal, which lists its files."""
        # not verl's: verl's writes the tracker and rotates before rlhooks.pt could seal the folder (issue 37)
        if self._checkpoint_writer is None:
            checkpoints.check_settings(self.config)
            self._checkpoint_writer = checkpoints.CheckpointWriter.from_config(self.config.trainer, use_critic=self.use_critic)
        workers = {"actor": self.actor_rollout_wg, **({str(Role.Critic): self.critic_wg} if self.use_critic else {})}
        step = self.global_steps
        before_seal = None
        if tq_checkpoint_wanted(self.trainer_mode):  # as verl: in-flight prompts survive a restart
            def before_seal(folder):
                tq.save_checkpoint(os.path.join(folder, "transfer_queue"), metadata={"global_steps": step})
        # data.pt holds the dataloader state, the sampler's included; rlhooks.pt is written before on_step_end
        # and _compute_metrics rewrites it once the step's hooks ran; this one covers a crash between.
        # A signal during the save ends the run once the checkpoint is whole (rlhooks train waits for it,
        # within driver.STOP_GRACE_S); a full disk is one error naming the folder and what is resumable.
        with interrupt.deferred("this checkpoint is saved"), driver.save_failure(self.config, step):
            folder = self._checkpoint_writer.save(step, workers, self.train_dataloader.state_dict(),
                                                  self._rlhooks_state(), before_seal=before_seal)
        self._saved_folder = str(folder)
        callback = getattr(self, "checkpoint_callback", None)  # verl 0.9.1 builds one in __init__, verl main none
        if callback is not None:
            callback.on_save(trainer=self, global_step=step, checkpoint_dir=str(folder), async_save=False)

    def _rlhooks_state(self) -> dict[str, Any]:
        return {"components": self.rl.state_dict(), "trainer": TRAINER_MODE,
                "prompts_drawn": self._prompts_drawn, "judged_groups": self.replay_buffer.judged_groups(),
                checkpoints.OWNER_KEY: checkpoints.owner_of(self.config, self.rl.run_dir.name)}  # resumed only by it

    def _write_rlhooks_state(self, folder: str) -> None:
        checkpoints.write_state(folder, self._rlhooks_state())  # keeps the seal's list of files

    def _load_checkpoint(self):
        """verl's load, after checkpoints.plan_resume: a missing tracked checkpoint, a damaged file or a
        spliced run directory is one CheckpointError naming the way out, not a traceback nor a silent restart.
        Besides the components: the prompt counter (uids continue where the run stopped) and the verdicts on
        the groups TransferQueue's checkpoint brings back (verl's async modes), so none is judged twice."""
        def restore(state: dict[str, Any]) -> None:
            if "prompts_drawn" in state:
                self._prompts_drawn = int(state["prompts_drawn"])
            else:  # an older rlhooks.pt: uids that cannot meet the ones TransferQueue may restore
                self._prompts_drawn = uuid.uuid4().int >> 64 << 64
            self.replay_buffer.restore_judged_groups(state.get("judged_groups") or {})

        return checkpoints.load_with_plan(self, super()._load_checkpoint, restore)[1]

    # -- prompt uids ---------------------------------------------------------------------------
    def _fetch_one_gen_batch(self):
        """verl's dataloader fetch with the n-th prompt the run draws as its uid (verl draws ``uuid4``): the
        replay buffer orders groups by uid, i.e. by when their prompts were drawn, so a resumed run judges,
        selects and trains the groups in the uninterrupted run's order (and with its uids)."""
        batch = super()._fetch_one_gen_batch()
        first, self._prompts_drawn = self._prompts_drawn, self._prompts_drawn + len(batch)
        tu.assign_non_tensor_stack(batch, "uid", [prompt_uid(i) for i in range(first, first + len(batch))])
        return batch


#: a file each timed rlhooks interval (``timing_s/rlhooks``, ``timing_s/rlhooks_step_end``) appends
#: ``<start> <end> <what>`` to, in wall-clock seconds (``time.time()``, as the stub rollout's log):
#: ``benchmarks/v1_generation.py`` traces them against the stub server's idle time. Unset: nothing is written.
TRACE_ENV = "RLHOOKS_V1_TRACE"


def trace_interval(took: float, what: str) -> None:
    """An interval of ``took`` seconds that ends now, into the ``RLHOOKS_V1_TRACE`` file if that is set."""
    path = os.environ.get(TRACE_ENV)
    if path:
        end = time.time()
        with open(path, "a") as fh:
            fh.write(f"{end - took:.6f} {end:.6f} {what}\n")


def rebuilt_loader(loader: StatefulDataLoader, dataset: Any, *, sampler: Any, batch_size: int) -> StatefulDataLoader:
    """verl's train ``loader`` over ``dataset`` with ``sampler`` (None: the loader's own) and ``batch_size``, every
    other constructor argument as verl gave it (read back from the loader)."""
    params = inspect.signature(type(loader).__init__).parameters
    replaced = {"self", "dataset", "sampler", "batch_sampler", "batch_size", "shuffle"}
    kwargs = {name: getattr(loader, name) for name, p in params.items() if name not in replaced
              and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and hasattr(loader, name)}
    return type(loader)(dataset=dataset, batch_size=batch_size, sampler=loader.sampler if sampler is None else sampler,
                        **kwargs)


def _rows_of(values: Any, rows: np.ndarray, convert: Any) -> Any:
    """A lazy column from a per-token field verl already read (``convert`` of it, then the ``rows`` mask)."""
    return lambda: convert(values)[rows]


@contextmanager
def verl_metric_read() -> Iterator[dict[str, Any]]:
    """What verl's ``_compute_metrics`` reads from TransferQueue for its own metrics (prompts, responses,
    advantages, rm_scores, token_level_rewards of the trained batch, in its keys' order), kept as ``["data"]``
    so the step's end takes ``advantage`` and ``final_reward`` from it instead of reading 4 bytes a token
    again. verl reads it through ``metric_utils.get_metric_data_with_optional_routed_experts`` (fingerprinted,
    compat); a verl without it: nothing is kept (the fields are read when a plugin reads them)."""
    from verl.trainer.ppo.v1 import trainer_base

    seen: dict[str, Any] = {}
    real = getattr(trainer_base, "get_metric_data_with_optional_routed_experts", None)
    if real is None:
        yield seen
        return

    def keep(*args: Any, **kwargs: Any) -> Any:
        seen["data"] = data = real(*args, **kwargs)
        return data

    trainer_base.get_metric_data_with_optional_routed_experts = keep
    try:
        yield seen
    finally:
        trainer_base.get_metric_data_with_optional_routed_experts = real


def tq_checkpoint_wanted(trainer_mode: str) -> bool:
    """Whether a checkpoint holds TransferQueue's state, as verl's ``_save_checkpoint`` decides: its async modes;
    verl main only where TransferQueue can save it (``_tq_supports_checkpoint``), 0.9.1 (no such gate) always."""
    if trainer_mode == "sync":
        return False
    from verl.trainer.ppo.v1 import trainer_base

    supported = getattr(trainer_base, "_tq_supports_checkpoint", None)
    return supported is None or bool(supported())


def prompt_uid(n: int) -> str:
    """The uid of the run's n-th drawn prompt: UUID-shaped, like verl's, and sorting as ``n`` does."""
    return str(uuid.UUID(int=n))


class _PromptSource:
    """The prompt stage's view of the V1 trainer: more prompts from verl's dataloader, rows of a TensorDict."""

    def __init__(self, trainer: RLHooksPPOTrainerSync):
        self.trainer = trainer

    def sample(self, step: int) -> tuple[Any, Batch]:
        td = self.trainer._fetch_one_gen_batch()
        return td, prompt_batch(td).with_meta(step=step)

    def select_prompts(self, payload: Any, rows: np.ndarray) -> Any:
        return tu.index_select_tensor_dict(payload, np.asarray(rows, dtype=np.int64).tolist())

    select = select_prompts

    def concat(self, payloads: list[Any]) -> Any:
        # a prompt batch from an earlier dispatch of the step carries the global_steps the trainer assigned,
        # a fresh top-up does not (TensorDict.cat needs equal keys); _submit_batch_to_rollout assigns it again
        return tu.concat_tensordict([p.exclude("global_steps") if "global_steps" in p.keys() else p for p in payloads])


__all__ = ["TRACE_ENV", "RLHooksPPOTrainerSync", "adapter_functions", "prompt_uid", "trace_interval",
           "tq_checkpoint_wanted"]
