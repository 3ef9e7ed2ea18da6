"""The simulator's --compare on the real CPU learner: DAPO vs DAPO + selective rollout vs the
learnability sampler, and a curriculum vs uniform sampling, over several seeds, on verl's V1 trainer
(verl's default) or its legacy one.

    python -m benchmarks.cpu_learning            # make bench-learning: V1, dapo and uniform, seed 0, 40 steps;
                                                 # writes benchmarks/CPU_LEARNING.md + .json, docs/img/cpu_learning.png
    python -m benchmarks.cpu_learning --quick    # make bench-quick: one V1 run of 2 steps, writes nothing
    python -m benchmarks.cpu_learning --trainer legacy   # the legacy table's runs (all five configs):
                                                 # writes benchmarks/CPU_LEARNING_LEGACY.json, cpu_learning_legacy.png
    python -m benchmarks.cpu_learning --seeds 0 1 --steps 16 --configs dapo selective
    python -m benchmarks.cpu_learning --no-write --out runs/b; python -m benchmarks.cpu_learning --publish runs/b/runs.json
    python -m benchmarks.cpu_learning --summarize benchmarks/CPU_LEARNING.json --target 0.47
    python -m benchmarks.cpu_learning --curriculum   # uniform vs the accuracy-gated curriculum:
                                                     # writes benchmarks/CPU_LEARNING_CURRICULUM.md + .json

A V1 run is what ``rlhooks train`` does with the CPU learner: ``main.build_config`` (the rlhooks trainer mode,
replay buffer and reward adapter), verl's ``run_ppo`` with the rlhooks ``TaskRunnerV1``; all the runs of one
invocation share one hermetic local Ray. The trainer runs in a Ray actor, so its figures are read back from
verl's file logger (``read_verl_log``). A legacy run is the legacy package's ``build_cpu_trainer(...).fit()`` in this process,
counted by an in-process plugin. Both start from the shipped policy: verl's trainer flow, workers, GRPO and PPO
loss on the tiny model. Accuracy is verl's own validation (``trainer.test_freq``; greedy decoding of all 434
prompts, ``val-core/<source>/acc/mean@1``), weighted by the sources' sizes. "Generated to target" counts the
trajectories generated (every generation batch, kept or not) until the validated accuracy first reaches the
target; a run that never does shows "-". Not a unit test: see docs/DEVELOPMENT.md for what a run costs."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
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
    # gated on the accuracy reward extra (acc: 1 when check_answer scores >= 1.5) of mul_small's unlocked
    # rows, not the summed reward the format functions alone push past any useful threshold; the same
    # source mix as uniform (proportional to the sources' sizes), so only the curriculum differs
    "curriculum_acc": {"sampler": {"name": "reward_curriculum", "complexity_source": "mul_small",
                                   "sampling_strategy": "proportional", "gate_metric": "acc",
                                   "initial_complexity_percentile": 30, "final_complexity_percentile": 100,
                                   "num_intervals": 3, "reward_threshold": 0.5, "reward_alpha": 0.2,
                                   "min_batches_per_level": 5, "check_frequency": 1}},
}
#: the --compare configurations: what the legacy table ran (--trainer legacy's default)
COMPARE_CONFIGS = ["dapo", "selective", "learnability", "uniform", "curriculum"]
#: what make bench-learning runs on V1 (its default): the filtered path (DAPO through the rlhooks replay
#: buffer's evict-and-refill) and the plain one (every group trains); the other three are variants of these
#: (selective: dapo + a prompt filter; learnability: dapo + a sampler; curriculum: uniform + a sampler), and all
#: five x 3 seeds (15 runs) do not fit CI's time on 2 cores (docs/DEVELOPMENT.md, "make bench-learning on V1")
V1_COMPARE_CONFIGS = ["dapo", "uniform"]
#: make bench-learning's seeds on V1: the published table's (a seed spread to compare with the legacy seeds';
#: ~1.5-2 h on 2 cores); CI runs one (--seeds 0). A published table with fewer runs than this plan says it is partial
V1_SEEDS = [0, 1, 2]
# the same with a stricter gate: 70% of the unlocked products answered correctly
CONFIGS["curriculum_acc_0.7"] = {"sampler": {**CONFIGS["curriculum_acc"]["sampler"], "reward_threshold": 0.7}}
#: --curriculum: the configurations, files and chart of the curriculum comparison
CURRICULUM_CONFIGS = ["uniform", "curriculum_acc", "curriculum_acc_0.7"]
CURRICULUM_SOURCE = "mul_small"
REWARDS = ["format_exact", "format_approx", "check_answer", "check_numbers"]


class Counter:
    """Trajectories generated per step (every generation batch) and the validated accuracy."""

    def __init__(self, sizes: dict[str, int]):
        self.sizes = sizes
        self.generated: dict[int, int] = {}
        self.accuracy: dict[int, float] = {}
        self.source_accuracy: dict[int, dict[str, float]] = {}
        self.curriculum: dict[int, dict[str, float]] = {}
        self.timing: dict[int, dict[str, float]] = {}  # verl's timing_s/* of each step (benchmarks.cpu_step)
        self.step_ended: dict[int, float] = {}  # when each step's metrics came (time.time(); benchmarks.cpu_step)

    @rlhooks.hookimpl
    def on_rewards_computed(self, step, batch):
        self.generated[step] = self.generated.get(step, 0) + len(batch)

    @rlhooks.hookimpl
    def log_metrics(self, step, metrics):
        # a validation of every prompt has every source; one of a few (--val-max-samples) may lack some
        acc = {s: metrics[f"val-core/{s}/acc/mean@1"] for s in self.sizes if f"val-core/{s}/acc/mean@1" in metrics}
        if acc:
            self.record_validation(step, acc)
        level = {k: float(v) for k, v in metrics.items() if k.startswith("curriculum/")}
        if level:
            self.curriculum[step] = level
        timing = {k: float(v) for k, v in metrics.items() if k.startswith("timing_s/")}
        if timing:
            self.timing.setdefault(step, {}).update(timing)
        if "timing_s/step" in metrics:
            self.step_ended[step] = time.time()

    def record_validation(self, step: int, acc: dict[str, float]) -> None:
        """The accuracy over the validated sources, weighted by their sizes."""
        self.source_accuracy[step] = {s: float(v) for s, v in acc.items()}
        self.accuracy[step] = sum(acc[s] * self.sizes[s] for s in acc) / sum(self.sizes[s] for s in acc)


TRAINERS = ("v1", "legacy")


def _verl_overrides(name: str, seed: int, steps: int, test_freq: int, out: Path, assets: tuple[Path, Path],
                    lr: float) -> list[str]:
    """The verl settings of a run, on either trainer (verl's default, V1, unless the caller adds
    ``trainer.use_v1=false``)."""
    from rlhooks.engines.verl.cpu import runner

    policy_dir, data = assets
    return [
        *runner.verl_overrides(policy_dir, data),
        f"data.train_batch_size={TRAIN_BS}", f"data.gen_batch_size={GEN_BS}", f"data.seed={seed}",
        f"actor_rollout_ref.rollout.n={N}", f"actor_rollout_ref.actor.ppo_mini_batch_size={TRAIN_BS}",
        "algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.use_kl_loss=false",
        "algorithm.use_kl_in_reward=false", "actor_rollout_ref.rollout.val_kwargs.do_sample=false",
        f"actor_rollout_ref.actor.optim.lr={lr}", f"trainer.test_freq={test_freq}",
        f"trainer.total_training_steps={steps}", "trainer.total_epochs=1000", "trainer.save_freq=-1",
        f"trainer.default_local_dir={out / 'ckpt'}", f"trainer.experiment_name={name}-seed{seed}",
    ]


def _rlhooks_block(name: str, seed: int, out: Path) -> dict[str, Any]:
    block = {"rewards": REWARDS, "backends": ["jsonl"], **CONFIGS[name]}
    # the config's own run options (DAPO's max_num_gen_batches) join, never replace, the run's place
    block["run"] = {**block.get("run", {}), "out_dir": str(out / "runs"), "seed": seed}
    return block


def _sizes() -> dict[str, int]:
    from rlhooks.engines.verl.cpu import tasks

    items = tasks.items()
    return {s: int((items["source"] == s).sum()) for s in tasks.SOURCES}


def one_run(name: str, seed: int, steps: int, test_freq: int, out: Path, assets: tuple[Path, Path],
            lr: float = 1e-4, trainer: str = "v1", val_max_samples: int | None = None) -> dict:
    """One run of config ``name`` on verl's V1 trainer (``rlhooks train``'s path; needs ``shared_ray``) or
    its legacy one; what it generated and validated, per step."""
    if trainer == "legacy":
        return legacy_run(name, seed, steps, test_freq, out, assets, lr)
    return v1_run(name, seed, steps, test_freq, out, assets, lr, val_max_samples)


def legacy_run(name: str, seed: int, steps: int, test_freq: int, out: Path, assets: tuple[Path, Path],
               lr: float = 1e-4) -> dict:
    """The legacy CPU learner in this process (its ``build_cpu_trainer(...).fit()``), counted by an in-process
    plugin: how the published legacy table was measured."""
    from omegaconf import OmegaConf, open_dict

    from rlhooks.engines.verl import trainers
    from rlhooks.engines.verl.main import compose_verl_config

    cfg = compose_verl_config([*_verl_overrides(name, seed, steps, test_freq, out, assets, lr),
                               "trainer.use_v1=false", "trainer.logger=[console]", "trainer.val_before_train=false"])
    with open_dict(cfg):
        cfg.rlhooks = OmegaConf.create(_rlhooks_block(name, seed, out))
    counter = Counter(_sizes())
    started = time.perf_counter()
    legacy = trainers.removable("legacy")  # a ConfigError naming trainer.use_v1 once it is deleted
    trainer = legacy.build_cpu_trainer(cfg, rlhooks_plugins=[("bench_counter", counter)])
    trainer.global_steps = 0  # the step-0 accuracy; fit()'s val_before_train would log it to verl's logger only
    initial = trainer._validate()
    counter.record_validation(0, {s: initial[f"val-core/{s}/acc/mean@1"] for s in counter.sizes})
    trainer.fit()
    return {"config": name, "seed": seed, "trainer": "legacy", "wall_s": time.perf_counter() - started,
            "date": time.strftime("%Y-%m-%d"), "load_avg": os.getloadavg()[0],
            "generated": counter.generated, "accuracy": counter.accuracy,
            "source_accuracy": counter.source_accuracy, "curriculum": counter.curriculum, "timing": counter.timing,
            "step_ended": counter.step_ended}


def v1_config(name: str, seed: int, steps: int, test_freq: int, out: Path, assets: tuple[Path, Path],
              lr: float = 1e-4, val_max_samples: int | None = None) -> Any:
    """The config ``rlhooks train --config <out>/rlhooks.yaml`` builds for a V1 run: the rlhooks block in a
    YAML file, the verl settings as command-line overrides (so ``build_config`` sets the rlhooks trainer mode,
    replay buffer and reward adapter as it does for a user). verl's file logger records every step's metrics
    (verl's and rlhooks's, merged) and the step-0 validation (``val_before_train``)."""
    import yaml

    from rlhooks.engines.verl.main import build_config

    out.mkdir(parents=True, exist_ok=True)
    config_file = out / "rlhooks.yaml"
    config_file.write_text(yaml.safe_dump(_rlhooks_block(name, seed, out), sort_keys=False))
    overrides = [*_verl_overrides(name, seed, steps, test_freq, out, assets, lr),
                 f"actor_rollout_ref.rollout.seed={seed}",  # the CPU rollout server's per-request sampling seeds
                 "trainer.logger=[file]", "trainer.val_before_train=true"]
    if val_max_samples:
        overrides.append(f"data.val_max_samples={val_max_samples}")
    return build_config(str(config_file), overrides)


def v1_run(name: str, seed: int, steps: int, test_freq: int, out: Path, assets: tuple[Path, Path],
           lr: float = 1e-4, val_max_samples: int | None = None) -> dict:
    """``rlhooks train``'s V1 CPU learner (verl's ``run_ppo`` with the rlhooks TaskRunnerV1) on the Ray this
    process started (``shared_ray``); the figures are read back from verl's file logger (``verl_metrics.jsonl``)."""
    from rlhooks.engines.verl.cpu import runner
    from rlhooks.engines.verl.main import forward_rlhooks_env, validate_verl_config
    from rlhooks.engines.verl.v1.runner import RLHooksTaskRunnerV1

    cfg = v1_config(name, seed, steps, test_freq, out, assets, lr, val_max_samples)
    log = out / "verl_metrics.jsonl"  # verl's FileLogger rewrites it
    validate_verl_config(cfg)
    forward_rlhooks_env(cfg)
    started = time.perf_counter()
    with _run_resources_released():
        runner.run(cfg, RLHooksTaskRunnerV1.options(runtime_env={"env_vars": {"VERL_FILE_LOGGER_PATH": str(log)}}))
    wall = time.perf_counter() - started
    return {"config": name, "seed": seed, "trainer": "v1", "wall_s": wall, "date": time.strftime("%Y-%m-%d"),
            "load_avg": os.getloadavg()[0],
            **read_verl_log(log, _sizes(), n=N, gen_batch_size=GEN_BS)}


