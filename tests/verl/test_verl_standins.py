"""The CPU stand-ins match the verl methods they replace: same signature, same output keys.

The keys are read from the real methods' code (the dict literals that build their output), so a
verl change in what generation, log-probs or the actor update return breaks this CPU test
instead of a GPU run.
"""

from __future__ import annotations

import ast
import inspect
import textwrap

import numpy as np
import pytest
import torch

pytest.importorskip("verl.trainer.ppo.ray_trainer", reason="needs verl[verl-core]")

from .verl_shim_helpers import (  # noqa: E402
    CPUTrainer,
    StandinRollout,
    StandinWeights,
    StandinWorkerGroup,
    make_tokenizer,
)

from verl import DataProto  # noqa: E402
from verl.checkpoint_engine import CheckpointEngineManager  # noqa: E402
from verl.experimental.agent_loop.agent_loop import AgentLoopManager, AgentLoopWorker  # noqa: E402
from verl.trainer.ppo.ray_trainer import RayPPOTrainer  # noqa: E402
from verl.workers.engine_workers import ActorRolloutRefWorker  # noqa: E402

pytestmark = pytest.mark.verl


def _tree(func) -> ast.AST:
    return ast.parse(textwrap.dedent(inspect.getsource(inspect.unwrap(func))))


def _dict_keys(node: ast.AST) -> set[str]:
    return {k.value for k in getattr(node, "keys", []) if isinstance(k, ast.Constant) and isinstance(k.value, str)}


def assigned_literal(func, name: str) -> set[str]:
    """String keys / items of the dict or set literals assigned to ``name`` in ``func``."""
    out: set[str] = set()
    for node in ast.walk(_tree(func)):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            if isinstance(node.value, ast.Dict):
                out |= _dict_keys(node.value)
            elif isinstance(node.value, ast.Set):
                out |= {e.value for e in node.value.elts if isinstance(e, ast.Constant)}
    return out


def subscript_stores(func, name: str) -> set[str]:
    """Keys written as ``name["key"] = ...`` in ``func`` (optional outputs)."""
    out = set()
    for node in ast.walk(_tree(func)):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if (isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == name
                        and isinstance(t.slice, ast.Constant)):
                    out.add(t.slice.value)
    return out


def call_dict_keys(func, callee: str) -> set[str]:
    """String keys of dict literals passed as first argument to a call of ``callee`` (a name or attribute)."""
    out: set[str] = set()
    for node in ast.walk(_tree(func)):
        if isinstance(node, ast.Call):
            f = node.func
            called = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
            if called == callee and node.args and isinstance(node.args[0], ast.Dict):
                out |= _dict_keys(node.args[0])
    return out


def string_constants(func) -> set[str]:
    return {n.value for n in ast.walk(_tree(func)) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def params(func) -> list[tuple[str, object, object]]:
    sig = inspect.signature(func)
    return [(p.name, p.kind, p.default) for p in sig.parameters.values()]


@pytest.mark.parametrize(("standin", "real"), [
    (StandinRollout.generate_sequences, AgentLoopManager.generate_sequences),
    (CPUTrainer._compute_old_log_prob, RayPPOTrainer._compute_old_log_prob),
    (CPUTrainer._compute_ref_log_prob, RayPPOTrainer._compute_ref_log_prob),
    (CPUTrainer._update_actor, RayPPOTrainer._update_actor),
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


def test_log_prob_standins_return_the_real_keys(generated):
    trainer = CPUTrainer.__new__(CPUTrainer)  # the stand-ins read only the batch
    trainer.ref_calls = []
    out, mfu = trainer._compute_old_log_prob(generated)
    required = assigned_literal(RayPPOTrainer._compute_old_log_prob, "result")
    optional = subscript_stores(RayPPOTrainer._compute_old_log_prob, "result")
    assert required == {"old_log_probs", "entropys"} and "routed_experts" in optional
    assert required <= set(out.batch.keys()) <= required | optional
    assert isinstance(mfu, float)
    assert out.batch["old_log_probs"].shape == generated.batch["responses"].shape

    ref = trainer._compute_ref_log_prob(generated)
    ref_keys = call_dict_keys(RayPPOTrainer._compute_ref_log_prob, "get_tensordict")
    assert ref_keys == {"ref_log_prob"} and set(ref.batch.keys()) == ref_keys
    assert ref.batch["ref_log_prob"].shape == generated.batch["responses"].shape


def test_actor_update_standin_returns_the_real_metrics_layout(generated):
    trainer = CPUTrainer.__new__(CPUTrainer)
    trainer.trained = []
    generated.batch["advantages"] = torch.zeros(generated.batch["responses"].shape)
    out = trainer._update_actor(generated)
    real = RayPPOTrainer._update_actor
    literals = string_constants(real)
    assert {"actor/", "perf/mfu/actor", "actor/mfu", "metrics"} <= literals  # rename_dict(..., "actor/"), mfu renamed
    built = [n for n in ast.walk(_tree(real)) if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "from_single_dict"]
    data_args = [kw.value for n in built for kw in n.keywords if kw.arg == "data"]
    assert data_args and all(isinstance(v, ast.Dict) and not v.keys for v in data_args)  # data={}: metrics only
    assert set(out.meta_info) == {"metrics"} and len(out.batch.keys() if out.batch is not None else []) == 0
    metrics = out.meta_info["metrics"]
    assert "perf/mfu/actor" in metrics
    assert all(k.startswith("actor/") or k == "perf/mfu/actor" for k in metrics)
