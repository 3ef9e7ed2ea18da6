"""Imported by verl in every Ray process of the CPU learner (``VERL_USE_EXTERNAL_MODULES``, which verl's
``__init__`` imports once torch, tensordict and Ray are in): what is imported so far frozen out of later garbage
collections (``engines/verl/imports.py``), the ``cpu`` platform (``platform.install``; ``VERL_PLATFORM=cpu`` names
it), the CPU engine once verl's engine package is imported (``platform.register_engine_on_import``), the CPU rollout
(``register_cpu_rollout``), in a verl worker-group process its gloo process group, and verl's per-trajectory warnings
once a process (``quiet_repeated_warnings``).

verl's workers call ``initialize_global_process_group_ray``, which asks torch for backend
``cpu:gloo,<device>:<backend>`` = ``cpu:gloo,cpu:gloo`` on this platform, which torch refuses ("Duplicate
device type cpu"); it initializes nothing when a group exists. So a worker-group process (verl's
``RayWorkerGroup`` starts it with ``WG_BACKEND=ray``, ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR/PORT``)
gets the same group here, over gloo, before verl's worker constructor runs.
"""

from __future__ import annotations

import logging
import os

#: verl's warnings that repeat word for word for every trajectory: (logger, message format's start). The one here:
#: verl's agent loop builds a tokenizer wrapper for each trajectory and warns each time that it has none made for the
#: model type (the tiny policy is a ``mistral``): ~100 lines a CPU-learner step, half of ``verl.log``
REPEATED_WARNINGS = (("verl.utils.tokenizer.continuous_token_wiring", "No model-specific Continuous Token builder"),)


def _init_worker_group_process_group() -> None:
    import torch.distributed as dist

    env = os.environ
    if env.get("WG_BACKEND") != "ray" or dist.is_initialized():
        return
    if not all(env.get(k) for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")):
        return
    dist.init_process_group("gloo", rank=int(env["RANK"]), world_size=int(env["WORLD_SIZE"]),
                            init_method=env.get("DIST_INIT_METHOD"))


def register_cpu_rollout() -> None:
    """``rollout.name=cpu`` for verl, by name so that nothing is imported before verl asks for it (this runs
    inside ``import verl``): the replica through ``RolloutReplicaRegistry.register`` (public), the worker-side
    rollout in ``rollout.base._ROLLOUT_REGISTRY`` (verl 0.9.1 has no public registration for it;
    fingerprinted in compat)."""
    import importlib

    from verl.workers.rollout import base
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    RolloutReplicaRegistry.register(
        "cpu", lambda: importlib.import_module(f"{__package__}.rollout_server").CPURolloutReplica)
    base._ROLLOUT_REGISTRY[("cpu", "async")] = f"{__package__}.rollout_server.CPURolloutAdapter"


class FirstOnly(logging.Filter):
    """Lets through the first record of each distinct message that starts with ``prefix``; others all."""

    def __init__(self, prefix: str):
        super().__init__()
        self.prefix, self.seen = prefix, set()

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith(self.prefix):
            return True
        message = record.getMessage()
        if message in self.seen:
            return False
        self.seen.add(message)
        return True


def quiet_repeated_warnings() -> None:
    """Each of ``REPEATED_WARNINGS`` once a process (the same text again says nothing new)."""
    for name, prefix in REPEATED_WARNINGS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, FirstOnly) and f.prefix == prefix for f in logger.filters):
            logger.addFilter(FirstOnly(prefix))


def setup() -> None:
    from rlhooks.engines.verl import imports
    from rlhooks.engines.verl.cpu import platform

    imports.freeze_imported()  # torch, tensordict and Ray are in: the rest of the import collects past them
    platform.install(engine=False)
    platform.register_engine_on_import()  # only where verl builds an engine: ~2 s of imports saved elsewhere
    register_cpu_rollout()
    quiet_repeated_warnings()
    _init_worker_group_process_group()


setup()