def read_verl_log(path: Path, sizes: dict[str, int], *, n: int, gen_batch_size: int) -> dict[str, dict]:
    """A V1 run's figures from verl's file logger (one ``{"step", "data"}`` line per logged dict).

    Trajectories generated in a step: ``filter/generated_groups`` (every group the replay buffer scored,
    the ones the filters dropped and the surplus verl discards included) x ``n`` where rlhooks filters ran;
    without filters V1 generates what it dispatched (``train/num_gen_batches`` x ``gen_batch_size`` x ``n``).
    Validation: ``val-core/<source>/acc/mean@1`` (step 0 from ``val_before_train``); curriculum levels:
    ``curriculum/*``."""
    counter = Counter(sizes)
    for number, line in enumerate(path.read_text().splitlines(), 1):
        try:
            record = json.loads(line)
            step, data = int(record["step"]), record["data"]
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}:{number}: not a verl file-logger record ({exc})") from None
        if "filter/generated_groups" in data:
            counter.generated[step] = int(data["filter/generated_groups"]) * n
        elif "train/num_gen_batches" in data:
            counter.generated[step] = int(data["train/num_gen_batches"]) * gen_batch_size * n
        counter.log_metrics(step, data)
    if not counter.generated:
        raise ValueError(f"{path}: no training step logged (no filter/generated_groups or train/num_gen_batches)")
    return {"generated": counter.generated, "accuracy": counter.accuracy,
            "source_accuracy": counter.source_accuracy, "curriculum": counter.curriculum, "timing": counter.timing}


