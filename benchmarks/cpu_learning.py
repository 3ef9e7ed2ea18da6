"""The simulator's --compare on the real CPU learner: DAPO vs DAPO + selective rollout vs the
learnability sampler, and a curriculum vs uniform sampling, over several seeds.

    python -m benchmarks.cpu_learning            # make bench-learning: writes benchmarks/CPU_LEARNING.md + .json
    python -m benchmarks.cpu_learning --quick    # make bench-quick: 1 seed, 3 steps, 2 configs, writes nothing
    python -m benchmarks.cpu_learning --seeds 0 1 --steps 16 --configs dapo selective
    python -m benchmarks.cpu_learning --summarize benchmarks/CPU_LEARNING.json --target 0.47

Each run is ``rlhooks.engines.verl.cpu.runner.build_trainer(...).fit()`` from the shipped policy: verl's
trainer flow, workers, GRPO and PPO loss on the tiny model. Accuracy is verl's own validation
(``trainer.test_freq``; greedy decoding of all 434 prompts, ``val-core/<source>/acc/mean@1``), weighted
by the sources' sizes. "Generated to target" counts the trajectories generated (every generation batch,
kept or not) until the validated accuracy first reaches the target; a run that never does shows "-".
Not a unit test: the full run (5 configs x 3 seeds x 40 steps) takes 15-30 min on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import rlhooks

HERE = Path(__file__).parent

TRAIN_BS, GEN_BS, N = 8, 8, 8
DAPO: dict[str, Any] = {"filters": [{"name": "dapo", "metric": "acc"}],
                        "run": {"max_num_gen_batches": 4, "on_gen_limit": "continue"}}
CONFIGS: dict[str, dict[str, Any]] = {
    "dapo": DAPO,
    "selective": {**DAPO, "run": {**DAPO["run"], "gen_batch_sizing": "adaptive"},
                  "prompt_filters": [{"name": "selective_rollout"}]},
    "learnability": {**DAPO, "sampler": {"name": "learnability", "level": "prompt", "floor": 0.1}},
    "uniform": {},
    "curriculum": {"sampler": {"name": "reward_curriculum", "complexity_source": "mul_small",
                               "initial_complexity_percentile": 30, "final_complexity_percentile": 100,
                               "num_intervals": 3, "reward_threshold": 6.0, "reward_alpha": 0.3,
                               "min_batches_per_level": 2, "check_frequency": 1}},
}
REWARDS = ["format_exact", "format_approx", "check_answer", "check_numbers"]


class Counter:
    """Trajectories generated per step (every generation batch) and the validated accuracy."""

    def __init__(self, sizes: dict[str, int]):
        self.sizes = sizes
        self.generated: dict[int, int] = {}
        self.accuracy: dict[int, float] = {}

    @rlhooks.hookimpl
    def on_rewards_computed(self, step, batch):
        self.generated[step] = self.generated.get(step, 0) + len(batch)

    @rlhooks.hookimpl
    def log_metrics(self, step, metrics):
        acc = {s: metrics.get(f"val-core/{s}/acc/mean@1") for s in self.sizes}
        if all(v is not None for v in acc.values()):
            self.accuracy[step] = sum(acc[s] * n for s, n in self.sizes.items()) / sum(self.sizes.values())


def one_run(name: str, seed: int, steps: int, test_freq: int, out: Path, assets: tuple[Path, Path],
            lr: float = 1e-4) -> dict:
    from omegaconf import OmegaConf, open_dict

    from rlhooks.engines.verl.cpu import runner, tasks
    from rlhooks.engines.verl.main import compose_verl_config

    policy_dir, data = assets
    cfg = compose_verl_config([
        *runner.verl_overrides(policy_dir, data), "trainer.use_v1=false",  # the legacy learner (build_trainer)
        f"data.train_batch_size={TRAIN_BS}", f"data.gen_batch_size={GEN_BS}", f"data.seed={seed}",
        f"actor_rollout_ref.rollout.n={N}", f"actor_rollout_ref.actor.ppo_mini_batch_size={TRAIN_BS}",
        "algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.use_kl_loss=false",
        "algorithm.use_kl_in_reward=false", "actor_rollout_ref.rollout.val_kwargs.do_sample=false",
        f"actor_rollout_ref.actor.optim.lr={lr}",
        "trainer.logger=[console]", "trainer.val_before_train=false", f"trainer.test_freq={test_freq}",
        f"trainer.total_training_steps={steps}", "trainer.total_epochs=1000", "trainer.save_freq=-1",
        f"trainer.default_local_dir={out / 'ckpt'}", f"trainer.experiment_name={name}-seed{seed}",
    ])
    with open_dict(cfg):
        cfg.rlhooks = OmegaConf.create({"run": {"out_dir": str(out / "runs"), "seed": seed},
                                        "rewards": REWARDS, "backends": ["jsonl"], **CONFIGS[name]})
    items = tasks.items()
    counter = Counter({s: int((items["source"] == s).sum()) for s in tasks.SOURCES})
    started = time.perf_counter()
    trainer = runner.build_trainer(cfg, rlhooks_plugins=[("bench_counter", counter)])
    trainer.global_steps = 0  # the step-0 accuracy; fit()'s val_before_train would log it to verl's logger only
    initial = trainer._validate()
    counter.accuracy[0] = sum(initial[f"val-core/{s}/acc/mean@1"] * n for s, n in counter.sizes.items()) / sum(
        counter.sizes.values())
    trainer.fit()
    return {"config": name, "seed": seed, "wall_s": time.perf_counter() - started,
            "generated": counter.generated, "accuracy": counter.accuracy}


def generated_to(run: dict, target: float) -> int | None:
    total = 0
    steps = sorted(run["generated"])
    for step in [0, *steps]:
        total += run["generated"].get(step, 0)
        if run["accuracy"].get(step, -1.0) >= target:
            return total
    return None


def summarize(runs: list[dict], target: float) -> str:
    lines = [f"target accuracy {target:.2f} (validated, greedy, all prompts)", "",
             "| config | seeds | generated to target (per seed) | final accuracy (mean, per seed) | start | "
             "generated in all (mean) | wall time (mean) |",
             "|---|---|---|---|---|---|---|"]
    for name in dict.fromkeys(r["config"] for r in runs):
        mine = [r for r in runs if r["config"] == name]
        reached = [generated_to(r, target) for r in mine]
        finals = [r["accuracy"][max(r["accuracy"])] for r in mine]
        starts = [r["accuracy"][0] for r in mine]
        lines.append(f"| {name} | {len(mine)} | {', '.join('-' if g is None else f'{g:,}' for g in reached)} | "
                     f"{statistics.mean(finals):.3f} ({', '.join(f'{f:.3f}' for f in finals)}) | "
                     f"{statistics.mean(starts):.3f} | "
                     f"{statistics.mean(sum(r['generated'].values()) for r in mine):,.0f} | "
                     f"{statistics.mean(r['wall_s'] for r in mine):.0f} s |")
    return "\n".join(lines)


def chart(runs: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    colors = {}
    for r in runs:
        total, xs, ys = 0, [], []
        for step in sorted(set(r["accuracy"]) | set(r["generated"])):
            total += r["generated"].get(step, 0)
            if step in r["accuracy"]:
                xs.append(total)
                ys.append(r["accuracy"][step])
        line = ax.plot(xs, ys, marker="o", ms=3, color=colors.get(r["config"]),
                       label=r["config"] if r["config"] not in colors else None)[0]
        colors.setdefault(r["config"], line.get_color())
    ax.set_xlabel("trajectories generated")
    ax.set_ylabel("validated accuracy (greedy, 434 prompts)")
    ax.set_title("Real CPU learner (76k-parameter policy through verl's workers)")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _default_target(runs: list[dict]) -> float:
    return round(statistics.mean(r["accuracy"][0] for r in runs) + 0.05, 2)


def _int_keys(run: dict) -> dict:
    """A run read back from JSON (whose object keys are strings)."""
    return {**run, **{k: {int(s): v for s, v in run[k].items()} for k in ("generated", "accuracy")}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1 seed, 3 steps, dapo and selective; writes nothing")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--test-freq", type=int, default=4)
    ap.add_argument("--target", type=float, default=None, help="default: the mean start accuracy + 0.05")
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--out", default="runs/bench-cpu-learning")
    ap.add_argument("--summarize", metavar="JSON", help="only print the table of a saved run (e.g. another --target)")
    args = ap.parse_args(argv)
    if args.summarize:
        runs = [_int_keys(r) for r in json.loads(Path(args.summarize).read_text())]
        target = args.target if args.target is not None else _default_target(runs)
        print(summarize(runs, target))
        return 0
    if args.quick:
        args.seeds, args.steps, args.test_freq, args.configs = [0], 3, 3, ["dapo", "selective"]
    from rlhooks.engines.verl.cpu import platform, runner

    out = Path(args.out)
    assets = runner.prepare(out / "assets")
    platform.install()
    runs = []
    started = time.perf_counter()
    for name in args.configs:
        for seed in args.seeds:
            run = one_run(name, seed, args.steps, args.test_freq, out / f"{name}-{seed}", assets, args.lr)
            runs.append(run)
            print(f"[{name} seed {seed}: {run['wall_s']:.0f} s, accuracy "
                  f"{run['accuracy'][0]:.3f} -> {run['accuracy'][max(run['accuracy'])]:.3f}]", file=sys.stderr)
    target = args.target if args.target is not None else _default_target(runs)
    table = summarize(runs, target)
    total = time.perf_counter() - started
    print(table + f"\n\ntotal wall time {total:.0f} s")
    if not args.quick:
        (HERE / "CPU_LEARNING.json").write_text(json.dumps(runs, indent=1))
        chart(runs, HERE.parent / "docs" / "img" / "cpu_learning.png")  # the site shows it
        (HERE / "CPU_LEARNING.md").write_text(
            f"# Real CPU learner: the --compare configurations\n\n`python -m benchmarks.cpu_learning "
            f"--seeds {' '.join(map(str, args.seeds))} --steps {args.steps}`; {time.strftime('%Y-%m-%d')}; "
            f"train batch {TRAIN_BS} prompts x {N}, generation batch {GEN_BS}; total wall time {total:.0f} s "
            f"on this machine.\n\n{table}\n\n![accuracy vs trajectories](../docs/img/cpu_learning.png)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
