"""DatasetColumns: the columns a sampler needs, read without materializing rows.

Samplers work on ``data_source`` (dictionary-encoded: small integer codes + source names) and
``complexity`` (``extra_info.complexity_score``, float32, NaN where a row has none). Reading a
parquet file touches only these two columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from typing import TYPE_CHECKING

import attrs
import numpy as np
import structlog

from rlhooks.core.errors import RLHooksError

if TYPE_CHECKING:  # pragma: no cover - pyarrow is imported where a column is read
    import pyarrow as pa

log = structlog.get_logger("rlhooks.data")

COMPLEXITY_FIELD = "extra_info.complexity_score"


class DataError(RLHooksError, ValueError):
    """A dataset lacks what a component needs."""


@attrs.define(eq=False)
class DatasetColumns:
    """Per-row source codes and complexity of a dataset.

    source_codes: int array, ``source_names[source_codes[i]]`` is row i's data_source.
    complexity: float array or None; NaN marks rows without a complexity score.
    """

    source_codes: np.ndarray
    source_names: tuple[str, ...]
    complexity: np.ndarray | None = None
    origin: str = "<memory>"

    def __attrs_post_init__(self) -> None:
        if self.complexity is not None and len(self.complexity) != len(self.source_codes):
            raise DataError(
                f"{self.origin}: complexity has {len(self.complexity)} rows, data_source has {len(self.source_codes)}"
            )

    def __len__(self) -> int:
        return len(self.source_codes)

    @property
    def data_source(self) -> np.ndarray:
        """Source names per row (object array; builds a per-row array, use for small data only)."""
        return np.asarray(self.source_names, dtype=object)[self.source_codes]

    def source_counts(self) -> dict[str, int]:
        counts = np.bincount(self.source_codes, minlength=len(self.source_names))
        return dict(zip(self.source_names, counts.tolist()))

    @classmethod
    def from_arrays(
        cls, data_source: Sequence[str] | np.ndarray, complexity: Sequence[float] | np.ndarray | None = None,
        origin: str = "<memory>",
    ) -> DatasetColumns:
        ds = np.asarray(data_source, dtype=object)
        missing = np.flatnonzero(np.array([v is None or v == "" for v in ds], dtype=bool)) if ds.size else []
        if len(missing):
            raise DataError(
                f"{origin}: {len(missing)} rows have no data_source (first at row {int(missing[0])}); "
                "every row needs a data_source naming its source"
            )
        bad = np.flatnonzero([not isinstance(v, (str, np.str_)) for v in ds.tolist()]) if ds.size else []
        if len(bad):
            raise DataError(
                f"{origin}: column 'data_source' must hold a string per row; row {int(bad[0])} holds "
                f"{_show(ds[bad[0]])} ({type(ds[bad[0]]).__name__})"
            )
        names, codes = np.unique(ds.astype(str), return_inverse=True)
        import pyarrow as pa

        comp = None if complexity is None else complexity_scores(pa.array(np.asarray(complexity, dtype=np.float64)), origin)
        return cls(_small_codes(codes, len(names)), tuple(names.tolist()), comp, origin)

    @classmethod
    def from_parquet(cls, path: str | Path, complexity: bool = True) -> DatasetColumns:
        """Read ``data_source`` (and ``extra_info.complexity_score``) from a parquet file."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = Path(path)
        if not path.exists():
            raise DataError(f"dataset file {path} does not exist")
        pf = pq.ParquetFile(path)
        names = set(pf.schema_arrow.names)
        if "data_source" not in names:
            raise DataError(
                f"{path}: no 'data_source' column (columns: {', '.join(sorted(names))}); "
                "multi-source samplers need a data_source per row"
            )
        if pf.metadata.num_rows == 0:
            raise DataError(f"{path}: the dataset has no rows; a sampler needs at least one row per source")
        src_type = pf.schema_arrow.field("data_source").type
        # read dictionary-encoded: no Python string per row
        dictionary = ["data_source"] if pa.types.is_string(src_type) or pa.types.is_large_string(src_type) else None
        table = pq.read_table(path, columns=["data_source"], read_dictionary=dictionary)
        codes, src_names = source_codes(table.column("data_source"), str(path))
        comp = None
        if complexity and "extra_info" in names:
            info = pf.schema_arrow.field("extra_info").type
            if pa.types.is_struct(info) and info.get_field_index("complexity_score") >= 0:
                ct = pq.read_table(path, columns=[COMPLEXITY_FIELD])
                comp = complexity_scores(ct.column(0), str(path))
        return cls(codes, src_names, comp, str(path))