@contextmanager
def _run_resources_released(timeout: float = 120) -> Iterator[None]:
    """What ending an ``rlhooks train`` process releases, for the next run on the shared Ray: the actors the
    run's TaskRunner owned (they end with it; the CPU rollout server's name must be free again) and the
    placement groups verl made for it (they belong to the job: this process)."""
    from ray.util import placement_group_table

    from tests.verl.ray_cluster import release_run_resources

    before = set(placement_group_table())
    try:
        yield
    finally:
        release_run_resources(before, timeout)


@contextmanager
def shared_ray(assets: tuple[Path, Path]) -> Iterator[None]:
    """One local Ray for every V1 run of this invocation (starting Ray costs 20-60 s on 2 cores), started as
    the CPU learner's ``run_ppo`` would start it (``ray_learner.ray_init_kwargs``), hermetic: its own
    temporary directory and token, so no other Ray on the machine joins it or is joined."""
    from rlhooks.engines.verl.cpu import ray_learner, runner
    from rlhooks.engines.verl.main import compose_verl_config
    from tests.verl.ray_cluster import local_ray

    with local_ray(ray_learner.ray_init_kwargs(compose_verl_config(runner.verl_overrides(*assets)))):
        yield


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


def _finals(runs: list[dict], name: str) -> list[float]:
    return [r["accuracy"][max(r["accuracy"])] for r in sorted(runs, key=lambda r: r["seed"]) if r["config"] == name]


