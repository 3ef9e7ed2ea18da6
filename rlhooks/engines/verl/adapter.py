"""What both verl trainers share of DataProto / TensorDict <-> Batch: the dataset row index
(:class:`RowIndexedDataset`, ``ROW_KEY``), the sampler's dataset columns, the lazy column builders
(decoded text, dict fields, reward extras) and verl's validation metrics per source. The legacy trainer's
DataProto <-> Batch is ``legacy/adapter.py``; V1's is ``v1/batches.py``.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from rlhooks.core import batch as cols
from rlhooks.core.data import (
    PROMPT_CHARS,
    DataError,
    DatasetColumns,
    complexity_scores,
    read_table_columns,
    source_codes,
)
from rlhooks.core.metrics import VALIDATION_SCORE

#: non-tensor key carrying the dataset row a prompt was drawn from
ROW_KEY = "rlhooks_row"


# -- the dataset row index ----------------------------------------------------------------------


class RowIndexedDataset(Dataset):
    """A verl dataset whose rows also carry their own position (``rlhooks_row``).

    verl's ``index`` is ``extra_info.index``, a user field that need not be the row position
    (several files, filtered prompts). Samplers that learn from rewards need the position they
    drew, so the shim wraps the train dataset; every other attribute is the wrapped dataset's.
    """

    def __init__(self, inner: Dataset):
        self.inner = inner

    def __len__(self) -> int:
        return len(self.inner)  # type: ignore[arg-type]

    def __getitem__(self, item: int) -> dict[str, Any]:
        row = self.inner[item]
        row[ROW_KEY] = int(item)
        return row

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # during unpickling, before __dict__ is restored
            raise AttributeError(name)
        return getattr(self.inner, name)


def dataset_columns(dataset: Any, needed_by: str = "an rlhooks sampler", columns: Sequence[str] = ()) -> DatasetColumns:
    """``data_source`` and ``extra_info.complexity_score`` of a verl dataset, without its rows
    (``needed_by``: the configured components that read them, named in errors), and the ``columns``
    a sampler declares (``Sampler.columns``) as float32 arrays in ``extra``.

    Reads the columns of the dataset's HuggingFace ``dataframe`` as Arrow (after verl's own
    filtering and selection, so positions match what the dataloader indexes).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    inner = dataset.inner if isinstance(dataset, RowIndexedDataset) else dataset
    frame = getattr(inner, "dataframe", None)
    origin = f"train dataset {type(inner).__name__} ({', '.join(map(str, getattr(inner, 'data_files', []) or []))})"
    if frame is None or not hasattr(frame, "select_columns"):
        raise DataError(
            f"{origin}: {needed_by} needs the dataset's data_source column, read from a "
            f"HuggingFace `dataframe` attribute (verl's RLHFDataset has one); this dataset has none.\n"
            f"  Use verl's RLHFDataset (data.custom_cls unset), or remove that component from the rlhooks config."
        )
    names = set(frame.column_names)
    if "data_source" not in names:
        raise DataError(f"{origin}: {needed_by} needs a 'data_source' column (columns: {', '.join(sorted(names))})")
    wanted = ["data_source"] + (["extra_info"] if "extra_info" in names else [])
    wanted += [top for top in dict.fromkeys("prompt" if c == PROMPT_CHARS else c.split(".")[0] for c in columns)
               if top in names and top not in wanted]
    table: pa.Table = frame.select_columns(wanted).with_format("arrow")[:]
    if table.num_rows == 0:
        raise DataError(f"{origin}: the train dataset has no rows (after verl's filtering)")
    codes, source_names = source_codes(table.column("data_source"), origin)  # typed and null checks there
    complexity = None
    if "extra_info" in wanted:
        info = table.column("extra_info").combine_chunks()
        if pa.types.is_struct(info.type) and info.type.get_field_index("complexity_score") >= 0:
            complexity = complexity_scores(pc.struct_field(info, "complexity_score"), origin)
    extra = read_table_columns(table, columns, origin) if columns else {}
    return DatasetColumns(codes, source_names, complexity, origin, extra=extra)


# -- trajectory ids ------------------------------------------------------------------------------


# -- lazy column builders (both trainers) ---------------------------------------------------------


def dict_field(values: np.ndarray | None, key: str, default: Any, dtype: Any = object) -> Callable[[], np.ndarray]:
    def get() -> np.ndarray:
        if values is None:
            return np.full(0, default, dtype=dtype)
        out = [(v or {}).get(key, default) if isinstance(v, Mapping) or v is None else default for v in values]
        return np.asarray(out, dtype=dtype)

    return get


def token_decoder(tokenizer: Any, ids: torch.Tensor, mask: torch.Tensor | None) -> cols.RowLazy:
    """Decodes only the rows a plugin selected (RowLazy composes row selections)."""

    def decode(sel: np.ndarray | None) -> np.ndarray:
        if tokenizer is None:
            raise cols.BatchError("text columns need the run's tokenizer, which this batch was built without")
        index = slice(None) if sel is None else torch.as_tensor(sel, dtype=torch.long)
        rows = ids[index].tolist()
        if mask is not None:  # keep only the valid (unpadded) tokens of each row
            keep = mask[index].bool().tolist()
            rows = [[t for t, k in zip(r, m) if k] for r, m in zip(rows, keep)]
        return np.asarray(tokenizer.batch_decode(rows, skip_special_tokens=True), dtype=object)

    return cols.RowLazy(decode)


def chat_text(messages: np.ndarray) -> Callable[[], np.ndarray]:
    def text() -> np.ndarray:
        out = []
        for m in messages:
            if isinstance(m, str):
                out.append(m)
            else:  # a list of {"role", "content"} dicts
                out.append("\n".join(str(x.get("content", "")) for x in (m if m is not None else [])))
        return np.asarray(out, dtype=object)

    return text


def extra_column(values: np.ndarray) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype == object:
        try:
            return arr.astype(np.float64)
        except (TypeError, ValueError):
            return arr
    return arr


#: one key of verl's validation metrics (``RayPPOTrainer._val_metrics_update``):
#: ``val-core|val-aux/<data_source>/<var>/<metric>``, metric as verl's ``process_validation_metrics``
#: names them (``mean@4``, ``std@4``, ``best@4/mean``, ``maj@4/std``, ...); a source may hold '/'
_VAL_KEY = re.compile(
    r"^val-(?P<section>core|aux)/(?P<source>.+)/(?P<var>[^/]+)/(?P<metric>(?:mean|std|best|worst|maj)@\d+(?:/(?:mean|std))?)$"
)


def validation_per_source(metrics: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """verl's validation metrics per data source, as ``on_validation_end`` passes them.

    ``per_source[source]["<var>/<metric>"]`` for every per-source key, and ``per_source[source]["score"]``
    the headline: verl's core metric (``val-core``, the ``mean@<n>`` of ``acc`` when the reward reports
    it, else of the reward). Keys that name no source (``val-aux/num_turns/*``) are not per source.
    """
    out: dict[str, dict[str, float]] = {}
    for key, value in metrics.items():
        m = _VAL_KEY.match(key)
        if m is None:
            continue
        name = f"{m['var']}/{m['metric']}"
        per = out.setdefault(m["source"], {})
        per[name] = float(value)
        if m["section"] == "core" and m["metric"].startswith("mean@"):
            per[VALIDATION_SCORE] = float(value)
    return out
