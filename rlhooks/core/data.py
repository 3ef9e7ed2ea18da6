"""DatasetColumns: the columns a sampler needs, read without materializing rows.

Samplers work on ``data_source`` (dictionary-encoded: small integer codes + source names) and
``complexity`` (``extra_info.complexity_score``, float32, NaN where a row has none). Reading a
parquet file touches only these two columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import attrs
import numpy as np

from rlhooks.core.errors import RLHooksError

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
        names, codes = np.unique(ds.astype(str), return_inverse=True)
        comp = None if complexity is None else np.asarray(complexity, dtype=np.float32)
        return cls(_small_codes(codes, len(names)), tuple(names.tolist()), comp, origin)

    @classmethod
    def from_parquet(cls, path: str | Path, complexity: bool = True) -> DatasetColumns:
        """Read ``data_source`` (and ``extra_info.complexity_score``) from a parquet file."""
        import pyarrow.compute as pc
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
        # read dictionary-encoded: no Python string per row
        table = pq.read_table(path, columns=["data_source"], read_dictionary=["data_source"])
        col = table.column("data_source")
        if col.null_count:
            first = int(pc.index(pc.is_null(col), True).as_py())
            raise DataError(
                f"{path}: {col.null_count} rows have a null data_source (first at row {first}); "
                "every row needs a data_source"
            )
        enc = col.combine_chunks() if hasattr(col.type, "value_type") else pc.dictionary_encode(col).combine_chunks()
        if enc.dictionary.null_count or len(set(enc.dictionary.to_pylist())) != len(enc.dictionary):
            enc = pc.dictionary_encode(enc.cast(enc.type.value_type)).combine_chunks()  # chunks with own dicts
        src_names = [str(x) for x in enc.dictionary.to_pylist()]
        codes = enc.indices.to_numpy(zero_copy_only=False)
        # Sort source names so codes do not depend on row order.
        order = np.argsort(src_names)
        remap = np.empty(len(order), np.int64)
        remap[order] = np.arange(len(order))
        codes = remap[codes]
        comp = None
        if complexity and "extra_info" in names:
            try:
                ct = pq.read_table(path, columns=[COMPLEXITY_FIELD])
                c = ct.column(0).combine_chunks()
                comp = c.to_numpy(zero_copy_only=False).astype(np.float32)
            except (KeyError, ValueError, IndexError, TypeError) as exc:  # no such nested field
                if "complexity_score" in str(exc) or isinstance(exc, KeyError):
                    comp = None
                else:
                    raise
        return cls(
            _small_codes(codes, len(src_names)), tuple(sorted(src_names)), comp, str(path)
        )


def _small_codes(codes: np.ndarray, n_sources: int) -> np.ndarray:
    dtype = np.int8 if n_sources < 128 else np.int16 if n_sources < 32768 else np.int32
    return np.asarray(codes).astype(dtype, copy=False)
