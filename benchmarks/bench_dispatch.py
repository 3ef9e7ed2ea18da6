"""Hook dispatch cost: one hook call with 10 implementations (vs pluggy's own call, which has
no per-plugin error isolation), and a full step's hook traffic with the built-in plugins on."""

from __future__ import annotations

import sys

import numpy as np
import pluggy

from benchmarks.harness import Result, markdown_table, median_time, peak_memory
from rlhooks import Batch, hookimpl
from rlhooks.host import RunManager, load_config
from rlhooks.core import hookspecs


class _Impl:
    @hookimpl
    def on_rewards_computed(self, step, batch):
        return {"x": 1.0}


def _calls(fn, n):
    def run():
        for _ in range(n):
            fn()
    return run


def dispatch_case(tmp: str, quick: bool) -> Result:
    cfg = load_config({"run": {"out_dir": tmp}})
    m = RunManager(cfg, extra_plugins=[(f"p{i}", _Impl()) for i in range(10)])
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs.RLHookSpecs)
    for i in range(10):
        pm.register(_Impl(), name=f"p{i}")
    b = Batch({"uid": np.arange(4), "reward": np.ones(4)})
    n = 200 if quick else 5000
    ours = median_time(_calls(lambda: m.rewards_computed(1, b), n), repeat=5) / n
    ref = median_time(_calls(lambda: pm.hook.on_rewards_computed(step=1, batch=b), n), repeat=5) / n
    _, peak = peak_memory(lambda: m.rewards_computed(1, b))
    return Result("hook dispatch: 1 call, 10 implementations (ref: bare pluggy, no isolation)", ours, ref,
                  peak_bytes=peak, target="µs per call", note="ratio <1x = cost of per-plugin isolation", unit="us")


def full_step_case(tmp: str, quick: bool) -> Result:
    """Every hook of one step with every built-in observer/steering plugin on, no backend I/O:
    on_batch_sampled, on_rewards_computed, the DAPO filter, on_step_end, log_metrics, the tables."""
    from rlhooks.host import StepDriver
    from rlhooks.testing.factories import make_dataset, make_prompt_batch, make_trajectory_batch

    prompts, n = (128, 8) if quick else (512, 8)
    cfg = load_config({
        "run": {"out_dir": tmp, "train_batch_size": prompts, "n": n},
        "sampler": {"name": "multi_source", "adaptive_weights": True, "update_frequency": 1},
        "filters": ["dapo"],
        "rewards": ["source_metrics", {"name": "reward_monitor", "log_distributions": True}],
        "samples": ["top_bottom_k", "random_samples", "per_source_samples"],
    })
    m = RunManager(cfg)
    data = make_dataset(50_000)
    m.build_sampler(data, batch_size=prompts)
    driver = StepDriver(m)
    pb = make_prompt_batch(prompts, dataset=data)
    tb = make_trajectory_batch(group_size=n, prompts=pb, advantage=True)
    m.start()
    step = [0]

    def one_step():
        step[0] += 1
        s = step[0]
        metrics = dict(m.batch_sampled(s, pb))
        metrics.update(m.rewards_computed(s, tb))
        keep, _ = m.apply_filters(tb)
        driver.finish_step(s, tb.select(keep), metrics)

    t = median_time(one_step, repeat=5 if quick else 20, warmup=2)
    _, peak = peak_memory(one_step)
    m.end("success")
    return Result(f"full step's hook traffic, every built-in plugin on, {prompts}x{n} (no backend I/O)",
                  t, rows=prompts * n, peak_bytes=peak, target="µs per step", unit="us",
                  note="sampler feedback, DAPO, source_metrics, reward_monitor, 3 sample tables; reward "
                       "functions score inside generation (see the simulated-step case)")


def run(quick: bool = False) -> list[Result]:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        return [dispatch_case(tmp, quick), full_step_case(tmp, quick)]


if __name__ == "__main__":
    print(markdown_table(run(quick="--quick" in sys.argv)))
