"""Read a run's ``metrics.jsonl`` (the format of ``rlhooks.core.records``, written by the ``jsonl`` backend) into per-metric series.

Record kinds: ``run_start`` (name, config), ``metrics`` (step, metrics; NaN/inf written as null),
``table`` (step, name, rows), ``histogram``, ``run_end`` (status). A file may hold several runs
appended one after the other (a resumed run); their steps are merged, a later value for the
same step winning. A last line without its newline (the run is still writing) is ignored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import numpy as np
import structlog

from rlhooks.core.errors import RLHooksError
from rlhooks.core import records
from rlhooks.core.records import read_records

log = structlog.get_logger("rlhooks.report")



class ReportError(RLHooksError):
    """A run directory cannot be reported on."""


@attrs.define(eq=False)
class Table:
    step: int
    name: str
    rows: list[dict[str, Any]]


@attrs.define(eq=False)
class RunData:
    name: str
    path: Path  # the metrics.jsonl file
    config: dict[str, Any] = attrs.field(factory=dict)
    status: str | None = None
    series: dict[str, tuple[np.ndarray, np.ndarray]] = attrs.field(factory=dict)  # key -> (steps, values)
    first_tables: dict[str, Table] = attrs.field(factory=dict)  # earliest table of each name
    last_tables: dict[str, Table] = attrs.field(factory=dict)  # latest table of each name
    table_counts: dict[str, int] = attrs.field(factory=dict)
    n_steps: int = 0
    skipped_lines: int = 0

    def has(self, key: str) -> bool:
        return key in self.series

    def series_steps(self) -> np.ndarray:
        """Every step any metric was logged at, sorted."""
        if not self.series:
            return np.array([], dtype=np.int64)
        return np.unique(np.concatenate([s for s, _ in self.series.values()]))

    def last(self, key: str) -> float | None:
        s = self.series.get(key)
        if s is None or not len(s[1]):
            return None
        finite = s[1][np.isfinite(s[1])]
        return float(finite[-1]) if len(finite) else None


def find_metrics_file(run_dir: str | Path) -> Path:
    try:
        return records.find_metrics_file(run_dir, reader="the report")
    except FileNotFoundError as exc:
        raise ReportError(str(exc)) from None


def load_run(run_dir: str | Path) -> RunData:
    path = find_metrics_file(run_dir)
    run = RunData(name=path.parent.name, path=path)
    cols: dict[str, tuple[list[int], list[float]]] = {}
    steps_seen: set[int] = set()
    for lineno, rec in read_records(path):
        if rec is None:
            run.skipped_lines += 1
            if run.skipped_lines == 1:
                log.warning("skipping a line that is not a JSON object", file=str(path), line=lineno)
            continue
        kind = rec.get("kind")
        if kind == "metrics":
            step = int(rec.get("step", 0))
            steps_seen.add(step)
            for k, v in (rec.get("metrics") or {}).items():
                s, vals = cols.setdefault(k, ([], []))
                s.append(step)
                vals.append(float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else np.nan)
        elif kind == "table":
            t = Table(int(rec.get("step", 0)), str(rec.get("name", "table")), list(rec.get("rows") or []))
            run.table_counts[t.name] = run.table_counts.get(t.name, 0) + 1
            if t.name not in run.first_tables or t.step < run.first_tables[t.name].step:
                run.first_tables[t.name] = t
            if t.name not in run.last_tables or t.step >= run.last_tables[t.name].step:
                run.last_tables[t.name] = t
        elif kind == "run_start":
            run.name = str(rec.get("name") or run.name)
            run.config = rec.get("config") or {}
        elif kind == "run_end":
            run.status = rec.get("status")
    if not cols and not run.last_tables:
        raise ReportError(f"{path}: no metrics records; did the run log any step?")
    for k, (s, v) in cols.items():
        steps = np.asarray(s, dtype=np.int64)
        vals = np.asarray(v, dtype=np.float64)
        # the last value logged for a step wins (a resumed run re-logging a step)
        rev_steps = steps[::-1]
        uniq, first_rev = np.unique(rev_steps, return_index=True)
        run.series[k] = (uniq, vals[::-1][first_rev])
    run.n_steps = len({s for s in steps_seen if s >= 1})  # step 0: verl's validation before training
    return run
