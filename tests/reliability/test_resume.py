"""Resume: stop at step k, save the state, restore into a fresh engine and manager, continue.

The resumed run must equal an uninterrupted one: the same sampled indices, reward EMAs,
curriculum level, logged metrics (read back from the JSONL backend) and sample tables for every
step after k. Compared metrics exclude only the wall-clock ones (``TIMING_METRICS``:
``timing/gen_s``, ``timing/step_s``) and each JSONL record's ``time`` field.

The state goes through a JSON round trip, as a checkpoint file would.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rlhooks import hookimpl
from rlhooks.core.registry import Registry

from .conftest import (
    REWARD_FNS,
    TIMING_METRICS,
    all_builtins_config,
    jsonl_metrics,
    jsonl_tables,
    make_engine,
    read_jsonl,
)

STEPS, K = 12, 5

ADAPTIVE = {"adaptive_weights": True, "alpha": 0.3, "update_frequency": 2, "temperature": 0.5, "max_source_ratio": 3.0}
SAMPLERS = {
    "multi_source": {"name": "multi_source", "source_weights": {"arith_add": 1, "arith_mul": 1, "chain": 2, "logic": 1},
                     **ADAPTIVE},
    "time_curriculum": {"name": "time_curriculum", "complexity_source": "chain", "initial_complexity_percentile": 10,
                        "complexity_warmup_steps": 40, **ADAPTIVE},
    "reward_curriculum": {"name": "reward_curriculum", "complexity_source": "chain", "initial_complexity_percentile": 20,
                          "num_intervals": 6, "reward_threshold": 4.0, "reward_alpha": 0.5, "min_batches_per_level": 2,
                          "check_frequency": 1, "focus_new_intervals": True, **ADAPTIVE},
    "learnability": {"name": "learnability", "level": "source", "floor": 0.05},
    "dump_ucb": {"name": "dump_ucb", "window": 40, "temperature": 0.2},
}


class Probe:
    """Extra plugin: every generation batch's sampled indices and the sampler's state after each step."""

    def __init__(self) -> None:
        self.indices: dict[tuple[int, int], list[int]] = {}
        self.sampler_after: dict[int, dict[str, Any]] = {}
        self.sampler: Any = None

    @hookimpl
    def on_batch_sampled(self, step: int, batch: Any) -> None:
        self.indices[(step, batch.meta["generation"])] = batch["index"].tolist()

    @hookimpl
    def on_step_end(self, step: int) -> None:
        s = self.sampler
        if s is not None:
            self.sampler_after[step] = {
                "ema": s.reward_ema, "weights": s.weights,
                "level": getattr(s, "level", None), "percentile": getattr(s, "percentile", None),
            }


def _run(cfg: dict, data, run_dir: Path, steps: int, state: dict | None = None):
    probe = Probe()
    engine = make_engine(cfg, data, run_dir, extra_plugins=[("probe", probe)])
    probe.sampler = engine.sampler
    if state is not None:
        engine.load_state_dict(state)
    engine.run(steps)
    return engine, probe


def _checkpoint(engine) -> dict:
    return json.loads(json.dumps(engine.state_dict()))  # what a checkpoint file holds


def _assert_resume_equal(cfg: dict, data, tmp_path: Path) -> tuple[Any, Any, dict, dict]:
    full, full_probe = _run(cfg, data, tmp_path / "full", STEPS)
    first, _ = _run(cfg, data, tmp_path / "resumed", K)
    state = _checkpoint(first)
    assert state["step"] == K
    resumed, probe = _run(cfg, data, tmp_path / "resumed", STEPS, state=state)  # a fresh engine and manager
    assert resumed.step == STEPS

    # sampled indices of every generation batch after k
    after = {key: v for key, v in full_probe.indices.items() if key[0] > K}
    assert after and probe.indices == after
    # sampler EMAs, weights and curriculum level after every step
    assert probe.sampler_after == {s: v for s, v in full_probe.sampler_after.items() if s > K}
    # and the complete end state of every component (sampler, learner, reward monitor, ...), but for the
    # W&B run id: each run has its own, and a resumed run keeps its first segment's
    got_state, want_state = _checkpoint(resumed), _checkpoint(full)
    assert _wandb_run_ids(got_state) == _wandb_run_ids(state)
    for s in (got_state, want_state):
        _wandb_run_ids(s, drop=True)
    assert got_state == want_state

    # metrics and tables read back from the JSONL backend: one file holds both segments of the resumed run
    full_records = read_jsonl(tmp_path / "full" / "metrics.jsonl")
    resumed_records = read_jsonl(tmp_path / "resumed" / "metrics.jsonl")
    assert [r["kind"] for r in resumed_records].count("run_start") == 2
    want, got = jsonl_metrics(full_records), jsonl_metrics(resumed_records)
    assert sorted(got) == list(range(1, STEPS + 1))
    for step in range(K + 1, STEPS + 1):
        assert got[step] == want[step], f"step {step}: " + _diff(want[step], got[step])
    assert all(TIMING_METRICS <= set(r["metrics"]) for r in resumed_records if r["kind"] == "metrics")
    assert jsonl_tables(resumed_records) == jsonl_tables(full_records)
    return full, resumed, want, got


def _wandb_run_ids(state: dict, drop: bool = False) -> list:
    """The W&B backends' run ids in a checkpoint (removed from it with ``drop``)."""
    backends = [v for k, v in state["manager"].items() if k.startswith("backends[") and isinstance(v, dict)]
    return [b.pop("run_id") if drop else b["run_id"] for b in backends if "run_id" in b]


