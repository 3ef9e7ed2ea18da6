"""Run every benchmarks/bench_*.py in one process; print one markdown table and write RESULTS.md.

    python -m benchmarks.run_all                   # full sizes, writes benchmarks/RESULTS.md
    python -m benchmarks.run_all --only samplers   # re-measure one module: only its section is replaced
    python -m benchmarks.run_all --quick           # small sizes, a smoke test (CI); writes nothing

RESULTS.md has one section per benchmark module, each with its date and machine, so re-measuring
one module keeps the others' rows as they were measured.
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
    sections: dict[str, str] = {}
    results: list[Result] = []
    failed = []
    desc = machine()
    for name in modules:
        t0 = time.perf_counter()
        try:
            mod = importlib.import_module(f"benchmarks.{name}")
            got = mod.run(quick=args.quick)
            results += got
            sections[name] = f"## {name}\n\n{time.strftime('%Y-%m-%d')}; {desc}\n\n{markdown_table(got)}"
        except Exception as exc:  # noqa: BLE001 - report every module, then fail
            failed.append(f"{name}: {type(exc).__name__}: {exc}")
        print(f"[{name}: {time.perf_counter() - t0:.1f} s]", file=sys.stderr)
    print(f"Machine: {desc}\n\n{markdown_table(results)}")
    if not args.quick:
        write_results(sections)
    for f in failed:
        print(f"benchmark module failed: {f}", file=sys.stderr)
    return 1 if failed else 0


RESULTS_HEADER = (
    "# Benchmark results\n\n`make bench` (`python -m benchmarks.run_all`); one section per benchmark module, "
    "each with the date and machine it was measured on.\n\nTimes are medians of repeated runs; ratio = reference "
    "time / rlhooks time; 'met' compares with the target from the issue that introduced the case.\n"
)


def write_results(sections: dict[str, str]) -> None:
    """Replace the sections of the modules that ran; keep the others' as they were measured."""
    path = HERE / "RESULTS.md"
    kept: dict[str, str] = {}
    if path.exists():
        for chunk in path.read_text().split("\n## ")[1:]:
            kept[chunk.split("\n", 1)[0].strip()] = "## " + chunk.strip()
    kept.update(sections)
    path.write_text(RESULTS_HEADER + "".join(f"\n{kept[k].strip()}\n" for k in sorted(kept)))


if __name__ == "__main__":
    sys.exit(main())
