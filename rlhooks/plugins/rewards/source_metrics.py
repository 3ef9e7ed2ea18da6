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
non-finite gets no mean that step. Work per batch is one run-length factorization of the source column (runs summed with
``np.add.reduceat``, then the runs by source)
plus bincounts; the only Python loops are over the distinct sources.
"""

from __future__ import annotations

from typing import Any, Literal

import attrs
import numpy as np

from rlhooks import DATA_SOURCE, REWARD, Batch, factorize_runs, hookimpl

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
    names, starts, codes = factorize_runs(batch[source_column])
    k = len(names)
    if starts is None:  # codes per row (labels that needed the sorting fallback): every row is a run
        starts = np.arange(len(codes))

    def per_source(values: np.ndarray) -> np.ndarray:
        # each run of one source summed first (a group's rows are contiguous), then the runs by source
        return np.bincount(codes, weights=np.add.reduceat(values, starts), minlength=k) if len(starts) else np.zeros(k)

    lengths = np.diff(starts, append=len(batch)).astype(np.float64)
    out: dict[str, np.ndarray] = {"names": names, "count": np.bincount(codes, weights=lengths, minlength=k)}
    for col in (REWARD, ACC):
        if col not in batch:
            continue
        v = np.asarray(batch[col], dtype=np.float64)
        if np.isfinite(v.sum()):  # a finite sum means no NaN/inf: skip the masking passes
            out[f"{col}_sum"] = per_source(v)
            out[f"{col}_n"] = out["count"]
        else:
            ok = np.isfinite(v)
            out[f"{col}_sum"] = per_source(np.where(ok, v, 0.0))
            out[f"{col}_n"] = per_source(ok.astype(np.float64))
    return out


class _Totals:
    """Running per-source sums across the generation batches of one step."""

    __slots__ = ("count", "sums")

    def __init__(self) -> None:
        self.count: dict[str, float] = {}
        self.sums: dict[str, dict[str, float]] = {}

    def add(self, part: dict[str, np.ndarray]) -> None:
        names = [str(n) for n in part["names"].tolist()]
        counts = part["count"].tolist()  # Python floats once, not a numpy scalar per source and key
        columns = [(key, part[key].tolist()) for key in ("reward_sum", "reward_n", "acc_sum", "acc_n") if key in part]
        for i, name in enumerate(names):  # over distinct sources, not rows
            self.count[name] = self.count.get(name, 0.0) + counts[i]
            acc = self.sums.setdefault(name, {})
            for key, values in columns:
                acc[key] = acc.get(key, 0.0) + values[i]


def _emit_sums(part: dict[str, np.ndarray], suffix: str, out: dict[str, float]) -> list[str]:
    """``_emit`` for the sums of one batch (``source_sums``), straight from its arrays; returns the names."""
    names = [str(n) for n in part["names"].tolist()]
    counts = part["count"].tolist()
    means = []
    for col in (REWARD, ACC):
        if f"{col}_sum" in part:
            n = part[f"{col}_n"]
            has = n > 0
            means.append((col, (part[f"{col}_sum"] / np.where(has, n, 1.0)).tolist(), has.tolist()))
    for i, name in enumerate(names):
        prefix = f"source/{name}/{suffix}"
        out[prefix + "count"] = int(counts[i])
        for col, mean, has in means:
            if has[i]:
                out[prefix + col] = mean[i]
    return names


_SUM_KEYS = tuple((col, f"{col}_sum", f"{col}_n") for col in (REWARD, ACC))


def _emit(totals: _Totals, suffix: str, out: dict[str, float]) -> None:
    empty: dict[str, float] = {}
    for name, count in totals.count.items():
        prefix = f"source/{name}/{suffix}"
        out[prefix + "count"] = int(count)
        sums = totals.sums.get(name, empty)
        for col, sum_key, n_key in _SUM_KEYS:
            n = sums.get(n_key, 0.0)
            if n > 0:
                out[prefix + col] = sums[sum_key] / n


class SourceMetrics:
    """``source/<name>/count|reward|acc`` for trained rows and ``generated_*`` for all generated rows."""

    Options = SourceMetricsOptions

    def __init__(self, options: SourceMetricsOptions | None = None) -> None:
        self.options = options if options is not None else SourceMetricsOptions()
        #: the columns it reads (an engine reading from a store reads only what its plugins declare)
        self.batch_columns = (self.options.source_column, REWARD, ACC)
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
        trained: list[str] = []
        if len(batch) and not self._skip(batch):  # one batch: emitted from its arrays, no running totals
            trained = _emit_sums(source_sums(batch, self.options.source_column), "", out)
        generated = self._generated if self._step == step else _Totals()
        for name in generated.count.keys() - set(trained):  # generated but not trained: count 0
            out[f"source/{name}/count"] = 0
        if self.options.generated:
            _emit(generated, "generated_", out)
        self._step, self._generated = None, _Totals()
        return out