def compare_trainers(v1: list[dict], legacy: list[dict]) -> str:
    """Per config run on both trainers: the final validated accuracy's mean and seed-to-seed spread (the
    range over seeds, min-max) on each trainer, V1 minus legacy, and whether V1's mean lies inside the legacy
    seeds' range (what "reproduces within the seed-to-seed spread" means here)."""
    lines = ["| config | legacy final accuracy: mean [min-max over seeds] (n) | V1 final accuracy: mean [min-max] (n) | "
             "V1 - legacy (means) | V1 mean within the legacy seeds' range |",
             "|---|---|---|---|---|"]
    for name in dict.fromkeys(r["config"] for r in v1):
        old, new = _finals(legacy, name), _finals(v1, name)
        if not old:
            continue
        inside = min(old) <= statistics.mean(new) <= max(old)
        lines.append(f"| {name} | {statistics.mean(old):.3f} [{min(old):.3f}-{max(old):.3f}] ({len(old)}) | "
                     f"{statistics.mean(new):.3f} [{min(new):.3f}-{max(new):.3f}] ({len(new)}) | "
                     f"{statistics.mean(new) - statistics.mean(old):+.3f} | {'yes' if inside else 'no'} |")
    return "\n".join(lines)


def _level_steps(run: dict) -> list[int]:
    """The step at which each curriculum level above 0 was first reached."""
    out, level = [], 0
    for step in sorted(run.get("curriculum", {})):
        now = int(run["curriculum"][step].get("curriculum/level", 0))
        out += [step] * max(0, now - level)
        level = max(level, now)
    return out


