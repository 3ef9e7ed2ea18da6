"""Engine-neutral step logic, shared by the simulator, the verl shim and any other engine.

One step, stage by stage (``[engine]`` marks the only engine operations)::

    collect:  [engine: sample prompts]
              -> pre-generation stage (core/pregen.py): prompt filters with the learning state,
                 top-ups from the sampler, adaptive size (engine: select_prompts)
              -> on_batch_sampled (the prompts that will be generated) -> [engine: generate]
              -> score with the configured reward functions
              -> [engine: place_rewards]
              -> [engine, async only: evict_stale]
              -> scored (the one entry for a scored batch, every engine's): learning-state update
                 -> on_rewards_computed -> filters (on the groups not evicted)
              -> accumulate until train_batch_size groups (or max_num_gen_batches) -> trim
    [engine: advantage + update]
    finish_step: on_step_end -> log_metrics -> log_table / log_histogram

The driver owns everything that does not depend on the engine: reward functions (the ``reward``
and ``reward_fn/<name>`` columns and the ``rewards/errors/<name>`` counts, summed over a step's
generation batches), filters, accumulation and trimming, and the step's metrics. An engine
provides a ``Rollout``: operations on its own batch objects only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Generic, Protocol, TypeVar

import attrs
import numpy as np
import structlog

from rlhooks.core.batch import RESPONSE, REWARD, REWARD_FN_PREFIX, TARGET, Batch
from rlhooks.core.errors import GenerationLimitError, RLHooksError
from rlhooks.core.manager import RunManager, merge_metrics
from rlhooks.core.pregen import adaptive_size
from rlhooks.core.staleness import add_metrics, eviction_metrics, lag_metrics

log = structlog.get_logger("rlhooks.driver")

P = TypeVar("P")  # the engine's own batch object (a DataProto in verl)


_as_text = np.frompyfunc(str, 1, 1)


class Rollout(Protocol[P]):
    """An engine's operations on its own batch objects; everything else is the driver's."""

    def sample(self, step: int) -> tuple[P, Batch]:
        """Draw one generation batch of prompts; return the engine object and a prompt-row Batch."""

    def select_prompts(self, payload: P, rows: np.ndarray) -> P:
        """The prompt payload (as ``sample`` returned it) restricted to prompt rows ``rows`` (sorted ints).

        Used by a pre-generation stage to drop prompts before paying for their generation.
        """

    def generate(self, step: int, payload: P) -> tuple[P, Batch]:
        """Generate n responses per prompt; return the engine object and a trajectory-row Batch.

        The Batch has ``uid`` (a prompt's rows contiguous), ``response`` and ``target`` (what reward
        functions read; lazy is best) and ``reward``: the engine's own score, kept when no reward
        function is configured.
        """

    def place_rewards(self, payload: P, reward: np.ndarray) -> P:
        """Put the total reward of each trajectory row into the engine object (verl: at the last
        valid token of ``token_level_scores``). Called only when reward functions are configured."""

    def select(self, payload: P, rows: np.ndarray) -> P:
        """The engine object restricted to trajectory rows ``rows`` (sorted int indices)."""

    def concat(self, payloads: list[P]) -> P:
        """Engine objects of several generation batches, rows in order."""

    # Optional, for asynchronous engines (see core/staleness.py), looked up with getattr:
    #   evict_stale(step, batch) -> bool row mask | None
    # the rows of the groups the engine's replay buffer evicts as too stale (verl's
    # max_off_policy_threshold); they skip the filters and never train.


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
        #: groups evicted as too stale before the filters (None: the engine evicts nothing)
        self.stale_evicted_groups: int | None = None
        self.filter_metrics: dict[str, float] = {}

    def add(self, payload: P, batch: Batch, keep: np.ndarray, filter_metrics: Mapping[str, float] = (),
            evicted: np.ndarray | None = None) -> None:
        """A generation batch: ``keep`` = rows the filters kept; ``evicted`` = rows of groups evicted as
        stale (not kept, and not counted as filtered)."""
        self.num_gen_batches += 1
        groups = batch.groups
        if evicted is not None:
            n_evicted = int(np.count_nonzero(groups.any(evicted))) if len(batch) else 0
            self.stale_evicted_groups = (self.stale_evicted_groups or 0) + n_evicted
            keep = keep & ~np.asarray(evicted, dtype=bool)
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
        judged = self.generated_groups - (self.stale_evicted_groups or 0)
        metrics: dict[str, float] = {
            "train/num_gen_batches": self.num_gen_batches,
            "filter/kept_groups": self.kept_groups,
            "filter/generated_groups": self.generated_groups,
            # of the groups the filters judged: a group evicted as stale was never the filters' to keep
            "filter/kept_ratio": self.kept_groups / judged if judged else 0.0,
            "filter/discarded_surplus": self.kept_groups - used,
            "filter/limit_reached": float(not self.ready),
            "filter/trained_groups": used,
        }
        if self.stale_evicted_groups is not None:  # generated = stale-evicted + seen by the filters
            metrics["filter/stale_evicted_groups"] = self.stale_evicted_groups
        metrics.update(self.filter_metrics)
        if not batches:
            return None, Batch(meta={"trained_groups": 0}), metrics
        if len(batches) == 1:  # one generation batch: nothing to concatenate
            return payloads[0], batches[0], metrics
        return rollout.concat(payloads), Batch.concat(batches), metrics


@attrs.frozen
class Collected(Generic[P]):
    payload: P | None  # None when nothing survived (on_gen_limit: continue)
    batch: Batch
    metrics: dict[str, float]


@attrs.define
class Generation(Generic[P]):
    """One generation batch on its way through ``collect``'s stages."""

    step: int
    number: int  # 1-based within the step
    payload: P  # the engine object: prompts until generated, then trajectories
    prompts: Batch
    trajectories: Batch | None = None


