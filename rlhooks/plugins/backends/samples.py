"""Sample tables: a few concrete rows (prompt, response, target, rewards, ...) per step.

These components are not logging sinks. They run in the training thread: each generation batch
of a step is seen in ``on_rewards_computed`` (before any filter, so dropped groups count too), a
running selection of at most ``top + bottom`` rows (``k`` per source for ``per_source_samples``)
is kept, and at ``on_step_end`` the rows are emitted with ``run.log_table``; the manager sends the
table to every backend after the step's metrics.

Selection is vectorized over the batch's columns: ``np.partition`` finds the k-th value, only the
selected rows are then turned into Python dicts (``batch.select(idx)`` first, so lazy text
columns are produced for those rows only). Rows whose key is NaN are never selected.

Ties are broken deterministically by arrival: among equal keys the row that arrived first (earlier
generation batch, then lower row number in its batch) ranks first, for top and bottom alike.
When a step has fewer than ``top + bottom`` rows, every row appears exactly once (top rows are
chosen first, bottom rows from the rest).

Each emitted row starts with ``step``, ``selection`` ("top", "bottom" or "random") and ``rank``
(1 = highest for top, lowest for bottom), followed by the configured columns. The default columns
are the sample-logging document's fields: ``sample_id`` (one trajectory, stable for the run),
``policy_version`` (the step whose weights generated the response), ``policy_lag`` (updates it is
behind the weights it trains, asynchronous engines only), the group ``uid``, prompt,
response, target, rewards, ``advantage``, lengths. Rows chosen among the generated rows get their
``advantage`` at step end from the trained batch, matched by ``sample_id``; a row the filters
dropped (it did not train) has ``advantage: None``.
"""

from __future__ import annotations

import abc
import fnmatch
from typing import Any, ClassVar, Literal

import attrs
import numpy as np
import structlog

import rlhooks
from rlhooks import Batch, hookimpl, run_starts
from rlhooks.plugins.backends._common import non_negative, positive

log = structlog.get_logger("rlhooks.backends")

#: the sample-logging spec's fields as Batch columns, in table order; ``reward_fn/*`` expands to
#: the per-function rewards and ``@extras`` to the reward extras (acc, score, ...) of the batch
DEFAULT_COLUMNS = (
    rlhooks.SAMPLE_ID, rlhooks.POLICY_VERSION, rlhooks.POLICY_LAG, rlhooks.UID, rlhooks.INDEX, rlhooks.DATA_SOURCE, rlhooks.PROMPT,
    rlhooks.RESPONSE, rlhooks.TARGET, rlhooks.REWARD, rlhooks.FINAL_REWARD, rlhooks.REWARD_FN_PREFIX + "*", "@extras",
    rlhooks.ADVANTAGE, rlhooks.PROMPT_LENGTH, rlhooks.RESPONSE_LENGTH,
)
_EMPTY = np.zeros(0, dtype=np.int64)


# -- vectorized selection ------------------------------------------------------------------


def _extreme_k_positions(values: np.ndarray, k: int, largest: bool) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    n = len(values)
    if k <= 0 or n == 0:
        return _EMPTY
    nan = np.isnan(values)
    if nan.any():
        valid = np.flatnonzero(~nan)
        return valid[_extreme_k_positions(values[valid], k, largest)]
    if k < n:
        kth = np.partition(values, n - k if largest else k - 1)[n - k if largest else k - 1]
        beyond = np.flatnonzero(values > kth if largest else values < kth)  # fewer than k rows
        ties = np.flatnonzero(values == kth)[: k - len(beyond)]  # lowest positions win the ties
        cand = np.concatenate([beyond, ties])
    else:
        cand = np.arange(n)
    v = values[cand]
    return cand[np.lexsort((cand, -v if largest else v))]


