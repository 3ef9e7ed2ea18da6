"""The legacy CPU learner (``trainer.use_v1=false``): a real tiny policy trained through verl's own workers,
loss and legacy trainer flow, in this process.

One module-scoped pair of runs (3 steps straight; a resume from its step-2 checkpoint) carries the end-to-end
checks: DAPO accumulation, KL in the reward, the rlhooks reward functions, checkpoints, resume with
the sampler state (``slow``: ~33 s of a test worker). The legacy learner's replacements for verl classes that
cannot run on CPU are checked against verl's source in the default suite: if verl changes what they replace,
or fixes the reason they exist, a test here fails.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("verl.trainer.ppo.ray_trainer", reason="needs verl[verl-core]")
pytest.importorskip("transformers")

from omegaconf import OmegaConf, open_dict  # noqa: E402

import rlhooks  # noqa: E402
from rlhooks.engines.verl.cpu import platform, runner, tasks  # noqa: E402
from rlhooks.engines.verl.legacy import cpu_runner  # noqa: E402
from rlhooks.engines.verl.legacy.cpu_rollout import ColocatedWeights, CPURolloutManager, _hf_rollout_class  # noqa: E402
from rlhooks.engines.verl.legacy.cpu_trainer import ReferenceGroup  # noqa: E402
from rlhooks.engines.verl.main import compose_verl_config  # noqa: E402

from ..verl_source import _tree, assigned_literal, call_dict_keys, params, subscript_stores  # noqa: E402

pytestmark = pytest.mark.verl

STEPS, BETA = 3, 0.05


class StepLog:
    """What the tests read back from each step: metrics, drawn rows, trained rows' rewards and groups."""

    def __init__(self):
        self.logged: dict[int, dict] = {}
        self.drawn: list[tuple[int, int, list[int]]] = []
        self.trained: dict[int, dict[str, np.ndarray]] = {}

    @rlhooks.hookimpl
    def on_batch_sampled(self, step, batch):
        self.drawn.append((step, batch.meta["generation"], batch["index"].tolist()))

    @rlhooks.hookimpl
    def on_step_end(self, step, batch, metrics):
        self.trained[step] = {k: np.asarray(batch[k]).copy() for k in ("uid", "acc", "reward", "final_reward")}

    @rlhooks.hookimpl
    def log_metrics(self, step, metrics):
        self.logged[step] = dict(metrics)


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> tuple[Path, Path]:
    return runner.prepare(tmp_path_factory.mktemp("tiny"))


def learner_config(assets, out: Path, steps: int):
    policy_dir, data = assets
    cfg = compose_verl_config([
        *runner.verl_overrides(policy_dir, data, micro_batch=16), "trainer.use_v1=false",
        "data.train_batch_size=4", "data.gen_batch_size=4", "data.seed=3",
        "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.use_kl_loss=false",
        "algorithm.use_kl_in_reward=true", f"algorithm.kl_ctrl.kl_coef={BETA}", "algorithm.kl_ctrl.type=fixed",
        "trainer.logger=[console]", "trainer.val_before_train=false", "trainer.test_freq=-1",
        f"trainer.total_training_steps={steps}", "trainer.total_epochs=100", "trainer.save_freq=2",
        f"trainer.default_local_dir={out / 'ckpt'}", "trainer.experiment_name=cpu-learner-test",
    ])
    with open_dict(cfg):
        cfg.rlhooks = OmegaConf.create({
            "run": {"out_dir": str(out / "runs")},
            "sampler": {"name": "learnability", "level": "prompt", "floor": 0.1},
            "filters": [{"name": "dapo", "metric": "acc"}],
            "rewards": ["check_answer", "format_exact"],
        })
    return cfg


def _fit(assets, out: Path, steps: int):
    log = StepLog()
    trainer = cpu_runner.build_trainer(learner_config(assets, out, steps), rlhooks_plugins=[("steplog", log)])
    trainer.fit()
    return trainer, log


