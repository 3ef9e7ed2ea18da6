"""A V1 step against a legacy step on the real CPU learner: the same config, side by side in one invocation.

    python -m benchmarks.cpu_step                 # 6 steps on each trainer; writes benchmarks/CPU_STEP.md + .json
    python -m benchmarks.cpu_step --steps 4 --no-write

Both runs are ``benchmarks.cpu_learning``'s (dapo, seed 0: 8 prompts x 8 answers a generation batch, the DAPO
filter through the rlhooks replay buffer on V1): the legacy trainer in this process, then verl's V1 trainer on a
local Ray, as ``rlhooks train`` runs it. A step's time is verl's own ``timing_s/step``; the figure is the median
of steps 2 onwards (step 1 warms up). The V1 step is split by verl's phases (``timing_s/gen``: rollout, reward
workers, TransferQueue and the replay buffer's polls; old log-probs; advantages; the actor update; the weight
sync; rlhooks's own ``timing_s/rlhooks``). Not a unit test: ~4-6 min on 2 cores, most of it starting V1's Ray
actors (see docs/DEVELOPMENT.md, "A V1 step on the CPU learner").
"""

from __future__ import annotations

import argparse
import json
import os
import platform as host
import statistics
import sys
import time
from pathlib import Path

from benchmarks import cpu_learning

HERE = Path(__file__).parent
CONFIG, SEED = "dapo", 0
#: verl's phases of a V1 step, as it times them (timing_s/<phase>), in step order
PHASES = ["gen", "old_log_prob", "ref", "adv", "update_actor", "update_weights", "rlhooks"]


def median_steps(run: dict, key: str) -> float | None:
    """The median of ``timing_s/<key>`` over steps 2 onwards (None where no such step logged it)."""
    values = [t[f"timing_s/{key}"] for step, t in run["timing"].items() if step >= 2 and f"timing_s/{key}" in t]
    return statistics.median(values) if values else None


def measure(steps: int, out: Path) -> dict:
    from rlhooks.engines.verl.cpu import platform, runner

    assets = runner.prepare(out / "assets")
    platform.install()
    load_before = os.getloadavg()[0]
    legacy = cpu_learning.one_run(CONFIG, SEED, steps, steps + 1, out / "legacy", assets, trainer="legacy")
    with cpu_learning.shared_ray(assets):
        v1 = cpu_learning.one_run(CONFIG, SEED, steps, steps + 1, out / "v1", assets, trainer="v1", val_max_samples=8)
    return {"date": time.strftime("%Y-%m-%d"), "machine": f"{os.cpu_count()} cores, {host.machine()}",
            "load_avg": [load_before, os.getloadavg()[0]], "steps": steps,
            "runs": {"legacy": _compact(legacy), "v1": _compact(v1)}}


def _compact(run: dict) -> dict:
    return {"wall_s": run["wall_s"], "timing": {str(k): v for k, v in run["timing"].items()}}


def markdown(result: dict) -> str:
    runs = {name: {**r, "timing": {int(k): v for k, v in r["timing"].items()}} for name, r in result["runs"].items()}
    legacy, v1 = (median_steps(runs[n], "step") for n in ("legacy", "v1"))
    lines = [
        "# A V1 step against a legacy step on the CPU learner",
        "",
        f"`python -m benchmarks.cpu_step --steps {result['steps']}` on {result['date']}, {result['machine']}, load "
        f"average {result['load_avg'][0]:.1f} before and {result['load_avg'][1]:.1f} after (the machine was "
        f"{'busy' if max(result['load_avg']) > 1.5 else 'idle'}). Same config on both trainers "
        "(dapo, seed 0, 8 prompts x 8 answers a generation batch); verl's `timing_s/step`, median of steps "
        f"2-{result['steps']}.",
        "",
        "| trainer | step (s) | run wall (s) |",
        "| --- | ---: | ---: |",
        f"| legacy | {legacy:.2f} | {runs['legacy']['wall_s']:.0f} |",
        f"| V1 (`rlhooks_sync`) | {v1:.2f} | {runs['v1']['wall_s']:.0f} |",
        "",
        f"**V1 / legacy: {v1 / legacy:.2f}x** (goal: at most 2x).",
        "",
        "Where a V1 step's time goes (verl's phases, median of the same steps):",
        "",
        "| phase | seconds |",
        "| --- | ---: |",
    ]
    for phase in PHASES:
        value = median_steps(runs["v1"], phase)
        if value is not None:
            lines.append(f"| `timing_s/{phase}` | {value:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--out", default=None, help="where the two runs go (a new folder; default: "
                    "runs/bench-cpu-step/<date-time>, so a rerun never meets the last one's run directories, which the "
                    "trainers refuse to splice into)")
    ap.add_argument("--no-write", action="store_true", help="print the table only")
    args = ap.parse_args(argv)
    if args.steps < 3:
        ap.error("--steps must be at least 3 (the figure is the median of steps 2 onwards)")
    out = Path(args.out) if args.out else Path("runs/bench-cpu-step") / time.strftime("%Y%m%d-%H%M%S")
    result = measure(args.steps, out)
    text = markdown(result)
    print(text)
    if not args.no_write:
        (HERE / "CPU_STEP.json").write_text(json.dumps(result, indent=1))
        (HERE / "CPU_STEP.md").write_text(text)
        print("wrote benchmarks/CPU_STEP.md and .json", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
