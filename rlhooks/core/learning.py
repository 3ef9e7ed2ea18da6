"""Prompt-level learning state: what the run has learned about each dataset row so far.

One ``LearningState`` per run, shared by every component (``RunContext.learning`` in
``on_run_start``; prompt filters also get it as ``learning/*`` columns of the prompt batch).
The driver updates it from every generation batch's rewards *before* the filters, so a row's
record covers every group generated for it, trained on or not.

Per row, as numpy arrays (13 bytes a row; 130 MB at 10M rows):

| array            | dtype   | meaning                                                              |
|------------------|---------|----------------------------------------------------------------------|
| ``times_sampled``| uint16  | groups generated for the row (saturates at 65535)                    |
| ``last_step``    | uint32  | step of the latest group (0 = never)                                  |
| ``last_mean``    | float16 | mean metric of the latest group (NaN = never)                         |
| ``pass_ema``     | float16 | EMA of the group pass rate (share of responses with metric >= threshold) |
| ``last_abs_adv`` | float16 | mean GRPO ``|advantage|`` of the latest group (0 for a constant group) |
| ``zero_var_run`` | int8    | run of consecutive zero-variance groups: +k = k all-pass groups in a row, |
|                  |         | -k = k all-fail groups in a row, 0 = the latest group had a spread     |

Per source it also keeps the sum of learnability ``p(1-p)`` over seen rows (float64, a few
numbers), updated in O(rows in the batch), so samplers get a source's mean learnability cheaply.

An update costs O(rows in the batch): one GroupIndex pass, then fancy-indexed writes. A row that
appears in several groups of one batch is updated once, with its last group (``times_sampled``
counts every group).
"""

from __future__ import annotations

import base64
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np
import structlog

from rlhooks.core.batch import INDEX, REWARD, UID, Batch, BatchError

log = structlog.get_logger("rlhooks.learning")

STATE_VERSION = 1
#: (dtype, fill value) of each per-row array
ROW_ARRAYS: dict[str, tuple[Any, Any]] = {
    "times_sampled": (np.uint16, 0),
    "last_step": (np.uint32, 0),
    "last_mean": (np.float16, np.nan),
    "pass_ema": (np.float16, np.nan),
    "last_abs_adv": (np.float16, np.nan),
    "zero_var_run": (np.int8, 0),
}
#: column prefix of the learning state on a prompt batch seen by prompt filters
COLUMN_PREFIX = "learning/"
#: learnability p(1-p) given to a row never sampled (the maximum: nothing is known yet)
UNSEEN_LEARNABILITY = 0.25
_RUN_MAX = 127
_U16_MAX = np.iinfo(np.uint16).max
GRPO_EPS = 1e-6