@pytest.fixture(scope="module")
def runs(assets, tmp_path_factory):
    """(straight 3-step trainer, its log, a trainer resumed from its step-2 checkpoint, its log, the
    initial weights). The resumed run starts from a copy of the step-2 checkpoint folder (verl's
    tracker file says 2), which is what a 2-step run with the same settings leaves (save_freq 2)."""
    import shutil

    from transformers import AutoModelForCausalLM

    out = tmp_path_factory.mktemp("runs")
    with platform.installed():
        initial = {k: v.clone() for k, v in AutoModelForCausalLM.from_pretrained(assets[0]).state_dict().items()}
        full, full_log = _fit(assets, out / "full", STEPS)
        shutil.copytree(out / "full" / "ckpt" / "global_step_2", out / "resumed" / "ckpt" / "global_step_2")
        (out / "resumed" / "ckpt" / "latest_checkpointed_iteration.txt").write_text("2")
        resumed, resumed_log = _fit(assets, out / "resumed", STEPS)
        yield full, full_log, resumed, resumed_log, initial


def _weights(trainer) -> dict[str, torch.Tensor]:
    """The actor's parameters as plain tensors (FSDP2 holds DTensors; one rank holds them whole)."""
    return {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().clone()
            for k, v in trainer.actor_module.state_dict().items()}


def _the_policy_learns_through_verls_update(runs):
    full, log, _, _, initial = runs
    trained = _weights(full)
    moved = [k for k in initial if not torch.equal(initial[k], trained[k].to(initial[k].dtype))]
    assert len(moved) == len(initial), "every parameter tensor is updated by verl's actor update"
    for step in range(1, STEPS + 1):
        m = log.logged[step]
        assert np.isfinite(m["actor/pg_loss"]) and m["actor/grad_norm"] > 0
        assert 0 < m["actor/entropy"] < np.log(len(tasks.make_tokenizer()))  # real log-probs of a real policy


def _dapo_accumulates_generation_batches_of_real_generations(runs):
    _, log, _, _, _ = runs
    for step in range(1, STEPS + 1):
        rows = log.trained[step]
        _, groups = np.unique(rows["uid"], return_inverse=True)
        assert len(rows["uid"]) == 4 * 4 and np.bincount(groups).tolist() == [4] * 4
        acc_min = np.minimum.reduceat(rows["acc"][np.argsort(groups, kind="stable")], np.arange(0, 16, 4))
        acc_max = np.maximum.reduceat(rows["acc"][np.argsort(groups, kind="stable")], np.arange(0, 16, 4))
        assert (acc_max > acc_min).all(), "DAPO trains only groups whose answers differ"
        m = log.logged[step]
        assert m["filter/generated_groups"] == 4 * m["train/num_gen_batches"]
    assert max(log.logged[s]["train/num_gen_batches"] for s in log.logged) > 1


def _rlhooks_rewards_and_the_kl_penalty_are_what_verl_trains_on(runs):
    _, log, _, _, _ = runs
    for step in range(1, STEPS + 1):
        m, rows = log.logged[step], log.trained[step]
        # token_level_scores carry the rlhooks total (check_answer + format_exact) of the trained rows
        assert m["critic/score/mean"] == pytest.approx(rows["reward"].mean(), abs=1e-5)
        assert set(np.unique(rows["reward"])) <= {-1.0, 0.0, 2.0, 3.0, 3.5, 3.25, 4.5, 6.0}
        # token_level_rewards = scores - beta * KL(actor || ref): zero before the first update, then not
        assert m["critic/rewards/mean"] == pytest.approx(rows["final_reward"].mean(), abs=1e-5)
        assert m["actor/reward_kl_penalty_coeff"] == pytest.approx(BETA)
        if step == 1:
            assert m["actor/reward_kl_penalty"] == pytest.approx(0.0, abs=1e-6)
        else:
            # verl's "kl" estimator (log-ratio, k1) per token can have either sign; it is no longer zero
            assert abs(m["actor/reward_kl_penalty"]) > 1e-6
            assert m["critic/rewards/mean"] != pytest.approx(m["critic/score/mean"], abs=1e-7)


