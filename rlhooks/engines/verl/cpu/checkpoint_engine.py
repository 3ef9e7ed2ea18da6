"""A CPU checkpoint engine for verl's ``separate_async`` trainer: the actor's weights to standalone rollout
replicas over a gloo group.

verl's ``separate_async`` refuses the ``naive`` engine (it only hands tensors over inside one process) and
its others (nccl, nixl, hccl, mooncake, kimi) need accelerators or RDMA. This is the same contract
(``verl.checkpoint_engine.CheckpointEngine``, registered with ``CheckpointEngineRegistry.register``) over
gloo, which runs on the host CPU; ``tests/verl/test_cpu_checkpoint_engine.py`` checks it against the
abstract methods and NCCL engine's signatures, and moves real weights between two processes.

Topology as verl's NCCL engine in single-sender mode: actor rank 0 (``is_master``) is rank 0 of a group
with every rollout worker; the other actor ranks sit the broadcast out (rank -1) but still walk the
weights generator (FSDP gathers full tensors collectively over the actor ranks). Each sync is a fresh
group (``prepare`` picks the port, ``finalize`` drops the group), as verl rebuilds it every update.
A sync is one broadcast of the names, shapes and dtypes, then the weights in buckets of
``bucket_size`` bytes (``checkpoint_engine.update_weights_bucket_megabytes``).
"""

from __future__ import annotations

import pickle
import socket
from collections.abc import AsyncIterator, Generator, Iterable
from datetime import timedelta
from typing import Any

import ray
import torch
import torch.distributed as dist
from verl.checkpoint_engine import CheckpointEngine, CheckpointEngineRegistry

#: ``actor_rollout_ref.rollout.checkpoint_engine.backend`` of the CPU engine
BACKEND = "cpu_gloo"
#: how long a rank waits for the others to join a sync's group
JOIN_TIMEOUT = timedelta(minutes=10)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


