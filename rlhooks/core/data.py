"""DatasetColumns: the columns a sampler needs, read without materializing rows.

Samplers work on ``data_source`` (dictionary-encoded: small integer codes + source names) and
``complexity`` (``extra_info.complexity_score``, float32, NaN where a row has none). Reading a
parquet file touches only these two columns.

A sampler that needs more declares it: ``columns = ("extra_info.difficulty", "prompt_chars")`` on
its class. Each declared column is read once, when the engine builds the sampler, as one float32
per row (NaN where a row has none; 4 bytes a row: 40 MB per column at 10M rows) into
``data.extra[name]`` (``data.column(name)``). A name is a numeric (or boolean) column of the
dataset, top-level (``difficulty``) or a field of a struct (``extra_info.difficulty``), or
``prompt_chars``: the characters of each row's prompt (a string, or the sum of a chat list's
``content``), computed in slices from the prompt column without keeping its text.
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
#: a declared column derived from the prompt: its length in characters
PROMPT_CHARS = "prompt_chars"
#: rows per slice when a declared column is computed from the prompt text (bounds the text held at once)
PROMPT_SLICE_ROWS = 65_536


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
    #: columns a sampler declared (``Sampler.columns``): name -> float32 per row, NaN where absent
    extra: dict[str, np.ndarray] = attrs.field(factory=dict)

    def __attrs_post_init__(self) -> None:
        if self.complexity is not None and len(self.complexity) != len(self.source_codes):
            raise DataError(
                f"{self.origin}: complexity has {len(self.complexity)} rows, data_source has {len(self.source_codes)}"
            )
        for name, values in self.extra.items():
            if len(values) != len(self.source_codes):
                raise DataError(f"{self.origin}: column {name!r} has {len(values)} rows, data_source has {len(self.source_codes)}")

    def column(self, name: str) -> np.ndarray:
        """A declared column (float32 per row, NaN where a row has none)."""
        try:
            return self.extra[name]
        except KeyError:
            loaded = ", ".join(sorted(self.extra)) or "none"
            raise DataError(
                f"{self.origin}: column {name!r} was not loaded (loaded: {loaded}); declare it on the sampler "
                f"class, columns = ({name!r},), and the engine reads it once when it builds the sampler"
            ) from None

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
    def from_parquet(cls, path: str | Path, complexity: bool = True, columns: Sequence[str] = ()) -> DatasetColumns:
        """Read ``data_source`` (and ``extra_info.complexity_score``, and the declared ``columns`` into
        ``extra``) from a parquet file."""
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
        extra = read_parquet_columns(path, columns) if columns else {}
        return cls(codes, src_names, comp, str(path), extra=extra)


def declared_columns(component: object) -> tuple[str, ...]:
    """The dataset columns a sampler class (or instance) declares in ``columns`` (checked)."""
    names = getattr(component, "columns", ()) or ()
    if isinstance(names, str) or not all(isinstance(n, str) and n for n in names):
        raise DataError(f"{getattr(component, '__name__', type(component).__name__)}.columns must be a tuple of "
                        f"column names such as ('extra_info.difficulty', 'prompt_chars'), got {names!r}")
    return tuple(dict.fromkeys(names))


def read_parquet_columns(path: str | Path, names: Sequence[str]) -> dict[str, np.ndarray]:
    """Declared columns of a parquet file as float32 arrays (only those columns are read)."""
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(path)
    out: dict[str, np.ndarray] = {}
    for name in names:
        if name == PROMPT_CHARS:
            if "prompt" not in pf.schema_arrow.names:
                raise DataError(f"{path}: {PROMPT_CHARS!r} is computed from a 'prompt' column, which this file has not")
            parts = [prompt_chars(b.column(0), str(path)) for b in pf.iter_batches(PROMPT_SLICE_ROWS, columns=["prompt"])]
            out[name] = np.concatenate(parts) if parts else np.zeros(0, np.float32)
            continue
        _field(pf.schema_arrow, name, str(path))  # a clear error before pyarrow's own
        table = pq.read_table(path, columns=[name])
        out[name] = numeric_column(table.column(0), name, str(path))
    return out


def read_table_columns(table: pa.Table, names: Sequence[str], origin: str) -> dict[str, np.ndarray]:
    """Declared columns of an in-memory Arrow table (a verl dataset's frame), as float32 arrays."""
    import pyarrow.compute as pc

    out: dict[str, np.ndarray] = {}
    for name in names:
        if name == PROMPT_CHARS:
            if "prompt" not in table.column_names:
                raise DataError(f"{origin}: {PROMPT_CHARS!r} is computed from a 'prompt' column, which this dataset has not")
            col = table.column("prompt")
            parts = [prompt_chars(col.slice(i, PROMPT_SLICE_ROWS), origin) for i in range(0, len(col), PROMPT_SLICE_ROWS)]
            out[name] = np.concatenate(parts) if parts else np.zeros(0, np.float32)
            continue
        _field(table.schema, name, origin)
        top, *rest = name.split(".")
        col = table.column(top)
        for part in rest:
            col = pc.struct_field(col, part)
        out[name] = numeric_column(col, name, origin)
    return out


def _field(schema: pa.Schema, name: str, origin: str) -> None:
    """DataError naming the file and what it has, unless ``name`` (dotted into structs) is a field."""
    import pyarrow as pa

    top, *rest = name.split(".")
    if top not in schema.names:
        raise DataError(f"{origin}: no column {top!r} for the declared column {name!r} "
                        f"(columns: {', '.join(sorted(schema.names))})")
    tp = schema.field(top).type
    for i, part in enumerate(rest):
        if not pa.types.is_struct(tp) or tp.get_field_index(part) < 0:
            have = [tp.field(j).name for j in range(tp.num_fields)] if pa.types.is_struct(tp) else []
            where = ".".join([top, *rest[:i]])
            raise DataError(f"{origin}: {where!r} has no field {part!r} for the declared column {name!r}"
                            + (f" (fields: {', '.join(sorted(have))})" if have else f" ({where!r} is {tp}, not a struct)"))
        tp = tp.field(tp.get_field_index(part)).type


def numeric_column(col: pa.Array | pa.ChunkedArray, name: str, origin: str) -> np.ndarray:
    """A declared column as float32, NaN for nulls; DataError naming the first bad row unless numeric."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not (pa.types.is_floating(col.type) or pa.types.is_integer(col.type) or pa.types.is_decimal(col.type)
            or pa.types.is_boolean(col.type) or pa.types.is_null(col.type)):
        first = _first_row(pc.is_valid(col)) if len(col) and col.null_count < len(col) else 0
        raise DataError(f"{origin}: declared column {name!r} has type {col.type}; only numeric or boolean columns are "
                        f"loaded (row {first} holds {_show(col[first].as_py()) if len(col) else 'nothing'})")
    if pa.types.is_boolean(col.type):
        col = col.cast(pa.int8())
    return np.asarray(col.cast(pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float32)


def prompt_chars(col: pa.Array | pa.ChunkedArray, origin: str) -> np.ndarray:
    """Characters of each prompt: a string's length, or the sum over a chat list's ``content`` (float32)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    tp = arr.type
    if pa.types.is_string(tp) or pa.types.is_large_string(tp):
        return np.asarray(pc.utf8_length(arr).fill_null(0).to_numpy(zero_copy_only=False), dtype=np.float32)
    if (pa.types.is_list(tp) or pa.types.is_large_list(tp)) and pa.types.is_struct(tp.value_type) \
            and tp.value_type.get_field_index("content") >= 0:
        content = pc.struct_field(pc.list_flatten(arr), "content")
        lengths = pc.utf8_length(content).fill_null(0).to_numpy(zero_copy_only=False)
        parents = pc.list_parent_indices(arr).to_numpy(zero_copy_only=False)
        return np.bincount(parents, weights=lengths, minlength=len(arr)).astype(np.float32)
    raise DataError(f"{origin}: {PROMPT_CHARS!r} needs 'prompt' as a string or a chat list of {{role, content}}; "
                    f"it is {tp}")


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
