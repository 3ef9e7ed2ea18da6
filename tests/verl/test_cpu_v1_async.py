"""`rlhooks train` in verl V1's asynchronous modes on the CPU learner: verl's own async trainers, replay buffer,
TransferQueue, agent loop (partial rollout) and reward workers, with the rlhooks hooks, filters and metrics.

Runs on the shared Ray (conftest ``cpu_v1_ray``), 3 steps of DAPO + GRPO each, with the built-ins together
(the selective_rollout prompt filter, the dapo filter, weighted reward functions in verl's reward workers,
source_metrics, reward_monitor with an alert, top/bottom-k tables, the jsonl backend) and, per run, a
different sampler and the rest of the built-ins (``RUNS``): colocate_async with ``max_off_policy_threshold=2``
(learnability; the random and per-source tables; the console, tensorboard and wandb backends, read back)
and with 1 (reward_curriculum, levelling up on the rewards of the groups not evicted; every group generated
before the last update is evicted), and separate_async (dump_ucb; the trainer and a standalone CPU rollout
server in separate resource pools and actors, weights moved by the CPU gloo checkpoint engine). multi_source and
time_curriculum are the samplers of the async resume pairs (tests/verl/test_v1_resume_async.py: colocate_async and
separate_async); multi_source runs on V1 sync too (`rlhooks train`'s run in tests/verl/test_cpu_v1_learner.py,
which checks every built-in sampler is one of these runs'). rlhooks's metrics are read
back from its jsonl backend and verl's from the same records (rlhooks merges them before verl logs).
Slow: Ray and the runs cost minutes on 2 cores.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

pytest.importorskip("verl.trainer.ppo.v1", reason="needs verl[verl-core]")
pytest.importorskip("transformers")
pytest.importorskip("tensorboard")
pytest.importorskip("wandb")

from rlhooks.engines.verl import main  # noqa: E402
from rlhooks.engines.verl.cpu import runner  # noqa: E402

from .test_cpu_v1_learner import _release_the_runs_resources  # noqa: E402

pytestmark = [pytest.mark.verl, pytest.mark.slow]

STEPS = 3
ALERT = {"metric": "rewards/count", "condition": "greater", "threshold": 0.0, "level": "warning",
         "message": "fires every step (the test's alert)"}


#: what each run adds to the built-ins every run carries: its sampler, sample tables and backends
RUNS: dict[str, dict] = {
    "colocate": {"sampler": {"name": "learnability"},
                 "samples": [{"name": "top_bottom_k", "k": 2}, {"name": "random_samples", "k": 2},
                             {"name": "per_source_samples", "k": 1}],
                 "backends": ["console", "jsonl", "tensorboard", {"name": "wandb", "mode": "offline"}]},
    "separate": {"sampler": {"name": "dump_ucb", "window": 16}},
    # a threshold every reward passes, checked every batch: it levels up on the rewards of unevicted groups (100
    # levels: one a feedback batch never reaches the last in 3 steps)
    "evicting": {"sampler": {"name": "reward_curriculum", "complexity_source": "add_carry", "reward_threshold": -1.0,
                             "min_batches_per_level": 0, "check_frequency": 1, "reward_alpha": 1.0,
                             "num_intervals": 100}},
}


def _config(tmp_path: Path, name: str) -> Path:
    policy_dir, data = runner.prepare(tmp_path / "tiny")
    example = yaml.safe_load((Path(__file__).parents[2] / "examples/configs/verl_cpu_tiny.yaml").read_text())
    verl = example["verl"]
    verl["data"].update(train_files=str(data), val_files=str(data))
    verl["actor_rollout_ref"]["model"]["path"] = str(policy_dir)
    verl["trainer"].update(total_training_steps=STEPS, test_freq=0, val_before_train=False, save_freq=0,
                           logger=["console"], default_local_dir=str(tmp_path / "ckpt"))
    config = {
        "run": {"name": name, "out_dir": str(tmp_path / "runs")},
        # skip prompts seen all-pass / all-fail before (keep 5%)
        "prompt_filters": [{"name": "selective_rollout", "p_easy": 0.05, "p_hard": 0.05, "adjust_step": 0.0, "seed": 1}],
        "filters": [{"name": "dapo", "metric": "acc"}],
        "rewards": [{"name": "check_answer", "weight": 2.0}, "format_exact", "format_approx", "check_numbers",
                    "source_metrics", {"name": "reward_monitor", "alerts": [ALERT]}],
        "samples": [{"name": "top_bottom_k", "k": 2}],
        "backends": ["jsonl"],
        "verl": verl,
        **RUNS[name],
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def _run(tmp_path: Path, name: str, overrides: list[str]) -> tuple[dict[int, dict], list[dict], Path]:
    """The run's metrics by step, the records of its metrics.jsonl and its run directory."""
    from ray.util import placement_group_table

    cfg = main.build_config(str(_config(tmp_path, name)), overrides)
    before = set(placement_group_table())
    try:
        main.run(cfg)
    finally:
        _release_the_runs_resources(before)
    run_dir = tmp_path / "runs" / name
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = {r["step"]: r["metrics"] for r in records if r.get("kind") == "metrics"}
    return steps, records, run_dir


def _colocate(threshold: int) -> list[str]:
    return ["trainer.v1.trainer_mode=rlhooks_colocate_async", f"trainer.v1.sampler.max_off_policy_threshold={threshold}"]


@pytest.fixture(scope="module")
def colocate_run(cpu_v1_ray, tmp_path_factory):
    return _run(tmp_path_factory.mktemp("colocate"), "colocate", _colocate(2))


