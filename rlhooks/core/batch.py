"""Batch: the engine-neutral, columnar view of one rollout batch.

A Batch holds equally long 1-D numpy columns; a row is a prompt (``on_batch_sampled``) or a
trajectory (``on_rewards_computed`` / ``on_step_end``). Engines build it from their own objects
(the verl shim from a DataProto) without copying what nobody reads: a column may be *lazy*, a
callable that produces the array on first access (decoded text, for example).

Group helpers (``batch.groups``) factorize ``uid`` once and reduce per group with bincount-style
numpy operations, so filters and metrics never loop over rows in Python.

Columns are read-only views: a hook or filter that writes into the batch it was given gets
numpy's "read-only" ValueError, which the run manager reports naming the plugin.
"""

from __future__ import annotations

import ctypes

from collections.abc import Callable, Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

# Standard column names. Engines fill what they have; plugins read what they need.
UID = "uid"  # group id: all responses of one prompt share it
INDEX = "index"  # dataset row index (int64)
DATA_SOURCE = "data_source"  # source name (str)
COMPLEXITY = "complexity"  # extra_info.complexity_score (float, NaN if absent)
REWARD = "reward"  # sequence reward: sum of token-level scores (float)
FINAL_REWARD = "final_reward"  # sum of token-level rewards, i.e. after a KL penalty (float)
ADVANTAGE = "advantage"  # sequence-level advantage (float)
SAMPLE_ID = "sample_id"  # one trajectory, stable for the run (survives filtering, reordering, concat)
POLICY_VERSION = "policy_version"  # the step whose weights generated the response (int64; 0 = initial weights)
TRAINED_VERSION = "trained_version"  # the policy version the step that trains on the row starts from (int64)
POLICY_LAG = "policy_lag"  # trained_version - policy_version (int64 >= 0): updates the response is behind; 0 = on-policy
PROMPT = "prompt"
RESPONSE = "response"
TARGET = "target"  # ground truth
PROMPT_LENGTH = "prompt_length"
RESPONSE_LENGTH = "response_length"
REWARD_FN_PREFIX = "reward_fn/"  # per-function reward components: reward_fn/<name>

LazyColumn = Callable[[], np.ndarray]


class RowLazy:
    """A lazy column that can produce any subset of its rows, e.g. decode only those.

    ``fn(rows)`` returns the values for the given source rows (``None`` = all rows). Selecting
    rows from a batch composes the row indices, so only the selected rows are ever decoded.
    A plain zero-argument callable also works as a lazy column, but is produced whole first.
    """

    __slots__ = ("fn", "rows")

    def __init__(self, fn: Callable[[np.ndarray | None], Any], rows: np.ndarray | None = None):
        self.fn = fn
        self.rows = rows

    def take(self, idx: np.ndarray) -> RowLazy:
        return RowLazy(self.fn, idx if self.rows is None else self.rows[idx])

    def __call__(self) -> np.ndarray:
        return np.asarray(self.fn(self.rows))


def _read_only(arr: np.ndarray) -> np.ndarray:
    """A read-only view (a flag, not a copy): a hook writing into a column it was handed raises
    instead of changing what the other hooks, the filters and the trainer see."""
    if arr.flags.writeable:
        arr = arr.view()
        arr.setflags(write=False)  # half the cost of assigning arr.flags.writeable
    return arr


#: what the error of a write into a batch column says to do (see ``is_read_only_write``)
READ_ONLY_HINT = ("batch columns are read-only for every hook and filter: copy a column before changing it "
                  "(values = np.array(batch['reward'])), or return new columns from the hook's result")


def is_read_only_write(exc: BaseException) -> bool:
    """numpy's error for a write into a read-only array (item assignment, ``out=``, in-place sort)."""
    return isinstance(exc, ValueError) and "read-only" in str(exc)


class BatchError(ValueError):
    """A batch is malformed (ragged columns, a missing column a plugin needs, ...)."""


