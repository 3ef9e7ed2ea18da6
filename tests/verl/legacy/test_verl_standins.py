"""The CPU stand-ins match the verl methods they replace: same signature, same output keys.

The keys are read from the real methods' code (the dict literals that build their output), so a
verl change in what generation, log-probs or the actor update return breaks this CPU test
instead of a GPU run.
"""

from __future__ import annotations

import ast
import inspect

import numpy as np
import pytest
import torch

pytest.importorskip("verl.trainer.ppo.ray_trainer", reason="needs verl[verl-core]")

from ..verl_shim_helpers import make_tokenizer  # noqa: E402
from ..verl_source import _dict_keys, _tree, assigned_literal, call_dict_keys, params, subscript_stores  # noqa: E402
from .legacy_helpers import CPUTrainer, StandinRollout, StandinWeights, StandinWorkerGroup  # noqa: E402

from verl import DataProto  # noqa: E402
from verl.checkpoint_engine import CheckpointEngineManager  # noqa: E402
from verl.experimental.agent_loop.agent_loop import AgentLoopManager, AgentLoopWorker  # noqa: E402
from verl.trainer.ppo.ray_trainer import RayPPOTrainer  # noqa: E402
from verl.workers.engine_workers import ActorRolloutRefWorker, TrainingWorker  # noqa: E402

pytestmark = pytest.mark.verl


@pytest.mark.parametrize(("standin", "real"), [
    (StandinRollout.generate_sequences, AgentLoopManager.generate_sequences),
    (StandinWorkerGroup.compute_log_prob, ActorRolloutRefWorker.compute_log_prob),
    (StandinWorkerGroup.compute_ref_log_prob, ActorRolloutRefWorker.compute_ref_log_prob),
    (StandinWorkerGroup.update_actor, ActorRolloutRefWorker.update_actor),
    (StandinWeights.update_weights, CheckpointEngineManager.update_weights),
    (StandinWeights.sleep_replicas, CheckpointEngineManager.sleep_replicas),
    (StandinWorkerGroup.save_checkpoint, ActorRolloutRefWorker.save_checkpoint),
    (StandinWorkerGroup.load_checkpoint, ActorRolloutRefWorker.load_checkpoint),
], ids=lambda f: getattr(f, "__qualname__", str(f)))
def test_standin_has_the_real_signature(standin, real):
    assert params(standin) == params(real), f"{standin.__qualname__} must match verl's {real.__qualname__}"


@pytest.fixture(scope="module")
def generated() -> DataProto:
    tok = make_tokenizer()
    prompts = DataProto.from_dict(non_tensors={
        "raw_prompt": np.array([[{"role": "user", "content": "easy what is 1 plus 1"}],
                                [{"role": "user", "content": "mixed what is 2 plus 1"}]], dtype=object),
        "data_source": np.array(["easy", "mixed"], dtype=object),
        "reward_model": np.array([{"ground_truth": "2"}, {"ground_truth": "3"}], dtype=object),
    })
    return StandinRollout(tok).generate_sequences(prompts)


def test_generation_standin_returns_the_agent_loop_keys(generated):
    post = AgentLoopWorker._postprocess
    required = call_dict_keys(post, "TensorDict")
    optional = subscript_stores(post, "optional_outputs") | subscript_stores(post, "batch")
    assert {"prompts", "responses", "response_mask", "input_ids", "attention_mask", "position_ids"} <= required
    assert "rm_scores" in optional  # the reward loop's score, which the shim's reward step reads
    tensors = set(generated.batch.keys())
    assert required <= tensors and tensors <= required | optional, (tensors, required, optional)

    non_tensor_required = assigned_literal(post, "non_tensor_batch") | assigned_literal(post, "default_extra_keys")
    assert "__num_turns__" in non_tensor_required
    assert non_tensor_required <= set(generated.non_tensor_batch)
    # the rest are reward extras (meta_info["reward_extra_keys"]) and multi-modal inputs, as in verl
    extras = set(generated.meta_info["reward_extra_keys"])
    assert set(generated.non_tensor_batch) - non_tensor_required <= extras | {"multi_modal_inputs"}

    # meta_info: the manager's timing plus the worker's meta_info without its popped metrics
    meta_keys = set()
    for node in ast.walk(_tree(post)):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "meta_info" for t in node.targets):
            meta_keys |= _dict_keys(node.value)
    manager_keys = _dict_keys(next(n.value for n in ast.walk(_tree(AgentLoopManager.generate_sequences))
                                   if isinstance(n, ast.Assign) and isinstance(n.value, ast.Dict)
                                   and any(isinstance(t, ast.Attribute) and t.attr == "meta_info" for t in n.targets)))
    assert set(generated.meta_info) == (meta_keys - {"metrics"}) | manager_keys == {"timing", "reward_extra_keys"}
    for key in ("prompts", "responses", "input_ids", "attention_mask", "position_ids", "response_mask"):
        assert generated.batch[key].dtype == torch.int64, key


