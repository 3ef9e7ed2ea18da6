"""The built-ins together on verl's V1 trainer, end to end on the CPU learner: the config composed as
``rlhooks train`` composes it (``build_config``: the rlhooks trainer mode, replay buffer and the
``rewards:`` functions mapped onto verl's reward loop), then verl's run_ppo with the rlhooks V1 TaskRunner
for 3 steps. Enabled together: the multi_source sampler, selective_rollout (prompts skipped before the
agent loop), the dapo filter, two weighted reward functions, source_metrics, reward_monitor with an alert,
top/bottom-k sample tables, and the console, jsonl, tensorboard and wandb (offline) backends. Each one's
metrics or files are read back from the run.

The other samplers and built-ins (format_approx, check_numbers, the per-source and random sample tables) are
in the async runs (test_cpu_v1_async.py) and the resume pairs; a check here that every built-in sampler is one of
those runs' samplers. Shares the session's hermetic Ray (``cpu_v1_ray``); minutes on 2 cores, so slow-marked.
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

from .test_cpu_v1_learner import STEPS, _release_the_runs_resources  # noqa: E402

pytestmark = [pytest.mark.verl, pytest.mark.slow]

def _run(cfg, log: Path) -> dict[int, dict]:
    """The rlhooks TaskRunnerV1 (as ``rlhooks train`` starts it) on the shared Ray, verl's file logger writing
    to ``log``; the logged (verl + rlhooks) metrics by step."""
    from ray.util import placement_group_table

    from rlhooks.engines.verl.cpu import runner
    from rlhooks.engines.verl.v1.runner import RLHooksTaskRunnerV1

    before = set(placement_group_table())
    try:
        runner.run(cfg, RLHooksTaskRunnerV1.options(runtime_env={"env_vars": {"VERL_FILE_LOGGER_PATH": str(log)}}))
    finally:
        _release_the_runs_resources(before)
    return {r["step"]: r["data"] for r in map(json.loads, log.read_text().splitlines())}


ALERT = {"metric": "rewards/count", "condition": "greater", "threshold": 0.0, "level": "warning",
         "message": "fires every step (the test's alert)"}


def _config(assets, out: Path):
    from rlhooks.engines.verl.cpu import runner
    from rlhooks.engines.verl.main import build_config

    policy_dir, data = assets
    rl = {
        "run": {"out_dir": str(out / "runs"), "name": "builtins"},
        "sampler": {"name": "multi_source"},
        # skip prompts seen all-pass / all-fail before (keep 5%): with 8 prompts, step 2 on revisits them
        "prompt_filters": [{"name": "selective_rollout", "p_easy": 0.05, "p_hard": 0.05, "adjust_step": 0.0,
                            "seed": 1}],
        "filters": [{"name": "dapo", "metric": "acc"}],
        "rewards": [{"name": "check_answer", "weight": 2.0}, "format_exact", "source_metrics",
                    {"name": "reward_monitor", "alerts": [ALERT]}],
        "samples": [{"name": "top_bottom_k", "k": 2}],
        "backends": ["console", "jsonl", "tensorboard", {"name": "wandb", "mode": "offline"}],
    }
    path = out / "rlhooks.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(rl))
    return build_config(str(path), [
        *runner.verl_overrides(policy_dir, data, micro_batch=16),
        "data.train_batch_size=4", "data.seed=3", "data.train_max_samples=8", "data.val_max_samples=8",
        "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.use_kl_loss=true",
        "trainer.logger=[console,file]", "trainer.val_before_train=false", f"trainer.test_freq={STEPS}",
        f"trainer.total_training_steps={STEPS}", "trainer.total_epochs=100", f"trainer.save_freq={STEPS}",
        f"trainer.default_local_dir={out / 'ckpt'}", "trainer.experiment_name=v1-builtins",
    ])


@pytest.fixture(scope="module")
def builtins_run(cpu_v1_ray, tmp_path_factory):
    from rlhooks.engines.verl.cpu import runner

    out = tmp_path_factory.mktemp("v1builtins")
    assets = runner.prepare(out / "tiny")
    cfg = _config(assets, out)
    logged = _run(cfg, out / "verl.jsonl")
    return cfg, logged, out / "runs" / "builtins"


def test_the_builtins_run_together_on_v1(builtins_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from tests.wandb_records import read_wandb_records

    cfg, logged, run_dir = builtins_run
    # rewards: reached verl's reward loop as the rlhooks adapter with the entries' weights
    kwargs = cfg.reward.custom_reward_function.reward_kwargs
    assert list(kwargs.functions) == ["check_answer", "format_exact"] and list(kwargs.weights) == [2.0, 1.0]
    assert sorted(logged) == list(range(1, STEPS + 1))
    for step, m in logged.items():  # verl's logger logged the merged dict: verl's metrics and rlhooks's
        assert m["actor/grad_norm"] > 0
        # the reward functions, scored in verl's reward-loop workers, read back per function
        assert {"rewards/functions/check_answer", "rewards/functions/format_exact"} <= set(m)
        assert m["rewards/errors/check_answer"] == 0 and m["rewards/errors/format_exact"] == 0
        assert {"contributions/check_answer", "contributions/format_exact"} <= set(m)
        # the sampler, the prompt stage and the dapo filter
        assert any(k.startswith("sampler/weight/") for k in m), sorted(m)
        assert m["prompt_filter/sampled"] >= 1 and "selective_rollout/p_easy" in m
        assert m["filter/trained_groups"] == 4 and "filter/dropped_constant" in m
        # kept = trained + the surplus verl discards after draining; the dropped groups are the ones verl evicted
        assert m["filter/generated_groups"] >= m["filter/kept_groups"] == 4 + m["filter/discarded_surplus"]
        assert m["filter/generated_groups"] - m["filter/kept_groups"] == m.get("training/filter_groups/evicted_samples", 0)
        # source_metrics and reward_monitor (the alert fires every step)
        assert any(k.startswith("source/") and k.endswith("/reward") for k in m), sorted(m)
        assert m["rewards/count"] > 0 and m["alerts/warning"] >= 1
    # selective_rollout skipped revisited prompts before the agent loop, and the agent loop generated exactly
    # the prompts that passed: every group scored in a step (the replay buffer's count) is one the prompt
    # stage let through (sampled - skipped + forced, less the surplus it held back)
    assert logged[STEPS]["prompt_filter/skipped_total"] > 0, {s: m["prompt_filter/skipped_total"] for s, m in logged.items()}
    for step, m in logged.items():
        passed = (m["prompt_filter/sampled"] - m["prompt_filter/skipped"] + m["prompt_filter/forced"]
                  - m["prompt_filter/surplus"])
        assert m["filter/generated_groups"] == passed, (step, {k: v for k, v in m.items() if "filter/" in k})
    assert sum(m["prompt_filter/skipped"] - m["prompt_filter/forced"] for m in logged.values()) > 0

    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    tables = {(r["name"], r["step"]): r["rows"] for r in records if r["kind"] == "table"}
    for step in range(1, STEPS + 1):
        rows = tables[("samples/top_bottom_k", step)]
        assert len(rows) == 4 and all("response" in r and "reward" in r for r in rows)
        assert tables[("alerts", step)][0]["metric"] == "rewards/count"
    scalars = {r["step"]: r for r in records if r["kind"] == "metrics"}
    assert scalars[STEPS]["metrics"]["filter/trained_groups"] == 4

    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0}).Reload()
    tags = set(events.Tags()["scalars"])
    assert {"rewards/functions/check_answer", "filter/trained_groups", "alerts/warning"} <= tags, sorted(tags)
    assert [e.step for e in events.Scalars("filter/trained_groups")] == list(range(1, STEPS + 1))

    (wandb_file,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    history = [r.history for r in read_wandb_records(wandb_file) if r.WhichOneof("record_type") == "history"]
    keys = {item.key or "/".join(item.nested_key) for h in history for item in h.item}
    assert {"rewards/functions/check_answer", "filter/trained_groups"} <= keys, sorted(keys)


# -- every built-in sampler on V1 -------------------------------------------------------------------------

def test_every_builtin_sampler_runs_on_v1_in_one_of_the_real_runs():
    """Each registered built-in sampler is the sampler of one of the V1 runs on the CPU learner, fed by the rlhooks
    replay buffer (the same ``judge`` path in every mode): multi_source here and in the sync and colocate_async
    resume pairs, learnability, dump_ucb and reward_curriculum in test_cpu_v1_async.py (reward_curriculum
    levelling up), time_curriculum in the separate_async resume pair (its schedule counted in the buffer's
    feedback batches, restored on resume). The short sync run each sampler had here is gone (CI time, issue 36):
    a generation batch is one feedback call in sync mode too (test_v1_replay_buffer.py, waves)."""
    from rlhooks.core.registry import Registry

    from . import test_cpu_v1_async, test_v1_resume

    reg = Registry()
    run = [{"name": "multi_source"}, test_v1_resume.MULTI_SOURCE, test_v1_resume.TIME_CURRICULUM,
           *(r["sampler"] for r in test_cpu_v1_async.RUNS.values())]
    builtin = {e.value for e in reg.entries("sampler") if e.dist == "rlhooks"}
    assert len(builtin) >= 5 and {reg.info("sampler", r["name"]).value for r in run} == builtin, \
        "add the new sampler to one of the V1 runs"