def _resume_from_verls_checkpoint_continues_exactly(runs):
    full, full_log, resumed, resumed_log, _ = runs
    assert sorted(resumed_log.logged) == list(range(3, STEPS + 1))
    later = lambda log: [d for d in log.drawn if d[0] > 2]  # noqa: E731
    assert later(resumed_log) == later(full_log)  # sampler state (learnability) and dataloader position
    for step in range(3, STEPS + 1):
        for key in ("critic/score/mean", "critic/rewards/mean", "actor/pg_loss", "train/num_gen_batches"):
            assert resumed_log.logged[step][key] == pytest.approx(full_log.logged[step][key], rel=1e-4, abs=1e-6), key
    assert resumed.rl.state_dict() == full.rl.state_dict()
    a, b = _weights(full), _weights(resumed)
    assert all(torch.allclose(a[k], b[k], atol=1e-5) for k in a), "the resumed weights are the uninterrupted run's"
    assert resumed.checkpoint_manager.updates[0] == 2  # generation continued from step 2's weights


def _generation_follows_the_agent_loop_contract(runs):
    full, _, _, _, _ = runs
    from verl import DataProto
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    data = tasks.items()
    rows = [0, 150]
    prompts = DataProto.from_dict(non_tensors={
        "raw_prompt": np.array([[{"role": "user", "content": data["question"][i]}] for i in rows], dtype=object),
        "data_source": data["source"][rows],
        "reward_model": np.array([{"ground_truth": data["answer"][i]} for i in rows], dtype=object),
        "extra_info": np.array([{} for _ in rows], dtype=object),
    }, meta_info={"global_steps": 9})
    out = full.async_rollout_manager.generate_sequences(prompts)

    post = AgentLoopWorker._postprocess
    required = call_dict_keys(post, "TensorDict")
    optional = subscript_stores(post, "optional_outputs") | subscript_stores(post, "batch")
    assert required <= set(out.batch.keys()) <= required | optional
    assert "rm_scores" in out.batch.keys()
    non_tensor_required = assigned_literal(post, "non_tensor_batch") | assigned_literal(post, "default_extra_keys")
    assert non_tensor_required <= set(out.non_tensor_batch)
    assert set(out.non_tensor_batch) - non_tensor_required <= set(out.meta_info["reward_extra_keys"])
    assert set(out.meta_info) == {"timing", "reward_extra_keys"}

    # the reward sits at the last response token and is the configured compute_score of the decoded text
    tok = full.tokenizer
    prompt_len = out.batch["prompts"].shape[1]
    valid = out.batch["attention_mask"][:, prompt_len:].sum(-1)
    for i, row in enumerate(rows):
        text = tok.decode(out.batch["responses"][i][: valid[i]], skip_special_tokens=True)
        score = out.batch["rm_scores"][i]
        assert score.nonzero().flatten().tolist() in ([int(valid[i]) - 1], [])
        assert out.non_tensor_batch["check_answer"][i] == check_answer(text, data["answer"][row])
        assert float(score.sum()) == pytest.approx(float(out.non_tensor_batch["score"][i]))
    # left-padded prompts, as the agent loop renders them; positions count only real tokens
    assert (out.batch["attention_mask"][:, 0] == 0).any()
    # seeded by (seed, step, call): the same call again generates the same tokens
    manager = full.async_rollout_manager
    manager._step = None
    again = manager.generate_sequences(prompts)
    assert torch.equal(again.batch["responses"], out.batch["responses"])


@pytest.mark.slow  # 33 s of a make-test worker; V1, verl's default, has its real-learner runs in the slow suite too
def test_the_real_learner_end_to_end(runs):
    """One test over the module's runs, so pytest-xdist builds them once (on one worker); each check
    below asserts on its own (learning, DAPO accumulation, rewards and KL, exact resume, agent-loop contract)."""
    _the_policy_learns_through_verls_update(runs)
    _dapo_accumulates_generation_batches_of_real_generations(runs)
    _rlhooks_rewards_and_the_kl_penalty_are_what_verl_trains_on(runs)
    _resume_from_verls_checkpoint_continues_exactly(runs)
    _generation_follows_the_agent_loop_contract(runs)


