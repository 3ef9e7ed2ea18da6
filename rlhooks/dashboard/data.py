"""Run data for the dashboard: incremental reading of ``metrics.jsonl`` into pandas frames.

The record format is ``rlhooks.core.records``' (one JSON object per line, ``kind`` = run_start,
metrics, table, histogram, run_end). A reader running while the run writes must ignore a last line
without its newline. ``read_records`` reads a whole file; the dashboard re-reads every second or
two, so ``RunTail`` instead keeps the byte offset of the last complete line and on each
``refresh`` parses only what was appended since (a file that shrank or was replaced is new: it starts over).
"""

from __future__ import annotations

import json
import threading
from collections import deque
from pathlib import Path
from typing import Any

import pandas as pd

from rlhooks.core.metrics import split_source_key
from rlhooks.core import records
#: run-end JSON files shown in the summary panel (reward monitor, simulator)
SUMMARY_FILES = ("reward_monitor.json", "summary.json")
#: bytes of metrics.jsonl read at a time, and metric rows parsed into a frame at a time: a long
#: run's first load stays within a few times its frame (~1 KB per step at 130 metrics)
READ_BLOCK = 16 * 2**20
FRAME_CHUNK = 2_000
ALERTS_TABLE = "alerts"


class DashboardError(ValueError):
    """A run directory the dashboard cannot show."""


def find_metrics_file(run: str | Path) -> Path:
    try:
        return records.find_metrics_file(run, reader="the dashboard")
    except FileNotFoundError as exc:
        raise DashboardError(str(exc)) from None


def label_runs(tails: list["RunTail"]) -> None:
    """Give every run a distinct ``label``: its name, or ``name (run directory)`` when several runs
    share a name (two seeds of ``demo`` under different parents); call after ``refresh``, which may
    replace the name with the run_start record's."""
    names = [t.name for t in tails]
    for t in tails:
        t.label = f"{t.name} ({t.run_dir})" if names.count(t.name) > 1 else t.name
    labels = [t.label for t in tails]
    for i, t in enumerate(tails):  # the same directory given twice
        if labels.count(t.label) > 1:
            t.label = f"{t.label} #{labels[:i + 1].count(t.label)}"


class RunTail:
    """One run's ``metrics.jsonl``, re-read incrementally. Thread-safe (one dashboard, many browser tabs)."""

    def __init__(self, path: str | Path, max_tables: int = 20) -> None:
        self.path = find_metrics_file(path)
        self.run_dir = self.path.parent
        self.name = self.run_dir.name
        self.label = self.name  # what the page shows: the name, or name (directory) when names collide
        self.config: dict[str, Any] = {}
        self.status: str | None = None
        self.skipped_lines = 0
        self.tables: dict[str, deque[tuple[int, list[dict[str, Any]]]]] = {}
        self.alert_rows: list[dict[str, Any]] = []
        self._max_tables = max_tables
        self._offset = 0
        self._inode: int | None = None
        self._pending: list[dict[str, Any]] = []
        self._frame = pd.DataFrame({"step": pd.Series(dtype="int64")})
        self._lock = threading.Lock()
        self.version = 0  # bumps whenever new records arrived

    def _reset(self) -> None:
        self.__init__(self.path, self._max_tables)  # type: ignore[misc]

    def refresh(self) -> bool:
        """Parse what was appended since the last call; True when something new arrived."""
        with self._lock:
            try:
                st = self.path.stat()
            except OSError as exc:
                raise DashboardError(f"cannot read {self.path}: {exc.strerror or exc}") from None
            size = st.st_size
            if size < self._offset or (self._inode is not None and st.st_ino != self._inode):  # a new file
                self._reset()
            self._inode = st.st_ino
            if size == self._offset:
                return False
            start = self._offset
            frames: list[pd.DataFrame] = []
            with self.path.open("rb") as fh:
                fh.seek(self._offset)
                while self._offset < size:  # in blocks: a long run's file is never in memory whole
                    data = fh.read(min(READ_BLOCK, size - self._offset))
                    end = data.rfind(b"\n")
                    if end < 0:
                        if len(data) < READ_BLOCK:
                            break  # only an unfinished line so far
                        data += fh.readline()  # one line longer than a block
                        end = data.rfind(b"\n")
                        if end < 0:
                            break
                    fh.seek(self._offset + end + 1)
                    self._offset += end + 1
                    for line in data[:end].split(b"\n"):
                        if line.strip():
                            self._record(line)
                        if len(self._pending) >= FRAME_CHUNK:  # rows as dicts cost ~50x their frame
                            frames.append(pd.DataFrame.from_records(self._pending))
                            self._pending = []
            if self._pending:
                frames.append(pd.DataFrame.from_records(self._pending))
                self._pending = []
            if frames:
                if len(self._frame):
                    frames.insert(0, self._frame)
                frame = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
                # a resumed run re-logs steps: the last value for a step wins
                self._frame = frame.drop_duplicates("step", keep="last").sort_values("step", kind="stable").reset_index(drop=True)
            if self._offset == start:
                return False
            self.version += 1
            return True

    def _record(self, line: bytes) -> None:
        try:
            rec = json.loads(line)
        except ValueError:
            rec = None
        if not isinstance(rec, dict):
            self.skipped_lines += 1
            return
        kind = rec.get("kind")
        if kind == "metrics" and isinstance(rec.get("step"), int):
            metrics = rec.get("metrics") or {}
            row = {k: (float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else float("nan"))
                   for k, v in metrics.items()}
            row["step"] = rec["step"]
            self._pending.append(row)
        elif kind == "table":
            name = str(rec.get("name", "table"))
            rows = [r for r in rec.get("rows") or [] if isinstance(r, dict)]
            step = int(rec.get("step", 0))
            self.tables.setdefault(name, deque(maxlen=self._max_tables)).append((step, rows))
            if name == ALERTS_TABLE:
                self.alert_rows.extend(rows)
        elif kind == "run_start":
            self.name = str(rec.get("name") or self.name)
            self.config = rec.get("config") or {}
            self.status = None
        elif kind == "run_end":
            self.status = rec.get("status")

    # -- views ------------------------------------------------------------------------------
    @property
    def frame(self) -> pd.DataFrame:
        """One row per step, one column per metric (NaN where a step did not log it)."""
        return self._frame

    def columns(self, prefix: str = "", suffix: str = "") -> list[str]:
        return sorted(c for c in self._frame.columns if c != "step" and c.startswith(prefix) and c.endswith(suffix))

    def last(self, key: str) -> float | None:
        if key not in self._frame.columns:
            return None
        s = self._frame[key].dropna()
        return float(s.iloc[-1]) if len(s) else None

    @property
    def last_step(self) -> int | None:
        return int(self._frame["step"].iloc[-1]) if len(self._frame) else None

    def sources(self) -> dict[str, dict[str, str]]:
        """Per-source metric columns: source name -> metric -> column."""
        out: dict[str, dict[str, str]] = {}
        for c in self.columns("source/"):
            parts = split_source_key(c)
            if parts is not None:
                out.setdefault(parts[0], {})[parts[1]] = c
        return out

    def summaries(self) -> dict[str, Any]:
        """The run-end JSON files present in the run directory (file name -> content)."""
        out: dict[str, Any] = {}
        for name in SUMMARY_FILES:
            f = self.run_dir / name
            if f.exists():
                try:
                    out[name] = json.loads(f.read_text(encoding="utf-8"))
                except (OSError, ValueError) as exc:
                    out[name] = {"error": f"cannot read {f.name}: {exc}"}
        return out