@attrs.frozen
class Scored:
    """What ``StepDriver.scored`` made of a scored batch."""

    keep: np.ndarray  # rows the filters kept (False on evicted rows)
    filter_metrics: dict[str, float]  # the filters' additive metrics
    hook_metrics: dict[str, float]  # what on_rewards_computed returned
    learning_metrics: dict[str, float]  # the learning state's update

    def add_to(self, metrics: dict[str, float], learning: dict[str, float]) -> None:
        """Into a step's accumulators: hook metrics merged (``merge_metrics``), learning metrics summed."""
        merge_metrics(metrics, self.hook_metrics)
        for k, v in self.learning_metrics.items():
            learning[k] = learning.get(k, 0.0) + v


class StepDriver:
    """Runs a step's engine-neutral stages around an engine's own generation and update."""

    def __init__(self, manager: RunManager):
        self.manager = manager
        self.run = manager.config.run
        self.rewards = manager.rewards
        #: steps in a row that hit max_num_gen_batches (on_gen_limit: continue): warned once per streak
        self.gen_limit_streak = 0

    def collect(self, step: int, rollout: Rollout[P]) -> Collected[P]:
        """Generation batches until enough groups survive; the (trimmed) batch to train on."""
        m = self.manager
        metrics: dict[str, float] = {}
        reward_errors: dict[str, float] = {}  # rewards/errors/<name> and rewards/nonfinite_scores/<name>
        acc: GroupAccumulator[P] = GroupAccumulator(self.run.train_batch_size, self.run.max_num_gen_batches, self.run.on_gen_limit)
        stage = m.prompt_stage
        stage.begin_step()
        learning_metrics: dict[str, float] = {}
        staleness: dict[str, float] = {}
        while True:
            number = acc.num_gen_batches + 1
            progress = None
            if self.run.gen_batch_sizing == "adaptive" and number > 1:
                progress = (self.run.train_batch_size - acc.kept_groups, acc.kept_groups, acc.generated_groups)
            gen = self.generation(step, rollout, number, metrics, reward_errors, progress)
            trajectories = gen.trajectories
            assert trajectories is not None
            evicted = self.evicted(step, rollout, trajectories)
            if evicted is not None:
                add_metrics(staleness, eviction_metrics(trajectories, evicted))
            judged = self.scored(step, trajectories, evicted=evicted)
            judged.add_to(metrics, learning_metrics)
            acc.add(gen.payload, trajectories, judged.keep, judged.filter_metrics, evicted)
            if acc.ready:
                if self.gen_limit_streak:
                    log.info(f"steps fill their batch again after {self.gen_limit_streak} step(s) at max_num_gen_batches", step=step)
                self.gen_limit_streak = 0
                break
            if acc.limit_reached:
                if self.run.on_gen_limit == "raise":
                    raise acc.limit_error()
                if not self.gen_limit_streak:  # every such step counts in filter/limit_reached
                    log.warning(
                        "max_num_gen_batches reached; training on the groups kept so far (on_gen_limit: continue; "
                        "not repeated while the following steps reach it too, see filter/limit_reached)",
                        step=step, kept_groups=acc.kept_groups, needed=self.run.train_batch_size,
                    )
                self.gen_limit_streak += 1
                break
        payload, batch, acc_metrics = acc.finish(rollout)
        if not m.filters:  # without filters only the generation count (and evictions) mean something
            acc_metrics = {k: v for k, v in acc_metrics.items() if k in ("train/num_gen_batches", "filter/stale_evicted_groups")}
        metrics.update(acc_metrics)
        metrics.update(staleness)
        metrics.update(lag_metrics(batch))
        metrics.update(reward_errors)
        if learning_metrics:
            learning_metrics["learning/rows_seen"] = float(m.learning.rows_seen)
            metrics.update(learning_metrics)
        metrics.update(stage.metrics())
        return Collected(payload, batch.with_meta(step=step), metrics)

    def scored(self, step: int, batch: Batch, *, evicted: np.ndarray | None = None) -> Scored:
        """The one entry for a scored batch, every engine's (``collect`` here; verl's V1 replay buffer for
        the groups that finished since its last poll): the learning state, then ``on_rewards_computed``,
        both on every row (an evicted row was generated and scored), then the filters on the rows not
        ``evicted`` (a bool row mask of whole groups the engine evicts as too stale)."""
        m = self.manager
        learning = m.update_learning(step, batch)  # scored, before any filter
        hooks = m.rewards_computed(step, batch)
        if evicted is None:
            keep, filter_metrics = m.apply_filters(batch)
        else:  # the filters judge only the groups the engine did not evict as stale
            evicted = np.asarray(evicted, dtype=bool)
            kept_fresh, filter_metrics = m.apply_filters(batch.select(~evicted))
            keep = np.zeros(len(batch), dtype=bool)
            keep[~evicted] = kept_fresh
        return Scored(keep, dict(filter_metrics), hooks, learning)

    @staticmethod
    def evicted(step: int, rollout: Rollout[P], trajectories: Batch) -> np.ndarray | None:
        """The engine's stale-group eviction (``evict_stale``), checked: a bool row mask of whole groups."""
        evict = getattr(rollout, "evict_stale", None)
        if not callable(evict):
            return None
        mask = evict(step, trajectories)
        if mask is None:
            return None
        mask = np.asarray(mask)
        if mask.dtype != bool or mask.shape != (len(trajectories),):
            raise RLHooksError(
                f"the engine's evict_stale() ({type(rollout).__name__}) must return a bool row mask of shape "
                f"({len(trajectories)},) or None, got {mask.dtype} {mask.shape}"
            )
        if len(trajectories):
            g = trajectories.groups
            part = g.sum(mask)
            if np.any((part > 0) & (part < g.sizes)):
                raise RLHooksError(f"the engine's evict_stale() ({type(rollout).__name__}) evicted part of a group; "
                                   "a group is evicted whole")
        return mask

    # -- the stages of one generation batch -------------------------------------------------
    def generation(
        self,
        step: int,
        rollout: Rollout[P],
        number: int = 1,
        metrics: dict[str, float] | None = None,
        reward_errors: dict[str, float] | None = None,
        progress: tuple[int, int, int] | None = None,
    ) -> Generation[P]:
        """One generation batch up to its scored trajectories: sample -> pre-generation ->
        on_batch_sampled -> generate -> reward functions. ``metrics`` and ``reward_errors`` (if
        given) collect the hook metrics and the rows each reward function failed on. ``progress``
        (groups still needed, kept, generated so far this step) sizes the batch adaptively."""
        gen = self.sample(step, number, rollout)
        gen = self.before_generation(gen, rollout, progress)
        merge_metrics({} if metrics is None else metrics, self.manager.batch_sampled(step, gen.prompts))
        self.generate(gen, rollout)
        self.score(gen, rollout, {} if reward_errors is None else reward_errors)
        return gen

    def sample(self, step: int, number: int, rollout: Rollout[P]) -> Generation[P]:
        """The engine draws prompts."""
        payload, prompts = rollout.sample(step)
        return Generation(step, number, payload, prompts.with_meta(step=step, generation=number))

    def before_generation(self, gen: Generation[P], rollout: Rollout[P],
                          progress: tuple[int, int, int] | None = None) -> Generation[P]:
        """The pre-generation stage (core/pregen.py): prompt filters drop prompts and the sampler tops
        up (``rollout.select_prompts``), and/or the batch is cut to its adaptive size, before the
        generation is paid for. on_batch_sampled then sees the prompts that will be generated."""
        stage = self.manager.prompt_stage
        want = None
        if progress is not None:
            want = adaptive_size(len(gen.prompts), *progress, multiple=getattr(rollout, "prompt_multiple", 1))
        if not stage.active and want is None:
            return gen
        gen.payload, prompts = stage.select(gen.step, gen.number, rollout, gen.payload, gen.prompts, want)
        gen.prompts = prompts.with_meta(step=gen.step, generation=gen.number)
        return gen

    def generate(self, gen: Generation[P], rollout: Rollout[P]) -> None:
        payload, trajectories = rollout.generate(gen.step, gen.payload)
        gen.payload = payload
        gen.trajectories = trajectories.with_meta(step=gen.step, generation=gen.number)

    def score(self, gen: Generation[P], rollout: Rollout[P], errors: dict[str, float]) -> None:
        """The configured reward functions on ``response``/``target``: ``reward`` (their weighted
        total, also placed into the engine object) and ``reward_fn/<name>`` columns. Without reward
        functions the engine's own ``reward`` stays. Failed rows (raised, NaN/inf) are added to
        ``errors``, keyed by metric name."""
        if not self.rewards:
            return
        batch = gen.trajectories
        assert batch is not None
        missing = [c for c in (RESPONSE, TARGET) if c not in batch]
        if missing:
            raise RLHooksError(
                f"reward functions {', '.join(self.rewards.names)} need the trajectories' "
                f"{' and '.join(missing)} column(s), which the engine ({type(rollout).__name__}) did not provide; "
                f"its generate() must return a Batch with response and target columns"
            )
        if not callable(getattr(rollout, "place_rewards", None)):
            raise RLHooksError(
                f"the engine ({type(rollout).__name__}) has no place_rewards(payload, reward) method, which "
                f"reward functions need (see rlhooks.core.driver.Rollout)"
            )
        # None -> "None", as text; object-wise (astype(str) makes a fixed-width array: 4 bytes x the longest
        # target x rows, gigabytes for one 1M-character target)
        targets = _as_text(np.asarray(batch[TARGET], dtype=object))
        result = self.rewards.score(batch[RESPONSE], targets)
        gen.payload = rollout.place_rewards(gen.payload, result.total)
        columns: dict[str, Any] = {REWARD: result.total}
        columns.update({REWARD_FN_PREFIX + name: values for name, values in result.components.items()})
        gen.trajectories = batch.with_columns(**columns).with_meta(reward_functions=tuple(self.rewards.names))
        for key, n in result.metrics().items():
            errors[key] = errors.get(key, 0.0) + n

    # -- the end of a step --------------------------------------------------------------------
    def finish_step(self, step: int, batch: Batch, metrics: Mapping[str, Any]) -> dict[str, float]:
        """on_step_end, then the merged metrics to log_metrics, then queued tables/histograms."""
        m = self.manager
        merged = dict(metrics)
        merge_metrics(merged, m.step_end(step, batch, merged))
        m.log_metrics(step, merged)
        m.dispatch_emitted()
        return merged
