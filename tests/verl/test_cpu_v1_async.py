"""`rlhooks train` in verl V1's colocate_async mode on the CPU learner: verl's own async trainer, replay buffer,
TransferQueue, agent loop (partial rollout) and reward workers, with the rlhooks hooks, filters and metrics.

One run on the shared Ray (conftest ``cpu_v1_ray``), 3 steps of DAPO + GRPO; rlhooks's metrics are read back
from its jsonl backend and verl's from the same records (rlhooks merges them before verl logs). Slow: Ray
and the run cost minutes on 2 cores.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

pytest.importorskip("verl.trainer.ppo.v1", reason="needs verl[verl-core]")
pytest.importorskip("transformers")

from rlhooks.engines.verl import main  # noqa: E402
from rlhooks.engines.verl.cpu import runner  # noqa: E402

from .test_cpu_v1_learner import _release_the_runs_resources  # noqa: E402

pytestmark = [pytest.mark.verl, pytest.mark.slow]

FUNCTIONS = "[format_exact,format_approx,check_answer,check_numbers]"


def _config(tmp_path: Path) -> Path:
    policy_dir, data = runner.prepare(tmp_path / "tiny")
    example = yaml.safe_load((Path(__file__).parents[2] / "examples/configs/verl_cpu_tiny.yaml").read_text())
    verl = example["verl"]
    verl["data"].update(train_files=str(data), val_files=str(data))
    verl["actor_rollout_ref"]["model"]["path"] = str(policy_dir)
    verl["reward"]["custom_reward_function"]["name"] = "compute_score"
    verl["trainer"].update(total_training_steps=3, test_freq=0, val_before_train=False, save_freq=0, logger=["console"],
                           default_local_dir=str(tmp_path / "ckpt"))
    config = {"run": {"name": "colocate", "out_dir": str(tmp_path / "runs")}, "filters": [{"name": "dapo", "metric": "acc"}],
              "rewards": ["source_metrics", "reward_monitor"], "backends": ["jsonl"], "verl": verl}
    path = tmp_path / "colocate.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def _run(tmp_path: Path, threshold: int) -> dict[int, dict]:
    from ray.util import placement_group_table

    cfg = main.build_config(str(_config(tmp_path)), [
        "trainer.v1.trainer_mode=rlhooks_colocate_async", f"trainer.v1.sampler.max_off_policy_threshold={threshold}",
        f"+reward.custom_reward_function.reward_kwargs.functions={FUNCTIONS}"])
    before = set(placement_group_table())
    try:
        main.run(cfg)
    finally:
        _release_the_runs_resources(before)
    steps = {}
    for line in (tmp_path / "runs" / "colocate" / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record.get("kind") == "metrics":
            steps[record["step"]] = record["metrics"]
    assert sorted(steps) == [1, 2, 3]
    for m in steps.values():
        assert m["actor/grad_norm"] >= 0 and "actor/pg_loss" in m  # verl's update ran
        # staleness: rlhooks's lag of the trained batch is verl's worst-case trajectory staleness
        assert m["staleness/lag_mean"] == pytest.approx(m["training/off_policy/trajectory_staleness_worst/mean"])
        assert m["staleness/lag_max"] == m["training/off_policy/trajectory_staleness_worst/max"] <= threshold - 1
        # the DAPO filter judged the groups verl did not evict as stale; every generated group is counted once
        judged = m["filter/kept_groups"] + m["filter/dropped_constant"] + m["filter/dropped_band"] + m["filter/dropped_nonfinite"]
        assert m["filter/generated_groups"] == judged
        assert m["filter/stale_evicted_groups"] == m["staleness/evicted_groups"] == m.get("training/off_policy/evicted_samples", 0)
        assert m["filter/trained_groups"] == 8 and any(k.startswith("source/") and k.endswith("/count") for k in m)
    return steps


def test_colocate_async_trains_with_the_rlhooks_hooks_and_reports_staleness_as_verl_measures_it(cpu_v1_ray, tmp_path):
    steps = _run(tmp_path, threshold=2)
    assert any(m["staleness/lag_max"] == 1 for m in steps.values())  # generation overlapped training


def test_colocate_async_evicts_stale_groups_before_the_rlhooks_filters(cpu_v1_ray, tmp_path):
    steps = _run(tmp_path, threshold=1)  # only on-policy groups train: every group generated earlier is evicted
    evicted = sum(m["staleness/evicted_groups"] for m in steps.values())
    assert evicted > 0
    per_source = sum(v for m in steps.values() for k, v in m.items()
                     if k.startswith("source/") and k.endswith("/stale_evicted_groups"))
    assert per_source == evicted
