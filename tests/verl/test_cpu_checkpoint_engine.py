"""The CPU checkpoint engine (``cpu/checkpoint_engine.py``, separate_async's weight sync on the CPU learner):
verl's contract, and real weights moved over gloo from an actor rank to rollout ranks, driven as verl's
``CheckpointEngineManager`` drives an engine (prepare on every rank, the class's topology, init_process_group,
send on the actor side while the rollout side receives, finalize). Ranks are threads of this process, each
with its own gloo group member (in-process: milliseconds)."""

from __future__ import annotations

import asyncio
import inspect
import threading

import pytest
import torch

pytest.importorskip("verl.checkpoint_engine", reason="needs verl[verl-core]")

from verl.checkpoint_engine import CheckpointEngine, CheckpointEngineRegistry  # noqa: E402
from verl.checkpoint_engine.base import CheckpointEngineWorker  # noqa: E402

from rlhooks.engines.verl.cpu import checkpoint_engine  # noqa: E402
from rlhooks.engines.verl.cpu.checkpoint_engine import CPUCheckpointEngine  # noqa: E402

pytestmark = pytest.mark.verl


def test_it_is_registered_and_keeps_verls_checkpoint_engine_contract() -> None:
    assert CheckpointEngineRegistry.get(checkpoint_engine.BACKEND) is CPUCheckpointEngine
    assert not getattr(CPUCheckpointEngine, "__abstractmethods__", None)  # every abstract method implemented
    # verl's parameters, in verl's order (init_process_group takes what build_topology hands out: **kwargs in verl)
    for name in ("prepare", "finalize", "send_weights", "receive_weights", "build_topology"):
        verls = list(inspect.signature(getattr(CheckpointEngine, name)).parameters)
        assert list(inspect.signature(getattr(CPUCheckpointEngine, name)).parameters)[:len(verls)] == verls, name
    assert inspect.iscoroutinefunction(CPUCheckpointEngine.send_weights)  # the actor worker awaits it
    # the rollout worker hands receive_weights' result to the rollout adapter without awaiting it
    assert "self.checkpoint_engine.receive_weights(global_steps=global_steps)" in inspect.getsource(CheckpointEngineWorker)
    # as verl's actor worker and CheckpointEngineWorker build it: (backend, is_master=, bucket_size=, **engine_kwargs)
    CheckpointEngineRegistry.new(checkpoint_engine.BACKEND, is_master=True, bucket_size=1 << 20)
    with pytest.raises(TypeError, match="engine_kwargs"):
        CheckpointEngineRegistry.new(checkpoint_engine.BACKEND, bucket_size=1, unknown=1)


