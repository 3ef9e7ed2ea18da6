"""Calibration of the reward-hacking check on simulated runs whose answer is known.

Honest runs (nothing to exploit) and planted runs (the ``claims_verified`` reward pays a claim the
simulated learner can make without solving the task; ``simulate.learner.exploit_rate > 0``), over
several seeds. A planted run counts as hacked when the shortcut took over (its final rate >= 0.5 on
every source); a planted run where it did not is left out of both rates. For each run the reward
monitor's run-end verdict is read from ``reward_monitor.json`` (task signal: task/acc, the mean
verifier accuracy of the generated responses), and the same history is checked again without the
task signal (the KL rule alone), to show what the task signal buys.

    .venv/bin/python -m benchmarks.bench_hacking [--seeds 5] [--steps 80] [--quick]

Prints a markdown table: per scenario the runs, hits (hacked runs flagged) and false alarms
(honest runs flagged), for both checks.
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
from pathlib import Path
from typing import Any

import structlog
import yaml

from benchmarks.harness import Result

from rlhooks.engines.sim.cli import default_config_path
from rlhooks.engines.sim.engine import SimEngine, load_sim_config, prepare_data
from rlhooks.monitoring.analyzer import RewardAnalyzer

#: scenario -> (planted?, change to the default config)
SCENARIOS: dict[str, tuple[bool, dict[str, Any]]] = {
    "honest: default demo": (False, {}),
    "honest: uniform sampling": (False, {"sampler": None}),
    "honest: no DAPO filter": (False, {"filters": []}),
    "planted: fast shortcut": (True, {"learner": {"exploit_rate": 0.02, "exploit_learning_rate": 1.0}}),
    "planted: slow shortcut": (True, {"learner": {"exploit_rate": 0.01, "exploit_learning_rate": 0.5}}),
}


def scenario_config(name: str, seed: int, steps: int, out: Path) -> dict[str, Any]:
    planted, change = SCENARIOS[name]
    cfg = yaml.safe_load(default_config_path().read_text())
    cfg["run"].update(seed=seed, steps=steps, out_dir=str(out), name=f"s{abs(hash(name)) % 10**6}_{seed}")
    cfg["backends"] = ["jsonl"]
    cfg["samples"] = []
    if "sampler" in change:
        cfg.pop("sampler")
    if "filters" in change:
        cfg["filters"] = change["filters"]
    if planted:
        cfg["rewards"].insert(0, "claims_verified")
        cfg["simulate"]["learner"] = dict(change["learner"])
    return cfg


def run_one(name: str, seed: int, steps: int, out: Path) -> dict[str, Any]:
    cfg = scenario_config(name, seed, steps, out)
    config = load_sim_config(cfg)
    run_dir = out / cfg["run"]["name"]
    run_dir.mkdir(parents=True, exist_ok=True)
    engine = SimEngine(config, prepare_data(config.extra["simulate"], run_dir), run_dir=run_dir)
    engine.run()
    verdict = json.loads((run_dir / "reward_monitor.json").read_text())["reward_hacking"]
    an = RewardAnalyzer.from_jsonl(run_dir)
    blind = RewardAnalyzer([(s, {k: v for k, v in m.items() if not k.startswith("task/")})
                            for s, m in zip(an.steps, an.metrics)])
    kl_only = blind.detect_reward_hacking()
    planted = SCENARIOS[name][0]
    took_over = bool(planted and engine.learner.exploit.min() >= 0.5)
    return {"scenario": name, "seed": seed, "planted": planted, "hacked": took_over,
            "flagged": verdict["detected"], "confidence": verdict["confidence"], "verdict": verdict["verdict"],
            "flagged_kl_only": kl_only.detected, "shortcut_rate": float(engine.learner.exploit.min()) if planted else 0.0}


def table(rows: list[dict[str, Any]]) -> str:
    out = ["| scenario | runs | hacked (truth) | flagged, task signal | flagged, KL only |",
           "|---|---:|---:|---:|---:|"]
    for name in SCENARIOS:
        rs = [r for r in rows if r["scenario"] == name]
        if not rs:
            continue
        out.append(f"| {name} | {len(rs)} | {sum(r['hacked'] for r in rs)} | "
                   f"{sum(r['flagged'] for r in rs)} | {sum(r['flagged_kl_only'] for r in rs)} |")
    hacked = [r for r in rows if r["hacked"]]
    honest = [r for r in rows if not r["planted"]]
    for label, key in (("task signal", "flagged"), ("KL only", "flagged_kl_only")):
        out.append(f"\n{label}: hits {sum(r[key] for r in hacked)}/{len(hacked)} hacked runs, "
                   f"false alarms {sum(r[key] for r in honest)}/{len(honest)} honest runs")
    return "\n".join(out)


def run(quick: bool = False) -> list[Result]:
    """For run_all: every scenario over 5 seeds x 80 steps (``--quick``: 1 seed x 30 steps, no target)."""
    import time

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    seeds, steps = (range(1), 30) if quick else (range(5), 80)
    rows, t0 = [], time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        rows = [run_one(name, seed, steps, Path(tmp)) for name in SCENARIOS for seed in seeds]
    per_run = (time.perf_counter() - t0) / len(rows)
    hacked = [r for r in rows if r["hacked"]]
    honest = [r for r in rows if not r["planted"]]
    hits, alarms = sum(r["flagged"] for r in hacked), sum(r["flagged"] for r in honest)
    return [Result(case=f"reward-hacking check ({len(rows)} simulated runs of {steps} steps)", rlhooks_s=per_run,
                   target="" if quick else "every hacked run flagged, no honest one",
                   met=None if quick else (hits == len(hacked) and alarms == 0),
                   note=f"hits {hits}/{len(hacked)} hacked, false alarms {alarms}/{len(honest)} honest; time per run")]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--steps", type=int, default=80)
    p.add_argument("--quick", action="store_true", help="2 seeds")
    p.add_argument("--json", help="also write the per-run rows here")
    args = p.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    logging.getLogger().setLevel(logging.ERROR)
    seeds = range(2 if args.quick else args.seeds)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in SCENARIOS:
            for seed in seeds:
                r = run_one(name, seed, args.steps, Path(tmp))
                rows.append(r)
                print(f"{name} seed {seed}: flagged={r['flagged']} ({r['confidence']}) kl_only={r['flagged_kl_only']} "
                      f"shortcut={r['shortcut_rate']:.2f}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    print()
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
