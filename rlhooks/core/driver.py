"""Engine-neutral step logic, shared by the simulator and the verl shim.

    sampler -> [engine: generate] -> on_batch_sampled -> [engine: reward] -> on_rewards_computed
    -> filters -> accumulate until train_batch_size groups (or max_num_gen_batches) -> trim
    -> [engine: advantage + update] -> on_step_end -> log_metrics -> log_table / log_histogram

An engine provides a ``Rollout`` (how to draw prompts, generate and score them, and select and
concatenate its own batch objects), calls ``StepDriver.collect`` for the batch to train on,
trains, then calls ``StepDriver.finish_step`` with its own metrics.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Generic, Protocol, TypeVar

import attrs
import numpy as np
import structlog

from rlhooks.core.batch import Batch
from rlhooks.core.errors import GenerationLimitError
from rlhooks.core.manager import RunManager, merge_metrics
from rlhooks.core.pregen import adaptive_size

log = structlog.get_logger("rlhooks.driver")

P = TypeVar("P")  # the engine's own batch object (a DataProto in verl)


class Rollout(Protocol[P]):
    def sample(self, step: int) -> tuple[P, Batch]:
        """Draw one generation batch of prompts; return the engine object and a prompt-row Batch."""

    def generate(self, step: int, payload: P) -> tuple[P, Batch]:
        """Generate n responses per prompt and score them; return a trajectory-row Batch."""

    def select(self, payload: P, rows: np.ndarray) -> P:
        """The engine object restricted to trajectory rows ``rows`` (sorted int indices)."""

    def concat(self, payloads: list[P]) -> P:
        """Engine objects of several generation batches, rows in order."""

    def select_prompts(self, payload: P, rows: np.ndarray) -> P:
        """The *prompt* engine object restricted to prompt rows ``rows`` (the pre-generation stage;
        optional: ``select`` is used when an engine does not define it)."""


@attrs.define
class _Part(Generic[P]):
    payload: P
    batch: Batch
    kept_rows: np.ndarray  # trajectory rows that survived the filters
    kept_codes: np.ndarray  # group code of each kept row


class GroupAccumulator(Generic[P]):
    """Kept groups of successive generation batches, until ``train_batch_size`` prompts.

    Counters are per step and cover every generation batch, not only the last one.
    """

    def __init__(self, train_batch_size: int, max_num_gen_batches: int = 0, on_limit: str = "raise"):
        self.train_batch_size = train_batch_size
        self.max_num_gen_batches = max_num_gen_batches
        self.on_limit = on_limit
        self.parts: list[_Part[P]] = []
        self.num_gen_batches = 0
        self.generated_groups = 0
        self.kept_groups = 0
        self.filter_metrics: dict[str, float] = {}

    def add(self, payload: P, batch: Batch, keep: np.ndarray, filter_metrics: Mapping[str, float] = ()) -> None:
        self.num_gen_batches += 1
        groups = batch.groups
        kept_rows = np.flatnonzero(keep)
        kept_codes = groups.codes[kept_rows]
        n_kept = int(np.count_nonzero(groups.any(keep))) if len(batch) else 0
        self.generated_groups += groups.n_groups
        self.kept_groups += n_kept
        for k, v in dict(filter_metrics).items():
            self.filter_metrics[k] = self.filter_metrics.get(k, 0.0) + float(v)
        if n_kept:
            self.parts.append(_Part(payload, batch, kept_rows, kept_codes))

    @property
    def ready(self) -> bool:
        return self.kept_groups >= self.train_batch_size

    @property
    def limit_reached(self) -> bool:
        return self.max_num_gen_batches > 0 and self.num_gen_batches >= self.max_num_gen_batches

    def limit_error(self) -> GenerationLimitError:
        return GenerationLimitError(
            f"num_gen_batches={self.num_gen_batches} >= max_num_gen_batches={self.max_num_gen_batches}. "
            f"Generated too many. Please check if your data are too difficult or too easy: only "
            f"{self.kept_groups} of {self.generated_groups} generated groups survived the filters, "
            f"{self.train_batch_size} are needed per step.\n"
            f"  To change it: raise run.max_num_gen_batches (0 = unlimited), raise run.gen_batch_size, "
            f"use another filter metric, or set run.on_gen_limit: continue to train on the groups kept."
        )

    def finish(self, rollout: Rollout[P]) -> tuple[P | None, Batch, dict[str, float]]:
        """Trim to the first ``train_batch_size`` kept groups in arrival order."""
        need = self.train_batch_size
        payloads, batches = [], []
        used = 0
        for part in self.parts:
            if used >= need:
                break
            # kept group codes are increasing in arrival order within a part
            uniq = np.unique(part.kept_codes)
            take_groups = uniq[: need - used]
            rows = part.kept_rows[np.isin(part.kept_codes, take_groups, assume_unique=False)]
            used += len(take_groups)
            payloads.append(rollout.select(part.payload, rows))
            batches.append(part.batch.select(rows))
        metrics: dict[str, float] = {
            "train/num_gen_batches": self.num_gen_batches,
            "filter/kept_groups": self.kept_groups,
            "filter/generated_groups": self.generated_groups,
            "filter/kept_ratio": self.kept_groups / self.generated_groups if self.generated_groups else 0.0,
            "filter/discarded_surplus": self.kept_groups - used,
            "filter/limit_reached": float(not self.ready),
            "filter/trained_groups": used,
        }
        metrics.update(self.filter_metrics)
        if not batches:
            return None, Batch(meta={"trained_groups": 0}), metrics
        payload = payloads[0] if len(payloads) == 1 else rollout.concat(payloads)
        return payload, Batch.concat(batches), metrics


@attrs.frozen
class Collected(Generic[P]):
    payload: P | None  # None when nothing survived (on_gen_limit: continue)
    batch: Batch
    metrics: dict[str, float]


class StepDriver:
    """Runs the hook points of a step around an engine's own generation and update."""

    def __init__(self, manager: RunManager):
        self.manager = manager
        self.run = manager.config.run

    def collect(self, step: int, rollout: Rollout[P]) -> Collected[P]:
        """Generation batches until enough groups survive; the (trimmed) batch to train on."""
        m = self.manager
        metrics: dict[str, float] = {}
        acc: GroupAccumulator[P] = GroupAccumulator(self.run.train_batch_size, self.run.max_num_gen_batches, self.run.on_gen_limit)
        stage = m.prompt_stage
        stage.begin_step()
        learning_metrics: dict[str, float] = {}
        while True:
            generation = acc.num_gen_batches + 1
            payload, prompts = rollout.sample(step)
            want = None
            if self.run.gen_batch_sizing == "adaptive" and generation > 1:
                want = adaptive_size(len(prompts), self.run.train_batch_size - acc.kept_groups, acc.kept_groups,
                                     acc.generated_groups, getattr(rollout, "prompt_multiple", 1))
            if stage.active or want is not None:  # pre-generation stage (core/pregen.py)
                payload, prompts = stage.select(step, generation, rollout, payload, prompts.with_meta(step=step), want)
            merge_metrics(metrics, m.batch_sampled(step, prompts.with_meta(step=step, generation=generation)))
            payload, trajectories = rollout.generate(step, payload)
            trajectories = trajectories.with_meta(step=step, generation=generation)
            for k, v in m.update_learning(step, trajectories).items():  # before any filter
                learning_metrics[k] = learning_metrics.get(k, 0.0) + v
            merge_metrics(metrics, m.rewards_computed(step, trajectories))
            keep, filter_metrics = m.apply_filters(trajectories)
            acc.add(payload, trajectories, keep, filter_metrics)
            if acc.ready:
                break
            if acc.limit_reached:
                if self.run.on_gen_limit == "raise":
                    raise acc.limit_error()
                log.warning(
                    "max_num_gen_batches reached; training on the groups kept so far (on_gen_limit: continue)",
                    step=step, kept_groups=acc.kept_groups, needed=self.run.train_batch_size,
                )
                break
        payload, batch, acc_metrics = acc.finish(rollout)
        if not m.filters:  # without filters only the generation count means something
            acc_metrics = {"train/num_gen_batches": acc_metrics["train/num_gen_batches"]}
        metrics.update(acc_metrics)
        if learning_metrics:
            learning_metrics["learning/rows_seen"] = float(m.learning.rows_seen)
            metrics.update(learning_metrics)
        metrics.update(stage.metrics())
        return Collected(payload, batch.with_meta(step=step), metrics)

    def finish_step(self, step: int, batch: Batch, metrics: Mapping[str, Any]) -> dict[str, float]:
        """on_step_end, then the merged metrics to log_metrics, then queued tables/histograms."""
        m = self.manager
        merged = dict(metrics)
        merge_metrics(merged, m.step_end(step, batch, merged))
        m.log_metrics(step, merged)
        m.dispatch_emitted()
        return merged