@pytest.fixture(scope="module")
def separate_run(cpu_v1_ray, tmp_path_factory):
    return _run(tmp_path_factory.mktemp("separate"), "separate",
                [*runner.separate_async_overrides(8), "trainer.v1.sampler.max_off_policy_threshold=2"])


def _check_async_run(steps: dict[int, dict], records: list[dict], threshold: int) -> None:
    assert sorted(steps) == list(range(1, STEPS + 1))
    for m in steps.values():
        assert m["actor/grad_norm"] >= 0 and "actor/pg_loss" in m  # verl's update ran
        # staleness: rlhooks's lag of the trained batch is verl's worst-case trajectory staleness
        assert m["staleness/lag_mean"] == pytest.approx(m["training/off_policy/trajectory_staleness_worst/mean"])
        assert m["staleness/lag_max"] == m["training/off_policy/trajectory_staleness_worst/max"] <= threshold - 1
        assert any(k.startswith("source/") and k.endswith("/lag_mean") for k in m), sorted(m)  # per-source lag
        # the DAPO filter judged the groups verl did not evict as stale; every generated group is counted once
        judged = m["filter/kept_groups"] + m["filter/dropped_constant"] + m["filter/dropped_band"] + m["filter/dropped_nonfinite"]
        assert m["filter/generated_groups"] == judged
        assert m["filter/stale_evicted_groups"] == m["staleness/evicted_groups"] == m.get("training/off_policy/evicted_samples", 0)
        assert m["filter/trained_groups"] == 8
        # every built-in: the reward functions scored in verl's reward workers, the sampler, the prompt stage,
        # source_metrics and reward_monitor (its alert fires every step)
        assert m["rewards/errors/check_answer"] == 0 and "rewards/functions/format_exact" in m
        assert {"rewards/functions/format_approx", "rewards/functions/check_numbers"} <= set(m)
        assert m["rewards/errors/format_approx"] == 0 and m["rewards/errors/check_numbers"] == 0
        assert any(k.startswith("sampler/") for k in m), sorted(m)
        assert m["prompt_filter/sampled"] >= 1 and "selective_rollout/p_easy" in m
        assert any(k.startswith("source/") and k.endswith("/count") for k in m)
        assert m["rewards/count"] > 0 and m["alerts/warning"] >= 1
        # rlhooks's share of the step, measured
        assert m["timing_s/rlhooks"] > 0 and 0 < m["timing/rlhooks_share"] < 1
    assert all(steps[s]["timing_s/rlhooks_step_end"] > 0 for s in range(2, STEPS + 1))
    tables = {(r["name"], r["step"]) for r in records if r["kind"] == "table"}
    assert {("samples/top_bottom_k", s) for s in range(1, STEPS + 1)} <= tables
    assert {("alerts", s) for s in range(1, STEPS + 1)} <= tables


def test_colocate_async_trains_with_every_builtin_and_reports_staleness_as_verl_measures_it(colocate_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from tests.wandb_records import read_wandb_records

    steps, records, run_dir = colocate_run
    _check_async_run(steps, records, threshold=2)
    assert any(m["staleness/lag_max"] == 1 for m in steps.values())  # generation overlapped training
    tables = {(r["name"], r["step"]): r["rows"] for r in records if r["kind"] == "table"}
    for step in range(1, STEPS + 1):  # the other sample tables, their rows carrying the staleness columns
        assert {("samples/random", step), ("samples/per_source", step)} <= set(tables), sorted(tables)
        assert all({"policy_version", "policy_lag"} <= set(row) for row in tables[("samples/random", step)])
        assert len(tables[("samples/random", step)]) == 2  # k
        per_source = tables[("samples/per_source", step)]
        assert per_source and all({"response", "reward"} <= set(row) for row in per_source)
    # the other backends got the same metrics, staleness included: read back from their files
    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0}).Reload()
    assert [e.step for e in events.Scalars("staleness/lag_mean")] == list(range(1, STEPS + 1))
    (wandb_file,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    keys = {item.key or "/".join(item.nested_key) for r in read_wandb_records(wandb_file)
            if r.WhichOneof("record_type") == "history" for item in r.history.item}
    assert {"staleness/lag_mean", "filter/stale_evicted_groups", "rewards/functions/check_answer"} <= keys, sorted(keys)


def test_separate_async_trains_with_every_builtin_and_reports_staleness_as_verl_measures_it(separate_run):
    steps, records, _ = separate_run
    _check_async_run(steps, records, threshold=2)
    for m in steps.values():  # dump_ucb, fed by the buffer
        assert any(k.startswith("sampler/ucb/") for k in m) and any(k.startswith("sampler/mean_abs_advantage/") for k in m)
    # the standalone rollout got each update's weights through the gloo checkpoint engine (verl merges the
    # sender's sync metrics into the step's), and generated while the trainer trained
    assert all(m["checkpoint_engine/payload_mbytes"] > 0 for m in steps.values()), [sorted(m) for m in steps.values()][0]
    assert any(m["staleness/lag_max"] == 1 for m in steps.values())


def test_colocate_async_evicts_stale_groups_before_the_rlhooks_filters(cpu_v1_ray, tmp_path):
    steps, _, _ = _run(tmp_path, "evicting", _colocate(1))  # only on-policy groups train: earlier ones are evicted
    evicted = sum(m["staleness/evicted_groups"] for m in steps.values())
    assert evicted > 0
    per_source = sum(v for m in steps.values() for k, v in m.items()
                     if k.startswith("source/") and k.endswith("/stale_evicted_groups"))
    assert per_source == evicted
    assert all("curriculum/level" in m and "curriculum/reward_ema" in m for m in steps.values())  # reward_curriculum
    # every batch passes its threshold: it levels up on each feedback batch the buffer fed it
    assert steps[STEPS]["curriculum/level"] > steps[1]["curriculum/level"] >= 1
