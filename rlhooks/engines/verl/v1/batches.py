"""TransferQueue / TensorDict -> rlhooks Batch on verl's V1 trainer: the same columns as the legacy
adapter (:mod:`rlhooks.engines.verl.adapter`) builds from a DataProto.

================== ===========================================================================
column             from (V1: the agent loop puts each trajectory's fields into TransferQueue)
================== ===========================================================================
uid                ``uid`` (one per prompt; the rows of a group are made contiguous here)
index              ``rlhooks_row`` (the dataset row the sampler drew; RowIndexedDataset)
data_source        ``data_source``
reward             ``rm_scores`` summed (the reward loop's score at the last response token), or the same
                   score from ``reward_extra_info`` under verl's naive reward manager (no 4 bytes a token)
<extra>            each key of ``extra_fields["reward_extra_info"]`` (``acc``, ...); NaN where a row lacks it
reward_fn/<name>   the rlhooks reward adapter's per-function scores (``reward.custom_reward_function``)
sample_id          ``<uid>/<session>`` from the TransferQueue key ``{uid}_{session}_{index}``
policy_version     ``extra_fields["min_global_steps"]``: the weights version that began the response
final_reward       ``token_level_rewards`` (after an in-reward KL penalty) or ``rm_scores``, summed
advantage          ``advantages`` averaged over the response (step end only)
response_length    the tags' ``response_len`` (else ``responses`` lengths); ``prompt_length`` likewise
prompt, response   decoded lazily with the run's tokenizer; ``target`` from ``reward_model.ground_truth``
complexity         ``extra_info["complexity_score"]``
================== ===========================================================================

What is read up front and what when a plugin reads it (for its rows): :func:`scored_fields`, :func:`scored_batch`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

import numpy as np
import torch

from rlhooks.core import batch as cols
from rlhooks.core.batch import Batch
from rlhooks.engines.verl.adapter import ROW_KEY, dict_field, extra_column, token_decoder

#: the fields a scored group's columns come from (all written by V1's agent loop, or the dataset); which of
#: them are read is :func:`scored_fields`' choice
SCORED_FIELDS = ("uid", "data_source", ROW_KEY, "rm_scores", "extra_fields", "prompts", "responses",
                 "reward_model", "extra_info")
#: Batch column -> the TransferQueue field it comes from; any other column name (a reward extra such as
#: ``acc``, ``reward_fn/<name>``, ``@extras``, ``policy_version``) comes from ``extra_fields``
COLUMN_FIELDS = {cols.INDEX: ROW_KEY, cols.DATA_SOURCE: "data_source", cols.REWARD: "rm_scores",
                 cols.TARGET: "reward_model", cols.COMPLEXITY: "extra_info", cols.PROMPT: "prompts",
                 cols.PROMPT_LENGTH: "prompts", cols.RESPONSE: "responses", cols.RESPONSE_LENGTH: "responses"}
#: columns that come from the keys, or only at step end / from the engine: no field at judging time
NO_FIELD_COLUMNS = frozenset({cols.UID, cols.SAMPLE_ID, cols.ADVANTAGE, cols.FINAL_REWARD, cols.POLICY_LAG})
#: fields never read up front: a column from them (text, target, complexity) is read for the rows a plugin
#: reads (a table's few rows); the length columns come from TransferQueue's tags (``prompt_len``, ``response_len``)
ROW_FIELDS = ("prompts", "responses", "reward_model", "extra_info")
#: how a lazy column reads fields of some keys from TransferQueue: ``fetch(fields, keys) -> TensorDict``
Fetch = Callable[[list[str], list[str]], Any]
#: reward extras of the rlhooks reward adapter that are not a function's score
ADAPTER_EXTRAS = ("acc", "reward_errors")
#: the adapter's per-function error flag: ``reward_errors/<function>`` (1.0 when it raised or was not finite)
ADAPTER_ERROR_PREFIX = "reward_errors/"


def scored_fields(columns: frozenset[str] | None, present: set[str], *, reward_in_extras: bool = False) -> list[str]:
    """The fields read up front (one read) for scored groups whose plugins read ``columns`` for every row
    (None: every column); :func:`scored_batch` reads any other column when a plugin reads it, for its rows.

    Always ``extra_fields`` (reward extras: the adapter's error counts, policy_version; small) and the reward's
    field: ``rm_scores`` (4 bytes a response token), or nothing more where ``reward_in_extras`` (verl's naive
    reward manager stores the score in the extras too: :func:`scored_batch`). Never :data:`ROW_FIELDS`."""
    if columns is None:
        wanted = set(SCORED_FIELDS)
    else:
        wanted = {COLUMN_FIELDS.get(c, "extra_fields") for c in columns if c not in NO_FIELD_COLUMNS}
    wanted |= {"extra_fields", "rm_scores"}
    if reward_in_extras:
        wanted.discard("rm_scores")
    wanted -= {"uid", *ROW_FIELDS}  # uid: from the key
    return [f for f in SCORED_FIELDS if f in wanted and f in present]


#: the fields :func:`scored_fields` may read up front, as :func:`field_values` holds them (one value a row)
UP_FRONT_FIELDS = (ROW_KEY, "data_source", "rm_scores", "extra_fields")


def field_values(data: Any) -> dict[str, np.ndarray]:
    """The up-front fields of a TransferQueue read (:data:`UP_FRONT_FIELDS` it holds) as one numpy value a
    row: the dataset row, the source, ``rm_scores`` summed, the ``extra_fields`` dicts. What the replay buffer
    keeps of the groups it judged, so the step's end builds the trained rows without reading them again."""
    present = set(data.keys())
    out: dict[str, np.ndarray] = {}
    if ROW_KEY in present:
        out[ROW_KEY] = objects(data.get(ROW_KEY)).astype(np.int64)
    if "data_source" in present:
        out["data_source"] = objects(data.get("data_source"))
    if "rm_scores" in present:
        out["rm_scores"] = token_sums(data.get("rm_scores"))
    if "extra_fields" in present:
        out["extra_fields"] = objects(data.get("extra_fields"))
    return out


def _stacked_values(values: Any) -> list | None:
    """The values of a NonTensorStack of NonTensorData (what TransferQueue returns for a non-tensor field), read
    from each element's storage: tensordict's ``tolist`` goes through its attribute machinery per row (~30 us a
    row: 0.5 s for 16,384 rows; this, ~1 ms). None for any other layout (``tolist`` then)."""
    elements = getattr(values, "tensordicts", None)
    if not isinstance(elements, list):
        return None
    try:
        return [element._non_tensordict["data"] for element in elements]
    except (AttributeError, KeyError, TypeError):
        return None


def objects(values: Any) -> np.ndarray:
    """A TensorDict entry (NonTensorStack, NonTensorData, tensor, list) as a 1-d numpy array."""
    if isinstance(values, torch.Tensor) and not values.is_nested:
        return values.detach().cpu().numpy()
    items = _stacked_values(values)
    if items is None:
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


def _lengths(values: torch.Tensor) -> np.ndarray:
    """Row lengths of a jagged field (a plain tensor when every row has the same length)."""
    if values.is_nested:
        return values.offsets().diff().cpu().numpy().astype(np.int64)
    return np.full(values.shape[0], values.shape[-1], dtype=np.int64)


def _padded(nested: torch.Tensor, padding: float = 0.0) -> torch.Tensor:
    return nested.to_padded_tensor(padding) if nested.is_nested else nested


def token_sums(values: Any) -> np.ndarray:
    """Each row's sum of a per-token field: over a jagged field's flat values, one ``reduceat`` (no padding:
    16,384 x 8k tokens pad to ~0.5 GB), in float32 as verl holds the field, returned as float64."""
    if isinstance(values, torch.Tensor) and values.is_nested and values.dim() == 2:
        flat = values.values().detach().cpu().float().numpy()
        offsets = values.offsets().cpu().numpy().astype(np.int64)
        out = np.zeros(len(offsets) - 1, dtype=np.float32)
        filled = np.diff(offsets) > 0  # reduceat would give an empty row its next value
        if filled.any():
            out[filled] = np.add.reduceat(flat[: offsets[-1]], offsets[:-1][filled])
        return out.astype(np.float64)
    return _padded(values).float().sum(-1).cpu().numpy().astype(np.float64)


def _score_from_extras(infos: list[dict]) -> np.ndarray | None:
    """The reward verl's naive reward manager put in ``rm_scores``: its ``score`` extra (a compute_score that
    returns a dict) or ``acc`` (one that returns a float), rounded to float32 as ``rm_scores`` holds it (one
    non-zero token: the sums are equal bit for bit). None when a row has neither."""
    scores = [info.get("score", info.get("acc")) for info in infos]
    if any(s is None or isinstance(s, (str, bytes, dict, list)) for s in scores):
        return None
    return np.asarray(scores, dtype=np.float32).astype(np.float64)


def _tag_lengths(tags: Sequence[dict] | None, name: str) -> np.ndarray | None:
    if not tags or not all(isinstance(t, dict) and name in t for t in tags):
        return None
    return np.fromiter((t[name] for t in tags), np.int64, len(tags))


#: at most this many rows (a table's shown rows), a lazy row field is read with the others in one round trip
FEW_ROWS = 64


class RowFields:
    """Reads fields of some of ``keys`` from TransferQueue; for a few rows (a table's: prompt, response,
    target, complexity of the rows it shows) every one of ``together`` in one read, kept for the next column."""

    def __init__(self, fetch: Fetch, keys: Sequence[str], together: Sequence[str] = ()):
        self.fetch, self.keys, self.together = fetch, np.asarray(keys, dtype=object), list(together)
        self._last: tuple[tuple, Any] | None = None

    def read(self, field: str, sel: np.ndarray | None) -> Any:
        wanted = (self.keys if sel is None else self.keys[sel]).tolist()
        if field in self.together and len(self.together) > 1 and len(wanted) <= FEW_ROWS:
            tag = tuple(wanted)
            if self._last is None or self._last[0] != tag:
                self._last = (tag, self.fetch(self.together, wanted))
            return self._last[1].get(field)
        return self.fetch([field], wanted).get(field)


def fetched(fetch: Fetch | RowFields, keys: Sequence[str], field: str, convert: Callable[[Any], np.ndarray]) -> cols.RowLazy:
    """A column read from TransferQueue when a plugin reads it, for the rows it reads: ``convert`` turns the
    field's values of those rows into the column (``fetch``: a read, or a RowFields shared by columns)."""
    reader = fetch if isinstance(fetch, RowFields) else RowFields(fetch, keys)

    def read(sel: np.ndarray | None) -> np.ndarray:
        if not len(reader.keys if sel is None else sel):
            return np.zeros(0, dtype=object)
        return convert(reader.read(field, sel))

    return cols.RowLazy(read)


def _text(tokenizer: Any) -> Callable[[Any], np.ndarray]:
    def decode(ids: Any) -> np.ndarray:
        if tokenizer is None:
            raise cols.BatchError("text columns need the run's tokenizer, which this batch was built without")
        lengths, padded = _lengths(ids), _padded(ids, 0)
        mask = torch.arange(padded.shape[-1]).unsqueeze(0) < torch.as_tensor(lengths).unsqueeze(1)
        return token_decoder(tokenizer, padded, mask.long()).fn(None)

    return decode


def token_means(values: Any) -> np.ndarray:
    """A per-token field averaged over each row's valid tokens (the jagged row's length): ``advantage``."""
    return token_sums(values) / np.maximum(_lengths(values), 1)


def scored_batch(data: Any, keys: Sequence[str], tokenizer: Any = None, adapter_functions: Sequence[str] = (), *,
                 fetch: Fetch | None = None, stored: Collection[str] = SCORED_FIELDS,
                 tags: Sequence[dict] | None = None) -> Batch:
    """One row per trajectory of finished groups, as read from TransferQueue (``data``: a TensorDict of
    some of :data:`SCORED_FIELDS` for ``keys``, rows in ``keys`` order; :func:`scored_fields` chooses them).

    With ``fetch``, the columns of fields ``stored`` in TransferQueue that ``data`` lacks are read when a
    plugin reads them, for the rows it reads (RowLazy), and ``reward`` from ``rm_scores`` when ``data`` has
    neither it nor a score extra. ``tags`` (TransferQueue's, in ``keys`` order) give the length columns
    without reading the token ids."""
    if isinstance(data, dict):  # field_values already (the judged rows kept by the replay buffer)
        values, data = data, {}
    else:
        values = field_values(data)
    present = set(data.keys()) | set(values)
    uid, sample_id = sessions(keys)
    n = len(keys)
    columns: dict[str, Any] = {cols.UID: uid, cols.SAMPLE_ID: sample_id}
    columns[cols.INDEX] = values[ROW_KEY] if ROW_KEY in values else np.full(n, -1, dtype=np.int64)
    if "data_source" in values:
        columns[cols.DATA_SOURCE] = values["data_source"]
    if "rm_scores" in values:
        columns[cols.REWARD] = values["rm_scores"]
    lazy: dict[str, Callable[[], np.ndarray]] = {}
    extra_keys: list[str] = []
    if "extra_fields" in values:
        fields = values["extra_fields"]
        infos = [((f or {}).get("reward_extra_info") or {}) if isinstance(f, dict) else {} for f in fields]
        if cols.REWARD not in columns:
            score = _score_from_extras(infos)
            if score is not None:
                columns[cols.REWARD] = score
        extra_keys = sorted({k for info in infos for k in info})
        for k in extra_keys:
            values = np.asarray([info.get(k, np.nan) for info in infos], dtype=object)
            if k in adapter_functions:
                columns[cols.REWARD_FN_PREFIX + k] = values.astype(np.float64)
            else:
                lazy[k] = (lambda v=values: extra_column(v))
        versions = [f.get("min_global_steps") if isinstance(f, dict) else None for f in fields]
        if all(v is not None for v in versions):
            columns[cols.POLICY_VERSION] = np.asarray(versions, dtype=np.int64)
    if cols.REWARD not in columns:
        if fetch is None:
            raise cols.BatchError("scored groups need rm_scores or a score extra: neither was read")
        columns[cols.REWARD] = token_sums(fetch(["rm_scores"], list(keys)).get("rm_scores"))
    for name, tag in ((cols.RESPONSE_LENGTH, "response_len"), (cols.PROMPT_LENGTH, "prompt_len")):
        known = _tag_lengths(tags, tag)
        if known is not None:
            lazy[name] = (lambda v=known: v)
    later = [f for f in stored if f not in present] if fetch is not None else []
    if later:
        fetch = RowFields(fetch, keys, [f for f in (ROW_KEY, "data_source", *ROW_FIELDS) if f in later])  # type: ignore[arg-type]
    for field in later:  # not read up front: read when a plugin reads it, for its rows
        if field in ("responses", "prompts"):
            text, length = (cols.RESPONSE, cols.RESPONSE_LENGTH) if field == "responses" else (cols.PROMPT, cols.PROMPT_LENGTH)
            lazy[text] = fetched(fetch, keys, field, _text(tokenizer))
            lazy.setdefault(length, fetched(fetch, keys, field, _lengths))
        elif field == ROW_KEY:
            columns.pop(cols.INDEX)
            lazy[cols.INDEX] = fetched(fetch, keys, ROW_KEY, lambda v: objects(v).astype(np.int64))
        elif field == "data_source":
            lazy[cols.DATA_SOURCE] = fetched(fetch, keys, field, objects)
        elif field == "reward_model":
            lazy[cols.TARGET] = fetched(fetch, keys, field, lambda v: dict_field(objects(v), "ground_truth", None)())
        elif field == "extra_info":
            lazy[cols.COMPLEXITY] = fetched(fetch, keys, field,
                                            lambda v: dict_field(objects(v), "complexity_score", np.nan, np.float64)())
    if "responses" in present:
        responses = data.get("responses")
        lengths = _lengths(responses)
        lazy[cols.RESPONSE_LENGTH] = lambda: lengths
        ids = _padded(responses, 0)
        mask = torch.arange(ids.shape[-1]).unsqueeze(0) < torch.as_tensor(lengths).unsqueeze(1)
        lazy[cols.RESPONSE] = token_decoder(tokenizer, ids, mask.long())
    if "prompts" in present:
        prompts = data.get("prompts")
        plengths = _lengths(prompts)
        lazy[cols.PROMPT_LENGTH] = lambda: plengths
        pids = _padded(prompts, 0)
        pmask = torch.arange(pids.shape[-1]).unsqueeze(0) < torch.as_tensor(plengths).unsqueeze(1)
        lazy[cols.PROMPT] = token_decoder(tokenizer, pids, pmask.long())
    if "reward_model" in present:
        lazy[cols.TARGET] = dict_field(objects(data.get("reward_model")), "ground_truth", None)
    if "extra_info" in present:
        lazy[cols.COMPLEXITY] = dict_field(objects(data.get("extra_info")), "complexity_score", np.nan, np.float64)
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
        lazy[cols.COMPLEXITY] = dict_field(objects(td.get("extra_info")), "complexity_score", np.nan, np.float64)
    if "reward_model" in present:
        lazy[cols.TARGET] = dict_field(objects(td.get("reward_model")), "ground_truth", None)
    if "raw_prompt" in present:
        from rlhooks.engines.verl.adapter import chat_text

        lazy[cols.PROMPT] = chat_text(objects(td.get("raw_prompt")))
    return Batch(columns, lazy=lazy, length=n)