def _trainer(config_overrides: tuple[str, ...] = ()) -> CPUTrainer:
    """verl's own trainer methods over the stand-in worker group (no dataloader, no run)."""
    from rlhooks.engines.verl.main import compose_verl_config

    trainer = CPUTrainer.__new__(CPUTrainer)
    trainer.config = compose_verl_config(["actor_rollout_ref.actor.ppo_mini_batch_size=2", *config_overrides])
    trainer.ref_in_actor = False
    trainer.actor_rollout_wg = trainer.ref_policy_wg = StandinWorkerGroup()
    return trainer


def _with_token_counts(batch: DataProto) -> DataProto:
    batch = batch.select(deepcopy=True)
    batch.meta_info["global_token_num"] = batch.batch["attention_mask"].sum(-1).tolist()
    return batch


def test_worker_standin_emits_mfu_only_with_token_counts_like_the_real_worker():
    """The rule behind the KL-in-reward crash (KeyError 'mfu'), read from verl's worker: the metric
    exists only when the batch carries global_token_num; the trainer's log-prob pass reads it."""
    post = _tree(TrainingWorker._postprocess_output)
    guarded = [n for n in ast.walk(post) if isinstance(n, ast.If)
               and "global_token_num" in ast.unparse(n.test) and "mfu" in ast.unparse(n)]
    assert guarded and "is not None" in ast.unparse(guarded[0].test), "verl changed when the worker emits mfu"
    assert 'tu.get(data, key="global_token_num")' in inspect.getsource(TrainingWorker.infer_batch)
    assert '["mfu"]' in inspect.getsource(RayPPOTrainer._compute_old_log_prob)  # read unconditionally


def test_log_probs_through_verls_trainer_methods_on_the_standin(generated):
    trainer = _trainer()
    with pytest.raises(KeyError, match="mfu"):  # what the real worker does without the token counts
        trainer._compute_old_log_prob(generated)
    batch = _with_token_counts(generated)
    out, mfu = trainer._compute_old_log_prob(batch)  # verl's own method: no-padding in, padding out
    required = assigned_literal(RayPPOTrainer._compute_old_log_prob, "result")
    assert required == {"old_log_probs", "entropys"} and required <= set(out.batch.keys())
    assert isinstance(mfu, float)
    mask = batch.batch["response_mask"].bool()
    assert out.batch["old_log_probs"].shape == generated.batch["responses"].shape
    assert torch.all(out.batch["old_log_probs"][mask] == StandinWorkerGroup.OLD_LOG_PROB)
    assert torch.all(out.batch["entropys"][mask] == StandinWorkerGroup.ENTROPY)

    ref = trainer._compute_ref_log_prob(batch)
    assert set(ref.batch.keys()) == call_dict_keys(RayPPOTrainer._compute_ref_log_prob, "get_tensordict") == {"ref_log_prob"}
    assert torch.all(ref.batch["ref_log_prob"][mask] == StandinWorkerGroup.REF_LOG_PROB)
    assert trainer.ref_calls == [len(batch)]


def test_actor_update_through_verls_trainer_method_on_the_standin(generated):
    trainer = _trainer()
    batch = _with_token_counts(generated)
    batch.batch["advantages"] = torch.ones(batch.batch["responses"].shape)
    batch.batch["old_log_probs"] = torch.zeros(batch.batch["responses"].shape)
    out = trainer._update_actor(batch)  # verl's own: pops actor/mfu into perf/mfu/actor
    metrics = out.meta_info["metrics"]
    assert set(out.meta_info) == {"metrics"} and "perf/mfu/actor" in metrics
    assert all(k.startswith("actor/") or k == "perf/mfu/actor" for k in metrics)
    assert metrics["actor/ppo_kl"] == [StandinWorkerGroup.PPO_KL]
    assert len(trainer.trained) == 1 and len(trainer.trained[0]) == len(batch)
    # the real update needs the PPO loss's inputs: the stand-in is not more lenient
    batch.batch.pop("old_log_probs")
    with pytest.raises(AssertionError, match="old_log_probs"):
        trainer._update_actor(batch)
