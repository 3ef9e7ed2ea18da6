"""Shared helpers for benchmarks: median timing, peak memory, one result row per case.

Every ``benchmarks/bench_*.py`` module exposes ``run(quick: bool) -> list[Result]``; ``make bench``
runs them all in one process and prints one markdown table (see benchmarks/run_all.py).
"""

from __future__ import annotations

import gc
import statistics
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import attrs


@attrs.define
class Result:
    case: str
    rlhooks_s: float  # median seconds per call of the rlhooks implementation
    reference_s: float | None = None  # median seconds of the reference implementation, same input
    rows: int | None = None  # rows processed per call (for rows/s)
    peak_bytes: int | None = None  # peak traced memory of one rlhooks call
    target: str = ""  # the target from the issue, e.g. "<10 ms, >=20x"
    met: bool | None = None  # whether the target is met (None: no target)
    note: str = ""
    max_s: float | None = None  # time target: rlhooks_s must be below this
    min_ratio: float | None = None  # speed-up target: ratio must be at least this
    margin: str = ""  # how far from the target, for targets that are not a time or a ratio
    unit: str | None = None  # "us": print times in microseconds whatever their size

    def __attrs_post_init__(self) -> None:
        if self.met is None and (self.max_s is not None or self.min_ratio is not None):
            self.met = self.distance_ok()

    def distance_ok(self) -> bool:
        ok = True
        if self.max_s is not None:
            ok &= self.rlhooks_s < self.max_s
        if self.min_ratio is not None:
            ok &= (self.ratio or 0.0) >= self.min_ratio
        return ok

    @property
    def distance(self) -> str:
        """How far from the target: the share of a time limit used, the multiple of a ratio floor."""
        parts = []
        if self.max_s is not None:
            parts.append(f"{self.rlhooks_s / self.max_s:.0%} of {fmt_time(self.max_s)}")
        if self.min_ratio is not None and self.ratio is not None:
            parts.append(f"{self.ratio / self.min_ratio:.1f}x the {self.min_ratio:g}x floor")
        if self.margin:
            parts.append(self.margin)
        return "; ".join(parts) or "-"

    @property
    def ratio(self) -> float | None:
        if self.reference_s is None or self.rlhooks_s <= 0:
            return None
        return self.reference_s / self.rlhooks_s


def median_time(fn: Callable[[], Any], repeat: int = 5, warmup: int = 1) -> float:
    """Median wall time of ``fn()`` over ``repeat`` runs after ``warmup`` runs."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def peak_memory(fn: Callable[[], Any]) -> tuple[Any, int]:
    """Result of ``fn()`` and the peak bytes allocated while it ran (tracemalloc; numpy is traced)."""
    gc.collect()
    tracemalloc.start()
    try:
        out = fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return out, peak


def fmt_time(s: float | None, unit: str | None = None) -> str:
    if s is None:
        return "-"
    if unit == "us" or s < 1e-3:
        return f"{s * 1e6:,.1f} µs"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def fmt_bytes(b: int | None) -> str:
    if b is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if b < 1024 or unit == "GiB":
            return f"{b:.0f} {unit}" if unit == "B" else f"{b:.1f} {unit}"
        b /= 1024
    return str(b)


def markdown_table(results: list[Result]) -> str:
    head = "| case | rlhooks | reference | ratio | rows/s | peak memory | target | vs target | met |\n"
    head += "|---|---|---|---|---|---|---|---|---|\n"
    lines = []
    for r in results:
        ratio = f"{r.ratio:.1f}x" if r.ratio is not None else "-"
        rps = f"{r.rows / r.rlhooks_s:,.0f}" if r.rows and r.rlhooks_s > 0 else "-"
        met = "-" if r.met is None else ("yes" if r.met else "NO")
        note = f" ({r.note})" if r.note else ""
        lines.append(
            f"| {r.case}{note} | {fmt_time(r.rlhooks_s, r.unit)} | {fmt_time(r.reference_s, r.unit)} | {ratio} | {rps} | "
            f"{fmt_bytes(r.peak_bytes)} | {r.target or '-'} | {r.distance} | {met} |"
        )
    return head + "\n".join(lines) + "\n"