def _first_row(mask: pa.Array | pa.ChunkedArray) -> int:
    import pyarrow.compute as pc

    return int(pc.index(mask, True).as_py())


def _show(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def source_codes(col: pa.Array | pa.ChunkedArray, origin: str) -> tuple[np.ndarray, tuple[str, ...]]:
    """A ``data_source`` column as (small integer codes, sorted source names); DataError naming the
    file, the column and the first bad row when a row has no string source."""
    import pyarrow as pa
    import pyarrow.compute as pc

    tp = col.type.value_type if pa.types.is_dictionary(col.type) else col.type
    if not (pa.types.is_string(tp) or pa.types.is_large_string(tp) or pa.types.is_integer(tp)):
        first = _first_row(pc.is_valid(col)) if len(col) and col.null_count < len(col) else 0
        example = f" (row {first} holds {_show(col[first].as_py())})" if len(col) else ""
        raise DataError(
            f"{origin}: column 'data_source' has type {col.type}; expected one string per row{example}"
        )
    if col.null_count:
        raise DataError(
            f"{origin}: {col.null_count} rows have a null data_source (first at row {_first_row(pc.is_null(col))}); "
            "every row needs a data_source"
        )
    if not pa.types.is_dictionary(col.type) or pa.types.is_integer(tp):
        col = pc.dictionary_encode(col.cast(pa.string()) if pa.types.is_integer(tp) else col)
    enc = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if enc.dictionary.null_count or len(set(enc.dictionary.to_pylist())) != len(enc.dictionary):
        enc = pc.dictionary_encode(enc.cast(enc.type.value_type))  # chunks with their own dictionaries
        enc = enc.combine_chunks() if isinstance(enc, pa.ChunkedArray) else enc
    src_names = [str(x) for x in enc.dictionary.to_pylist()]
    # Sort source names so codes do not depend on row order.
    order = np.argsort(src_names)
    remap = np.empty(len(order), np.int64)
    remap[order] = np.arange(len(order))
    codes = remap[enc.indices.to_numpy(zero_copy_only=False)]
    return _small_codes(codes, len(src_names)), tuple(sorted(src_names))


_FLOAT32_MAX = float(np.finfo(np.float32).max)


def complexity_scores(col: pa.Array | pa.ChunkedArray, origin: str) -> np.ndarray:
    """``extra_info.complexity_score`` as float32 with NaN for rows without a usable score.

    Null, NaN, +-inf and values beyond the float32 range all count as "no score" (a sampler
    treats those rows like rows without one) and are reported with accurate wording. A column
    that is not numeric is a DataError naming the first bad row.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    if not (pa.types.is_floating(col.type) or pa.types.is_integer(col.type) or pa.types.is_decimal(col.type)
            or pa.types.is_null(col.type)):
        first = _first_row(pc.is_valid(col)) if len(col) and col.null_count < len(col) else 0
        raise DataError(
            f"{origin}: column '{COMPLEXITY_FIELD}' has type {col.type}; expected a number per row "
            f"(row {first} holds {_show(col[first].as_py()) if len(col) else 'nothing'})"
        )
    values = np.asarray(col.cast(pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64)
    with np.errstate(invalid="ignore"):
        too_big = np.isfinite(values) & (np.abs(values) > _FLOAT32_MAX)
    # NaN and null already mean "no score"; these would become a wrong score or a crash
    kinds = {"+inf": values == np.inf, "-inf": values == -np.inf, "beyond the float32 range": too_big}
    bad = {k: m for k, m in kinds.items() if m.any()}
    if bad:
        every = np.logical_or.reduce(list(bad.values()))
        parts = ", ".join(f"{int(m.sum())} {k}" for k, m in bad.items())
        log.warning(
            f"{origin}: {int(every.sum())} rows have an {COMPLEXITY_FIELD} that is not a usable number ({parts}; "
            f"first at row {int(np.flatnonzero(every)[0])}); they are treated like rows without a score"
        )
        values = np.where(every, np.nan, values)
    return values.astype(np.float32)


def _small_codes(codes: np.ndarray, n_sources: int) -> np.ndarray:
    dtype = np.int8 if n_sources < 128 else np.int16 if n_sources < 32768 else np.int32
    return np.asarray(codes).astype(dtype, copy=False)
