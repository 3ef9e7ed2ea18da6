"""verl V1's trainer modes on the real CPU learner with the same sampler and filter: ``rlhooks_sync`` vs
``rlhooks_colocate_async`` vs ``rlhooks_separate_async``.

    python -m benchmarks.cpu_async                 # writes benchmarks/CPU_ASYNC.md + .json, docs/img/cpu_async.png
    python -m benchmarks.cpu_async --steps 4 --no-write --modes sync colocate_async
    python -m benchmarks.cpu_async --summarize benchmarks/CPU_ASYNC.json
    python -m benchmarks.cpu_async --publish runs/bench-cpu-async/runs.json   # a --no-write run's saved runs

Every invocation saves its runs (with their options and the machine's core count) to ``<--out>/runs.json``.

Each run is ``rlhooks train``'s path (``main.build_config`` then ``main.run``: verl's ``run_ppo`` with the
rlhooks TaskRunner) from the shipped tiny policy, on one local Ray started here for all modes. Per step,
read back from the run's jsonl backend: verl's ``timing_s/step``, rlhooks's ``timing_s/rlhooks`` +
``timing_s/rlhooks_step_end`` and ``timing/rlhooks_share``, the groups generated (``filter/generated_groups``:
every scored group, judged or evicted as stale) and their lag; verl's validation (greedy,
``data.val_max_samples`` prompts, every ``--test-freq`` steps and before training) gives the accuracy over
time. Not a unit test and not in CI: V1 costs minutes a run on 2 cores (Ray, verl's actor processes).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
MODES = ["sync", "colocate_async", "separate_async"]
TRAIN_BS, N = 8, 8
#: the same sampler / filter / rewards in every mode
RLHOOKS: dict[str, Any] = {
    "sampler": {"name": "learnability"},
    "filters": [{"name": "dapo", "metric": "acc"}],
    "rewards": ["format_exact", "format_approx", "check_answer", "check_numbers", "source_metrics"],
    "backends": ["jsonl"],
}


def mode_overrides(mode: str) -> list[str]:
    from rlhooks.engines.verl.cpu import runner

    if mode == "separate_async":
        return runner.separate_async_overrides(TRAIN_BS)
    return [f"trainer.v1.trainer_mode=rlhooks_{mode}"]


def one_run(mode: str, steps: int, test_freq: int, val_samples: int, threshold: int, out: Path,
            assets: tuple[Path, Path]) -> dict:
    import yaml

    from rlhooks.engines.verl import main
    from rlhooks.engines.verl.cpu import runner

    policy_dir, data = assets
    path = out / f"{mode}.yaml"
    path.write_text(yaml.safe_dump({**RLHOOKS, "run": {"name": mode, "out_dir": str(out / "runs")}}))
    cfg = main.build_config(str(path), [
        *runner.verl_overrides(policy_dir, data),
        f"data.train_batch_size={TRAIN_BS}", f"actor_rollout_ref.rollout.n={N}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={TRAIN_BS}", "data.seed=0",
        "algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.use_kl_loss=false",
        "actor_rollout_ref.rollout.val_kwargs.do_sample=false", f"data.val_max_samples={val_samples}",
        f"trainer.v1.sampler.max_off_policy_threshold={threshold}",
        "trainer.logger=[console,file]", "trainer.val_before_train=true", f"trainer.test_freq={test_freq}",
        f"trainer.total_training_steps={steps}", "trainer.total_epochs=1000", "trainer.save_freq=-1",
        f"trainer.default_local_dir={out / 'ckpt' / mode}", f"trainer.experiment_name=async-{mode}",
        *mode_overrides(mode),
    ])
    from rlhooks.engines.verl.v1.runner import RLHooksTaskRunnerV1

    log = out / f"{mode}.verl.jsonl"  # verl's file logger: the merged metrics of each step, step 0's validation
    log.unlink(missing_ok=True)
    from ray.util import placement_group_table

    before = set(placement_group_table())
    started = time.perf_counter()
    try:
        runner.run(cfg, RLHooksTaskRunnerV1.options(runtime_env={"env_vars": {"VERL_FILE_LOGGER_PATH": str(log)}}))
    finally:
        wall = time.perf_counter() - started
        _release(before)
    logged: dict[int, dict] = {}
    for r in map(json.loads, log.read_text().splitlines()):
        logged.setdefault(int(r["step"]), {}).update(r["data"])
    return {"mode": mode, "wall_s": wall, "load_avg_1m_at_end": round(os.getloadavg()[0], 2), "cpus": os.cpu_count(),
            "options": {"steps": steps, "test_freq": test_freq, "val_samples": val_samples, "threshold": threshold},
            "steps": {s: _kept(m) for s, m in logged.items() if "timing_s/step" in m},
            "accuracy": {s: a for s, m in logged.items() if (a := _accuracy(m)) is not None}}


def _release(placement_groups_before: set[str], timeout: float = 120) -> None:
    """What ending an ``rlhooks train`` process releases, for the next mode on this Ray."""
    from tests.verl.ray_cluster import release_run_resources

    release_run_resources(placement_groups_before, timeout)


KEEP = ("timing_s/step", "timing_s/rlhooks", "timing_s/rlhooks_step_end", "timing/rlhooks_share", "timing_s/testing",
        "filter/generated_groups", "filter/stale_evicted_groups", "filter/trained_groups", "staleness/lag_mean")


def _kept(m: dict) -> dict:
    return {k: m[k] for k in KEEP if k in m}


def _accuracy(m: dict) -> float | None:
    """verl's validation accuracy (greedy), the mean over the sources verl reports."""
    accs = [v for k, v in m.items() if k.startswith("val-core/") and k.endswith("/acc/mean@1")]
    return statistics.mean(accs) if accs else None