class Batch:
    """Columnar batch of equally long 1-D numpy arrays, some possibly lazy.

    ``meta`` holds batch-level facts (``step``, ``generation``, ``n``, ``reward_extra_keys``,
    ``reward_functions``); it is exposed read-only.
    """

    __slots__ = ("_cols", "_lazy", "_len", "_meta", "_groups")

    def __init__(
        self,
        columns: Mapping[str, Any] | None = None,
        *,
        lazy: Mapping[str, LazyColumn] | None = None,
        meta: Mapping[str, Any] | None = None,
        length: int | None = None,
    ) -> None:
        cols: dict[str, np.ndarray] = {}
        n = length
        for name, values in (columns or {}).items():
            arr = np.asarray(values)
            if arr.ndim != 1:
                raise BatchError(f"column {name!r} must be 1-D, got shape {arr.shape}")
            if n is None:
                n = len(arr)
            elif len(arr) != n:
                raise BatchError(f"column {name!r} has {len(arr)} rows, expected {n} (ragged batch)")
            cols[name] = _read_only(arr)
        if n is None and lazy:
            raise BatchError("a batch with only lazy columns needs an explicit length=")
        self._cols = cols
        self._lazy: dict[str, LazyColumn] = dict(lazy or {})
        self._len = int(n or 0)
        self._meta = MappingProxyType(dict(meta or {}))
        self._groups: GroupIndex | None = None

    # -- basic access -------------------------------------------------------------------
    def __len__(self) -> int:
        return self._len

    def __contains__(self, name: object) -> bool:
        return name in self._cols or name in self._lazy

    def __getitem__(self, name: str) -> np.ndarray:
        try:
            return self._cols[name]
        except KeyError:
            pass
        if name in self._lazy:
            arr = np.asarray(self._lazy.pop(name)())
            if arr.shape != (self._len,):
                raise BatchError(f"lazy column {name!r} produced shape {arr.shape}, expected ({self._len},)")
            arr = self._cols[name] = _read_only(arr)
            return arr
        raise BatchError(
            f"batch has no column {name!r}; available columns: {', '.join(self.columns) or '(none)'}"
        )

    def get(self, name: str, default: Any = None) -> Any:
        return self[name] if name in self else default

    @property
    def columns(self) -> list[str]:
        """All column names, materialized and lazy."""
        return [*self._cols, *self._lazy]

    @property
    def materialized(self) -> list[str]:
        return list(self._cols)

    def is_lazy(self, name: str) -> bool:
        return name in self._lazy

    @property
    def meta(self) -> Mapping[str, Any]:
        return self._meta

    def reward_components(self) -> dict[str, np.ndarray]:
        """Per-function reward components, ``{function name: values}``."""
        n = len(REWARD_FN_PREFIX)
        return {c[n:]: self[c] for c in self.columns if c.startswith(REWARD_FN_PREFIX)}

    def reward_extra_keys(self) -> list[str]:
        """Reward extras (``acc``, ``score``, ...) present as columns."""
        return [k for k in self._meta.get("reward_extra_keys", ()) if k in self]

    def __iter__(self) -> Iterator[str]:
        return iter(self.columns)

    def __repr__(self) -> str:
        lazy = f", lazy={list(self._lazy)}" if self._lazy else ""
        return f"Batch(len={self._len}, columns={list(self._cols)}{lazy})"

    # -- derivation (never mutates self) ------------------------------------------------
    def with_columns(self, _lazy: Mapping[str, LazyColumn] | None = None, **columns: Any) -> Batch:
        """A new batch with added or replaced columns (arrays are shared, not copied)."""
        cols = {**self._cols, **columns}
        lazy = {k: v for k, v in self._lazy.items() if k not in columns}
        lazy.update(_lazy or {})
        for k in lazy:
            cols.pop(k, None)
        return Batch(cols, lazy=lazy, meta=self._meta, length=self._len)

    def with_meta(self, **meta: Any) -> Batch:
        out = Batch(self._cols, lazy=self._lazy, meta={**self._meta, **meta}, length=self._len)
        out._groups = self._groups
        return out

    def select(self, rows: np.ndarray | slice | Iterable[int]) -> Batch:
        """Rows by boolean mask, integer indices or slice; lazy columns stay lazy."""
        if isinstance(rows, slice):
            idx = np.arange(self._len)[rows]
        else:
            idx = np.asarray(rows)
            if idx.dtype == bool:
                if idx.shape != (self._len,):
                    raise BatchError(f"keep mask has shape {idx.shape}, batch has {self._len} rows")
                idx = np.flatnonzero(idx)
            elif idx.size == 0:
                idx = idx.astype(np.int64)
            elif not np.issubdtype(idx.dtype, np.integer):
                raise BatchError(f"select() takes a bool mask or integer indices, got dtype {idx.dtype}")
        cols = {k: v[idx] for k, v in self._cols.items()}
        lazy = {k: f.take(idx) if isinstance(f, RowLazy) else _lazy_take(f, idx) for k, f in self._lazy.items()}
        return Batch(cols, lazy=lazy, meta=self._meta, length=len(idx))

    @staticmethod
    def concat(batches: Iterable[Batch], meta: Mapping[str, Any] | None = None) -> Batch:
        """Rows of several batches; columns must match. A column lazy in any batch stays lazy
        (concatenated on first access), so text nobody reads is never decoded."""
        batches = list(batches)
        if not batches:
            return Batch(meta=meta)
        names = batches[0].columns
        for i, b in enumerate(batches[1:], 1):
            if set(b.columns) != set(names):
                diff = set(b.columns) ^ set(names)
                raise BatchError(f"cannot concat: batch {i} differs in columns {sorted(diff)}")
        cols = {k: np.concatenate([b[k] for b in batches]) for k in names if not any(b.is_lazy(k) for b in batches)}
        lazy: dict[str, LazyColumn] = {
            k: (lambda k=k: np.concatenate([b[k] for b in batches])) for k in names if k not in cols
        }
        return Batch(cols, lazy=lazy, meta=batches[0].meta if meta is None else meta, length=sum(map(len, batches)))

    # -- groups -------------------------------------------------------------------------
    @property
    def groups(self) -> GroupIndex:
        """Groups of rows sharing a ``uid`` (computed once per batch)."""
        if self._groups is None:
            self._groups = GroupIndex.from_keys(self[UID])
        return self._groups

    def to_rows(self, columns: Iterable[str] | None = None, rows: np.ndarray | None = None) -> list[dict]:
        """Plain-Python dicts for a few rows (tables); not for hot paths."""
        names = list(columns) if columns is not None else self.columns
        names = [c for c in names if c in self]
        idx = np.arange(self._len) if rows is None else np.asarray(rows)
        data = {c: self[c][idx].tolist() for c in names}
        return [{c: data[c][i] for c in names} for i in range(len(idx))]


