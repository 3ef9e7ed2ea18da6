"""MultiSourceSampler: mix data sources with fixed or adaptive (reward-driven) weights.

Behaviour, option names, defaults and log lines follow the verl_extensions samplers
(shared/spec/multi_source_samplers.md). How it works:

* Rows are grouped once into one numpy index array per source (int32 below 2**31 rows).
* Batch composition: every ``batch_size`` indices form one batch whose per-source counts are
  the weights times the batch size, rounded by the largest-remainder method with the rounding
  error carried to the next batch (so long-run shares are exact, not biased to the first source).
* Within a source rows are drawn without replacement in passes over the source (a keyed
  pseudo-random permutation, see ``_draw.Pools``); the batch is then shuffled.
* ``__iter__`` is lazy: a batch's composition is decided when its first index is requested, so
  rewards fed back in between (``on_rewards_computed``) steer the very next batch.
* One "update" / "batch" in the options (``update_frequency`` here, the curricula's
  ``complexity_warmup_steps``, ``check_frequency``, ``min_batches_per_level``) is one
  ``on_rewards_computed`` call, i.e. the rewards of one generation batch.
* Randomness is counter-based (derived from the seed, the batch number and each pool's pass
  number), so ``state_dict()`` is a few numbers and resuming reproduces the uninterrupted run.

Sources in the data that ``source_weights`` does not name are excluded (never sampled) with a
warning; give them a weight to include them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

import attrs
import numpy as np
import structlog

from rlhooks import Batch, DataError, DatasetColumns, Sampler, build_options, factorize, hookimpl
from rlhooks.plugins.samplers._draw import (
    KeyedShuffle,
    Pools,
    clamp_ratio,
    largest_remainder,
    softmax_weights,
    weight_bounds,
)

log = structlog.get_logger("rlhooks.samplers")

STATE_VERSION = 2
#: version 1 (rlhooks 0.1) walked its passes in another order: its pool cursors are not reusable
OLD_STATE_VERSIONS = (1,)
_SHUFFLE_SALT = 0x5A17


# -- option validators (messages become "sampler.<key> (<plugin>): ..." in config errors) ----


def _positive_int(_inst: Any, attr: attrs.Attribute, value: int) -> None:
    if value < 1:
        raise ValueError(f"must be an integer >= 1, got {value!r}")


def _non_negative_int(_inst: Any, attr: attrs.Attribute, value: int) -> None:
    if value < 0:
        raise ValueError(f"must be an integer >= 0, got {value!r}")


def _positive_finite(_inst: Any, attr: attrs.Attribute, value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"must be a finite number > 0, got {value!r}")


def _unit_fraction(_inst: Any, attr: attrs.Attribute, value: float) -> None:
    if not (0 < value <= 1):
        raise ValueError(f"must be in (0, 1], got {value!r}")


def _ratio(_inst: Any, attr: attrs.Attribute, value: float) -> None:
    if not (math.isfinite(value) and value >= 1):
        raise ValueError(f"must be a finite number >= 1 (largest weight / smallest weight), got {value!r}")


def _weights(_inst: Any, attr: attrs.Attribute, value: Mapping[str, float]) -> None:
    bad = {k: v for k, v in value.items() if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0)}
    if bad:
        listed = ", ".join(f"{k}: {v!r}" for k, v in bad.items())
        raise ValueError(
            f"every weight must be a finite number > 0; got {listed}. "
            "Remove a source from source_weights to exclude it"
        )


@attrs.frozen(kw_only=True)
class MultiSourceOptions:
    """Options of MultiSourceSampler (also inherited by both curriculum samplers)."""

    #: weighted: use source_weights; proportional: weights proportional to source sizes
    sampling_strategy: Literal["weighted", "proportional"] = "weighted"
    #: weight per source (normalized); empty = every source in the data, weight 1
    source_weights: dict[str, float] = attrs.field(factory=dict, validator=_weights)
    adaptive_weights: bool = False
    #: EMA smoothing of each source's mean reward
    alpha: float = attrs.field(default=0.1, validator=_unit_fraction)
    #: feedback batches between weight updates
    update_frequency: int = attrs.field(default=5, validator=_positive_int)
    #: softmax temperature over -reward_ema (lower = more sensitive)
    temperature: float = attrs.field(default=1.0, validator=_positive_finite)
    #: largest allowed max(weight) / min(weight)
    max_source_ratio: float = attrs.field(default=3.0, validator=_ratio)


def coerce_options(cls: type, options: Any) -> Any:
    """Accept an Options instance, a mapping (validated like a config section) or None."""
    opts_cls = cls.Options
    if isinstance(options, opts_cls):
        return options
    if options is None:
        options = {}
    if isinstance(options, Mapping):
        return build_options(opts_cls, options, path="sampler", plugin=cls.__name__)
    raise TypeError(f"{cls.__name__} options must be a {opts_cls.__name__} or a mapping, got {type(options).__name__}")


class MultiSourceSampler(Sampler):
    """Weighted mix of data sources; optionally adapts the weights to per-source rewards."""

    Options: ClassVar[type] = MultiSourceOptions
    #: old registry names -> new name (config logs a deprecation warning when one is used)
    deprecated_names: ClassVar[dict[str, str]] = {}
    #: whether the dataset's complexity column is needed (curricula)
    needs_complexity: ClassVar[bool] = False

    def __init__(self, options: Any, data: DatasetColumns, *, batch_size: int, seed: int = 0) -> None:
        options = coerce_options(type(self), options)
        super().__init__(options, data, batch_size=batch_size, seed=seed)
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise DataError(f"{type(self).__name__}: batch_size must be an integer >= 1, got {batch_size!r}")
        self.batch_size = int(batch_size)
        self.seed = int(seed)
        self.name = type(self).__name__
        self._build_sources(options, data)
        n = len(self.sources)
        self._epoch_len = int(sum(len(r) for r in self._rows))
        self._carry = np.zeros(n)
        self._ema = np.full(n, np.nan)
        self._ema_count = np.zeros(n, dtype=np.int64)
        self._feedback = 0
        self._nan_total = 0
        self._unknown_total = 0
        self._batch_no = 0
        self._epoch = 0
        self._pos = 0
        self._batch = np.zeros(0, dtype=np.int64)
        self._offset = 0
        self._pools = Pools(self.seed)
        self._shuffle = KeyedShuffle(self.seed, _SHUFFLE_SALT)
        self._init_extra()
        self._log_init()

    # -- construction -------------------------------------------------------------------
    def _build_sources(self, opts: MultiSourceOptions, data: DatasetColumns) -> None:
        origin = data.origin
        n_rows = len(data)
        if n_rows == 0:
            raise DataError(f"{self.name}: dataset {origin} has no rows; there is nothing to sample")
        codes = np.asarray(data.source_codes)
        names = list(data.source_names)
        counts = np.bincount(codes, minlength=len(names))
        for bad in ("", "None", "nan"):
            if bad in names and counts[names.index(bad)]:
                first = int(np.flatnonzero(codes == names.index(bad))[0])
                raise DataError(
                    f"{self.name}: {counts[names.index(bad)]} rows of {origin} have no usable data_source "
                    f"(value {bad!r}, first at row {first}); every row needs the name of its source"
                )
        found = {nm: int(c) for nm, c in zip(names, counts) if c > 0}
        found_text = ", ".join(f"{k} ({v} rows)" for k, v in found.items())
        if opts.source_weights:
            unknown = [k for k in opts.source_weights if k not in found]
            if unknown:
                empty = [k for k in unknown if k in names]
                what = (
                    f"source {', '.join(map(repr, empty))} has no rows" if empty and len(empty) == len(unknown)
                    else f"source_weights names {', '.join(map(repr, unknown))}, which no row of the dataset has"
                )
                raise DataError(
                    f"{self.name}: {what}. Sources found in {origin}: {found_text}. "
                    "Fix the names in source_weights (they must equal the rows' data_source values)"
                )
            active = list(opts.source_weights)
            excluded = {k: v for k, v in found.items() if k not in opts.source_weights}
            if excluded:
                log.warning(
                    f"[{self.name}] Sources not named in source_weights are excluded (never sampled): "
                    + ", ".join(f"{k} ({v} rows)" for k, v in excluded.items())
                    + "; give them a weight to include them",
                    excluded=sorted(excluded),
                )
        else:
            active = list(found)
        self.excluded_sources = tuple(k for k in found if k not in active)
        self.sources: tuple[str, ...] = tuple(active)
        code_of = {nm: i for i, nm in enumerate(names)}
        # One stable radix sort of the small int codes groups every source's rows at once.
        order = np.argsort(codes, kind="stable")
        idx_dtype = np.int32 if n_rows < 2**31 else np.int64
        order = order.astype(idx_dtype)
        starts = np.concatenate([[0], np.cumsum(counts)])
        self._rows: list[np.ndarray] = []
        for src in active:
            c = code_of[src]
            self._rows.append(order[starts[c]:starts[c + 1]])
        if self.excluded_sources:  # keep only the active rows alive
            self._rows = [r.copy() for r in self._rows]
        del order
        self.source_sizes = np.array([len(r) for r in self._rows], dtype=np.int64)
        if opts.sampling_strategy == "proportional":
            base = self.source_sizes.astype(np.float64)
        else:
            base = np.array([float(opts.source_weights.get(s, 1.0)) for s in active])
        base = base / base.sum()
        self.base_weights = base
        self._weights = clamp_ratio(base, opts.max_source_ratio) if opts.adaptive_weights else base.copy()
        # dataset code -> active source index (-1: excluded), for feedback mapping
        self._name_to_active = {s: i for i, s in enumerate(active)}

    def _init_extra(self) -> None:
        """Subclass hook: build curriculum structures (may raise DataError)."""

    def _log_init(self) -> None:
        o = self.options
        mode = "adaptive" if o.adaptive_weights else "fixed"
        log.info(
            f"[{self.name}] Strategy: {o.sampling_strategy}, Mode: {mode}, "
            f"Sources: {len(self.sources)}, Batch size: {self.batch_size}"
        )
        for s, size, w in zip(self.sources, self.source_sizes, self._weights):
            log.info(f"  {s}: {size} samples (weight: {w:.3f})")
        if o.adaptive_weights:
            log.info(f"[{self.name}] Adaptive: alpha={o.alpha}, update_freq={o.update_frequency}, temp={o.temperature}")
            lo, hi = weight_bounds(len(self.sources), o.max_source_ratio)
            log.info(f"[{self.name}] Weight bounds: [{lo * 100:.1f}%, {hi * 100:.1f}%]")

    @classmethod
    def from_parquet(
        cls, path: str | Path, options: Any = None, *, batch_size: int, seed: int = 0
    ) -> MultiSourceSampler:
        """Build from a parquet file's ``data_source`` (+ ``extra_info.complexity_score``) columns."""
        data = DatasetColumns.from_parquet(path, complexity=cls.needs_complexity)
        return cls(options, data, batch_size=batch_size, seed=seed)

    # -- torch Sampler --------------------------------------------------------------------
    def __len__(self) -> int:
        """Indices per epoch: the number of rows of the sampled sources."""
        return self._epoch_len

    def __iter__(self) -> Iterator[int]:
        # All position state lives on self, so a fresh iterator after load_state_dict resumes.
        if self._pos >= self._epoch_len:
            self._epoch += 1
            self._pos = 0
            self._batch = self._batch[:0]
            self._offset = 0
        while self._pos < self._epoch_len:
            if self._offset >= len(self._batch):
                # decided now, not earlier: feedback that arrived since the last batch counts
                self._batch = self._compose(min(self.batch_size, self._epoch_len - self._pos))
                self._offset = 0
            i = self._batch[self._offset]
            self._offset += 1
            self._pos += 1
            yield int(i)

    def _compose(self, m: int) -> np.ndarray:
        """One batch of ``m`` row indices following the current weights."""
        counts = largest_remainder(self._weights, m, self._carry)
        parts = [self._draw_source(i, int(c)) for i, c in enumerate(counts) if c > 0]
        idx = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        self._shuffle.shuffle(idx, self._batch_no)
        self._batch_no += 1
        self.last_counts = dict(zip(self.sources, counts.tolist()))
        return idx.astype(np.int64, copy=False)

    def _draw_source(self, i: int, count: int) -> np.ndarray:
        return self._pools.draw(f"source:{self.sources[i]}", self._rows[i], count)

    def draw_batch(self, m: int | None = None) -> np.ndarray:
        """Compose one batch directly (benchmarks, dry runs); advances the same state as iteration."""
        return self._compose(self.batch_size if m is None else m)

    # -- feedback ---------------------------------------------------------------------------
    @property
    def weights(self) -> dict[str, float]:
        return dict(zip(self.sources, self._weights.tolist()))

    @property
    def reward_ema(self) -> dict[str, float]:
        return {s: float(e) for s, e in zip(self.sources, self._ema) if np.isfinite(e)}

    @hookimpl
    def on_rewards_computed(self, step: int, batch: Batch) -> dict[str, float]:
        """Per-source mean rewards of one generation batch (pre-filter) -> EMAs, weights, curriculum."""
        sums, counts, n_nan, n_unknown = self._source_rewards(batch)
        self._feedback += 1
        self._nan_total += n_nan
        self._unknown_total += n_unknown
        if n_nan:
            log.warning(
                f"[{self.name}] {n_nan} NaN/inf rewards in batch {self._feedback} ignored "
                f"({self._nan_total} so far); check the reward function",
                step=step,
            )
        if n_unknown and self._unknown_total == n_unknown:
            log.warning(f"[{self.name}] feedback rows from sources this sampler does not sample are ignored",
                        rows=n_unknown, step=step)
        with np.errstate(over="ignore", invalid="ignore"):
            means = np.divide(sums, counts, out=np.full(len(sums), np.nan), where=counts > 0)
        seen = (counts > 0) & np.isfinite(means)  # a sum of huge finite rewards may overflow: skip it
        a = self.options.alpha
        first = seen & (self._ema_count == 0)
        upd = seen & ~first
        self._ema[first] = means[first]  # the first observation initializes the EMA (no bias toward 0)
        self._ema[upd] = a * means[upd] + (1 - a) * self._ema[upd]
        self._ema_count += seen
        if self.options.adaptive_weights and self._feedback % self.options.update_frequency == 0:
            self._adapt()
        self._after_feedback(step, means, counts)
        metrics: dict[str, float] = {}
        for s, w, e in zip(self.sources, self._weights, self._ema):
            metrics[f"sampler/weight/{s}"] = float(w)
            if np.isfinite(e):
                metrics[f"sampler/reward_ema/{s}"] = float(e)
        metrics["sampler/nan_rewards"] = n_nan
        metrics["sampler/nan_rewards_total"] = self._nan_total
        metrics.update(self._extra_metrics())
        return metrics

    def _source_rewards(self, batch: Batch, column: str = "reward") -> tuple[np.ndarray, np.ndarray, int, int]:
        """Sum and count of a column's finite values per sampled source (default the sequence
        reward), non-finite count, unknown-source rows."""
        n = len(self.sources)
        if len(batch) == 0:
            return np.zeros(n), np.zeros(n, np.int64), 0, 0
        reward = np.asarray(batch[column], dtype=np.float64)
        # run-length factorization: ~20x cheaper than np.unique on object strings (a sort)
        names, inverse = factorize(np.asarray(batch["data_source"]))
        lut = np.array([self._name_to_active.get(str(nm), -1) for nm in names.tolist()], dtype=np.int64)
        code = lut[inverse]
        finite = np.isfinite(reward)
        ok = finite & (code >= 0)
        sums = np.bincount(code[ok], weights=reward[ok], minlength=n)
        counts = np.bincount(code[ok], minlength=n)
        return sums, counts, int(np.count_nonzero(~finite)), int(np.count_nonzero(finite & (code < 0)))

    def _adapt(self) -> None:
        ema = self._ema.copy()
        if not np.isfinite(ema).any():
            return  # nothing observed yet: keep the current weights
        ema[~np.isfinite(ema)] = ema[np.isfinite(ema)].mean()  # unobserved sources count as average
        o = self.options
        self._weights = clamp_ratio(softmax_weights(ema, o.temperature), o.max_source_ratio)
        log.info(f"[{self.name}] Batch {self._feedback} - Weight adjustment:")
        for s, e, w in zip(self.sources, self._ema, self._weights):
            log.info(f"  {s}: reward_ema={e:6.2f}, weight={w:.3f} ({w * 100:.1f}%)")
        log.info(f"  Actual max/min ratio: {self._weights.max() / self._weights.min():.2f}x")

    def _after_feedback(self, step: int, means: np.ndarray, counts: np.ndarray) -> None:
        """Subclass hook: curriculum progress after each feedback batch."""

    def _extra_metrics(self) -> dict[str, float]:
        return {}

    # -- state ----------------------------------------------------------------------------
    def _fingerprint(self) -> dict[str, Any]:
        return {
            "sampler": self.name,
            "sources": list(self.sources),
            "source_sizes": self.source_sizes.tolist(),
            "batch_size": self.batch_size,
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            **self._fingerprint(),
            "seed": self.seed,
            "epoch": self._epoch,
            "pos": self._pos,
            "batch_no": self._batch_no,
            "batch": self._batch[self._offset:].tolist(),  # the rest of a partly consumed batch
            "carry": self._carry.tolist(),
            "weights": self._weights.tolist(),
            "ema": [None if not np.isfinite(e) else float(e) for e in self._ema],
            "ema_count": self._ema_count.tolist(),
            "feedback": self._feedback,
            "nan_rewards": self._nan_total,
            "unknown_rows": self._unknown_total,
            "pools": self._pools.state_dict(),
            "extra": self._extra_state(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        mine = self._fingerprint()
        theirs = {k: state.get(k) for k in mine}
        version = state.get("version")
        if version not in (STATE_VERSION, *OLD_STATE_VERSIONS) or theirs != mine:
            diff = {k: (theirs[k], mine[k]) for k in mine if theirs[k] != mine[k]}
            raise DataError(
                f"{self.name}: cannot resume from this state: it was saved for a different sampler or dataset "
                f"(saved vs now: {diff or {'version': (state.get('version'), STATE_VERSION)}}). "
                "Resume with the same sampler options, dataset and batch size, or start without the saved state"
            )
        self.seed = int(state["seed"])
        self._pools = Pools(self.seed)
        self._shuffle = KeyedShuffle(self.seed, _SHUFFLE_SALT)
        self._pools.load_state_dict(state["pools"])
        if version != STATE_VERSION:
            self._pools.restart_passes()
            log.warning(
                f"[{self.name}] sampler state of version {version} (rlhooks 0.1): each source starts a new "
                "pass over its rows; weights, reward EMAs, curriculum and position in the epoch are restored"
            )
        self._epoch = int(state["epoch"])
        self._pos = int(state["pos"])
        self._batch_no = int(state["batch_no"])
        self._batch = np.asarray(state["batch"], dtype=np.int64)
        self._offset = 0
        self._carry = np.asarray(state["carry"], dtype=np.float64)
        self._weights = np.asarray(state["weights"], dtype=np.float64)
        self._ema = np.array([np.nan if e is None else e for e in state["ema"]], dtype=np.float64)
        self._ema_count = np.asarray(state["ema_count"], dtype=np.int64)
        self._feedback = int(state["feedback"])
        self._nan_total = int(state["nan_rewards"])
        self._unknown_total = int(state.get("unknown_rows", 0))
        self._load_extra(state.get("extra") or {})

    def _extra_state(self) -> dict[str, Any]:
        """State a subclass adds to ``state_dict()`` (the curricula: level, EMA, counters)."""
        return {}

    def _load_extra(self, state: Mapping[str, Any]) -> None:
        """Restore what ``_extra_state`` returned; the base sampler has none."""

    def __repr__(self) -> str:
        return f"{self.name}(sources={list(self.sources)}, batch_size={self.batch_size}, rows={self._epoch_len})"