def summarize(runs: list[dict]) -> str:
    lines = ["| trainer mode | wall time per step, steps 2+ (mean; median) | first step | groups generated | "
             "stale groups evicted | lag of trained trajectories, steps 2+ (mean) | rlhooks per step (mean s; share) | "
             "validated accuracy (step: acc) | run wall time |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        steps = {int(k): v for k, v in r["steps"].items()}
        later = [steps[s]["timing_s/step"] for s in sorted(steps) if s > 1]
        rl = [steps[s].get("timing_s/rlhooks", 0.0) + steps[s].get("timing_s/rlhooks_step_end", 0.0) for s in sorted(steps)]
        share = [steps[s].get("timing/rlhooks_share", 0.0) for s in sorted(steps)]
        lag = [steps[s].get("staleness/lag_mean", 0.0) for s in sorted(steps) if s > 1]  # step 1: lag 0 always
        acc = ", ".join(f"{s}: {a:.3f}" for s, a in sorted((int(k), v) for k, v in r["accuracy"].items()))
        lines.append(
            f"| `rlhooks_{r['mode']}` | {statistics.mean(later):.1f} s; {statistics.median(later):.1f} s | "
            f"{steps[min(steps)]['timing_s/step']:.1f} s | "
            f"{sum(steps[s].get('filter/generated_groups', 0) for s in steps):.0f} | "
            f"{sum(steps[s].get('filter/stale_evicted_groups', 0) for s in steps):.0f} | "
            f"{statistics.mean(lag):.2f} | {statistics.mean(rl):.2f} s; {100 * statistics.mean(share):.1f}% | "
            f"{acc} | {r['wall_s']:.0f} s |")
    return "\n".join(lines)


def chart(runs: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for r in runs:
        steps = {int(k): v for k, v in r["steps"].items()}
        xs = sorted(steps)
        label = f"rlhooks_{r['mode']}"
        axes[0].plot(xs, [steps[s]["timing_s/step"] for s in xs], marker="o", ms=3, label=label)
        axes[1].plot(xs, [100 * steps[s].get("timing/rlhooks_share", 0.0) for s in xs], marker="o", ms=3, label=label)
        acc = sorted((int(k), v) for k, v in r["accuracy"].items())
        cum, total = {}, 0.0
        for s in [0, *xs]:
            total += steps.get(s, {}).get("filter/generated_groups", 0.0) * N
            cum[s] = total
        axes[2].plot([cum.get(s, total) for s, _ in acc], [a for _, a in acc], marker="o", ms=3, label=label)
    axes[0].set(xlabel="training step", ylabel="wall time of the step (s)", title="verl's timing_s/step")
    axes[1].set(xlabel="training step", ylabel="% of the step", title="rlhooks's share (timing/rlhooks_share)")
    accs = [a for r in runs for a in r["accuracy"].values()] or [0.0, 1.0]
    axes[2].set_ylim(max(0.0, min(accs) - 0.05), min(1.0, max(accs) + 0.05))  # not a zoom that makes one prompt a slope
    axes[2].set(xlabel="trajectories generated", ylabel="validated accuracy (greedy, mean over sources)",
                title="accuracy over generation")
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"verl V1 trainer modes on the CPU learner ({runs[0].get('cpus', '?')}-core machine)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def publish(runs: list[dict]) -> None:
    """benchmarks/CPU_ASYNC.md + .json and docs/img/cpu_async.png from ``runs``: the command line, the core
    count and the load come from what the runs recorded, not from this invocation."""
    options = {json.dumps(r.get("options"), sort_keys=True) for r in runs}
    if len(options) != 1 or None in (r.get("options") for r in runs):
        raise SystemExit(f"the runs do not record one set of options ({sorted(options)}): rerun them")
    o = runs[0]["options"]
    loads = ", ".join(f"{r['mode']} {r['load_avg_1m_at_end']}" for r in runs)
    (HERE / "CPU_ASYNC.json").write_text(json.dumps(runs, indent=1))
    (HERE / "CPU_ASYNC.md").write_text(
        f"# verl V1 trainer modes on the CPU learner\n\n`python -m benchmarks.cpu_async --steps {o['steps']} "
        f"--test-freq {o['test_freq']} --val-samples {o['val_samples']} --threshold {o['threshold']}`, "
        f"one run per mode, one after the other on one local Ray, on a {runs[0]['cpus']}-core machine "
        f"(1-minute load average at each run's end: {loads}).\n\n" + summarize(runs) + "\n")
    chart(runs, HERE.parent / "docs" / "img" / "cpu_async.png")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modes", nargs="+", default=MODES, choices=MODES)
    ap.add_argument("--steps", type=int, default=40)  # the published table's
    ap.add_argument("--test-freq", type=int, default=10)
    ap.add_argument("--val-samples", type=int, default=64, help="prompts verl validates (greedy)")
    ap.add_argument("--threshold", type=int, default=2, help="trainer.v1.sampler.max_off_policy_threshold")
    ap.add_argument("--out", default="runs/bench-cpu-async")
    ap.add_argument("--no-write", action="store_true", help="print the table only")
    ap.add_argument("--summarize", metavar="JSON", help="only print the table of a saved run")
    ap.add_argument("--publish", metavar="JSON", help="write CPU_ASYNC.md/.json and the chart from a saved run "
                    "(the --out folder's runs.json), with the options the runs recorded")
    args = ap.parse_args(argv)
    if args.summarize or args.publish:
        runs = json.loads(Path(args.summarize or args.publish).read_text())
        print(summarize(runs))
        if args.publish:
            publish(runs)
        return 0
    import ray

    from rlhooks.engines.verl.cpu import platform, ray_learner, runner
    from rlhooks.engines.verl.main import compose_verl_config

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tiny = (out / "tiny" / "policy", out / "tiny" / "train.parquet")
    assets = tiny if all(p.exists() for p in tiny) else runner.prepare(out / "tiny")
    platform.install()
    # one Ray for every mode, with separate_async's standalone rollout GPU (logical) too
    ray.init(include_dashboard=False, **ray_learner.ray_init_kwargs(compose_verl_config(
        runner.verl_overrides(*assets) + runner.separate_async_overrides(TRAIN_BS))))
    runs = []
    try:
        for mode in args.modes:
            runs.append(one_run(mode, args.steps, args.test_freq, args.val_samples, args.threshold, out, assets))
            (out / "runs.json").write_text(json.dumps(runs, indent=1))  # after each mode, even with --no-write
            print(summarize(runs), flush=True)
    finally:
        ray.shutdown()
    print(summarize(runs))
    if not args.no_write:
        publish(runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