def top_k_positions(values: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` largest values, best first; ties: lower position first; NaN never.

    O(n): one ``np.partition`` for the k-th value and two comparisons; only the k candidates are
    sorted.
    """
    return _extreme_k_positions(values, k, True)


def bottom_k_positions(values: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` smallest values, lowest first; ties: lower position first."""
    return _extreme_k_positions(values, k, False)


def grouped_top_k_positions(values: np.ndarray, codes: np.ndarray, k: int) -> np.ndarray:
    """Per group (``codes``), positions of its ``k`` largest values; ties: lower position first.

    Returned ordered by group code, then best first. One lexsort over the rows, no group loop.
    """
    values = np.asarray(values, dtype=np.float64)
    n = len(values)
    if k <= 0 or n == 0:
        return _EMPTY
    valid = np.flatnonzero(~np.isnan(values))
    if len(valid) < n:
        return valid[grouped_top_k_positions(values[valid], codes[valid], k)]
    pos = np.arange(n)
    order = np.lexsort((pos, -values, codes))
    starts = run_starts(codes[order])
    rank = pos - np.repeat(starts, np.diff(np.append(starts, n)))
    return order[rank < k]


# -- the components ------------------------------------------------------------------------


@attrs.define
class _Candidates:
    """The running selection of one step: at most a few rows, in arrival order."""

    step: int
    rows: list[dict[str, Any]] = attrs.field(factory=list)
    keys: np.ndarray = attrs.field(factory=lambda: np.zeros(0))
    groups: np.ndarray = attrs.field(factory=lambda: np.zeros(0, dtype=object))
    seen: int = 0  # rows seen this step (arrival counter)
    ids: np.ndarray | None = None  # each kept row's sample_id, when the batches have one


class _SampleTable(abc.ABC):
    """Shared machinery: column choice, per-step running selection, emission."""

    table_default: ClassVar[str] = "samples"
    grouped: ClassVar[bool] = False

    def __init__(self, options: Any) -> None:
        self.options = options
        self.run: Any = None
        self._cand: _Candidates | None = None
        self._warned: set[str] = set()

    @property
    def batch_columns(self) -> tuple[str, ...]:
        """The columns it reads for every row (to rank them); the columns it shows are read for the rows it
        shows (``batch.select`` first), on the steps it logs."""
        ranked = (getattr(self.options, "key", None), getattr(self, "group_column", None), rlhooks.SAMPLE_ID)
        return tuple(dict.fromkeys(c for c in ranked if c))

    # subclasses: the sort key of each row and how many top/bottom rows to keep
    def _keys(self, step: int, batch: Batch) -> np.ndarray:
        key = self.options.key
        if key not in batch:
            raise KeyError(
                f"{self.options.table}: the sort key {key!r} is not a column of this batch "
                f"(columns: {', '.join(batch.columns)}); set 'key' to one of them"
                + ("; 'advantage' exists only in the trained rows: set rows: trained" if key == rlhooks.ADVANTAGE else "")
            )
        return np.asarray(batch[key], dtype=np.float64)

    @abc.abstractmethod
    def _counts(self) -> tuple[int, int]:
        """How many rows to take from the top and from the bottom of a step's ranking."""

    def _labels(self) -> tuple[str, str]:
        return "top", "bottom"

    # -- hooks ----------------------------------------------------------------------------
    @hookimpl
    def on_run_start(self, run: Any) -> None:
        self.run = run

    @hookimpl
    def on_rewards_computed(self, step: int, batch: Batch) -> None:
        if self.options.rows == "generated" and self._active(step):
            self._add(step, batch)

    @hookimpl
    def on_step_end(self, step: int, batch: Batch) -> None:
        if not self._active(step):
            self._cand = None
            return
        if self.options.rows == "trained":
            self._cand = None
            self._add(step, batch)
        cand, self._cand = self._cand, None
        if cand is None or cand.step != step or not cand.rows:
            return
        if self.options.rows == "generated":
            self._attach_advantage(cand, batch)
        rows = self._finish(step, cand)
        if self.run is not None:
            self.run.log_table(self.options.table, rows, step=step)

    def _attach_advantage(self, cand: _Candidates, trained: Batch) -> None:
        """Generated rows get their ``advantage`` from the trained batch (by sample_id); None if not trained."""
        wanted = self.options.columns is None or rlhooks.ADVANTAGE in self.options.columns
        if not wanted or cand.ids is None or rlhooks.ADVANTAGE not in trained or rlhooks.SAMPLE_ID not in trained:
            return
        ids = np.asarray(trained[rlhooks.SAMPLE_ID], dtype=object)
        adv = np.asarray(trained[rlhooks.ADVANTAGE], dtype=np.float64)
        order = np.argsort(ids, kind="stable")
        sorted_ids = ids[order]
        pos = np.clip(np.searchsorted(sorted_ids, cand.ids), 0, max(len(ids) - 1, 0))
        found = (sorted_ids[pos] == cand.ids) if len(ids) else np.zeros(len(cand.ids), bool)
        values = adv[order[pos]] if len(ids) else np.zeros(len(cand.ids))
        for row, hit, value in zip(cand.rows, found.tolist(), values.tolist()):  # the few selected rows only
            row[rlhooks.ADVANTAGE] = value if hit else None

    def _active(self, step: int) -> bool:
        return step % self.options.every == 0

    # -- selection ------------------------------------------------------------------------
    def _columns(self, batch: Batch) -> list[str]:
        wanted = self.options.columns if self.options.columns is not None else DEFAULT_COLUMNS
        present = batch.columns
        out: list[str] = []
        for c in wanted:
            if c == "@extras":
                names = batch.reward_extra_keys()
            elif any(ch in c for ch in "*?["):
                names = sorted(fnmatch.filter(present, c))
            elif c in batch:
                names = [c]
            else:
                names = []
                if self.options.columns is not None and c not in self._warned:
                    self._warned.add(c)
                    log.warning(
                        f"{self.options.table}: column {c!r} is not in the batch; rows will not have it",
                        plugin=self.options.table, available=", ".join(present),
                    )
            out.extend(n for n in names if n not in out)
        for must in (self.options.key if hasattr(self.options, "key") else None, getattr(self, "group_column", None)):
            if must and must in batch and must not in out:
                out.append(must)
        return out

    def _pick(self, keys: np.ndarray, groups: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Top and bottom positions (bottom excludes top, so no row is picked twice)."""
        n_top, n_bot = self._counts()
        if groups is None:
            top = top_k_positions(keys, n_top)
            bot = bottom_k_positions(keys, n_bot)
            if len(np.intersect1d(top, bot, assume_unique=True)) == 0:
                return top, bot  # the usual case (more than top + bottom rows): disjoint already
            rest = np.ones(len(keys), dtype=bool)
            rest[top] = False
            rem = np.flatnonzero(rest)
            return top, rem[bottom_k_positions(keys[rem], n_bot)]
        _, codes = np.unique(groups, return_inverse=True)
        codes = codes.ravel()
        top = grouped_top_k_positions(keys, codes, n_top)
        rest = np.ones(len(keys), dtype=bool)
        rest[top] = False
        rem = np.flatnonzero(rest)
        return top, rem[grouped_top_k_positions(-keys[rem], codes[rem], n_bot)]

    def _add(self, step: int, batch: Batch) -> None:
        if len(batch) == 0:
            return
        cand = self._cand
        if cand is None or cand.step != step:
            cand = self._cand = _Candidates(step)
        keys = self._keys(step, batch)
        groups = np.asarray(batch[self.group_column]).astype(object) if self.grouped else None
        # candidates of this batch alone, then only those rows become Python dicts
        top, bot = self._pick(keys, groups)
        idx = np.unique(np.concatenate([top, bot]))
        cand.seen += len(batch)
        ids = np.asarray(batch[rlhooks.SAMPLE_ID], dtype=object)[idx] if rlhooks.SAMPLE_ID in batch else None
        # merge with the step's running selection; positions in arrival order keep ties stable
        all_keys = np.concatenate([cand.keys, keys[idx]])
        all_groups = np.concatenate([cand.groups, groups[idx]]) if groups is not None else cand.groups
        top, bot = self._pick(all_keys, all_groups if groups is not None else None)
        keep = np.unique(np.concatenate([top, bot]))
        # only this batch's rows that stay in the selection become Python dicts (their text read, decoded)
        old = len(cand.rows)
        new = keep[keep >= old] - old
        fresh = dict(zip(new.tolist(), batch.select(idx[new]).to_rows(self._columns(batch)))) if len(new) else {}
        cand.rows = [cand.rows[i] if i < old else fresh[i - old] for i in keep.tolist()]  # at most top + bottom
        cand.keys = all_keys[keep]
        if ids is not None and (cand.ids is not None or old == 0):
            all_ids = ids if cand.ids is None else np.concatenate([cand.ids, ids])
            cand.ids = all_ids[keep]
        else:
            cand.ids = None  # a batch without ids: no advantage lookup this step
        if groups is not None:
            cand.groups = all_groups[keep]

    def _finish(self, step: int, cand: _Candidates) -> list[dict[str, Any]]:
        top, bot = self._pick(cand.keys, cand.groups if self.grouped else None)
        top_label, bot_label = self._labels()
        out = []
        for label, positions in ((top_label, top), (bot_label, bot)):
            rank = 0
            prev_group: Any = object()
            for p in positions:
                g = cand.groups[p] if self.grouped else None
                rank = 1 if g != prev_group else rank + 1
                prev_group = g
                out.append({"step": step, "selection": label, "rank": rank, **cand.rows[p]})
        return out


def _opt_count(_inst: Any, attr: attrs.Attribute, value: Any) -> None:
    non_negative(_inst, attr, value)


class TopBottomKSamples(_SampleTable):
    """The ``top`` highest and ``bottom`` lowest rows of each step by ``key`` (default: reward)."""

    @attrs.frozen(kw_only=True)
    class Options:
        #: rows at each end; ``top`` / ``bottom`` override it for one end
        k: int = attrs.field(default=2, validator=non_negative)
        top: int | None = attrs.field(default=None, validator=_opt_count)
        bottom: int | None = attrs.field(default=None, validator=_opt_count)
        #: numeric column to rank by (reward, final_reward, acc, reward_fn/<name>, response_length, ...)
        key: str = rlhooks.REWARD
        #: columns (names or glob patterns) of each row; default: the sample-logging spec's fields
        columns: list[str] | None = None
        table: str = "samples/top_bottom_k"
        #: ``generated``: every row of the step, before filters (on_rewards_computed);
        #: ``trained``: the rows that trained (on_step_end), which have ``advantage``
        rows: Literal["generated", "trained"] = "generated"
        #: emit a table every N steps (other steps are not collected at all)
        every: int = attrs.field(default=1, validator=positive)

    def __init__(self, options: Options | None = None) -> None:
        super().__init__(options if options is not None else self.Options())

    def _counts(self) -> tuple[int, int]:
        o = self.options
        return (o.k if o.top is None else o.top), (o.k if o.bottom is None else o.bottom)


class PerSourceSamples(_SampleTable):
    """The top and bottom ``k`` rows of each data source per step."""

    grouped = True

    @attrs.frozen(kw_only=True)
    class Options:
        k: int = attrs.field(default=1, validator=non_negative)
        top: int | None = attrs.field(default=None, validator=_opt_count)
        bottom: int | None = attrs.field(default=None, validator=_opt_count)
        key: str = rlhooks.REWARD
        #: the column that names a row's source
        source_column: str = rlhooks.DATA_SOURCE
        columns: list[str] | None = None
        table: str = "samples/per_source"
        rows: Literal["generated", "trained"] = "generated"
        every: int = attrs.field(default=1, validator=positive)

    def __init__(self, options: Options | None = None) -> None:
        super().__init__(options if options is not None else self.Options())
        self.group_column = self.options.source_column

    def _counts(self) -> tuple[int, int]:
        o = self.options
        return (o.k if o.top is None else o.top), (o.k if o.bottom is None else o.bottom)


class RandomSamples(_SampleTable):
    """``k`` rows drawn uniformly without replacement from all rows of each step (seeded).

    Each row gets a random priority and the ``k`` lowest are kept, which is a uniform sample of
    the step's rows however they are split into generation batches. The priorities come from a
    generator seeded with (seed, step), so a rerun with the same seed draws the same rows.
    """

    @attrs.frozen(kw_only=True)
    class Options:
        k: int = attrs.field(default=4, validator=non_negative)
        #: default: the run's seed
        seed: int | None = None
        columns: list[str] | None = None
        table: str = "samples/random"
        rows: Literal["generated", "trained"] = "generated"
        every: int = attrs.field(default=1, validator=positive)

    def __init__(self, options: Options | None = None) -> None:
        super().__init__(options if options is not None else self.Options())
        self._rng: np.random.Generator | None = None
        self._rng_step: int | None = None

    def _keys(self, step: int, batch: Batch) -> np.ndarray:
        if self._rng is None or self._rng_step != step:
            seed = self.options.seed if self.options.seed is not None else (self.run.seed if self.run else 0)
            self._rng = np.random.default_rng([int(seed), int(step)])
            self._rng_step = step
        return self._rng.random(len(batch))

    def _counts(self) -> tuple[int, int]:
        return 0, self.options.k

    def _labels(self) -> tuple[str, str]:
        return "top", "random"
