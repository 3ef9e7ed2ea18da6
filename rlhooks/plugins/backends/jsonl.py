"""JsonlBackend: one JSON object per line, for offline analysis and ``rlhooks report``.

Records (``kind`` says which)::

    {"kind": "run_start", "time": 1700000000.1, "name": "demo", "run_dir": "...", "config": {...}}
    {"kind": "metrics", "step": 3, "time": ..., "metrics": {"rewards/mean": 0.5, "x": null},
     "nonfinite": {"x": "nan"}}                       # "nonfinite" only when some value was NaN/inf
    {"kind": "table", "step": 3, "time": ..., "name": "samples/top_bottom_k", "rows": [{...}, ...]}
    {"kind": "histogram", "step": 3, "time": ..., "name": "rewards/distribution", "values": [...]}
    {"kind": "histogram", ..., "summary": {"count": ..., "mean": ..., "std": ..., "min": ..., "p5": ...}}
    {"kind": "run_end", "time": ..., "status": "success"}

JSON has no NaN or infinity: such floats are written as ``null`` (metrics also list them under
``nonfinite`` as "nan", "inf" or "-inf"). Every line is written with one ``write`` on a file
opened for appending and unbuffered, so a reader sees whole lines; a reader running at the same
time should ignore a last line that does not end in a newline yet. Several runs (a resume) append
to the same file, each starting with its own ``run_start`` record. ``time`` is Unix seconds.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import attrs
import numpy as np
import structlog

from rlhooks import hookimpl
from rlhooks.plugins.backends._common import DispatchOptions, json_safe, to_number

log = structlog.get_logger("rlhooks.backends")

DEFAULT_FILE = "metrics.jsonl"
_PCTS = (5, 25, 50, 75, 95)
#: characters str.splitlines() (and some JSON-lines readers) treat as line ends that json.dumps
#: leaves raw with ensure_ascii=False; written escaped so one record is always one line
_LINE_SEPARATORS = re.compile("[\x85\u2028\u2029]")


def read_records(path: str | Path) -> Iterator[tuple[int, dict[str, Any] | None]]:
    """``(line number, record)`` for each complete line of a file this backend wrote.

    The text after the last newline is a line still being written and is not returned. A line
    that is not a JSON object gives ``None`` as its record, so each caller picks its own policy
    (the analyzer refuses the file, the report skips the line). Blank lines are skipped.
    """
    with Path(path).open("r", encoding="utf-8") as fh:
        lines = fh.read().split("\n")
    if lines[-1].strip():
        log.debug("ignoring an unfinished last line (run still writing?)", file=str(path), line=len(lines))
    for lineno, line in enumerate(lines[:-1], 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            rec = None
        yield lineno, rec if isinstance(rec, dict) else None


def _nonfinite_name(v: float) -> str:
    return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")


class JsonlBackend:
    """Appends every run event as a JSON line to ``<run_dir>/metrics.jsonl`` (or ``path``)."""

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
        self.lines = 0

    # -- writing --------------------------------------------------------------------------
    def _open(self, run_dir: Path | None) -> None:
        if self._fd is not None:
            return
        p = Path(self.options.path) if self.options.path else Path(DEFAULT_FILE)
        if not p.is_absolute():
            p = (run_dir if run_dir is not None else Path.cwd()) / p
        p.parent.mkdir(parents=True, exist_ok=True)
        self.path = p
        # O_APPEND + one os.write per line: lines from this writer are never interleaved or torn
        self._fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def _write(self, record: dict[str, Any]) -> None:
        if self._fd is None:
            self._open(None)
        text = json.dumps(record, ensure_ascii=False, allow_nan=False)
        if _LINE_SEPARATORS.search(text):  # only inside strings, so the escape keeps the value
            text = _LINE_SEPARATORS.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
        data = (text + "\n").encode("utf-8")
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)  # type: ignore[arg-type]
            view = view[n:]
        self.lines += 1

    # -- hooks ----------------------------------------------------------------------------
    @hookimpl
    def on_run_start(self, run: Any) -> None:
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
                nonfinite[k] = _nonfinite_name(num)
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
        self._write({"kind": "run_end", "time": time.time(), "status": status})
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
