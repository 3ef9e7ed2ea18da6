"""DataProto <-> Batch on the legacy trainer: what rlhooks plugins see of a verl batch, and a keep mask
applied back (the parts shared with V1 are ``engines/verl/adapter.py``).

Only cheap sequence-level columns are built eagerly (``uid``, ``index``, ``data_source``,
``reward``). Everything else is a *lazy* column, computed the first time a plugin reads it:
lengths, ``final_reward``, ``advantage``, reward extras, ``complexity`` and the decoded text
(``prompt``, ``response``, ``target``). Lazy columns capture the tensors they need at build time
(a reference, not a copy), so a later in-place change of the DataProto's dict does not leak in.

Column sources (verl 0.9, legacy trainer):

================== ===========================================================================
column             from
================== ===========================================================================
uid                ``non_tensor_batch["uid"]`` (one uuid per prompt; a group's rows contiguous)
index              the dataset row the sampler drew (``rlhooks_row``, added by
                   :class:`RowIndexedDataset`); else ``non_tensor_batch["index"]``; else
                   ``extra_info["index"]``
data_source        ``non_tensor_batch["data_source"]``
complexity         ``extra_info["complexity_score"]`` (NaN where absent)
reward             ``token_level_scores.sum(-1)``
final_reward       ``token_level_rewards.sum(-1)`` (after a KL penalty, when verl applies one)
<extra>            each key of ``meta_info["reward_extra_keys"]`` (``acc``, ``score``, ...)
sample_id          ``rlhooks_sample_id`` (``<uid>/<j>``, j = the response's number in its group),
                   set by the shim right after generation, so it follows the row everywhere
policy_version     ``rlhooks_policy_version``: the step whose actor update produced the weights
                   that generated the response (0 = the initial or resumed-from weights' step)
advantage          mean of ``advantages`` over the response mask. GRPO, RLOO, REINFORCE++ and
                   the other outcome estimators broadcast one value over a response, so this is
                   exactly the sequence advantage; for GAE it is the mean token advantage.
response_length    ``response_mask.sum(-1)``
prompt_length      prompt part of ``attention_mask`` summed
prompt             ``prompts`` decoded (or the chat messages of ``raw_prompt`` before generation)
response           ``responses`` decoded, valid tokens only
target             ``reward_model["ground_truth"]``
================== ===========================================================================
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from verl import DataProto

from rlhooks.core import batch as cols
from rlhooks.core.batch import Batch
from rlhooks.engines.verl.adapter import (  # the shared parts, also reached from here by the legacy trainer
    ROW_KEY,
    RowIndexedDataset,
    chat_text,
    dataset_columns,
    dict_field,
    extra_column,
    token_decoder,
    validation_per_source,
)

#: non-tensor keys of a trajectory's id and the version of the weights that generated it
SAMPLE_ID_KEY = "rlhooks_sample_id"
POLICY_VERSION_KEY = "rlhooks_policy_version"

__all__ = ["ROW_KEY", "RowIndexedDataset", "dataset_columns", "validation_per_source", "SAMPLE_ID_KEY",
           "POLICY_VERSION_KEY", "tag_trajectories", "sequence_sum", "sequence_mean", "prompt_batch",
           "trajectory_batch", "select_rows", "concat"]


def tag_trajectories(data: DataProto, n: int, policy_version: int) -> None:
    """Give each row of a just-generated batch (``n`` contiguous rows per uid) its id and policy version."""
    uid = np.asarray(data.non_tensor_batch["uid"]).astype(str)
    within = np.tile(np.arange(n), len(data) // n).astype(str)
    data.non_tensor_batch[SAMPLE_ID_KEY] = np.char.add(np.char.add(uid, "/"), within).astype(object)
    data.non_tensor_batch[POLICY_VERSION_KEY] = np.full(len(data), int(policy_version), dtype=np.int64)


# -- DataProto -> Batch -------------------------------------------------------------------------


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().float().cpu().numpy()


def sequence_sum(token_values: torch.Tensor) -> np.ndarray:
    """Per-row sum of token values (a sequence reward from token-level scores or rewards)."""
    return _np(token_values.sum(-1))


def sequence_mean(token_values: torch.Tensor, mask: torch.Tensor) -> np.ndarray:
    """Per-row mean over the response mask (a sequence advantage from token advantages)."""
    return _np((token_values * mask).sum(-1) / mask.sum(-1).clamp(min=1))


def _indices(data: DataProto) -> np.ndarray:
    nt = data.non_tensor_batch
    if ROW_KEY in nt:
        return np.asarray(nt[ROW_KEY], dtype=np.int64)
    if "index" in nt:
        return np.asarray(nt["index"], dtype=np.int64)
    if "extra_info" in nt:
        return np.fromiter(((e or {}).get("index", -1) for e in nt["extra_info"]), np.int64, len(data))
    return np.full(len(data), -1, dtype=np.int64)


def prompt_batch(data: DataProto, meta: Mapping[str, Any] | None = None) -> Batch:
    """One row per prompt, as drawn from the dataloader (before generation)."""
    nt = data.non_tensor_batch
    n = len(data)
    columns: dict[str, Any] = {cols.INDEX: _indices(data)}
    if "data_source" in nt:
        columns[cols.DATA_SOURCE] = nt["data_source"]
    if "uid" in nt:
        columns[cols.UID] = nt["uid"]
    lazy: dict[str, Callable[[], np.ndarray]] = {}
    extra = nt.get("extra_info")
    if extra is not None:
        lazy[cols.COMPLEXITY] = dict_field(extra, "complexity_score", np.nan, np.float64)
    if "reward_model" in nt:
        lazy[cols.TARGET] = dict_field(nt["reward_model"], "ground_truth", None)
    if "raw_prompt" in nt:
        lazy[cols.PROMPT] = chat_text(nt["raw_prompt"])
    return Batch(columns, lazy=lazy, meta=meta, length=n)


def trajectory_batch(data: DataProto, tokenizer: Any = None, meta: Mapping[str, Any] | None = None) -> Batch:
    """One row per trajectory, after generation and reward (and, at step end, advantages)."""
    t = data.batch
    nt = data.non_tensor_batch
    n = len(data)
    keys = set(t.keys()) if t is not None else set()
    columns: dict[str, Any] = {cols.INDEX: _indices(data)}
    for src, dst in (("uid", cols.UID), ("data_source", cols.DATA_SOURCE), (SAMPLE_ID_KEY, cols.SAMPLE_ID),
                     (POLICY_VERSION_KEY, cols.POLICY_VERSION)):
        if src in nt:
            columns[dst] = nt[src]
    if "token_level_scores" in keys:
        columns[cols.REWARD] = _np(t["token_level_scores"].sum(-1))
    lazy: dict[str, Callable[[], np.ndarray]] = {}
    mask = t["response_mask"] if "response_mask" in keys else None
    if "token_level_rewards" in keys:  # read when asked: place_rewards assigns a new tensor after this
        lazy[cols.FINAL_REWARD] = lambda: sequence_sum(data.batch["token_level_rewards"])
    if "advantages" in keys and mask is not None:
        adv, m = t["advantages"], mask
        lazy[cols.ADVANTAGE] = lambda: sequence_mean(adv, m)
    if mask is not None:
        lazy[cols.RESPONSE_LENGTH] = lambda: mask.sum(-1).cpu().numpy().astype(np.int64)
    if "attention_mask" in keys and "responses" in keys:
        att, resp_len = t["attention_mask"], t["responses"].shape[-1]
        lazy[cols.PROMPT_LENGTH] = lambda: att[:, :-resp_len].sum(-1).cpu().numpy().astype(np.int64)
    extra_keys = [k for k in data.meta_info.get("reward_extra_keys", ()) if k in nt]
    for k in extra_keys:
        lazy[k] = (lambda v=nt[k]: extra_column(v))
    fn_names = [k[len(cols.REWARD_FN_PREFIX):] for k in nt if k.startswith(cols.REWARD_FN_PREFIX)]
    for name in fn_names:
        columns[cols.REWARD_FN_PREFIX + name] = np.asarray(nt[cols.REWARD_FN_PREFIX + name], dtype=np.float64)
    if "extra_info" in nt:
        lazy[cols.COMPLEXITY] = dict_field(nt["extra_info"], "complexity_score", np.nan, np.float64)
    if "reward_model" in nt:
        lazy[cols.TARGET] = dict_field(nt["reward_model"], "ground_truth", None)
    if "prompts" in keys:
        prompts = t["prompts"]
        pmask = t["attention_mask"][:, : prompts.shape[-1]] if "attention_mask" in keys else None
        lazy[cols.PROMPT] = token_decoder(tokenizer, prompts, pmask)
    elif "raw_prompt" in nt:
        lazy[cols.PROMPT] = chat_text(nt["raw_prompt"])
    if "responses" in keys:
        lazy[cols.RESPONSE] = token_decoder(tokenizer, t["responses"], mask)
    full_meta = {"reward_extra_keys": tuple(extra_keys), "reward_functions": tuple(fn_names), **(meta or {})}
    return Batch(columns, lazy=lazy, meta=full_meta, length=n)


# -- Batch -> DataProto ------------------------------------------------------------------------


def select_rows(data: DataProto, rows: np.ndarray | Sequence[int]) -> DataProto:
    """The DataProto restricted to ``rows``: a bool keep mask or sorted int row indices."""
    idx = np.asarray(rows)
    if idx.dtype == bool:
        if idx.shape != (len(data),):
            raise ValueError(f"keep mask has shape {idx.shape}, the DataProto has {len(data)} rows")
        idx = np.flatnonzero(idx)
    if len(idx) == len(data) and np.array_equal(idx, np.arange(len(data))):
        return data  # nothing dropped: no copy
    return data.select_idxs(idx.astype(np.int64))


def concat(parts: Sequence[DataProto]) -> DataProto:
    """Rows of several generation batches in order; meta_info merged (later batches win).

    DataProto.concat asserts equal meta_info values, but per-batch facts (e.g. timing) differ
    between generation batches, so meta_info is merged here instead.
    """
    if len(parts) == 1:
        return parts[0]
    meta: dict[str, Any] = {}
    for p in parts:
        meta.update({k: v for k, v in p.meta_info.items() if k != "metrics"})
    bare = [DataProto(batch=p.batch, non_tensor_batch=p.non_tensor_batch, meta_info={}) for p in parts]
    out = DataProto.concat(bare)
    out.meta_info = meta
    return out
