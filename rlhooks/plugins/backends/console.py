"""ConsoleBackend: a compact line per step and readable sample tables on stdout/stderr.

    step 12 | rewards/mean 0.5123 | source/gsm8k/reward 0.6 | filter/kept_ratio 0.75 | … +41 more

A line ``run <name> started; output in <run_dir>`` opens the run and ``run ended: <status>``
closes it. While a tqdm progress bar is on screen (``rlhooks simulate``, verl's fit loop), lines
are written with ``tqdm.write`` so they appear above the bar instead of being glued to it.

Tables print as one indented JSON object per row, long text cut to ``max_text`` characters::

    ── samples/top_bottom_k · step 12 · 4 rows ──
    {
      "selection": "top",
      ...
    }
"""

from __future__ import annotations

import fnmatch
import json
import math
import sys
from collections.abc import Mapping
from typing import IO, Any, Literal

import attrs
import numpy as np

from rlhooks import hookimpl
from rlhooks.plugins.backends._common import DispatchOptions, json_safe, non_negative, positive, to_number, truncate


def _fmt(value: float | int, digits: int) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isnan(value) or math.isinf(value):
        return str(value)
    return f"{value:.{digits}g}"


#: without ``keys:``, these come first in this order (a verl step logs ~150 of verl's own metrics, whose
#: ``actor/*`` would fill the line sorted alphabetically), then every other metric sorted
FIRST = ("val-core/*/acc/mean@*", "sim/accuracy/mean", "source/*/acc", "task/acc", "filter/kept_ratio",
         "staleness/lag_mean", "staleness/evicted_groups", "timing/rlhooks_share", "rewards/mean", "alerts/total",
         "curriculum/level")


def default_order(metrics: Mapping[str, Any]) -> list[str]:
    """The metric names in the console's order without ``keys:``: ``FIRST``'s matches, then the rest sorted."""
    rest = sorted(metrics)
    first: list[str] = []
    for pattern in FIRST:
        first += [m for m in fnmatch.filter(rest, pattern) if m not in first]
    taken = set(first)
    return first + [m for m in rest if m not in taken]


class ConsoleBackend:
    """Prints metrics (every ``interval`` steps) and tables in a human-readable form."""

    #: its "run ended: <status>" line states the outcome: it ends after the backends that may lose data
    records_outcome = True

    @attrs.frozen(kw_only=True)
    class Options(DispatchOptions):
        #: metric names or glob patterns to print, in this order; empty: rlhooks's own first (validation,
        #: per-source accuracy, filter, staleness, rlhooks's share, rewards, alerts), then the rest sorted
        keys: list[str] = attrs.field(factory=list)
        #: print metrics every N steps (step 1 is always printed)
        interval: int = attrs.field(default=1, validator=positive)
        #: at most this many metrics per line (0 = no limit); the rest is counted
        max_keys: int = attrs.field(default=12, validator=non_negative)
        #: significant digits of floats
        digits: int = attrs.field(default=4, validator=positive)
        #: longest text printed in a table cell before it is cut (0 = no limit)
        max_text: int = attrs.field(default=300, validator=non_negative)
        #: print tables (sample rows) at all
        tables: bool = True
        #: print a one-line summary of each histogram
        histograms: bool = False
        stream: Literal["stdout", "stderr"] = "stdout"

    def __init__(self, options: Options | None = None) -> None:
        self.options = options if options is not None else self.Options()
        self._patterns = [k for k in self.options.keys if any(c in k for c in "*?[")]
        self._run: Any = None

    def _out(self) -> IO[str]:
        # looked up per call so a redirected sys.stdout (pytest, notebooks) is honoured
        return sys.stdout if self.options.stream == "stdout" else sys.stderr

    def _emit(self, text: str) -> None:
        out = self._out()
        tqdm_mod = sys.modules.get("tqdm")
        bar_cls = getattr(tqdm_mod, "tqdm", None)
        if bar_cls is not None and getattr(bar_cls, "_instances", None):
            # a progress bar (rlhooks simulate, verl's fit) is on screen: print above it, not into it
            bar_cls.write(text, file=out)
            out.flush()
            return
        out.write(text + "\n")
        out.flush()

    def _select(self, metrics: Mapping[str, Any]) -> tuple[list[tuple[str, Any]], int]:
        if not self.options.keys:
            names = default_order(metrics)
        else:
            names = []
            seen: set[str] = set()
            for key in self.options.keys:
                matches = sorted(fnmatch.filter(metrics, key)) if key in self._patterns else ([key] if key in metrics else [])
                for m in matches:
                    if m not in seen:
                        seen.add(m)
                        names.append(m)
        limit = self.options.max_keys or len(names)
        shown = [(n, metrics[n]) for n in names[:limit]]
        return shown, len(names) - len(shown)

    def format_metrics(self, step: int, metrics: Mapping[str, Any]) -> str:
        shown, rest = self._select(metrics)
        parts = [f"step {step}"]
        for name, value in shown:
            num = to_number(value)
            parts.append(f"{name} {_fmt(num, self.options.digits) if num is not None else value}")
        if rest:
            parts.append(f"… +{rest} more")
        return " | ".join(parts)

    def format_table(self, step: int, name: str, rows: list[dict[str, Any]]) -> str:
        limit = self.options.max_text
        lines = [f"── {name} · step {step} · {len(rows)} row{'s' if len(rows) != 1 else ''} ──"]
        for row in rows:
            cut = {k: truncate(v, limit) if isinstance(v, str) else v for k, v in row.items()}
            lines.append(json.dumps(json_safe(cut), indent=2, ensure_ascii=False))
        return "\n".join(lines)

    @hookimpl
    def on_run_start(self, run: Any) -> None:
        self._run = run  # its stop_reason is printed at the end
        self._emit(f"run {run.name} started; output in {run.run_dir}")

    @hookimpl
    def log_metrics(self, step: int, metrics: Mapping[str, Any]) -> None:
        if step != 1 and step % self.options.interval:
            return
        self._emit(self.format_metrics(step, metrics))

    @hookimpl
    def log_table(self, step: int, name: str, rows: list[dict[str, Any]]) -> None:
        if not self.options.tables:
            return
        self._emit(self.format_table(step, name, rows))

    @hookimpl
    def log_histogram(self, step: int, name: str, values: np.ndarray) -> None:
        if not self.options.histograms:
            return
        v = np.asarray(values, dtype=np.float64)
        d = self.options.digits
        if v.size:
            text = (f"n={v.size} mean={_fmt(float(v.mean()), d)} std={_fmt(float(v.std()), d)} "
                    f"min={_fmt(float(v.min()), d)} max={_fmt(float(v.max()), d)}")
        else:
            text = "n=0"
        self._emit(f"step {step} | {name} {text}")

    @hookimpl
    def on_run_end(self, status: str) -> None:
        run = self._run
        reason = getattr(run, "stop_reason", None) if run is not None else None
        by = f" by {run.stopped_by}" if reason and getattr(run, "stopped_by", None) else ""
        self._emit(f"run ended: {status}" + (f" (stop requested{by}: {reason})" if reason else ""))
