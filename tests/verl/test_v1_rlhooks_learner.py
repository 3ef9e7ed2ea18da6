"""``rlhooks_sync`` end to end on the CPU learner: verl's run_ppo with the rlhooks V1 TaskRunner, all of
V1's own code (PPOTrainer.fit/step, the rlhooks replay buffer as verl's custom sampler, TransferQueue, the
agent loop, the reward loop running the rlhooks reward adapter, Ray), 3 steps with a checkpoint at step 2,
then a resume from a copy of it. Shares the session's hermetic Ray (``cpu_v1_ray``); minutes on 2 cores,
so slow-marked.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("verl.trainer.ppo.v1", reason="needs verl[verl-core]")
pytest.importorskip("transformers")

from omegaconf import OmegaConf, open_dict  # noqa: E402

from .test_cpu_v1_learner import STEPS, _release_the_runs_resources, v1_config  # noqa: E402

pytestmark = [pytest.mark.verl, pytest.mark.slow]


def _rlhooks_config(assets, out: Path):
    from rlhooks.engines.verl.main import select_v1_parts

    cfg = v1_config(assets, out, "algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=acc")
    with open_dict(cfg):
        cfg.rlhooks = OmegaConf.create({"run": {"out_dir": str(out / "runs"), "name": "v1"},
                                        "rewards": ["source_metrics", "reward_monitor"], "backends": ["jsonl"]})
        select_v1_parts(cfg, [])
    return cfg


def _run(cfg, log: Path) -> dict[int, dict]:
    from ray.util import placement_group_table

    from rlhooks.engines.verl.cpu import runner
    from rlhooks.engines.verl.v1.runner import RLHooksTaskRunnerV1

    before = set(placement_group_table())
    try:
        runner.run(cfg, RLHooksTaskRunnerV1.options(runtime_env={"env_vars": {"VERL_FILE_LOGGER_PATH": str(log)}}))
    finally:
        _release_the_runs_resources(before)
    return {r["step"]: r["data"] for r in map(json.loads, log.read_text().splitlines())}


@pytest.fixture(scope="module")
def rlhooks_runs(cpu_v1_ray, tmp_path_factory):
    from rlhooks.engines.verl.cpu import runner

    out = tmp_path_factory.mktemp("v1rl")
    assets = runner.prepare(out / "tiny")
    full = _run(_rlhooks_config(assets, out / "full"), out / "full.jsonl")
    shutil.copytree(out / "full" / "ckpt" / "global_step_2", out / "resumed" / "ckpt" / "global_step_2")
    (out / "resumed" / "ckpt" / "latest_checkpointed_iteration.txt").write_text("2")
    resumed = _run(_rlhooks_config(assets, out / "resumed"), out / "resumed.jsonl")
    return full, resumed, out


def test_rlhooks_hooks_run_on_v1_and_resume_exactly(rlhooks_runs):
    import torch

    full, resumed, out = rlhooks_runs
    assert sorted(full) == [1, 2, 3]
    for step in (1, 2, 3):
        m = full[step]  # verl's logger logged the merged dict: verl's metrics and rlhooks's
        assert m["actor/grad_norm"] > 0 and m["filter/trained_groups"] == 4
        # kept = trained + the surplus verl discards after draining; dropped groups were evicted and refilled
        assert m["filter/generated_groups"] >= m["filter/kept_groups"] == 4 + m["filter/discarded_surplus"]
        assert m["filter/generated_groups"] - m["filter/kept_groups"] == m.get("training/filter_groups/evicted_samples", 0)
        assert m["train/num_gen_batches"] >= 1 and "rewards/errors/check_answer" in m
        assert {"source/add_small/reward", "source/add_small/count"} <= set(m)
    state = torch.load(out / "full" / "ckpt" / "global_step_2" / "rlhooks.pt", weights_only=False)
    assert state["trainer"] == "rlhooks_sync" and state["components"]
    # verl treated it as its sync trainer: no TransferQueue checkpoint (that is for async modes)
    assert not (out / "full" / "ckpt" / "global_step_2" / "transfer_queue").exists()
    records = (out / "full" / "runs" / "v1" / "metrics.jsonl").read_text()
    assert '"filter/kept_groups"' in records and '"actor/pg_loss"' in records  # the rlhooks backend got both
    assert sorted(resumed) == [3]
    resumed_state = torch.load(out / "resumed" / "ckpt" / "global_step_3" / "rlhooks.pt", weights_only=False)
    assert set(resumed_state["components"]) == set(state["components"])
    assert resumed[3]["filter/trained_groups"] == full[3]["filter/trained_groups"] == 4
