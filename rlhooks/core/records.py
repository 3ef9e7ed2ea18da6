"""The JSONL record format: what the ``jsonl`` backend writes and the report, the reward analyzer
and other readers read (``<run_dir>/metrics.jsonl``).

Records (``kind`` says which)::

    {"kind": "run_start", "time": 1700000000.1, "name": "demo", "run_dir": "...", "config": {...}}
    {"kind": "metrics", "step": 3, "time": ..., "metrics": {"rewards/mean": 0.5, "x": null},
     "nonfinite": {"x": "nan"}}                       # "nonfinite" only when some value was NaN/inf
    {"kind": "table", "step": 3, "time": ..., "name": "samples/top_bottom_k", "rows": [{...}, ...]}
    {"kind": "histogram", "step": 3, "time": ..., "name": "rewards/distribution", "values": [...]}
    {"kind": "histogram", ..., "summary": {"count": ..., "mean": ..., "std": ..., "min": ..., "p5": ...}}
    {"kind": "run_end", "time": ..., "status": "success"}
    {"kind": "run_end", "time": ..., "status": "stopped", "stop_reason": "...", "stopped_by": "reward_monitor (rewards[4])"}

JSON has no NaN or infinity: such floats are written as ``null`` (metrics also list them under
``nonfinite`` as "nan", "inf" or "-inf"). One record is one line (``encode_record``); a writer
appends each line with one ``write``, so a reader sees whole lines and ignores a last line that
does not end in a newline yet. Several runs (a resume) append to the same file, each starting
with its own ``run_start`` record. ``time`` is Unix seconds.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import structlog

log = structlog.get_logger("rlhooks.records")

#: the file name in a run directory
METRICS_FILE = "metrics.jsonl"
KINDS = ("run_start", "metrics", "table", "histogram", "run_end")

#: characters str.splitlines() (and some JSON-lines readers) treat as line ends that json.dumps
#: leaves raw with ensure_ascii=False; written escaped so one record is always one line
_LINE_SEPARATORS = re.compile("[\x85\u2028\u2029]")


def encode_record(record: dict[str, Any]) -> bytes:
    """One record as one UTF-8 line (newline included). Values must already be JSON-safe."""
    text = json.dumps(record, ensure_ascii=False, allow_nan=False)
    if _LINE_SEPARATORS.search(text):  # only inside strings, so the escape keeps the value
        text = _LINE_SEPARATORS.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return (text + "\n").encode("utf-8")


def nonfinite_name(value: float) -> str:
    """How a NaN or infinite metric is named under a metrics record's ``nonfinite``."""
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def read_records(path: str | Path) -> Iterator[tuple[int, dict[str, Any] | None]]:
    """``(line number, record)`` for each complete line of a records file.

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


def records_past(path: str | Path, start: int = 0) -> Iterator[dict[str, Any]]:
    """The records (JSON objects) written past byte ``start`` of a records file, e.g. the run a command just ran
    in a file a resumed run appends to. Lines that are not a JSON object are skipped; a missing or unreadable
    file has none."""
    try:
        fh = Path(path).open("rb")
    except OSError:
        return
    with fh:
        fh.seek(start)
        for line in fh:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict):
                yield rec


def find_metrics_file(run: str | Path, reader: str = "rlhooks") -> Path:
    """``run`` itself if it is a file, else ``run/metrics.jsonl``, else the first one below ``run``.

    ``reader`` names the command in the error (e.g. "the report"), which is a ``FileNotFoundError``.
    """
    p = Path(run)
    if p.is_file():
        return p
    if not p.is_dir():
        raise FileNotFoundError(f"{p}: no such run directory or metrics file (run directory {p} does not exist)")
    f = p / METRICS_FILE
    if f.exists():
        return f
    found = sorted(p.rglob(METRICS_FILE))
    if found:
        return found[0]
    raise FileNotFoundError(
        f"{p}: no {METRICS_FILE} here; {reader} reads what the 'jsonl' backend writes: "
        f"add 'jsonl' to the run's backends: list"
    )

