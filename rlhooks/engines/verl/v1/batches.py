"""TransferQueue / TensorDict -> rlhooks Batch on verl's V1 trainer: the same columns as the legacy
adapter (:mod:`rlhooks.engines.verl.adapter`) builds from a DataProto.

================== ===========================================================================
column             from (V1: the agent loop puts each trajectory's fields into TransferQueue)
================== ===========================================================================
uid                ``uid`` (one per prompt; the rows of a group are made contiguous here)
index              ``rlhooks_row`` (the dataset row the sampler drew; RowIndexedDataset)
data_source        ``data_source``
reward             ``rm_scores`` summed (the reward loop's score at the last response token)
<extra>            each key of ``extra_fields["reward_extra_info"]`` (``acc``, ...); NaN where a row lacks it
reward_fn/<name>   the rlhooks reward adapter's per-function scores (``reward.custom_reward_function``)
sample_id          ``<uid>/<session>`` from the TransferQueue key ``{uid}_{session}_{index}``
policy_version     ``extra_fields["min_global_steps"]``: the weights version that began the response
final_reward       ``token_level_rewards`` (after an in-reward KL penalty) or ``rm_scores``, summed
advantage          ``advantages`` averaged over the response (step end only)
response_length    ``responses`` lengths; ``prompt_length`` from ``prompts``
prompt, response   decoded lazily with the run's tokenizer; ``target`` from ``reward_model.ground_truth``
complexity         ``extra_info["complexity_score"]``
================== ===========================================================================
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from rlhooks.core import batch as cols
from rlhooks.core.batch import Batch
from rlhooks.engines.verl.adapter import ROW_KEY, _decoder, _dict_field, _extra_column

#: the fields read from TransferQueue for a scored group (all written by V1's agent loop, or the dataset)
SCORED_FIELDS = ("uid", "data_source", ROW_KEY, "rm_scores", "extra_fields", "prompts", "responses",
                 "reward_model", "extra_info")
#: reward extras of the rlhooks reward adapter that are not a function's score
ADAPTER_EXTRAS = ("acc", "reward_errors")
#: the adapter's per-function error flag: ``reward_errors/<function>`` (1.0 when it raised or was not finite)
ADAPTER_ERROR_PREFIX = "reward_errors/"


def objects(values: Any) -> np.ndarray:
    """A TensorDict entry (NonTensorStack, NonTensorData, tensor, list) as a 1-d numpy array."""
    if isinstance(values, torch.Tensor) and not values.is_nested:
        return values.detach().cpu().numpy()
    items = values.tolist() if hasattr(values, "tolist") else list(values)
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out


def sessions(keys: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(uid, ``<uid>/<session>``) of TransferQueue trajectory keys ``{uid}_{session}_{index}``."""
    parts = [k.rsplit("_", 2) for k in keys]
    uid = np.asarray([p[0] for p in parts], dtype=object)
    sample = np.asarray([f"{p[0]}/{p[1]}" if len(p) == 3 else k for p, k in zip(parts, keys)], dtype=object)
    return uid, sample


def group_order(keys: Sequence[str]) -> np.ndarray:
    """Row order that makes each group's rows contiguous (groups in first-seen order, sessions in order)."""
    uid, sample = sessions(keys)
    _, first = np.unique(uid, return_index=True)
    rank = {u: r for r, u in enumerate(uid[np.sort(first)])}
    group = np.fromiter((rank[u] for u in uid), np.int64, len(uid))
    return np.lexsort((np.asarray(sample, dtype=str), group))


def _lengths(nested: torch.Tensor) -> np.ndarray:
    return nested.offsets().diff().cpu().numpy().astype(np.int64)


def _padded(nested: torch.Tensor, padding: float = 0.0) -> torch.Tensor:
    return nested.to_padded_tensor(padding) if nested.is_nested else nested


