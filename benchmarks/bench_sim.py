"""A whole simulated step at 512 prompts x 8 responses: how much of it is rlhooks?

Two engines on the same data and seed, side by side:

* rlhooks: the embedded default config (reward curriculum sampler with adaptive weights, DAPO,
  the four reward functions, source_metrics, reward_monitor with alerts, top_bottom_k), no
  backends (backend I/O runs on background threads and is measured in bench_backends);
* reference: the same simulated engine with nothing configured (uniform sampling, the verifier's
  accuracy as reward, no filter, no hooks).

The rlhooks step is instrumented (the manager's hook helpers, the filters, the reward pipeline and
the sampler draws are timed in place) to report the share of a step spent in rlhooks code
(core + plugins) against the simulated learner / text generation.

    .venv/bin/python -m benchmarks.bench_sim [--quick]
"""

from __future__ import annotations

import argparse
import functools
import logging
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import structlog
import yaml

from benchmarks.harness import Result, markdown_table, peak_memory
from rlhooks.engines.sim.cli import default_config_path
from rlhooks.engines.sim.data import SimDataset, write_dataset
from rlhooks.engines.sim.engine import SimEngine, load_sim_config


def _config(prompts: int, out: Path, full: bool) -> dict[str, Any]:
    run = {"name": "bench", "seed": 0, "steps": 10_000, "train_batch_size": prompts, "gen_batch_size": prompts,
           "n": 8, "max_num_gen_batches": 0, "out_dir": str(out)}
    if not full:
        return {"run": run}
    cfg = yaml.safe_load(default_config_path().read_text())
    cfg["run"] = run
    cfg["backends"] = []
    cfg["samples"] = [{"name": "top_bottom_k", "k": 2, "every": 1}]
    return cfg


class _Timer:
    def __init__(self) -> None:
        self.spent: dict[str, float] = {}

    def wrap(self, obj: Any, attr: str, label: str) -> None:
        fn = getattr(obj, attr)

        @functools.wraps(fn)
        def timed(*a: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                self.spent[label] = self.spent.get(label, 0.0) + time.perf_counter() - t0

        setattr(obj, attr, timed)


def _steps(engine: SimEngine, n: int) -> list[float]:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        engine.train_step(engine.step + 1)
        times.append(time.perf_counter() - t0)
    return times


def run(quick: bool) -> list[Result]:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    prompts = 128 if quick else 512
    steps = 3 if quick else 10
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        data = SimDataset.from_parquet(write_dataset(out / "data.parquet", rows_per_source=4000, seed=0))
        ref = SimEngine(load_sim_config(_config(prompts, out, False)), data, run_dir=out / "ref")
        full = SimEngine(load_sim_config(_config(prompts, out, True)), data, run_dir=out / "full")
        timer = _Timer()
        m = full.manager
        for attr in ("batch_sampled", "rewards_computed", "step_end", "log_metrics", "dispatch_emitted"):
            timer.wrap(m, attr, "hooks")
        timer.wrap(m, "apply_filters", "filters")
        timer.wrap(m.rewards, "score", "reward functions")
        timer.wrap(full, "_draw", "sampler")  # with a sampler configured, _draw is the sampler's iteration
        m.start()
        _steps(ref, 1), _steps(full, 1)  # warm-up
        timer.spent.clear()
        t_ref = _steps(ref, steps)
        gen_before = full.generated_trajectories
        t_full = _steps(full, steps)
        gen_batches = (full.generated_trajectories - gen_before) / (prompts * 8) / steps
        total = sum(t_full)
        ours = sum(timer.spent.values())
        share = ours / total
        parts = ", ".join(f"{k} {v / total:.0%}" for k, v in sorted(timer.spent.items(), key=lambda kv: -kv[1]))
        _, peak = peak_memory(lambda: full.train_step(full.step + 1))  # one more step, traced
        m.end("success")
        results.append(Result(
            case=f"simulated step {prompts}x8, default plugins",
            rlhooks_s=statistics.median(t_full),
            reference_s=statistics.median(t_ref),
            rows=prompts * 8,
            peak_bytes=peak,
            note=f"rlhooks code {share:.0%} of the step ({parts}); simulated learner/text {1 - share:.0%}; "
                 f"{gen_batches:.1f} generation batches/step; reference = same engine, no plugins, 1 batch",
        ))
        # per generation batch, so DAPO's extra batches do not hide the plugin overhead
        results.append(Result(
            case=f"simulated step {prompts}x8, rlhooks code only",
            rlhooks_s=ours / steps,
            rows=prompts * 8,
            note="hooks + filters + reward functions + sampler, per step",
        ))
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    print(markdown_table(run(args.quick)))


if __name__ == "__main__":
    main()