def test_replacements_match_the_verl_classes_they_stand_for():
    from verl.checkpoint_engine import CheckpointEngineManager
    from verl.experimental.agent_loop.agent_loop import AgentLoopManager
    from verl.workers.engine_workers import ActorRolloutRefWorker

    assert params(CPURolloutManager.generate_sequences) == params(AgentLoopManager.generate_sequences)
    assert params(ColocatedWeights.update_weights) == params(CheckpointEngineManager.update_weights)
    assert params(ColocatedWeights.sleep_replicas) == params(CheckpointEngineManager.sleep_replicas)
    assert params(ReferenceGroup.compute_ref_log_prob) == params(ActorRolloutRefWorker.compute_ref_log_prob)
    # the ref role's log-prob is its engine's infer_batch; ReferenceGroup calls the same on the frozen actor
    calls = {ast.unparse(n.func) for n in ast.walk(_tree(ActorRolloutRefWorker.compute_ref_log_prob))
             if isinstance(n, ast.Call)}
    assert "self.ref.infer_batch" in calls


def test_the_reasons_for_each_replacement_still_hold():
    """If verl fixes one of these, the replacement should go (use verl's class instead)."""
    from verl.workers.rollout.base import BaseRollout
    from verl.workers.rollout.hf_rollout import HFRollout

    # HFRollout cannot be constructed: abstract methods left, and BaseRollout.__init__ called without arguments
    assert inspect.isabstract(HFRollout)
    init_calls = [n for n in ast.walk(_tree(HFRollout.__init__)) if isinstance(n, ast.Call)
                  and ast.unparse(n.func) == "super().__init__"]
    assert init_calls and not init_calls[0].args
    assert [p for p in inspect.signature(BaseRollout.__init__).parameters][1:4] == ["config", "model_config",
                                                                                  "device_mesh"]
    # our subclass sets exactly the attributes HFRollout.__init__ sets
    def self_attrs(func):
        return {t.attr for n in ast.walk(_tree(func)) if isinstance(n, ast.Assign) for t in n.targets
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"}
    colocated = _hf_rollout_class()
    assert self_attrs(colocated.__init__) == self_attrs(HFRollout.__init__) == {"config", "module"}
    assert not inspect.isabstract(colocated)


@pytest.mark.slow  # the legacy CPU learner in this process (no Ray): ~30-60 s on 2 cores
def test_rlhooks_train_on_the_legacy_trainer_holds_every_rlhooks_metric(tmp_path):
    """`rlhooks train ... trainer.use_v1=false` (the CLI's main, in this process) on the CPU learner: it trains
    for real, and the run's metrics.jsonl holds the dapo filter's, the reward functions', source_metrics' and
    reward_monitor's metrics (an alert that fires) beside verl's, as on V1
    (tests/verl/test_cpu_v1_learner.py::test_rlhooks_train_trains_on_verls_default_v1_trainer)."""
    import json

    from rlhooks.cli import main

    from ..test_cpu_v1_learner import TRAIN_COMMAND_STEPS, train_command

    assert TRAIN_COMMAND_STEPS == 2  # the steps checked below
    policy_dir, data = runner.prepare(tmp_path / "tiny")
    code = main(train_command(tmp_path, "train-legacy", policy_dir, data, "trainer.use_v1=false"))
    assert code == 0
    records = [json.loads(x) for x in (tmp_path / "runs" / "train-legacy" / "metrics.jsonl").read_text().splitlines()]
    steps = {r["step"]: r["metrics"] for r in records if r["kind"] == "metrics" and r["step"] >= 1}
    assert sorted(steps) == [1, 2]
    for m in steps.values():
        assert np.isfinite(m["actor/pg_loss"]) and m["actor/grad_norm"] > 0  # verl's update on a real policy
        assert m["filter/trained_groups"] == 4 and "filter/dropped_constant" in m  # the dapo filter
        assert {"rewards/functions/check_answer", "rewards/functions/format_exact"} <= set(m)
        # logged on a step with an error only on this trainer (docs/how-to/rewards.md): absent is 0
        assert m.get("rewards/errors/check_answer", 0) == 0 and "contributions/check_answer" in m
        assert any(k.startswith("source/") and k.endswith("/reward") for k in m), sorted(m)  # source_metrics
        assert m["rewards/count"] > 0 and m["alerts/warning"] >= 1  # reward_monitor and its alert
    assert any(k.startswith("val-core/") for k in steps[2])  # verl's validation at step 2
    assert (tmp_path / "ckpt" / "global_step_2" / "rlhooks.pt").is_file()
    assert [r["status"] for r in records if r["kind"] == "run_end"] == ["success"]
