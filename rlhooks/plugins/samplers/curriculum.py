"""Complexity curricula on one source: TimeCurriculumSampler and RewardCurriculumSampler.

The curriculum source's rows are sorted by ``extra_info.complexity_score`` once (an argsort,
stored as an index array). "The easiest p%" is the first ``floor(p/100 * n)`` rows of that
order (at least one row); ties in complexity are split by row order. Only
``complexity_source`` is restricted: other sources always sample from all their rows. Both
samplers keep the multi-source options (fixed or adaptive source weights).

One "update" / "batch" (``complexity_warmup_steps``, ``check_frequency``,
``min_batches_per_level``) is one ``on_rewards_computed`` call: the rewards of one generation
batch.

``RewardCurriculumSampler.gate_metric`` names what ``reward_threshold`` is compared with: the
curriculum source's mean of one feedback-batch column per batch (default ``reward``, the sequence
reward; ``acc``, another reward extra, or ``reward_fn/<name>``, one reward function's score), smoothed
by ``reward_alpha``. ``validation/<metric>`` (e.g. ``validation/score``) gates on the curriculum
source's held-out result from ``on_validation_end`` instead: each fresh result is compared once (at
most one level up per validation; no EMA, no ``check_frequency``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import attrs
import numpy as np

from rlhooks import REWARD, REWARD_FN_PREFIX, Batch, BatchError, DataError, hookimpl
from rlhooks.plugins.samplers._draw import largest_remainder
from rlhooks.plugins.samplers.multi_source import (
    MultiSourceOptions,
    MultiSourceSampler,
    _non_negative_int,
    _positive_int,
    _unit_fraction,
    log,
)

BANNER = "=" * 80


def _percentile(_inst: Any, attr: attrs.Attribute, value: float) -> None:
    if not (0 < value <= 100):
        raise ValueError(f"must be a percentile in (0, 100], got {value!r}")


def _decay(_inst: Any, attr: attrs.Attribute, value: float) -> None:
    if not (0 < value <= 1):
        raise ValueError(f"must be in (0, 1] (weight kept per level of age), got {value!r}")


def _finite(_inst: Any, attr: attrs.Attribute, value: float) -> None:
    if not math.isfinite(value):
        raise ValueError(f"must be a finite number, got {value!r}")


#: gate_metric ``validation/<metric>``: ``per_source[complexity_source][<metric>]`` of on_validation_end
VALIDATION_PREFIX = "validation/"
SEQUENCE_REWARD = REWARD  # the default gate: the sequence reward, every reward function summed


def _gate_metric(_inst: Any, attr: attrs.Attribute, value: str) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(
            f"must name a feedback-batch column, got {value!r}: reward (the default), acc or another reward extra, "
            "reward_fn/<name> (one reward function's score), or validation/<metric> (a validation result, e.g. "
            "validation/score)"
        )
    if value.startswith(VALIDATION_PREFIX) and not value[len(VALIDATION_PREFIX):].strip():
        raise ValueError(
            f"{value!r} names no validation metric: write validation/score (the source's headline held-out "
            "accuracy) or validation/<var>/<metric> as verl computes it, e.g. validation/acc/mean@4"
        )


def _check_order(opts: Any) -> None:
    if opts.initial_complexity_percentile > opts.final_complexity_percentile:
        raise ValueError(
            f"initial_complexity_percentile ({opts.initial_complexity_percentile}) must be <= "
            f"final_complexity_percentile ({opts.final_complexity_percentile})"
        )


@attrs.frozen(kw_only=True)
class TimeCurriculumOptions(MultiSourceOptions):
    complexity_source: str = "logicif"
    initial_complexity_percentile: int = attrs.field(default=30, validator=_percentile)
    final_complexity_percentile: int = attrs.field(default=100, validator=_percentile)
    #: updates (feedback batches) to go linearly from initial to final
    complexity_warmup_steps: int = attrs.field(default=100, validator=_non_negative_int)

    def __attrs_post_init__(self) -> None:
        _check_order(self)


@attrs.frozen(kw_only=True)
class RewardCurriculumOptions(MultiSourceOptions):
    complexity_source: str = "logicif"
    initial_complexity_percentile: int = attrs.field(default=30, validator=_percentile)
    final_complexity_percentile: int = attrs.field(default=100, validator=_percentile)
    #: levels between initial and final (levels 0..num_intervals)
    num_intervals: int = attrs.field(default=10, validator=_positive_int)
    #: EMA of gate_metric (a validation gate: its latest result) on the curriculum source that unlocks
    #: the next level (required)
    reward_threshold: float = attrs.field(validator=_finite)
    #: the feedback-batch column whose mean on the curriculum source's rows is smoothed and compared with
    #: reward_threshold: reward (sequence reward, all functions summed) | acc or another reward extra |
    #: reward_fn/<name> (one reward function's score) | validation/<metric>: the curriculum source's latest
    #: validation result (on_validation_end's per_source), compared once per validation, without EMA
    gate_metric: str = attrs.field(default=SEQUENCE_REWARD, validator=_gate_metric)
    reward_alpha: float = attrs.field(default=0.1, validator=_unit_fraction)
    min_batches_per_level: int = attrs.field(default=10, validator=_non_negative_int)
    check_frequency: int = attrs.field(default=3, validator=_positive_int)
    focus_new_intervals: bool = False
    interval_decay: float = attrs.field(default=0.5, validator=_decay)

    def __attrs_post_init__(self) -> None:
        _check_order(self)


class _CurriculumMixin(MultiSourceSampler):
    """Shared setup: validate the curriculum source and sort its rows by complexity."""

    needs_complexity: ClassVar[bool] = True

    def _init_extra(self) -> None:
        o = self.options
        data = self.data
        src = o.complexity_source
        if src not in self._name_to_active:
            found = ", ".join(f"{s} ({n} rows)" for s, n in data.source_counts().items() if n)
            hint = (
                "it is excluded because source_weights does not name it; add it to source_weights"
                if src in self.excluded_sources else f"sources found in {data.origin}: {found}"
            )
            raise DataError(f"{self.name}: complexity_source {src!r} is not a sampled source: {hint}")
        c = self._name_to_active[src]
        rows = self._rows[c]
        if data.complexity is None:
            raise DataError(
                f"{self.name}: dataset {data.origin} has no extra_info.complexity_score column; "
                f"the curriculum source {src!r} needs a complexity_score on every row"
            )
        comp = np.asarray(data.complexity)[rows]
        bad = ~np.isfinite(comp)
        if bad.any():
            first = int(rows[np.flatnonzero(bad)[0]])
            raise DataError(
                f"{self.name}: {int(bad.sum())} of {len(rows)} rows of curriculum source {src!r} in {data.origin} "
                f"have no usable extra_info.complexity_score (first at row {first}): missing, NaN, infinite or beyond "
                "the float32 range; give every row of that source a "
                "finite complexity_score, or choose another complexity_source"
            )
        order = np.argsort(comp, kind="stable")
        self._cur = c
        self._cur_rows = rows[order]  # curriculum rows, easiest first
        self._rows[c] = self._cur_rows
        self._cur_n = len(rows)
        self._cur_sorted_comp = comp[order]  # dropped after the init log
        del order, comp

    def _items(self, percentile: float) -> int:
        """Rows in the easiest ``percentile`` % of the curriculum source (at least one)."""
        return max(1, min(self._cur_n, math.floor(percentile * self._cur_n / 100 + 1e-9)))


class TimeCurriculumSampler(_CurriculumMixin):
    """Curriculum source restricted to its easiest rows, widening linearly with updates."""

    Options: ClassVar[type] = TimeCurriculumOptions
    deprecated_names: ClassVar[dict[str, str]] = {"CurriculumMultiSourceSampler": "TimeCurriculumSampler"}

    def _init_extra(self) -> None:
        super()._init_extra()
        self._last_decile = int(self.percentile // 10)
        del self._cur_sorted_comp

    @property
    def percentile(self) -> float:
        o = self.options
        lo, hi, steps = o.initial_complexity_percentile, o.final_complexity_percentile, o.complexity_warmup_steps
        frac = 1.0 if steps == 0 else min(1.0, self._feedback / steps)
        return lo + (hi - lo) * frac

    @property
    def num_items(self) -> int:
        return self._items(self.percentile)

    def _log_init(self) -> None:
        super()._log_init()
        o = self.options
        log.info(f"[{self.name}] Complexity curriculum for '{o.complexity_source}'")
        log.info(
            f"[{self.name}] Progress: {o.initial_complexity_percentile}% → {o.final_complexity_percentile}% "
            f"over {o.complexity_warmup_steps} updates"
        )

    def _draw_source(self, i: int, count: int) -> np.ndarray:
        if i != self._cur:
            return super()._draw_source(i, count)
        return self._pools.draw("curriculum", self._cur_rows[: self.num_items], count)

    def _after_feedback(self, step: int, means: np.ndarray, counts: np.ndarray) -> None:
        pct = self.percentile
        decile = int(pct // 10)
        final = self._feedback == self.options.complexity_warmup_steps
        if decile != self._last_decile or final:
            self._last_decile = decile
            log.info(f"[{self.name}] Complexity: {pct:.0f}% ({self.num_items}/{self._cur_n} items)")

    def _extra_metrics(self) -> dict[str, float]:
        o = self.options
        steps = o.complexity_warmup_steps
        return {
            "curriculum/level": min(self._feedback, steps),
            "curriculum/progress": 1.0 if steps == 0 else min(1.0, self._feedback / steps),
            "curriculum/percentile": self.percentile,
            "curriculum/num_items": self.num_items,
        }

    def _extra_state(self) -> dict[str, Any]:
        return {"last_decile": self._last_decile}

    def _load_extra(self, state: Mapping[str, Any]) -> None:
        self._last_decile = int(state.get("last_decile", self._last_decile))


class RewardCurriculumSampler(_CurriculumMixin):
    """Curriculum levels unlocked when the curriculum source's EMA of ``gate_metric`` (default the
    sequence reward), or its latest validation result (``validation/<metric>``), reaches a threshold."""

    Options: ClassVar[type] = RewardCurriculumOptions
    deprecated_names: ClassVar[dict[str, str]] = {"RewardGatedCurriculumSampler": "RewardCurriculumSampler"}

    def _init_extra(self) -> None:
        super()._init_extra()
        o = self.options
        lo, hi, k = o.initial_complexity_percentile, o.final_complexity_percentile, o.num_intervals
        #: upper percentile of each level; level L unlocks intervals 0..L
        self.level_percentiles = np.array([lo + (hi - lo) * i / k for i in range(k + 1)])
        self.bounds = np.array([self._items(p) for p in self.level_percentiles], dtype=np.int64)
        starts = np.concatenate([[0], self.bounds[:-1]])
        self.interval_sizes = self.bounds - starts
        comp = self._cur_sorted_comp
        self._interval_ranges = [
            (float(comp[s]), float(comp[e - 1])) if e > s else (math.nan, math.nan) for s, e in zip(starts, self.bounds)
        ]
        del self._cur_sorted_comp
        self.level = 0
        self._batches_at_level = 0
        self._cur_ema: float | None = None
        #: (sums, counts) per source of gate_metric in the current feedback batch; None = the rewards'
        self._gate_obs: tuple[np.ndarray, np.ndarray] | None = None
        self._iv_carry = np.zeros(k + 1)
        #: the per_source key of a validation gate (None: the gate reads feedback batches)
        self._val_metric = o.gate_metric[len(VALIDATION_PREFIX):] if o.gate_metric.startswith(VALIDATION_PREFIX) else None
        #: the latest validation result of the curriculum source and the step it came from
        self._val_value: float | None = None
        self._val_step: int | None = None
        self._val_warned = False  # a validation without the curriculum source: warned once
        empty = np.flatnonzero(self.interval_sizes == 0)
        if len(empty):
            log.warning(
                f"[{self.name}] {len(empty)} of {k + 1} intervals are empty ({self._cur_n} rows of "
                f"'{o.complexity_source}' for {k} intervals); their level-ups add no rows",
                empty_intervals=empty.tolist(),
            )

    def _log_init(self) -> None:
        super()._log_init()
        o = self.options
        log.info(f"[{self.name}] Complexity source: '{o.complexity_source}'")
        log.info(f"[{self.name}] Initial: {o.initial_complexity_percentile}%, Final: {o.final_complexity_percentile}%")
        log.info(f"[{self.name}] Intervals: {o.num_intervals + 1} (1 initial + {o.num_intervals} progressive)")
        for i, (size, (a, b)) in enumerate(zip(self.interval_sizes, self._interval_ranges)):
            head = f"Interval 0 (Initial {o.initial_complexity_percentile}%)" if i == 0 else f"Interval {i}"
            log.info(f"  {head}: {size} samples, [{a:.3f}, {b:.3f}]")
        if self._val_metric is not None:
            log.info(f"[{self.name}] Gate: validation '{self._val_metric}' of '{o.complexity_source}' >= "
                     f"{o.reward_threshold:g}, checked once per validation result")
        elif o.gate_metric != SEQUENCE_REWARD:
            log.info(f"[{self.name}] Gate: EMA of '{o.gate_metric}' on '{o.complexity_source}' >= {o.reward_threshold:g}")

    @property
    def num_items(self) -> int:
        return int(self.bounds[self.level])

    @property
    def percentile(self) -> float:
        return float(self.level_percentiles[self.level])

    def interval_weights(self) -> np.ndarray:
        """Sampling weight of each unlocked interval (newest 1, older decay**age; normalized)."""
        n = self.level + 1
        if not self.options.focus_new_intervals:
            w = self.interval_sizes[:n].astype(np.float64)  # uniform over rows
        else:
            w = self.options.interval_decay ** np.arange(n - 1, -1, -1, dtype=np.float64)
            w[self.interval_sizes[:n] == 0] = 0.0
        return w / w.sum()

    def _draw_source(self, i: int, count: int) -> np.ndarray:
        if i != self._cur:
            return super()._draw_source(i, count)
        if not self.options.focus_new_intervals:
            return self._pools.draw("curriculum", self._cur_rows[: self.num_items], count)
        n = self.level + 1
        counts = largest_remainder(self.interval_weights(), count, self._iv_carry[:n])
        starts = np.concatenate([[0], self.bounds[:-1]])
        parts = [
            self._pools.draw(f"interval:{j}", self._cur_rows[starts[j]:self.bounds[j]], int(c))
            for j, c in enumerate(counts) if c > 0
        ]
        return np.concatenate(parts)

    @hookimpl
    def on_rewards_computed(self, step: int, batch: Batch) -> dict[str, float]:
        self._gate_obs = self._gate_sums(batch)
        try:
            return super().on_rewards_computed(step, batch)
        finally:
            self._gate_obs = None

    def _gate_sums(self, batch: Batch) -> tuple[np.ndarray, np.ndarray] | None:
        """Per-source sum and count of gate_metric's finite values; None when the gate is the reward."""
        col = self.options.gate_metric
        if col == SEQUENCE_REWARD or self._val_metric is not None or len(batch) == 0:
            return None
        if col not in batch:
            fns = [c for c in batch.columns if c.startswith(REWARD_FN_PREFIX)]
            raise BatchError(
                f"{self.name}: gate_metric {col!r} is not a column of the feedback batch. Reward extras: "
                f"{', '.join(batch.reward_extra_keys()) or '(none)'}; reward functions: {', '.join(fns) or '(none)'}; "
                f"always: reward. Set sampler.gate_metric to one of these (or have a reward function return "
                f"{col!r} in its extra info)."
            )
        try:
            sums, counts, _, _ = self._source_rewards(batch, col)
        except (TypeError, ValueError) as exc:
            raise BatchError(
                f"{self.name}: gate_metric {col!r} is not numeric (dtype {batch[col].dtype}): {exc}; "
                "name a numeric column such as acc or reward_fn/<name>"
            ) from None
        return sums, counts

    @hookimpl
    def on_validation_end(self, step: int, per_source: Mapping[str, Mapping[str, float]]) -> dict[str, float] | None:
        """A validation gate: the curriculum source's fresh result is compared with reward_threshold once."""
        if self._val_metric is None:
            return None
        o = self.options
        results = per_source.get(o.complexity_source)
        if results is None:
            if not self._val_warned:
                self._val_warned = True
                log.warning(
                    f"[{self.name}] the validation results of step {step} have no source '{o.complexity_source}' "
                    f"(they have: {', '.join(per_source) or 'none'}); the curriculum stays at level {self.level} "
                    f"until a validation covers it: add rows of '{o.complexity_source}' to the validation set"
                )
            return None
        if self._val_step is not None and step <= self._val_step:
            return None  # already acted on (a resumed engine may validate the checkpoint's step again)
        if self._val_metric not in results:
            raise DataError(
                f"{self.name}: gate_metric {o.gate_metric!r}: the validation results of source "
                f"'{o.complexity_source}' at step {step} have no {self._val_metric!r}; they have: "
                f"{', '.join(results)}. Set sampler.gate_metric to validation/<one of these> "
                f"(validation/score is the headline accuracy)"
            )
        value = float(results[self._val_metric])
        if not math.isfinite(value):
            log.warning(f"[{self.name}] validation {self._val_metric!r} of '{o.complexity_source}' at step {step} "
                        f"is {value}: ignored, the level stays {self.level}")
            return None
        self._val_value, self._val_step = value, int(step)
        if (
            self.level < o.num_intervals
            and self._batches_at_level >= o.min_batches_per_level
            and value >= o.reward_threshold
        ):
            self._level_up(value, f"Validation at step {step}: {o.gate_metric}")
        return self._extra_metrics()

    def _after_feedback(self, step: int, means: np.ndarray, counts: np.ndarray) -> None:
        o = self.options
        c = self._cur
        if self._val_metric is not None:  # the gate moves in on_validation_end
            self._batches_at_level += 1
            return
        if self._gate_obs is not None:
            sums, counts = self._gate_obs
            with np.errstate(over="ignore", invalid="ignore"):
                means = np.divide(sums, counts, out=np.full(len(sums), np.nan), where=counts > 0)
        if counts[c] > 0 and np.isfinite(means[c]):
            x = float(means[c])
            self._cur_ema = x if self._cur_ema is None else o.reward_alpha * x + (1 - o.reward_alpha) * self._cur_ema
        self._batches_at_level += 1
        if (
            self.level < o.num_intervals
            and self._feedback % o.check_frequency == 0
            and self._batches_at_level >= o.min_batches_per_level
            and self._cur_ema is not None
            and self._cur_ema >= o.reward_threshold
        ):
            gate = o.gate_metric
            what = "Reward" if gate == SEQUENCE_REWARD else f"{gate} EMA"  # the spec's line for the default gate
            self._level_up(self._cur_ema, f"Batch {self._feedback}: {what}")

    def _level_up(self, value: float, what: str) -> None:
        before = self.num_items
        self.level += 1
        self._batches_at_level = 0
        self._iv_carry[:] = 0.0
        log.info(BANNER)
        log.info(f"[{self.name}] LEVEL UP! {self.level - 1} → {self.level}")
        log.info(f"[{self.name}] {what} {value:.3f} >= {self.options.reward_threshold:g}")
        log.info(f"[{self.name}] Samples: {before} → {self.num_items}")
        log.info(BANNER)

    def _extra_metrics(self) -> dict[str, float]:
        out = {
            "curriculum/level": self.level,
            "curriculum/percentile": self.percentile,
            "curriculum/num_items": self.num_items,
            "curriculum/batches_at_level": self._batches_at_level,
        }
        if self._cur_ema is not None:
            out["curriculum/reward_ema"] = self._cur_ema
        if self._val_value is not None:
            out["curriculum/validation_value"] = self._val_value
            out["curriculum/validation_step"] = self._val_step
        return out

    def _extra_state(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "batches_at_level": self._batches_at_level,
            "curriculum_ema": self._cur_ema,
            "gate_metric": self.options.gate_metric,
            "interval_carry": self._iv_carry.tolist(),
            "validation_value": self._val_value,
            "validation_step": self._val_step,
        }

    def _load_extra(self, state: Mapping[str, Any]) -> None:
        level = int(state["level"])
        if not 0 <= level <= self.options.num_intervals:
            raise DataError(f"{self.name}: saved curriculum level {level} is outside 0..{self.options.num_intervals}")
        self.level = level
        self._batches_at_level = int(state["batches_at_level"])
        ema = state["curriculum_ema"]
        self._cur_ema = None if ema is None else float(ema)
        saved_gate = state.get("gate_metric", SEQUENCE_REWARD)  # states before gate_metric gated on the reward
        if saved_gate != self.options.gate_metric:
            log.warning(
                f"[{self.name}] the saved curriculum EMA is of '{saved_gate}', this run gates on "
                f"'{self.options.gate_metric}': "
                + ("the EMA restarts from the next feedback batch" if self._val_metric is None
                   else "the gate waits for the next validation") + f" (level {level} kept)"
            )
            self._cur_ema = None
            self._val_value = self._val_step = None
        else:  # states from before the validation gate have neither
            value, val_step = state.get("validation_value"), state.get("validation_step")
            self._val_value = None if value is None else float(value)
            self._val_step = None if val_step is None else int(val_step)
        self._iv_carry = np.asarray(state["interval_carry"], dtype=np.float64)