def _lazy_take(fn: LazyColumn, idx: np.ndarray) -> LazyColumn:
    # a plain callable can only produce every row: produce them, then index
    return lambda: np.asarray(fn())[idx]


class GroupIndex:
    """Factorized group keys with vectorized per-group reductions.

    ``codes[i]`` is the group number of row ``i`` (groups numbered in order of first
    appearance), ``sizes[g]`` the row count of group ``g``.
    """

    __slots__ = ("codes", "keys", "sizes", "first_row", "contiguous")

    def __init__(self, codes: np.ndarray, keys: np.ndarray, first_row: np.ndarray, contiguous: bool):
        self.codes = codes
        self.keys = keys
        self.first_row = first_row
        self.sizes = np.bincount(codes, minlength=len(keys)) if len(codes) else np.zeros(0, np.int64)
        self.contiguous = contiguous

    @classmethod
    def from_keys(cls, keys: np.ndarray) -> GroupIndex:
        keys = np.asarray(keys)
        n = len(keys)
        if n == 0:
            e = np.zeros(0, np.int64)
            return cls(e, keys[:0], e, True)
        # Fast path: engines emit each group's rows contiguously (verl repeats interleaved),
        # so run boundaries are the groups when the run heads are all distinct.
        starts = run_starts(keys)
        heads = keys[starts]
        if len(set(heads.tolist())) == len(heads):
            # repeat over run lengths: ~25x cheaper than a cumsum of the bool boundaries
            codes = np.repeat(np.arange(len(starts), dtype=np.int64), np.diff(starts, append=n))
            return cls(codes, heads, starts, True)
        uniq, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")  # number groups by first appearance
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        return cls(rank[inverse.ravel()].astype(np.int64), uniq[order], first[order], False)

    @property
    def n_groups(self) -> int:
        return len(self.keys)

    def __len__(self) -> int:
        return len(self.keys)

    def sum(self, values: np.ndarray) -> np.ndarray:
        return np.bincount(self.codes, weights=np.asarray(values, dtype=np.float64), minlength=self.n_groups)

    def mean(self, values: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return self.sum(values) / self.sizes

    def std(self, values: np.ndarray) -> np.ndarray:
        """Population std per group (ddof=0), two-pass for accuracy; NaN in a group -> NaN."""
        v = np.asarray(values, dtype=np.float64)
        mean = self.mean(v)
        dev = v - mean[self.codes]
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.sqrt(np.bincount(self.codes, weights=dev * dev, minlength=self.n_groups) / self.sizes)

    def min(self, values: np.ndarray) -> np.ndarray:
        return self._extreme(values, np.minimum, np.inf)

    def max(self, values: np.ndarray) -> np.ndarray:
        return self._extreme(values, np.maximum, -np.inf)

    def _extreme(self, values: np.ndarray, ufunc: np.ufunc, identity: float) -> np.ndarray:
        v = np.asarray(values, dtype=np.float64)
        if self.contiguous:  # reduceat over run starts: one C pass
            return ufunc.reduceat(v, self.first_row) if len(v) else np.zeros(0)
        out = np.full(self.n_groups, identity)
        ufunc.at(out, self.codes, v)
        return out

    def any(self, mask: np.ndarray) -> np.ndarray:
        return np.bincount(self.codes, weights=np.asarray(mask, dtype=np.float64), minlength=self.n_groups) > 0

    def broadcast(self, group_values: np.ndarray) -> np.ndarray:
        """Per-group values back onto rows."""
        return np.asarray(group_values)[self.codes]


def run_starts(labels: np.ndarray) -> np.ndarray:
    """Row numbers where a run of equal labels begins (one vectorized comparison).

    Object arrays (strings): engines repeat a prompt's row object n times, so neighbours are mostly
    the *same* object. Their addresses are compared first (integers); only where the object changes
    are the values compared, since two distinct objects may still be equal. Comparing every pair of
    strings was most of the cost of per-source metrics.
    """
    labels = np.asarray(labels)
    if labels.dtype == object and labels.ndim == 1 and len(labels) > 1:
        addr = _addresses(labels)
        changed = np.flatnonzero(addr[1:] != addr[:-1])
        differs = np.asarray(labels[changed + 1] != labels[changed], dtype=bool)
        return np.concatenate(([0], changed[differs] + 1))
    boundary = np.empty(len(labels), dtype=bool)
    boundary[:1] = True
    np.not_equal(labels[1:], labels[:-1], out=boundary[1:])
    return np.flatnonzero(boundary)


def _addresses(labels: np.ndarray) -> np.ndarray:
    """The object pointers of a 1-D object array, as integers (numpy refuses an integer view of an
    object array, so the pointer buffer is read through ctypes and copied while ``arr`` is alive)."""
    arr = np.ascontiguousarray(labels)
    pointers = (ctypes.c_ssize_t * len(arr)).from_address(arr.ctypes.data)
    return np.frombuffer(pointers, dtype=np.intp).copy()


def factorize(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct labels in order of first appearance, code per row), in O(rows) for any number of labels.

    Run-length encode first (one vectorized comparison: a group's rows share a source, so runs
    are long), then hash the run heads: ``dict.fromkeys`` and a ``map`` over the heads run in C,
    so the cost is O(rows + runs) whatever the number of distinct labels. ``np.unique`` on
    object strings sorts with Python comparisons and is ~20x slower; it remains the fallback for
    unhashable labels and NaN (which is unequal to itself).
    """
    labels = np.asarray(labels)
    names, starts, run_codes = factorize_runs(labels)
    if starts is None:  # the sorting fallback already coded every row
        return names, run_codes
    return names, np.repeat(run_codes, np.diff(starts, append=len(labels)))  # cheaper than a cumsum


def factorize_runs(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """``factorize`` by runs: (distinct labels, start row of each run of equal labels, code of each run).

    For per-label sums, reduce each run first (``np.add.reduceat(values, starts)``) and then the
    runs by code (``np.bincount(run_codes, ...)``): no code per row is ever built. When the labels
    need the sorting fallback (NaN, unhashable), ``starts`` is None and the codes are per row.
    """
    labels = np.asarray(labels)
    n = len(labels)
    if n == 0:
        return labels[:0], np.zeros(0, np.int64), np.zeros(0, np.int64)
    if labels.dtype == object and labels.ndim == 1 and n > 1:
        return _factorize_object_runs(labels)
    starts = run_starts(labels)
    heads = labels[starts]
    if heads.dtype.kind in "fc" and np.isnan(heads).any():  # NaN is unequal to itself
        names, codes = _factorize_sorted(labels)
        return names, None, codes
    head_list = heads.tolist()
    try:
        code_of = {label: code for code, label in enumerate(dict.fromkeys(head_list))}
    except TypeError:  # unhashable labels
        names, codes = _factorize_sorted(labels)
        return names, None, codes
    head_codes = np.fromiter(map(code_of.__getitem__, head_list), dtype=np.int64, count=len(head_list))
    # codes are numbered in order of appearance: a code's first head is where the running max grows
    first_head = np.flatnonzero(np.diff(np.maximum.accumulate(head_codes), prepend=-1))
    return heads[first_head], starts, head_codes


def _factorize_object_runs(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """factorize_runs for object labels (strings): engines repeat a few label objects, so runs and
    codes are found on the objects' addresses (integers), and only the few distinct objects are
    hashed by value (two objects with one value get one code)."""
    addr = _addresses(labels)
    starts = np.concatenate(([0], np.flatnonzero(addr[1:] != addr[:-1]) + 1))
    uniq, inverse = np.unique(addr[starts], return_inverse=True)
    inverse = inverse.ravel()
    first = np.full(len(uniq), len(starts))
    np.minimum.at(first, inverse, np.arange(len(starts)))  # each object's first run
    order = np.argsort(first)  # distinct objects in order of first appearance (firsts are distinct)
    objects = labels[starts[first[order]]].tolist()
    try:
        code_of = {label: code for code, label in enumerate(dict.fromkeys(objects))}
    except TypeError:  # unhashable labels
        names, codes = _factorize_sorted(labels)
        return names, None, codes
    if any(label != label for label in code_of):  # NaN is unequal to itself
        names, codes = _factorize_sorted(labels)
        return names, None, codes
    code_by_object = np.empty(len(uniq), np.int64)
    code_by_object[order] = [code_of[o] for o in objects]
    names = np.empty(len(code_of), dtype=object)
    names[:] = list(code_of)
    return names, starts, code_by_object[inverse]


def _factorize_sorted(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """factorize() by sorting; labels of mixed types (None or NaN among strings) compare as text."""
    try:
        uniq, first, inv = np.unique(labels, return_index=True, return_inverse=True)
    except TypeError:  # '<' between str and float/None
        uniq, first, inv = np.unique(labels.astype(str), return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return uniq[order], rank[inv.ravel()].astype(np.int64)