def _means(values: list[float]) -> str:
    return f"{statistics.mean(values):.3f} ({', '.join(f'{v:.3f}' for v in values)})"


def summarize_curriculum(runs: list[dict], source: str = CURRICULUM_SOURCE) -> str:
    """Per config: final accuracy (all prompts, each source), the curriculum source's mean validated
    accuracy over the run (how early it learned), when each level unlocked; then the paired gain per seed."""
    configs = list(dict.fromkeys(r["config"] for r in runs))
    sources = list(next(iter(runs[0]["source_accuracy"].values())))
    lines = ["| config | seeds | final accuracy, all prompts (mean; per seed) | "
             + " | ".join(f"final {s}" for s in sources)
             + f" | {source}, mean over validations after step 0 | levels unlocked at step (per seed) | wall time (mean) |",
             "|---|---|---|" + "---|" * len(sources) + "---|---|---|"]
    stats: dict[str, dict[int, tuple[float, float, float]]] = {}
    for name in configs:
        mine = sorted((r for r in runs if r["config"] == name), key=lambda r: r["seed"])
        finals = [r["accuracy"][max(r["accuracy"])] for r in mine]
        per_src = {s: [r["source_accuracy"][max(r["source_accuracy"])][s] for r in mine] for s in sources}
        over_run = [statistics.mean(v[source] for k, v in r["source_accuracy"].items() if k > 0) for r in mine]
        stats[name] = {r["seed"]: (f, p, o) for r, f, p, o in zip(mine, finals, per_src[source], over_run)}
        levels = "; ".join(", ".join(map(str, _level_steps(r))) or "-" for r in mine) if "curriculum" in name else "n/a"
        lines.append(f"| {name} | {len(mine)} | {_means(finals)} | "
                     + " | ".join(_means(per_src[s]) for s in sources)
                     + f" | {_means(over_run)} | {levels} | {statistics.mean(r['wall_s'] for r in mine):.0f} s |")
    base = configs[0]
    for other in configs[1:]:
        seeds = sorted(set(stats[base]) & set(stats[other]))
        if seeds:
            lines += ["", f"{other} minus {base}, paired by seed ({', '.join(map(str, seeds))}):", ""]
            for i, what in enumerate(("final accuracy, all prompts", f"final {source} accuracy",
                                      f"{source} mean over validations")):
                d = [stats[other][k][i] - stats[base][k][i] for k in seeds]
                lines.append(f"* {what}: {statistics.mean(d):+.3f} on the mean ({', '.join(f'{x:+.3f}' for x in d)})")
    return "\n".join(lines)