def scored_batch(data: Any, keys: Sequence[str], tokenizer: Any = None, adapter_functions: Sequence[str] = ()) -> Batch:
    """One row per trajectory of finished groups, as read from TransferQueue (``data``: the TensorDict of
    :data:`SCORED_FIELDS` for ``keys``, rows in ``keys`` order)."""
    present = set(data.keys())
    uid, sample_id = sessions(keys)
    n = len(keys)
    columns: dict[str, Any] = {cols.UID: uid, cols.SAMPLE_ID: sample_id}
    columns[cols.INDEX] = (objects(data.get(ROW_KEY)).astype(np.int64) if ROW_KEY in present
                           else np.full(n, -1, dtype=np.int64))
    if "data_source" in present:
        columns[cols.DATA_SOURCE] = objects(data.get("data_source"))
    rm = _padded(data.get("rm_scores"))
    columns[cols.REWARD] = rm.float().sum(-1).cpu().numpy().astype(np.float64)
    lazy: dict[str, Callable[[], np.ndarray]] = {}
    extra_keys: list[str] = []
    if "extra_fields" in present:
        fields = objects(data.get("extra_fields"))
        infos = [((f or {}).get("reward_extra_info") or {}) if isinstance(f, dict) else {} for f in fields]
        extra_keys = sorted({k for info in infos for k in info})
        for k in extra_keys:
            values = np.asarray([info.get(k, np.nan) for info in infos], dtype=object)
            if k in adapter_functions:
                columns[cols.REWARD_FN_PREFIX + k] = values.astype(np.float64)
            else:
                lazy[k] = (lambda v=values: _extra_column(v))
        versions = [f.get("min_global_steps") if isinstance(f, dict) else None for f in fields]
        if all(v is not None for v in versions):
            columns[cols.POLICY_VERSION] = np.asarray(versions, dtype=np.int64)
    if "responses" in present:
        responses = data.get("responses")
        lengths = _lengths(responses)
        lazy[cols.RESPONSE_LENGTH] = lambda: lengths
        ids = _padded(responses, 0)
        mask = torch.arange(ids.shape[-1]).unsqueeze(0) < torch.as_tensor(lengths).unsqueeze(1)
        lazy[cols.RESPONSE] = _decoder(tokenizer, ids, mask.long())
    if "prompts" in present:
        prompts = data.get("prompts")
        plengths = _lengths(prompts)
        lazy[cols.PROMPT_LENGTH] = lambda: plengths
        pids = _padded(prompts, 0)
        pmask = torch.arange(pids.shape[-1]).unsqueeze(0) < torch.as_tensor(plengths).unsqueeze(1)
        lazy[cols.PROMPT] = _decoder(tokenizer, pids, pmask.long())
    if "reward_model" in present:
        lazy[cols.TARGET] = _dict_field(objects(data.get("reward_model")), "ground_truth", None)
    if "extra_info" in present:
        lazy[cols.COMPLEXITY] = _dict_field(objects(data.get("extra_info")), "complexity_score", np.nan, np.float64)
    fn_names = tuple(k for k in extra_keys if k in adapter_functions)
    meta = {"reward_extra_keys": tuple(k for k in extra_keys if k not in fn_names), "reward_functions": fn_names}
    return Batch(columns, lazy=lazy, meta=meta, length=n)


def adapter_error_counts(batch: Batch, functions: Sequence[str]) -> dict[str, float]:
    """``rewards/errors/<name>``: rows each adapter reward function failed on (its ``reward_errors/<name>``
    extra, summed), the metric name rlhooks reward functions report on the legacy path."""
    out = {}
    for name in functions:
        key = ADAPTER_ERROR_PREFIX + name
        if key in batch:
            out[f"rewards/errors/{name}"] = float(np.nansum(np.asarray(batch[key], dtype=np.float64)))
    return out


def prompt_batch(td: Any) -> Batch:
    """One row per prompt of a TensorDict the V1 trainer feeds the agent loop (before generation)."""
    present = set(td.keys())
    n = len(td)
    columns: dict[str, Any] = {}
    columns[cols.INDEX] = (objects(td.get(ROW_KEY)).astype(np.int64) if ROW_KEY in present
                           else np.full(n, -1, dtype=np.int64))
    for src, dst in (("data_source", cols.DATA_SOURCE), ("uid", cols.UID)):
        if src in present:
            columns[dst] = objects(td.get(src))
    lazy: dict[str, Callable[[], np.ndarray]] = {}
    if "extra_info" in present:
        lazy[cols.COMPLEXITY] = _dict_field(objects(td.get("extra_info")), "complexity_score", np.nan, np.float64)
    if "reward_model" in present:
        lazy[cols.TARGET] = _dict_field(objects(td.get("reward_model")), "ground_truth", None)
    if "raw_prompt" in present:
        from rlhooks.engines.verl.adapter import _chat_text

        lazy[cols.PROMPT] = _chat_text(objects(td.get("raw_prompt")))
    return Batch(columns, lazy=lazy, length=n)