def _diff(a: dict, b: dict) -> str:
    keys = sorted(set(a) | set(b))
    return ", ".join(f"{k}: {a.get(k, '<missing>')} != {b.get(k, '<missing>')}" for k in keys if a.get(k) != b.get(k))


@pytest.mark.parametrize("sampler", list(SAMPLERS))
def test_sampler_resume_equals_uninterrupted(sampler: str, sim_data, tmp_path: Path) -> None:
    cfg = {
        "run": {"name": sampler, "seed": 3, "steps": STEPS, "train_batch_size": 6, "gen_batch_size": 8, "n": 4,
                "max_num_gen_batches": 4, "on_gen_limit": "continue", "out_dir": str(tmp_path)},
        "sampler": SAMPLERS[sampler],
        "filters": ["dapo"],
        "rewards": list(REWARD_FNS),
        "backends": ["jsonl"],
    }
    full, _, want, _ = _assert_resume_equal(cfg, sim_data, tmp_path)
    # the comparison covers a sampler that kept changing after k (else it proves little)
    weights = {json.dumps({k: v for k, v in want[s].items() if k.startswith("sampler/weight/")}, sort_keys=True)
               for s in range(K, STEPS + 1)}
    assert len(weights) > 1, "adaptive weights did not move after the checkpoint"
    emas = [{k: v for k, v in want[s].items() if k.startswith("sampler/reward_ema/")} for s in (K, STEPS)]
    assert emas[0] and emas[0] != emas[1]
    if sampler in ("time_curriculum", "reward_curriculum"):
        assert want[K]["curriculum/percentile"] < want[STEPS]["curriculum/percentile"]
    # more generation batches than one epoch of the 160-row dataset: the state crosses epochs
    assert full.sampler.state_dict()["epoch"] >= 1


def test_every_builtin_plugin_resume_equals_uninterrupted(sim_data, tmp_path: Path) -> None:
    cfg = all_builtins_config(tmp_path, steps=STEPS)
    _, _, want, _ = _assert_resume_equal(cfg, sim_data, tmp_path)
    assert want[K]["curriculum/level"] < want[STEPS]["curriculum/level"]  # level-ups after k
    assert want[STEPS]["alerts/total"] > want[K]["alerts/total"] > 0
    # the reward monitor's run-end summary (alert counts, analysis over its step history) matches too
    summary = [json.loads((tmp_path / d / "reward_monitor.json").read_text()) for d in ("full", "resumed")]
    assert summary[0]["steps"] == STEPS and summary[1] == summary[0]


def test_every_builtin_is_in_the_all_plugins_config(tmp_path: Path) -> None:
    """The config above enables each built-in component (aliases aside; one sampler per run)."""
    reg = Registry()
    cfg = all_builtins_config(tmp_path)
    named = {cfg["sampler"]["name"]} | {
        (c if isinstance(c, str) else c["name"])
        for sec in ("filters", "prompt_filters", "rewards", "samples", "backends") for c in cfg[sec]
    }
    enabled = {e.value for e in reg.entries() if e.name in named and e.dist == "rlhooks"}
    builtin = {e.value for e in reg.entries() if e.dist == "rlhooks" and e.kind != "sampler"}
    assert builtin - enabled == set(), "add the new built-in to all_builtins_config"
    samplers = {e.value for e in reg.entries("sampler") if e.dist == "rlhooks"}
    covered = {reg.info("sampler", s["name"]).value for s in SAMPLERS.values()}
    assert samplers == covered, "add the new sampler to SAMPLERS"
