"""Run every benchmarks/bench_*.py in one process; print one markdown table and write RESULTS.md.

    python -m benchmarks.run_all           # full sizes, writes benchmarks/RESULTS.md
    python -m benchmarks.run_all --quick   # small sizes, a smoke test (CI); writes nothing
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import sys
import time
from pathlib import Path

from benchmarks.harness import Result, markdown_table

HERE = Path(__file__).parent


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(next(l for l in Path("/proc/meminfo").read_text().splitlines() if l.startswith("MemTotal")).split()[1])
        mem = f", {kb / 2**20:.0f} GiB RAM"
    except (OSError, StopIteration, ValueError):
        pass
    import numpy
    import torch

    return (f"{cpu}, {os.cpu_count()} cores{mem}; Python {platform.python_version()}, "
            f"numpy {numpy.__version__}, torch {torch.__version__}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, no RESULTS.md")
    ap.add_argument("--only", help="run only modules whose name contains this")
    args = ap.parse_args(argv)
    modules = sorted(p.stem for p in HERE.glob("bench_*.py") if not args.only or args.only in p.stem)
    results: list[Result] = []
    failed = []
    for name in modules:
        t0 = time.perf_counter()
        try:
            mod = importlib.import_module(f"benchmarks.{name}")
            results += mod.run(quick=args.quick)
        except Exception as exc:  # noqa: BLE001 - report every module, then fail
            failed.append(f"{name}: {type(exc).__name__}: {exc}")
        print(f"[{name}: {time.perf_counter() - t0:.1f} s]", file=sys.stderr)
    table = markdown_table(results)
    desc = machine()
    print(f"Machine: {desc}\n\n{table}")
    if not args.quick:
        (HERE / "RESULTS.md").write_text(
            f"# Benchmark results\n\n`make bench` on {time.strftime('%Y-%m-%d')}.\n\nMachine: {desc}\n\n"
            "Times are medians of repeated runs; ratio = reference time / rlhooks time; "
            "'met' compares with the target from the issue that introduced the case.\n\n" + table
        )
    for f in failed:
        print(f"benchmark module failed: {f}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
