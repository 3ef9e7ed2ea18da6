"""CsvBackend: every metric as a ``step,name,value`` row of a CSV file in the run directory.

Long format, so steps may log different metric names. Tables go to
``<tables_dir>/<name>/step_<step>.csv`` (``/`` in a table name becomes ``__``), one file per
table and step with the union of that step's row keys as header, because rows of different
steps may have different keys.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

import attrs

from rlhooks import hookimpl, open_output


def _not_empty(_inst: Any, attr: attrs.Attribute, value: str) -> None:
    if not value.strip():
        raise ValueError("must be a file name, got an empty string")


def _positive(_inst: Any, attr: attrs.Attribute, value: int) -> None:
    if value <= 0:
        raise ValueError(f"must be > 0, got {value!r}")


class CsvBackend:
    """Writes metrics to ``<run_dir>/<path>`` as CSV rows; flushes every ``flush_every`` steps and at the end."""

    @attrs.frozen(kw_only=True)
    class Options:
        #: metrics file; relative paths are under the run directory
        path: str = attrs.field(default="metrics.csv", validator=_not_empty)
        #: directory of the table files, relative to the run directory
        tables_dir: str = attrs.field(default="tables", validator=_not_empty)
        #: flush the file every N logged steps (it is always flushed and closed at run end)
        flush_every: int = attrs.field(default=10, validator=_positive)

    def __init__(self, options: Options | None = None) -> None:
        self.options = options if options is not None else self.Options()
        self.path: Path | None = None
        self.tables_dir: Path | None = None
        self._file: IO[str] | None = None
        self._writer: Any = None
        self._steps = 0

    @hookimpl
    def on_run_start(self, run: Any) -> None:
        self.path = Path(self.options.path)
        if not self.path.is_absolute():
            self.path = Path(run.run_dir) / self.path
        self.tables_dir = Path(run.run_dir) / self.options.tables_dir
        new = not self.path.exists() or self.path.stat().st_size == 0
        # open_output: claimed (a rerun of the run name may replace it), directories made, no symlink followed
        self._file = open_output(self.path, "a", newline="")  # closed in on_run_end
        self._writer = csv.writer(self._file)
        if new:
            self._writer.writerow(["step", "name", "value"])

    @hookimpl
    def log_metrics(self, step: int, metrics: Mapping[str, Any]) -> None:
        if self._writer is None:
            raise RuntimeError("csv backend: log_metrics before on_run_start (no run directory yet)")
        # repr() of a float round-trips exactly; nan/inf are written as Python spells them
        self._writer.writerows([step, k, repr(float(v))] for k, v in metrics.items())
        self._steps += 1
        if self._steps % self.options.flush_every == 0:
            self._file.flush()

    @hookimpl
    def log_table(self, step: int, name: str, rows: list[dict[str, Any]]) -> None:
        if self.tables_dir is None:
            raise RuntimeError("csv backend: log_table before on_run_start")
        path = self.tables_dir / name.replace("/", "__") / f"step_{step}.csv"
        columns = list(dict.fromkeys(k for row in rows for k in row))
        with open_output(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=columns)
            w.writeheader()
            w.writerows(rows)

    @hookimpl
    def on_run_end(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = self._writer = None


def read_metrics(path: str | Path) -> dict[int, dict[str, float]]:
    """Metrics of a CSV written by CsvBackend, ``{step: {name: value}}``."""
    out: dict[int, dict[str, float]] = {}
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            out.setdefault(int(row["step"]), {})[row["name"]] = float(row["value"])
    return out


def read_tables(tables_dir: str | Path) -> dict[tuple[int, str], list[dict[str, str]]]:
    """Every table file under ``tables_dir``: ``{(step, name): rows}``; cells are strings ("" for None)."""
    out: dict[tuple[int, str], list[dict[str, str]]] = {}
    for path in sorted(Path(tables_dir).glob("*/step_*.csv")):
        step = int(path.stem.removeprefix("step_"))
        with open(path, newline="", encoding="utf-8") as f:
            out[(step, path.parent.name.replace("__", "/"))] = list(csv.DictReader(f))
    return out


__all__ = ["CsvBackend", "read_metrics", "read_tables"]
