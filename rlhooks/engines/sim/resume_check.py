"""``rlhooks simulate --check-resume K``: does a resumed run continue exactly like an uninterrupted one?

Three simulated runs of one config on one dataset: the uninterrupted run to ``run.steps``; a run
to step K whose state (``SimEngine.state_dict``: sampler, filters, hook plugins, backends, learner)
is saved as a checkpoint (``SimEngine.save_checkpoint``: ``on_save_checkpoint`` fires); and a fresh
engine that loads it (``on_load_checkpoint`` fires) and runs on to ``run.steps``.
Steps K+1.. of the last must equal the uninterrupted run's: the prompts sampled for every
generation batch, then every step metric except wall-clock ``timing/*``. Steps 1..K of the
first two runs are compared too, so a plugin that is not deterministic at all is told apart from
one that does not resume. Backends are left out (the check compares states, not log files) and
the runs' files go to a temporary directory that is removed afterwards.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from rlhooks.core.hookspecs import hookimpl
from rlhooks.core.errors import RLHooksError
from rlhooks.core.manager import RunManager
from rlhooks.engines.sim.engine import SimEngine, load_sim_config, prepare_data, sim_options
from rlhooks.engines.sim.runs import default_config_path

#: metrics that measure wall-clock time, never equal between two runs
SKIPPED_PREFIX = "timing/"
_MAX_LISTED = 5


class _SampledPrompts:
    """Records the dataset rows of every generation batch, keyed by (step, generation)."""

    def __init__(self) -> None:
        self.rows: dict[tuple[int, int], np.ndarray] = {}

    @hookimpl
    def on_batch_sampled(self, step: int, batch: Any) -> None:
        self.rows[(step, int(batch.meta.get("generation", 1)))] = np.array(batch["index"])


@attrs.frozen
class Run:
    metrics: dict[int, dict[str, float]]
    prompts: dict[tuple[int, int], np.ndarray]


@attrs.frozen
class ResumeCheck:
    k: int
    steps: int
    compared_steps: int
    #: None when the runs agree; else where and how they first differ
    mismatch: str | None
    #: the runs differ before K too: a nondeterministic run, not a resume problem
    nondeterministic: bool = False

    @property
    def ok(self) -> bool:
        return self.mismatch is None

    def verdict(self) -> str:
        if self.ok:
            return (f"resume check passed: resumed at step {self.k}, steps {self.k + 1}-{self.steps} equal the "
                    f"uninterrupted run ({self.compared_steps} steps: sampled prompts and every metric but timing/*)")
        if self.nondeterministic:
            return (f"resume check inconclusive: two identical runs already differ before step {self.k}, without any "
                    f"resume: {self.mismatch}. Something in the run is not seeded (run.seed); fix that first.")
        return (f"resume check FAILED: resumed at step {self.k}, the run diverges from the uninterrupted one: "
                f"{self.mismatch}. A component's state_dict()/load_state_dict() does not capture or restore "
                f"everything it uses (a sampler's position or EMAs, a filter's or plugin's counters).")


def check_resume(
    source: str | Path | None, k: int, overrides: Sequence[str] = (), *, data: str | Path | None = None,
) -> ResumeCheck:
    config = load_sim_config(source if source is not None else default_config_path(), overrides=list(overrides))
    steps = config.run.steps
    if not 1 <= k < steps:
        raise RLHooksError(f"--check-resume {k}: K must be at least 1 and below run.steps ({steps}), so that "
                           f"steps after K are compared; raise --steps or lower K")
    config = attrs.evolve(config, backends=())
    with tempfile.TemporaryDirectory(prefix="rlhooks-check-resume-") as tmp:
        root = Path(tmp)
        dataset = prepare_data(sim_options(config), root, data)

        def engine(name: str) -> tuple[SimEngine, _SampledPrompts]:
            probe = _SampledPrompts()
            manager = RunManager(config, run_dir=root / name, extra_plugins=[("check_resume_probe", probe)])
            return SimEngine(config, dataset, manager=manager), probe

        full = _run(*engine("uninterrupted"), steps)
        first_engine, first_probe = engine("resumed")
        first = _run(first_engine, first_probe, k)
        checkpoint = first_engine.save_checkpoint(root / "checkpoint")  # a real one: on_save_checkpoint fires
        resumed_engine, resumed_probe = engine("resumed")
        resumed_engine.load_checkpoint(checkpoint)  # load_state_dict, then on_load_checkpoint
        resumed = _run(resumed_engine, resumed_probe, steps)

    before = _first_difference(full, first, range(1, k + 1))
    if before is not None:
        return ResumeCheck(k, steps, 0, before, nondeterministic=True)
    after = _first_difference(full, resumed, range(k + 1, steps + 1))
    return ResumeCheck(k, steps, steps - k, after)


def _run(engine: SimEngine, probe: _SampledPrompts, until: int) -> Run:
    metrics: dict[int, dict[str, float]] = {}
    engine.run(until, on_step=lambda step, merged: metrics.__setitem__(step, dict(merged)))
    return Run(metrics, probe.rows)


def _first_difference(want: Run, got: Run, steps: range) -> str | None:
    for step in steps:
        gens = sorted(g for s, g in want.prompts if s == step)
        if gens != sorted(g for s, g in got.prompts if s == step):
            return f"step {step} ran {len([g for s, g in got.prompts if s == step])} generation batch(es), expected {len(gens)}"
        for g in gens:
            a, b = want.prompts[(step, g)], got.prompts[(step, g)]
            if not np.array_equal(a, b):
                return (f"step {step} (generation batch {g}) sampled other prompts: dataset rows {_head(b)}, "
                        f"expected {_head(a)}")
        diff = _metric_differences(want.metrics.get(step, {}), got.metrics.get(step, {}))
        if diff:
            return f"step {step} logged other metrics: " + diff
    return None


def _metric_differences(want: Mapping[str, float], got: Mapping[str, float]) -> str:
    keys = sorted(k for k in set(want) | set(got) if not k.startswith(SKIPPED_PREFIX))
    differ = [k for k in keys if not _same(want.get(k), got.get(k))]
    shown = [f"{k} = {got.get(k, '<missing>')}, expected {want.get(k, '<missing>')}" for k in differ[:_MAX_LISTED]]
    more = f" (and {len(differ) - _MAX_LISTED} more)" if len(differ) > _MAX_LISTED else ""
    return "; ".join(shown) + more


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def _head(rows: np.ndarray) -> str:
    listed = ", ".join(str(int(r)) for r in rows[:8])
    return f"[{listed}{', ...' if len(rows) > 8 else ''}]"