class CPUCheckpointEngine(CheckpointEngine):
    """verl's checkpoint-engine contract over a gloo group on the host CPU."""

    def __init__(self, bucket_size: int, is_master: bool = False, **kwargs: Any) -> None:
        if kwargs:
            raise TypeError(f"the {BACKEND} checkpoint engine takes no engine_kwargs, got {sorted(kwargs)} "
                            f"(actor_rollout_ref.rollout.checkpoint_engine.engine_kwargs.{BACKEND})")
        self.bucket_size = max(int(bucket_size), 1)
        self.is_master = is_master
        self.rank: int | None = None
        self._group: Any = None
        self._store: Any = None
        self._master: tuple[str, int] | None = None

    # -- topology -------------------------------------------------------------------------------
    def prepare(self) -> dict[str, Any]:
        """The master's address for this sync (a fresh port each time, as each sync is a fresh group)."""
        if self.is_master:
            self._master = (ray.util.get_node_ip_address(), _free_port())
        return {"master": self._master if self.is_master else None}

    @classmethod
    def build_topology(cls, actor_wg_world_size: int, rollout_world_size: int,
                       metadata: list[dict[str, Any]]) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
        master = metadata[0]["master"]
        if master is None:
            raise RuntimeError(f"the {BACKEND} checkpoint engine needs actor rank 0 as its master (is_master)")
        world_size = rollout_world_size + 1
        actor = {"rank": [0] + [-1] * (actor_wg_world_size - 1), "world_size": [world_size] * actor_wg_world_size,
                 "master_metadata": [master] * actor_wg_world_size}
        rollout = {"rank": list(range(1, world_size)), "world_size": [world_size] * rollout_world_size,
                   "master_metadata": [master] * rollout_world_size}
        return actor, rollout

    def init_process_group(self, rank: int, world_size: int, master_metadata: tuple[str, int]) -> None:
        self.rank = rank
        if rank < 0:
            return
        host, port = master_metadata
        self._store = dist.TCPStore(host, int(port), world_size, is_master=rank == 0, timeout=JOIN_TIMEOUT,
                                    wait_for_workers=False)
        self._group = dist.ProcessGroupGloo(self._store, rank, world_size, JOIN_TIMEOUT)

    def finalize(self) -> None:
        self._group = self._store = None
        self.rank = None

    # -- weights --------------------------------------------------------------------------------
    def _broadcast(self, tensor: torch.Tensor) -> torch.Tensor:
        self._group.broadcast(tensor, 0).wait()
        return tensor

    async def send_weights(self, weights: Iterable[tuple[str, torch.Tensor]] | AsyncIterator,
                           global_steps: int | None = None) -> dict[str, float]:
        if self.rank is None:
            raise RuntimeError(f"the {BACKEND} checkpoint engine sends weights after init_process_group")
        if self.rank > 0:
            raise RuntimeError("rollout workers do not send weights")
        names, tensors = [], []
        async for name, tensor in _aiter(weights):  # every actor rank walks it: FSDP gathers collectively
            if self.rank == 0:
                names.append(name)
                tensors.append(tensor.detach().to("cpu").contiguous())
        if self.rank < 0:
            return {}
        meta = [(name, tuple(t.shape), t.dtype) for name, t in zip(names, tensors)]
        payload = torch.frombuffer(bytearray(pickle.dumps(meta)), dtype=torch.uint8)
        self._broadcast(torch.tensor([payload.numel()], dtype=torch.int64))
        self._broadcast(payload)
        for bucket in _buckets(tensors, self.bucket_size):
            self._broadcast(torch.cat([t.reshape(-1).view(torch.uint8) for t in bucket]))
        # named as verl's delta engine names it; verl merges the sender's metrics into the step's
        return {"checkpoint_engine/payload_mbytes": sum(t.nbytes for t in tensors) / (1 << 20)}

    def receive_weights(self, global_steps: int | None = None) -> Generator[tuple[str, torch.Tensor], None, None]:
        if self.rank is None or self.rank < 1:
            raise RuntimeError(f"the {BACKEND} checkpoint engine receives weights on rollout ranks after "
                               "init_process_group")
        size = self._broadcast(torch.zeros(1, dtype=torch.int64))
        meta = pickle.loads(self._broadcast(torch.empty(int(size.item()), dtype=torch.uint8)).numpy().tobytes())
        empty = [torch.empty(shape, dtype=dtype) for _, shape, dtype in meta]
        names = iter(name for name, _, _ in meta)
        for bucket in _buckets(empty, self.bucket_size):
            flat = self._broadcast(torch.empty(sum(t.nbytes for t in bucket), dtype=torch.uint8))
            offset = 0
            for t in bucket:
                t.reshape(-1).view(torch.uint8).copy_(flat[offset:offset + t.nbytes])
                offset += t.nbytes
                yield next(names), t


def _buckets(tensors: list[torch.Tensor], bucket_size: int) -> Generator[list[torch.Tensor], None, None]:
    """Consecutive tensors in groups of at most ``bucket_size`` bytes (a larger tensor alone)."""
    bucket: list[torch.Tensor] = []
    used = 0
    for t in tensors:
        if bucket and used + t.nbytes > bucket_size:
            yield bucket
            bucket, used = [], 0
        bucket.append(t)
        used += t.nbytes
    if bucket:
        yield bucket


async def _aiter(weights: Any) -> AsyncIterator:
    if hasattr(weights, "__aiter__"):
        async for item in weights:
            yield item
    else:
        for item in weights:
            yield item


def register() -> None:
    """``checkpoint_engine.backend=cpu_gloo`` for verl (idempotent)."""
    CheckpointEngineRegistry.register(BACKEND)(CPUCheckpointEngine)


__all__ = ["BACKEND", "CPUCheckpointEngine", "register"]


register()  # verl imports this module by checkpoint_engine.custom_backend_module where it builds an engine