def chart_curriculum(runs: list[dict], path: Path, source: str = CURRICULUM_SOURCE) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharex=True)
    colors: dict[str, str] = {}
    for r in runs:
        steps = sorted(r["source_accuracy"])
        for ax, ys in ((axes[0], [r["accuracy"][k] for k in steps]),
                       (axes[1], [r["source_accuracy"][k][source] for k in steps])):
            line = ax.plot(steps, ys, marker="o", ms=3, color=colors.get(r["config"]),
                           label=r["config"] if ax is axes[0] and r["config"] not in colors else None)[0]
        colors.setdefault(r["config"], line.get_color())
        for step in _level_steps(r):
            axes[1].axvline(step, color=colors[r["config"]], alpha=0.25, lw=1)
    axes[0].set_ylabel("validated accuracy, all 434 prompts")
    axes[1].set_ylabel(f"validated accuracy, {source} (lines: level-ups)")
    for ax in axes:
        ax.set_xlabel("training step")
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle("Real CPU learner: accuracy-gated curriculum vs uniform (greedy validation)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def chart(runs: list[dict], path: Path, trainer: str = "v1") -> None:
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
    ax.set_title(f"Real CPU learner, verl's {'V1' if trainer == 'v1' else 'legacy'} trainer (76k-parameter policy)")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _default_target(runs: list[dict]) -> float:
    return round(statistics.mean(r["accuracy"][0] for r in runs) + 0.05, 2)


def _int_keys(run: dict) -> dict:
    """A run read back from JSON (whose object keys are strings)."""
    keys = [k for k in ("generated", "accuracy", "source_accuracy", "curriculum", "timing") if k in run]
    return {**run, **{k: {int(s): v for s, v in run[k].items()} for k in keys}}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, with --quick's and each trainer's defaults resolved."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="a smoke test that writes nothing: V1, selective (a prompt filter and DAPO), 1 seed, 2 steps, "
                         "validation on 32 prompts; --trainer legacy: dapo and selective, 3 steps")
    ap.add_argument("--seeds", type=int, nargs="+", default=None, help="default: 0 1 2")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--test-freq", type=int, default=None, help="validate every N steps; default 10 on V1, 4 on legacy")
    ap.add_argument("--target", type=float, default=None, help="default: the mean start accuracy + 0.05")
    ap.add_argument("--configs", nargs="+", default=None, choices=list(CONFIGS),
                    help=f"default: {' '.join(V1_COMPARE_CONFIGS)} (V1), {' '.join(COMPARE_CONFIGS)} (legacy); "
                         f"with --curriculum: {' '.join(CURRICULUM_CONFIGS)}")
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--out", default="runs/bench-cpu-learning")
    ap.add_argument("--summarize", metavar="JSON", help="only print the table of a saved run (e.g. another --target)")
    ap.add_argument("--curriculum", action="store_true",
                    help=f"uniform vs the accuracy-gated curriculum ({', '.join(CURRICULUM_CONFIGS)}); writes "
                         "benchmarks/CPU_LEARNING_CURRICULUM.md + .json and docs/img/cpu_learning_curriculum.png")
    ap.add_argument("--no-write", action="store_true", help="print the table only (a timing or trial run)")
    ap.add_argument("--add-to", metavar="JSON", help="--curriculum: keep the runs saved in JSON and add these to them")
    ap.add_argument("--trainer", choices=TRAINERS, default="v1",
                    help="verl's V1 trainer (verl's default; rlhooks train's path, one shared local Ray) or the "
                         "legacy one (in this process; how the legacy table was measured)")
    ap.add_argument("--val-max-samples", type=int, default=None,
                    help="V1: validate on the first N prompts only (a smoke test; the tables validate on all 434)")
    ap.add_argument("--publish", metavar="JSON",
                    help="save the runs in JSON (a bench's <out>/runs.json) as --trainer's published runs and rewrite "
                         "benchmarks/CPU_LEARNING.md (e.g. after a bench run with --no-write)")
    args = ap.parse_args(argv)
    if args.quick and args.trainer == "v1":
        args.seeds, args.steps, args.test_freq, args.configs = [0], 2, 2, ["selective"]
        args.val_max_samples = args.val_max_samples or 32
    elif args.quick:
        args.seeds, args.steps, args.test_freq, args.configs = [0], 3, 3, ["dapo", "selective"]
    if args.seeds is None:
        args.seeds = V1_SEEDS if args.trainer == "v1" else [0, 1, 2]
    if args.test_freq is None:
        args.test_freq = 10 if args.trainer == "v1" else 4
    if args.configs is None:
        args.configs = (CURRICULUM_CONFIGS if args.curriculum else
                        V1_COMPARE_CONFIGS if args.trainer == "v1" else COMPARE_CONFIGS)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.publish:
        publish([_int_keys(r) for r in json.loads(Path(args.publish).read_text())], args.trainer)
        print(markdown())
        return 0
    if args.summarize:
        runs = [_int_keys(r) for r in json.loads(Path(args.summarize).read_text())]
        target = args.target if args.target is not None else _default_target(runs)
        print(summarize(runs, target))
        if any(r["config"].startswith("curriculum_acc") for r in runs):
            print("\n" + summarize_curriculum(runs))
        return 0
    from rlhooks.engines.verl.cpu import platform, runner

    out = Path(args.out)
    assets = runner.prepare(out / "assets")
    platform.install()
    with shared_ray(assets) if args.trainer == "v1" else nullcontext():
        runs, total = _run_all(args, out, assets)
    return _report(args, runs, total)