def _sync(actor_ranks: int, rollout_ranks: int, weights: dict[str, torch.Tensor], bucket_size: int):
    actors = [CPUCheckpointEngine(bucket_size, is_master=i == 0) for i in range(actor_ranks)]
    rollouts = [CPUCheckpointEngine(bucket_size) for _ in range(rollout_ranks)]
    metadata = [e.prepare() for e in actors + rollouts]
    actor_kwargs, rollout_kwargs = CPUCheckpointEngine.build_topology(actor_ranks, rollout_ranks, metadata)
    received: list[dict[str, torch.Tensor]] = [{} for _ in rollouts]
    sent: list[dict] = [{} for _ in actors]
    walked = [0] * actor_ranks
    errors: list[BaseException] = []

    def actor(i: int) -> None:
        actors[i].init_process_group(**{k: v[i] for k, v in actor_kwargs.items()})

        def gen():  # as FSDP's get_per_tensor_param: every actor rank walks it
            for name, t in weights.items():
                walked[i] += 1
                yield name, t
        sent[i] = asyncio.run(actors[i].send_weights(gen(), global_steps=3))

    def rollout(i: int) -> None:
        rollouts[i].init_process_group(**{k: v[i] for k, v in rollout_kwargs.items()})
        received[i] = {name: t.clone() for name, t in rollouts[i].receive_weights(global_steps=3)}

    def guarded(fn, i):
        try:
            fn(i)
        except BaseException as e:  # noqa: BLE001 - reported by the test thread
            errors.append(e)

    threads = [threading.Thread(target=guarded, args=(actor, i)) for i in range(actor_ranks)]
    threads += [threading.Thread(target=guarded, args=(rollout, i)) for i in range(rollout_ranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors, errors
    for e in actors + rollouts:
        e.finalize()
    return received, sent, walked


def test_weights_reach_every_rollout_rank_exactly_in_buckets() -> None:
    torch.manual_seed(0)
    weights = {"embed.weight": torch.randn(50, 8), "layer.bias": torch.randn(8).to(torch.bfloat16),
               "step": torch.tensor([7], dtype=torch.int64), "empty": torch.zeros(0)}
    # a bucket smaller than the largest tensor: several buckets, the large tensor alone in one
    received, sent, walked = _sync(2, 2, weights, bucket_size=600)
    assert walked == [4, 4]  # the non-master actor rank walked the generator too (FSDP gathers collectively)
    assert sent[0]["checkpoint_engine/payload_mbytes"] == sum(t.nbytes for t in weights.values()) / (1 << 20) and sent[1] == {}
    for got in received:
        assert list(got) == list(weights)
        for name, t in weights.items():
            assert got[name].dtype == t.dtype and torch.equal(got[name], t), name
    # a second sync is a fresh group (verl rebuilds it every update)
    weights2 = {k: v + 1 if v.dtype.is_floating_point else v for k, v in weights.items()}
    received, _, _ = _sync(1, 1, weights2, bucket_size=1 << 20)
    assert torch.equal(received[0]["embed.weight"], weights2["embed.weight"])


def test_misuse_is_an_error_not_a_hang() -> None:
    engine = CPUCheckpointEngine(1024)
    with pytest.raises(RuntimeError, match="after init_process_group"):
        asyncio.run(engine.send_weights(iter(())))
    with pytest.raises(RuntimeError, match="rollout ranks after init_process_group"):
        next(engine.receive_weights())
    with pytest.raises(RuntimeError, match="master"):
        CPUCheckpointEngine.build_topology(1, 1, [{"master": None}, {"master": None}])


def test_the_cpu_learner_checks_separate_async_settings_before_ray_starts() -> None:
    """What verl's separate_async asserts inside a Ray actor, and what the host CPU adds, as one ConfigError
    naming each key; with ``runner.separate_async_overrides`` none, and Ray gets the standalone pool's GPU."""
    from rlhooks.core.errors import ConfigError
    from rlhooks.engines.verl.cpu import ray_learner, runner
    from rlhooks.engines.verl.main import compose_verl_config

    from omegaconf import OmegaConf

    good = compose_verl_config(runner.verl_overrides("policy", "train.parquet") + runner.separate_async_overrides(8)
                               + ["data.train_batch_size=8"])  # one compose (Hydra costs seconds)
    ray_learner.check_v1_config(good)
    assert ray_learner.ray_init_kwargs(good)["num_gpus"] == 2  # the trainer's pool + the standalone rollout's
    bare = OmegaConf.create(OmegaConf.to_container(good))  # verl's defaults for what the overrides set
    for key, value in (("actor_rollout_ref.rollout.nnodes", 0), ("actor_rollout_ref.rollout.checkpoint_engine.backend", "naive"),
                       ("actor_rollout_ref.rollout.checkpoint_engine.custom_backend_module", None),
                       ("trainer.v1.separate_async.parameter_sync_step", 4)):
        OmegaConf.update(bare, key, value)
    assert ray_learner.ray_init_kwargs(bare)["num_gpus"] == 1
    with pytest.raises(ConfigError) as error:
        ray_learner.check_v1_config(bare)
    text = str(error.value)
    assert len(error.value.issues) == 3, text
    for key in ("actor_rollout_ref.rollout.nnodes", "checkpoint_engine.backend=cpu_gloo",
                "parameter_sync_step", ".cpu()"):
        assert key in text, key
    OmegaConf.update(good, "trainer.v1.separate_async.parameter_sync_step", 0)  # was read as 1 (issue 38)
    with pytest.raises(ConfigError, match="parameter_sync_step: is 0: on the CPU learner it must be 1"):
        ray_learner.check_v1_config(good)
