"""Per-source batch composition and reward, for the rows that trained and for all generated rows.

Metrics (``<name>`` is a ``data_source`` value):

trained rows (the ``on_step_end`` batch, after filtering and trimming)
    source/<name>/count            trajectory rows from this source (0 when a source was
                                   generated this step but none of its rows trained)
    source/<name>/reward           mean of the ``reward`` column (sum of token-level scores)
    source/<name>/acc              mean of the ``acc`` reward extra, when the batch has it
everything generated in the step (every ``on_rewards_computed`` batch of the step, before filters)
    source/<name>/generated_count
    source/<name>/generated_reward
    source/<name>/generated_acc

On by default: ``run.source_metrics: true`` (the default) adds this plugin to every run whose
``rewards:`` does not list it, and that instance skips batches without a ``data_source`` column.
``run.source_metrics: false`` turns it off; listing it in ``rewards:`` sets its options.

Means ignore NaN/inf values (the DAPO filter counts those); a source whose values are all
non-finite gets no mean that step. Work per batch is one factorization of the source column
plus bincounts; the only Python loops are over the distinct sources.
"""

from __future__ import annotations

from typing import Any, Literal

import attrs
import numpy as np

from rlhooks import DATA_SOURCE, REWARD, Batch, factorize, hookimpl

ACC = "acc"


@attrs.frozen(kw_only=True)
class SourceMetricsOptions:
    #: also report every generated row (pre-filter) as source/<name>/generated_*
    generated: bool = True
    #: column naming the source
    source_column: str = DATA_SOURCE
    #: a batch without that column: "error" (a plugin error) or "skip" it (what the instance that
    #: ``run.source_metrics`` adds by default does)
    missing_source: Literal["error", "skip"] = "error"


def source_sums(batch: Batch, source_column: str = DATA_SOURCE) -> dict[str, np.ndarray]:
    """Per-source sums for one batch: names, count, and (sum, finite count) of reward and acc."""
    names, codes = factorize(batch[source_column])
    k = len(names)
    out: dict[str, np.ndarray] = {"names": names, "count": np.bincount(codes, minlength=k).astype(np.float64)}
    for col in (REWARD, ACC):
        if col not in batch:
            continue
        v = np.asarray(batch[col], dtype=np.float64)
        if np.isfinite(v.sum()):  # a finite sum means no NaN/inf: skip the masking passes
            out[f"{col}_sum"] = np.bincount(codes, weights=v, minlength=k)
            out[f"{col}_n"] = out["count"]
        else:
            ok = np.isfinite(v)
            out[f"{col}_sum"] = np.bincount(codes, weights=np.where(ok, v, 0.0), minlength=k)
            out[f"{col}_n"] = np.bincount(codes, weights=ok, minlength=k)
    return out


class _Totals:
    """Running per-source sums across the generation batches of one step."""

    __slots__ = ("count", "sums")

    def __init__(self) -> None:
        self.count: dict[str, float] = {}
        self.sums: dict[str, dict[str, float]] = {}

    def add(self, part: dict[str, np.ndarray]) -> None:
        names = [str(n) for n in part["names"].tolist()]
        for i, name in enumerate(names):  # over distinct sources, not rows
            self.count[name] = self.count.get(name, 0.0) + float(part["count"][i])
            acc = self.sums.setdefault(name, {})
            for key in ("reward_sum", "reward_n", "acc_sum", "acc_n"):
                if key in part:
                    acc[key] = acc.get(key, 0.0) + float(part[key][i])


def _emit(totals: _Totals, suffix: str, out: dict[str, float]) -> None:
    for name, count in totals.count.items():
        out[f"source/{name}/{suffix}count"] = int(count)
        sums = totals.sums.get(name, {})
        for col in (REWARD, ACC):
            n = sums.get(f"{col}_n", 0.0)
            if n > 0:
                out[f"source/{name}/{suffix}{col}"] = sums[f"{col}_sum"] / n


class SourceMetrics:
    """``source/<name>/count|reward|acc`` for trained rows and ``generated_*`` for all generated rows."""

    Options = SourceMetricsOptions

    def __init__(self, options: SourceMetricsOptions | None = None) -> None:
        self.options = options if options is not None else SourceMetricsOptions()
        self._step: int | None = None
        self._generated = _Totals()

    def _skip(self, batch: Batch) -> bool:
        return self.options.missing_source == "skip" and self.options.source_column not in batch

    @hookimpl
    def on_rewards_computed(self, step: int, batch: Batch) -> None:
        if not self.options.generated or len(batch) == 0 or self._skip(batch):
            return None
        if self._step != step:  # a new step: earlier generations were emitted or belong to a failed step
            self._step, self._generated = step, _Totals()
        self._generated.add(source_sums(batch, self.options.source_column))
        return None

    @hookimpl
    def on_step_end(self, step: int, batch: Batch) -> dict[str, Any]:
        out: dict[str, float] = {}
        trained = _Totals()
        if len(batch) and not self._skip(batch):
            trained.add(source_sums(batch, self.options.source_column))
        generated = self._generated if self._step == step else _Totals()
        for name in generated.count:  # sources generated but not trained show count 0
            trained.count.setdefault(name, 0.0)
        _emit(trained, "", out)
        if self.options.generated:
            _emit(generated, "generated_", out)
        self._step, self._generated = None, _Totals()
        return out