def _run_all(args: argparse.Namespace, out: Path, assets: tuple[Path, Path]) -> tuple[list[dict], float]:
    """Every (config, seed) run; the runs so far are saved to ``<out>/runs.json`` after each one."""
    runs = [_int_keys(r) for r in json.loads(Path(args.add_to).read_text())] if args.add_to else []
    started = time.perf_counter()
    write = not (args.quick or args.no_write)
    out.mkdir(parents=True, exist_ok=True)
    # --curriculum and V1 pair the configs seed by seed: a bench cut short keeps whole pairs (runs.json)
    order = ([(name, seed) for seed in args.seeds for name in args.configs] if args.curriculum or args.trainer == "v1"
             else [(name, seed) for name in args.configs for seed in args.seeds])
    for name, seed in order:
        run = one_run(name, seed, args.steps, args.test_freq, out / f"{args.trainer}-{name}-{seed}", assets, args.lr,
                      trainer=args.trainer, val_max_samples=args.val_max_samples)
        runs.append(run)
        (out / "runs.json").write_text(json.dumps(runs, indent=1))
        print(f"[{name} seed {seed}: {run['wall_s']:.0f} s, accuracy "
              f"{run['accuracy'][0]:.3f} -> {run['accuracy'][max(run['accuracy'])]:.3f}]", file=sys.stderr)
        if args.curriculum and write:
            (HERE / "CPU_LEARNING_CURRICULUM.json").write_text(json.dumps(runs, indent=1))
    return runs, time.perf_counter() - started


#: where the published runs of each trainer and their charts are
RUNS_FILE = {"v1": HERE / "CPU_LEARNING.json", "legacy": HERE / "CPU_LEARNING_LEGACY.json"}
CHART_FILE = {"v1": "cpu_learning.png", "legacy": "cpu_learning_legacy.png"}


def publish(runs: list[dict], trainer: str) -> None:
    """Save ``runs`` as the published runs of ``trainer`` (its JSON and chart), then rewrite
    benchmarks/CPU_LEARNING.md from both trainers' published runs."""
    RUNS_FILE[trainer].write_text(json.dumps(runs, indent=1))
    chart(runs, HERE.parent / "docs" / "img" / CHART_FILE[trainer], trainer)  # the site shows them
    (HERE / "CPU_LEARNING.md").write_text(markdown())


def _load(trainer: str) -> list[dict]:
    path = RUNS_FILE[trainer]
    return [_int_keys(r) for r in json.loads(path.read_text())] if path.is_file() else []


def _described(runs: list[dict]) -> str:
    """What the runs were: configs, seeds, steps, validation interval, when, their run time, the load."""
    steps = max(max(r["accuracy"]) for r in runs)
    validated = sorted(runs[0]["accuracy"])
    every = validated[1] - validated[0] if len(validated) > 1 else steps
    dates = sorted({r["date"] for r in runs if r.get("date")})
    loads = [r["load_avg"] for r in runs if r.get("load_avg") is not None]
    return (f"configs {', '.join(dict.fromkeys(r['config'] for r in runs))}; seeds "
            f"{', '.join(map(str, sorted({r['seed'] for r in runs})))}; {steps} steps, validated every {every} "
            f"(greedy, all 434 prompts); train batch {TRAIN_BS} prompts x {N}, generation batch {GEN_BS}; "
            f"{', '.join(dates) or 'undated'}; {len(runs)} run{'s' * (len(runs) != 1)}, "
            f"{sum(r['wall_s'] for r in runs):,.0f} s of run time in all on this 2-core machine"
            + (f" (1-minute load average {' to '.join(dict.fromkeys(f'{x:.0f}' for x in (min(loads), max(loads))))} "
               f"at the runs' ends: other jobs shared the cores)" if loads else ""))


