"""Hook dispatch cost: one hook call with 10 implementations (vs pluggy's own call, which has
no per-plugin error isolation), and a full step's hook traffic with the built-in plugins on."""

from __future__ import annotations

import sys

import numpy as np
import pluggy

from benchmarks.harness import Result, markdown_table, median_time
from rlhooks import Batch, RunManager, hookimpl, load_config
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
    return Result("hook dispatch: 1 call, 10 implementations (ref: bare pluggy, no isolation)", ours, ref,
                  target="µs per call", note="ratio <1x = cost of per-plugin isolation")


def run(quick: bool = False) -> list[Result]:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        return [dispatch_case(tmp, quick)]


if __name__ == "__main__":
    print(markdown_table(run(quick="--quick" in sys.argv)))
