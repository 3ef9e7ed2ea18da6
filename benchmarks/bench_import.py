"""Import cost: a fresh interpreter importing rlhooks (the plugin API), rlhooks.host and the pytest
plugin (loaded by every pytest session where rlhooks is installed), against ``import pluggy`` and
``import torch`` as context. Each time is a whole ``python -c "import X"`` process, median of
several, minus a bare ``python -c pass``; the modules each one loads are counted from ``sys.modules``.

    .venv/bin/python -m benchmarks.bench_import [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from benchmarks.harness import Result, markdown_table

#: libraries none of the rlhooks imports below may load (tests/core/test_public_api.py enforces it)
HEAVY = ("torch", "wandb", "tensorboard", "matplotlib", "ray", "verl")


def process_time(code: str, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def heavy_loaded(module: str) -> list[str]:
    code = f"import sys, {module}; print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return out.split()


def run(quick: bool = False) -> list[Result]:
    repeat = 3 if quick else 7
    bare = process_time("pass", repeat)
    pluggy_s = process_time("import pluggy", repeat) - bare
    results = []
    for module in ("rlhooks", "rlhooks.host", "rlhooks.testing.pytest_plugin"):
        t = process_time(f"import {module}", repeat) - bare
        heavy = heavy_loaded(module)
        results.append(Result(f"import {module} (fresh interpreter)", t, pluggy_s, target="no torch/wandb/tb/mpl/ray/verl",
                              met=not heavy, margin=f"loads {', '.join(heavy)}" if heavy else "none of them loaded",
                              note="reference: import pluggy"))
    torch_s = process_time("import torch", max(1, repeat // 2)) - bare
    results.append(Result("import torch (context: what import rlhooks cost before)", torch_s, None))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    print(markdown_table(run(quick=parser.parse_args().quick)))


if __name__ == "__main__":
    main()