def _partial(runs: list[dict]) -> str:
    """What make bench-learning's V1 plan has that ``runs`` lack ('' when nothing)."""
    plan = [(c, s) for s in V1_SEEDS for c in V1_COMPARE_CONFIGS]
    done = {(r["config"], r["seed"]) for r in runs}
    missing = [f"{c} seed {s}" for c, s in plan if (c, s) not in done]
    return (f"**Partial**: {len(plan) - len(missing)} of {len(plan)} runs of `make bench-learning`; "
            f"not run: {', '.join(missing)}.\n\n") if missing else ""


def markdown() -> str:
    """benchmarks/CPU_LEARNING.md: the V1 table, the legacy table (labelled), and the comparison."""
    v1, legacy = _load("v1"), _load("legacy")
    target = _default_target(legacy or v1)  # one target for both tables: the legacy table's
    parts = ["# Real CPU learner: the --compare configurations on verl's V1 and legacy trainers\n"]
    if v1:
        parts += ["## V1 (verl's default trainer; `make bench-learning`)\n",
                  f"`python -m benchmarks.cpu_learning` (`--trainer v1`, the default): {_described(v1)}.\n",
                  _partial(v1) + summarize(v1, target) + "\n",
                  f"![accuracy vs trajectories, V1](../docs/img/{CHART_FILE['v1']})\n"]
    if legacy:
        parts += ["## Legacy trainer (`--trainer legacy`; the table published before V1)\n",
                  f"`python -m benchmarks.cpu_learning --trainer legacy`: {_described(legacy)}.\n",
                  summarize(legacy, target) + "\n",
                  f"![accuracy vs trajectories, legacy](../docs/img/{CHART_FILE['legacy']})\n"]
    if v1 and legacy:
        parts += ["## V1 vs legacy: final validated accuracy\n",
                  "The seed-to-seed spread is the range of a config's final accuracy over its seeds; V1 reproduces "
                  "the legacy figure when its mean lies inside the legacy seeds' range.\n",
                  compare_trainers(v1, legacy) + "\n"]
    return "\n".join(parts)


def _report(args: argparse.Namespace, runs: list[dict], total: float) -> int:
    write = not (args.quick or args.no_write)
    target = args.target if args.target is not None else _default_target(runs)
    table = summarize(runs, target)
    print(table + f"\n\ntotal wall time {total:.0f} s")
    if args.trainer == "v1" and not args.curriculum and not args.quick:  # CI's --no-write run reports it too
        legacy = _load("legacy")
        legacy_steps = sorted({max(r["accuracy"]) for r in legacy})
        if legacy_steps == [args.steps]:  # final accuracies compare only after as many steps
            print("\nV1 against the published legacy seeds:\n" + compare_trainers(runs, legacy))
        else:
            print(f"\nnot compared with the published legacy seeds: {args.steps} steps, theirs {legacy_steps}")
    if args.curriculum:
        table = summarize_curriculum(runs)
        print("\n" + table)
    if args.curriculum and write:
        chart_curriculum(runs, HERE.parent / "docs" / "img" / "cpu_learning_curriculum.png")
        threads = os.environ.get("OMP_NUM_THREADS")
        options = "".join(f"\n* `{name}`: " + (f"`{json.dumps(CONFIGS[name]['sampler'])}`" if "sampler" in CONFIGS[name]
                                                 else "none (verl's own sampler over all rows)")
                          for name in dict.fromkeys(r["config"] for r in runs))
        (HERE / "CPU_LEARNING_CURRICULUM.md").write_text(
            f"# Real CPU learner: accuracy-gated curriculum vs uniform\n\n"
            f"`{f'OMP_NUM_THREADS={threads} ' if threads else ''}python -m benchmarks.cpu_learning --curriculum "
            f"--trainer {args.trainer} "
            f"--steps {args.steps} --test-freq {args.test_freq}` (the last invocation: `--seeds {' '.join(map(str, args.seeds))} "
            f"--configs {' '.join(args.configs)}{' --add-to ' + args.add_to if args.add_to else ''}`); "
            f"{time.strftime('%Y-%m-%d')}; train batch {TRAIN_BS} prompts x {N}, generation batch {GEN_BS}; "
            f"{len(runs)} runs, {sum(r['wall_s'] for r in runs):.0f} s of run time in all on this machine.\n\n"
            f"Samplers:{options}\n\n{table}\n\n![accuracy per step](../docs/img/cpu_learning_curriculum.png)\n")
    elif write:
        publish(runs, args.trainer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
