"""JsonlBackend: one JSON object per line, for offline analysis and ``rlhooks report``.

The record format (and ``read_records`` to read it back) is core's: see ``rlhooks.core.records``.
Every line is written with one ``write`` on a file opened for appending and unbuffered.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import attrs
import numpy as np
import structlog

from rlhooks import METRICS_FILE, encode_record, hookimpl, nonfinite_name, open_output
from rlhooks import read_records as read_records  # the format is core's; still importable here
from rlhooks.plugins.backends._common import DispatchOptions, json_safe, to_number

log = structlog.get_logger("rlhooks.backends")

DEFAULT_FILE = METRICS_FILE
_PCTS = (5, 25, 50, 75, 95)


class JsonlBackend:
    """Appends every run event as a JSON line to ``<run_dir>/metrics.jsonl`` (or ``path``)."""

    #: its ``run_end`` record states the run's outcome: it ends after every other backend (RunManager.end)
    records_outcome = True

    @attrs.frozen(kw_only=True)
    class Options(DispatchOptions):
        #: output file; relative paths are under the run directory (default: metrics.jsonl there)
        path: str | None = None
        #: histograms as all ``values``, as a ``summary`` (count/mean/std/min/max/percentiles), or ``off``
        histograms: Literal["values", "summary", "off"] = "values"

    def __init__(self, options: Options | None = None) -> None:
        self.options = options if options is not None else self.Options()
        self.path: Path | None = None
        self._fd: int | None = None
        self._file: Any = None  # the open file behind _fd
        self.lines = 0
        self._run: Any = None

    # -- writing --------------------------------------------------------------------------
    def _open(self, run_dir: Path | None) -> None:
        if self._fd is not None:
            return
        p = Path(self.options.path) if self.options.path else Path(DEFAULT_FILE)
        if not p.is_absolute():
            p = (run_dir if run_dir is not None else Path.cwd()) / p
        self.path = p
        # claimed, never through a link planted at the name or above it (a resumed run's directory is not
        # cleared); appended to, unbuffered: one os.write per line, so lines are never interleaved or torn
        self._file = open_output(p, "ab", buffering=0)
        self._fd = self._file.fileno()

    def _write(self, record: dict[str, Any]) -> None:
        if self._fd is None:  # in a run whose start could not open the file: its run directory, never the cwd
            self._open(self._run.run_dir if self._run is not None else None)
        view = memoryview(encode_record(record))
        while view:
            n = os.write(self._fd, view)  # type: ignore[arg-type]
            view = view[n:]
        self.lines += 1

    # -- hooks ----------------------------------------------------------------------------
    @hookimpl
    def on_run_start(self, run: Any) -> None:
        self._run = run  # its stop_reason goes into run_end
        self._open(run.run_dir)
        self._write({
            "kind": "run_start", "time": time.time(), "name": run.name, "run_dir": str(run.run_dir),
            "config": json_safe(run.redacted_config()),
        })

    @hookimpl
    def log_metrics(self, step: int, metrics: Mapping[str, Any]) -> None:
        clean: dict[str, Any] = {}
        nonfinite: dict[str, str] = {}
        for k, v in metrics.items():
            num = to_number(v)
            if isinstance(num, float) and not math.isfinite(num):
                nonfinite[k] = nonfinite_name(num)
                num = None
            clean[k] = num
        record: dict[str, Any] = {"kind": "metrics", "step": int(step), "time": time.time(), "metrics": clean}
        if nonfinite:
            record["nonfinite"] = nonfinite
        self._write(record)

    @hookimpl
    def log_table(self, step: int, name: str, rows: list[dict[str, Any]]) -> None:
        self._write({"kind": "table", "step": int(step), "time": time.time(), "name": name, "rows": json_safe(rows)})

    @hookimpl
    def log_histogram(self, step: int, name: str, values: np.ndarray) -> None:
        mode = self.options.histograms
        if mode == "off":
            return
        v = np.asarray(values, dtype=np.float64).ravel()
        v = v[np.isfinite(v)]
        record: dict[str, Any] = {"kind": "histogram", "step": int(step), "time": time.time(), "name": name}
        if mode == "values":
            record["values"] = v.tolist()
        else:
            summary: dict[str, Any] = {"count": int(v.size)}
            if v.size:
                pct = np.percentile(v, _PCTS)
                summary.update(mean=float(v.mean()), std=float(v.std()), min=float(v.min()), max=float(v.max()))
                summary.update({f"p{p}": float(x) for p, x in zip(_PCTS, pct)})
            record["summary"] = json_safe(summary)  # a mean/std can overflow to inf near the float64 limit
        self._write(record)

    @hookimpl
    def on_run_end(self, status: str) -> None:
        record: dict[str, Any] = {"kind": "run_end", "time": time.time(), "status": status}
        run = self._run
        if run is not None and getattr(run, "stop_reason", None):  # a plugin's run.request_stop(reason)
            record["stop_reason"], record["stopped_by"] = run.stop_reason, run.stopped_by
        self._write(record)
        if self._file is not None:
            self._file.close()
            self._file, self._fd = None, None