class LearningState:
    """Per-row learning records of one dataset, updated from trajectory batches.

    ``metric``: the column judged per response (``"auto"`` = ``acc`` when the batch has it, else
    ``reward``). ``pass_threshold``: a response passes when its metric is >= this.
    ``ema_alpha``: weight of the newest group in ``pass_ema``. ``source_codes`` (optional, the
    dataset's small int codes) enables per-source learnability sums.
    """

    def __init__(
        self,
        n_rows: int,
        *,
        metric: str = "auto",
        pass_threshold: float = 0.5,
        ema_alpha: float = 0.3,
        source_codes: np.ndarray | None = None,
        source_names: tuple[str, ...] = (),
    ) -> None:
        if n_rows < 0:
            raise ValueError(f"n_rows must be >= 0, got {n_rows}")
        if not 0 < ema_alpha <= 1:
            raise ValueError(f"ema_alpha must be in (0, 1], got {ema_alpha}")
        self.n_rows = int(n_rows)
        self.metric = metric
        self.pass_threshold = float(pass_threshold)
        self.ema_alpha = float(ema_alpha)
        for name, (dtype, fill) in ROW_ARRAYS.items():
            setattr(self, name, np.full(self.n_rows, fill, dtype=dtype))
        self.source_codes = None if source_codes is None else np.asarray(source_codes)
        if self.source_codes is not None and len(self.source_codes) != self.n_rows:
            raise ValueError(f"source_codes has {len(self.source_codes)} rows, the state has {self.n_rows}")
        self.source_names = tuple(source_names)
        n_src = len(self.source_names) or (int(self.source_codes.max()) + 1 if self.source_codes is not None and self.n_rows else 0)
        self.source_rows = (
            np.bincount(self.source_codes, minlength=n_src).astype(np.int64) if self.source_codes is not None else np.zeros(0, np.int64)
        )
        self.source_seen = np.zeros(n_src, np.int64)
        self.source_learnability = np.zeros(n_src, np.float64)  # sum of p(1-p) over seen rows
        self.updates = 0
        self.rows_seen = 0

    # -- size --------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self.n_rows

    @property
    def nbytes(self) -> int:
        """Bytes held by the per-row arrays."""
        return sum(getattr(self, name).nbytes for name in ROW_ARRAYS)

    @staticmethod
    def bytes_per_row() -> int:
        return sum(np.dtype(dtype).itemsize for dtype, _ in ROW_ARRAYS.values())

    # -- update --------------------------------------------------------------------------------
    def metric_column(self, batch: Batch) -> str:
        if self.metric != "auto":
            if self.metric not in batch:
                raise BatchError(
                    f"learning state: metric column {self.metric!r} is not in the batch (columns: "
                    f"{', '.join(batch.columns)}); set run.learning_metric to one of them, or 'auto'"
                )
            return self.metric
        return "acc" if "acc" in batch else REWARD

    def update(self, batch: Batch, step: int) -> dict[str, float]:
        """Record every group of a trajectory batch (rows sharing ``uid``; ``index`` = dataset row)."""
        if len(batch) == 0:
            return {}
        for col in (UID, INDEX):
            if col not in batch:
                raise BatchError(f"learning state needs the {col!r} column; batch columns: {', '.join(batch.columns)}")
        v = np.asarray(batch[self.metric_column(batch)], dtype=np.float64)
        g = batch.groups
        rows = np.asarray(batch[INDEX], dtype=np.int64)[g.first_row]
        bad = (rows < 0) | (rows >= self.n_rows)
        if bad.any():
            raise BatchError(
                f"learning state: dataset row index {int(rows[bad][0])} is outside the dataset's {self.n_rows} rows"
            )
        finite = np.isfinite(v)
        vz = np.where(finite, v, 0.0)
        ok_group = ~g.any(~finite)  # a group with NaN/inf is not recorded (its mean is undefined)
        gmean = g.mean(vz)
        gmin, gmax = g.min(vz), g.max(vz)
        passed = g.mean(vz >= self.pass_threshold)
        constant = (gmax <= gmin) & (g.sizes > 1)
        # GRPO |advantage| per group: mean over responses of |r - mean| / (unbiased std + eps)
        sizes = g.sizes.astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            std = g.std(vz) * np.sqrt(sizes / np.maximum(sizes - 1, 1))
            abs_adv = g.mean(np.abs(vz - gmean[g.codes]) / (std[g.codes] + GRPO_EPS))
        abs_adv[constant | (g.sizes == 1)] = 0.0

        # every group counts; the latest group of a row decides its record (O(b log b), never O(rows))
        uniq, last_in_rev, counts = np.unique(rows[::-1], return_index=True, return_counts=True)
        last = len(rows) - 1 - last_in_rev  # group number of each distinct row's latest group
        keep = last[ok_group[last]]
        r = rows[keep]

        ts = self.times_sampled
        before = ts[uniq]
        self.rows_seen += int(np.count_nonzero(before == 0))
        ts[uniq] = np.minimum(before.astype(np.int64) + counts, _U16_MAX).astype(np.uint16)
        self.last_step[r] = np.uint32(step)
        self.last_mean[r] = gmean[keep]
        self.last_abs_adv[r] = abs_adv[keep]
        old_p = self.pass_ema[r].astype(np.float64)
        new_p = np.where(np.isnan(old_p), passed[keep], (1 - self.ema_alpha) * old_p + self.ema_alpha * passed[keep])
        self.pass_ema[r] = new_p
        run = self.zero_var_run[r].astype(np.int64)
        hi = constant[keep] & (gmean[keep] >= self.pass_threshold)
        lo = constant[keep] & (gmean[keep] < self.pass_threshold)
        run = np.where(hi, np.where(run > 0, np.minimum(run + 1, _RUN_MAX), 1), np.where(lo, np.where(run < 0, np.maximum(run - 1, -_RUN_MAX), -1), 0))
        self.zero_var_run[r] = run.astype(np.int8)
        if len(self.source_seen):
            src = self.source_codes[r].astype(np.int64)
            was_seen = ~np.isnan(old_p)
            old_l = np.where(was_seen, old_p * (1 - old_p), 0.0)
            p16 = self.pass_ema[r].astype(np.float64)
            delta = p16 * (1 - p16) - old_l
            self.source_learnability += np.bincount(src, weights=delta, minlength=len(self.source_seen))
            self.source_seen += np.bincount(src[~was_seen], minlength=len(self.source_seen))
        self.updates += 1
        n_const = int(np.count_nonzero(constant & ok_group))
        return {
            "learning/groups": float(g.n_groups),
            "learning/zero_variance_groups": float(n_const),
            "learning/rows_seen": float(self.rows_seen),
        }

    # -- queries -------------------------------------------------------------------------------
    def _rows(self, index: Any) -> np.ndarray:
        idx = np.asarray(index, dtype=np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= self.n_rows):
            raise IndexError(f"learning state: row index outside [0, {self.n_rows})")
        return idx

    def seen(self, index: Any) -> np.ndarray:
        return self.times_sampled[self._rows(index)] > 0

    def pass_rate(self, index: Any) -> np.ndarray:
        """EMA pass rate per row as float64; NaN for rows never sampled."""
        return self.pass_ema[self._rows(index)].astype(np.float64)

    def learnability(self, index: Any, unseen: float = UNSEEN_LEARNABILITY) -> np.ndarray:
        """p(1-p) of the EMA pass rate; ``unseen`` for rows never sampled."""
        p = self.pass_rate(index)
        return np.where(np.isnan(p), unseen, p * (1 - p))

    def solved_run(self, index: Any) -> np.ndarray:
        """Consecutive all-pass groups ending with the latest one (0 if the latest was not all-pass)."""
        return np.maximum(self.zero_var_run[self._rows(index)].astype(np.int64), 0)

    def unsolved_run(self, index: Any) -> np.ndarray:
        """Consecutive all-fail groups ending with the latest one."""
        return np.maximum(-self.zero_var_run[self._rows(index)].astype(np.int64), 0)

    def source_mean_learnability(self, unseen: float = UNSEEN_LEARNABILITY) -> np.ndarray:
        """Mean p(1-p) per source code over all its rows, rows never sampled counting ``unseen``."""
        if not len(self.source_seen):
            raise ValueError("this learning state was built without source codes")
        total = self.source_learnability + (self.source_rows - self.source_seen) * unseen
        return np.divide(total, self.source_rows, out=np.zeros(len(total)), where=self.source_rows > 0)

    def columns(self, index: Any) -> dict[str, np.ndarray]:
        """The rows' records as ``learning/<name>`` columns (copies), for a prompt batch."""
        idx = self._rows(index)
        return {COLUMN_PREFIX + name: getattr(self, name)[idx] for name in ROW_ARRAYS}

    # -- state ---------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Every array, exact (dtype kept), as compressed base64 text: survives pickle, torch.save and JSON."""
        out: dict[str, Any] = {
            "version": STATE_VERSION, "n_rows": self.n_rows, "metric": self.metric, "updates": self.updates,
            "pass_threshold": self.pass_threshold, "ema_alpha": self.ema_alpha,
            "rows_seen": self.rows_seen,
            "source_seen": self.source_seen.tolist(), "source_learnability": self.source_learnability.tolist(),
        }
        for name in ROW_ARRAYS:
            out[name] = _encode(getattr(self, name))
        return out

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"unsupported learning state version {state.get('version')!r} (expected {STATE_VERSION})")
        if int(state["n_rows"]) != self.n_rows:
            raise ValueError(
                f"saved learning state is for a dataset of {state['n_rows']} rows, this run's has {self.n_rows}; "
                "resume with the same dataset"
            )
        for name, (dtype, _) in ROW_ARRAYS.items():
            arr = _decode(state[name])
            if arr.shape != (self.n_rows,):
                raise ValueError(f"saved learning state array {name!r} has shape {arr.shape}, expected ({self.n_rows},)")
            setattr(self, name, arr.astype(dtype, copy=True))
        seen = np.asarray(state["source_seen"], dtype=np.int64)
        if len(seen) != len(self.source_seen):
            raise ValueError(
                f"saved learning state has per-source sums for {len(seen)} sources, this run's data has "
                f"{len(self.source_seen)}; resume with the same dataset"
            )
        saved = {"metric": state.get("metric", self.metric), "pass_threshold": state.get("pass_threshold", self.pass_threshold),
                 "ema_alpha": state.get("ema_alpha", self.ema_alpha)}
        changed = {k: v for k, v in saved.items() if v != getattr(self, k)}
        if changed:  # allowed (a user may retune), but the saved EMAs were made under the old settings
            log.warning(
                "learning state resumed under other settings than it was saved with; its pass-rate EMAs "
                "continue from values made under the saved ones",
                saved=changed, now={k: getattr(self, k) for k in changed},
            )
        self.source_seen = seen.copy()
        self.source_learnability = np.asarray(state["source_learnability"], dtype=np.float64).copy()
        self.updates = int(state.get("updates", 0))
        self.rows_seen = int(state.get("rows_seen", 0))


