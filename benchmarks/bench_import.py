"""Start-up cost: a fresh interpreter importing rlhooks (the plugin API), rlhooks.host and the pytest
plugin (loaded by every pytest session where rlhooks is installed), against ``import pluggy`` and
``import torch`` as context. Each time is a whole ``python -c "import X"`` process, median of
several, minus a bare ``python -c pass``; the modules each one loads are counted from ``sys.modules``.
Then building the plugin registry (every command and run does, and so do many tests), against
discovery as it was before the seventh session of issues 36-40: one ``entry_points()`` scan per group,
each entry's distribution name and version parsed from its METADATA again.

    .venv/bin/python -m benchmarks.bench_import [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from benchmarks.harness import Result, markdown_table, median_time

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
    results.append(registry_build(repeat * 3))
    return results


def registry_build(repeat: int) -> Result:
    import importlib.metadata as md

    from rlhooks.core.registry import GROUPS, Registry

    def scan_per_group() -> list[tuple[str, str, str, str | None]]:  # the discovery Registry did before
        return [(kind, ep.name, ep.value, ep.dist.metadata["Name"] if ep.dist is not None else None)
                for kind, group in GROUPS.items() for ep in md.entry_points(group=group)]

    # the same entry points (a half-installed distribution's name reads "<unknown>" in one, None in the other)
    found = {(e.kind, e.name, e.value) for e in Registry().entries()}
    assert found == {row[:3] for row in scan_per_group()}, "the two discoveries differ"
    ours, ref = median_time(Registry, repeat), median_time(scan_per_group, repeat)
    return Result(f"plugin registry built: {len(found)} entry points, {len(list(md.distributions()))} distributions "
                  "installed", ours, ref,
                  note="reference: one entry_points() scan per group, METADATA parsed per entry point")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    print(markdown_table(run(quick=parser.parse_args().quick)))


if __name__ == "__main__":
    main()
