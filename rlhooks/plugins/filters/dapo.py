"""DAPO dynamic sampling: drop groups whose responses all score the same.

Rule (the DAPO recipe's): per group (rows sharing a ``uid``), keep it when the population std
of its metric is > 0 or it has a single response. Optionally a band-pass on the group mean
(verl issue #2791): keep only groups whose mean metric lies in ``[min_mean, max_mean]``.
The two rules are ANDed; the band applies to singleton groups too.

Differences from the recipe, on purpose:

* "std > 0" is decided exactly, as ``max > min`` over the group. The recipe's ``np.std`` of a
  constant group such as twelve 0.1 scores comes out as 1.4e-17 through rounding (group sizes
  that are not powers of two) and keeps it.
* A group with a NaN or +-inf value has an undefined std (the recipe's ``np.std`` gives NaN and
  ``NaN > 0`` is false), so it is dropped, unless it is a singleton (kept, as in the recipe).
  Non-finite values are counted in ``filter/nonfinite_rows`` / ``filter/nonfinite_groups``.

Accumulation across generation batches and trimming live in core (rlhooks.core.driver); this
filter only judges one generation batch. All work is vectorized over the batch's GroupIndex.
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np

from rlhooks import FINAL_REWARD, REWARD, UID, Batch, BatchError, FilterDecision


#: metric names that do not name a column directly
METRIC_ALIASES = {"seq_reward": REWARD, "seq_final_reward": FINAL_REWARD}


def _metric_name(_inst: Any, _attr: attrs.Attribute, value: str) -> None:
    if not value or not value.strip():
        raise ValueError("must name a metric: acc, score, seq_reward, seq_final_reward or a reward extra")


def _finite_or_none(_inst: Any, attr: attrs.Attribute, value: float | None) -> None:
    if value is not None and not np.isfinite(value):
        raise ValueError(f"must be a finite number or null, got {value!r}")


@attrs.frozen(kw_only=True)
class DapoOptions:
    #: acc | score | any reward extra | seq_reward (column "reward") | seq_final_reward (column "final_reward")
    metric: str = attrs.field(default="acc", validator=_metric_name)
    #: band-pass: drop groups whose mean metric is below this (inclusive bound; null = no bound)
    min_mean: float | None = attrs.field(default=None, validator=_finite_or_none)
    #: band-pass: drop groups whose mean metric is above this (inclusive bound; null = no bound)
    max_mean: float | None = attrs.field(default=None, validator=_finite_or_none)
    #: keep only groups with some spread (the DAPO rule); false leaves only the band-pass
    require_variance: bool = True
    #: the metric's best / worst value, for filter/dropped_all_max / _min; null = for "acc" 1 / 0,
    #: otherwise the largest / smallest finite value in the generation batch
    max_value: float | None = attrs.field(default=None, validator=_finite_or_none)
    min_value: float | None = attrs.field(default=None, validator=_finite_or_none)

    def __attrs_post_init__(self) -> None:
        if self.min_mean is not None and self.max_mean is not None and self.min_mean > self.max_mean:
            raise ValueError(f"min_mean ({self.min_mean}) must be <= max_mean ({self.max_mean})")


class DapoGroupFilter:
    """Keep groups with a spread in their metric (and, optionally, a mean within a band).

    ``select`` returns a FilterDecision whose metrics are additive counts for one generation
    batch (the driver sums them over a step):

    filter/dropped_constant   groups (size > 1) dropped because every response had the same finite value
    filter/dropped_all_max    of those, groups whose value equals the metric's max (all correct for acc)
    filter/dropped_all_min    of those, groups whose value equals the metric's min (all wrong for acc);
                              a group equal to both (max == min) counts in both
    filter/dropped_nonfinite  groups (size > 1) dropped because a value was NaN or +-inf
    filter/dropped_band       groups that passed the variance rule but whose mean was outside
                              [min_mean, max_mean] (NaN/inf means are outside)

    dropped_constant + dropped_nonfinite + dropped_band = generated groups - kept groups.
    filter/nonfinite_rows     rows whose metric was NaN or +-inf (kept or not)
    filter/nonfinite_groups   groups with at least one such row
    filter/singleton_groups   groups with a single response (kept by the variance rule)
    """

    Options = DapoOptions

    def __init__(self, options: DapoOptions | None = None) -> None:
        self.options = options if options is not None else DapoOptions()
        self.column = METRIC_ALIASES.get(self.options.metric, self.options.metric)
        #: the columns it reads (an engine reading from a store reads only what its plugins declare)
        self.batch_columns = (UID, self.column)

    def metric_values(self, batch: Batch) -> np.ndarray:
        """The metric per row as float64, or a clear error naming what the batch offers."""
        if self.column not in batch:
            extras = batch.reward_extra_keys()
            raise BatchError(
                f"dapo filter: metric {self.options.metric!r} (column {self.column!r}) is not in the batch. "
                f"Reward extras available: {', '.join(extras) or '(none)'}; "
                f"always available: seq_reward, seq_final_reward (when the engine sets final_reward). "
                f"Set the filter's metric option to one of these, or have the reward function return "
                f"{self.options.metric!r} in its extra info. Batch columns: {', '.join(batch.columns)}."
            )
        raw = batch[self.column]
        try:
            return np.asarray(raw, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise BatchError(
                f"dapo filter: metric {self.options.metric!r} (column {self.column!r}) is not numeric "
                f"(dtype {raw.dtype}): {exc}"
            ) from None

    def select(self, batch: Batch) -> FilterDecision:
        opts = self.options
        n = len(batch)
        if n == 0:
            return FilterDecision(np.zeros(0, dtype=bool), {})
        if UID not in batch:
            raise BatchError(
                f"dapo filter needs the {UID!r} column to group responses; columns: {', '.join(batch.columns)}"
            )
        v = self.metric_values(batch)
        g = batch.groups
        finite = np.isfinite(v)
        n_bad = len(v) - int(np.count_nonzero(finite))
        if n_bad:
            bad_group = g.any(~finite)
            vz = np.where(finite, v, 0.0)  # keep NaN out of min/max so "constant" is about finite groups
        else:  # the usual case: skip the masking passes
            bad_group = np.zeros(g.n_groups, dtype=bool)
            vz = v
        singleton = g.sizes == 1
        gmin, gmax = g.min(vz), g.max(vz)
        spread = (gmax > gmin) & ~bad_group
        constant = ~spread & ~bad_group & ~singleton

        # Every dropped group is counted once: by the variance rule (constant or non-finite),
        # else by the band.
        if opts.require_variance:
            keep_g = spread | singleton
            dropped_const = constant
            dropped_bad = bad_group & ~singleton
        else:
            keep_g = np.ones(g.n_groups, dtype=bool)
            dropped_const = dropped_bad = np.zeros(g.n_groups, dtype=bool)
        band_drop = np.zeros(g.n_groups, dtype=bool)
        if opts.min_mean is not None or opts.max_mean is not None:
            mean = g.mean(vz)
            in_band = ~bad_group  # a NaN/inf value makes the mean undefined: outside any band
            if opts.min_mean is not None:
                in_band &= mean >= opts.min_mean
            if opts.max_mean is not None:
                in_band &= mean <= opts.max_mean
            band_drop = keep_g & ~in_band
            keep_g &= in_band

        hi, lo = self._extremes(v, finite)
        metrics = {
            "filter/dropped_constant": int(np.count_nonzero(dropped_const)),
            "filter/dropped_all_max": int(np.count_nonzero(dropped_const & (gmax == hi))),
            "filter/dropped_all_min": int(np.count_nonzero(dropped_const & (gmin == lo))),
            "filter/dropped_band": int(np.count_nonzero(band_drop)),
            "filter/dropped_nonfinite": int(np.count_nonzero(dropped_bad)),
            "filter/nonfinite_rows": n_bad,
            "filter/nonfinite_groups": int(np.count_nonzero(bad_group)),
            "filter/singleton_groups": int(np.count_nonzero(singleton)),
        }
        return FilterDecision(keep_g[g.codes], metrics)

    def _extremes(self, v: np.ndarray, finite: np.ndarray) -> tuple[float, float]:
        opts = self.options
        hi, lo = opts.max_value, opts.min_value
        if opts.metric == "acc":
            hi = 1.0 if hi is None else hi
            lo = 0.0 if lo is None else lo
        if hi is None or lo is None:
            fv = v[finite]
            if hi is None:
                hi = float(fv.max()) if fv.size else np.nan
            if lo is None:
                lo = float(fv.min()) if fv.size else np.nan
        return hi, lo