def _encode(arr: np.ndarray) -> dict[str, str]:
    le = arr.astype(arr.dtype.newbyteorder("<"), copy=False)
    return {"dtype": le.dtype.str, "zlib_b64": base64.b64encode(zlib.compress(le.tobytes(), 1)).decode("ascii")}


def _decode(value: Any) -> np.ndarray:
    if isinstance(value, Mapping) and "zlib_b64" in value:
        raw = zlib.decompress(base64.b64decode(value["zlib_b64"]))
        return np.frombuffer(raw, dtype=np.dtype(value["dtype"]))
    return np.asarray(value)


_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer over a uint64 array (wrapping arithmetic)."""
    x = x ^ (x >> _S30)
    x = x * _M1
    x = x ^ (x >> _S27)
    x = x * _M2
    return x ^ (x >> _S31)


def keyed_uniforms(words: tuple[int, ...] | list[int], index: Any) -> np.ndarray:
    """One U[0, 1) per entry of ``index``, a hash of (``words``, row index, position).

    For decisions that must be reproducible from a batch alone (a resumed run makes the same
    ones without saving an RNG stream): ``words`` are e.g. (seed, step, generation, draw).
    """
    k = np.zeros(1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for w in words:
            k = _mix64(k ^ np.uint64(int(w) & 0xFFFFFFFFFFFFFFFF))
        idx = np.asarray(index, dtype=np.int64).astype(np.uint64)
        h = _mix64(_mix64(idx ^ k[0]) ^ np.arange(len(idx), dtype=np.uint64))
    return (h >> np.uint64(11)).astype(np.float64) / float(1 << 53)
