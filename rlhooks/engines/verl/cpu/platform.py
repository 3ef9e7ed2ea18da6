"""verl on one CPU process: a ``cpu`` platform for verl's platform registry, verl's FSDP engine
registered for it, and a one-process gloo group.

verl 0.9.1 registers platforms for CUDA, NPU and ROCm only, and its FSDP engine for devices
``cuda``/``npu``; nothing in the engine itself needs an accelerator (FSDP2 ``fully_shard`` runs on
CPU tensors with gloo). So the engine class is verl's own, only registered under one more key.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import os
import sys
import threading
import types
from typing import Any

import torch

_ZERO_MEMORY = ("max_memory_allocated", "max_memory_reserved", "memory_allocated", "memory_reserved")
_NO_OPS = ("empty_cache", "reset_peak_memory_stats", "set_device", "ipc_collect")


class _CPUDeviceModule(types.ModuleType):
    """What verl calls on ``get_torch_device()`` (``torch.cuda`` on GPUs): ``torch.cpu`` where it has
    the function, no-ops for cache control, zeros for the memory statistics verl logs."""

    def __getattr__(self, name: str) -> Any:
        if hasattr(torch.cpu, name):
            return getattr(torch.cpu, name)
        if name in _NO_OPS:
            return lambda *args, **kwargs: None
        if name in _ZERO_MEMORY:
            return lambda *args, **kwargs: 0
        if name == "get_device_name":  # what verl's flops counter names torch.cpu
            return lambda *args, **kwargs: "CPU"
        if name == "mem_get_info":
            return lambda *args, **kwargs: (0, 0)
        if name in ("manual_seed", "manual_seed_all"):
            return torch.manual_seed
        if name in ("get_rng_state", "set_rng_state"):  # checkpoints save/restore the device RNG: here torch's
            return getattr(torch, name)
        raise AttributeError(f"verl asked the CPU device module for {name!r}, which CPU training does not have")


DEVICE_MODULE = _CPUDeviceModule("rlhooks_cpu_device")


def _platform_class():
    from verl.plugin.platform.platform_base import PlatformBase

    class PlatformCPU(PlatformBase):
        """verl's platform interface for the host CPU (device ``cpu``, collectives over gloo)."""

        device_name = "cpu"
        vendor_name = "cpu"

        @property
        def device_module(self):
            return DEVICE_MODULE

        def is_available(self) -> bool:
            return True

        def is_platform_available(self, use_smi_check: bool = False) -> bool:
            return True

        def current_device(self):
            # verl uses get_device_id() as a device (model.to(device=...), tensor.to(...)): "cpu" works there
            return "cpu"

        def device_count(self) -> int:
            return 1

        # The no-ops below are what these calls mean on the host CPU: one device, always current, no
        # asynchronous queue to wait on, no caching allocator to tune or empty, no device profiler.
        def set_device(self, device_index: int) -> None:
            pass

        def synchronize(self, device_index: int | None = None) -> None:
            pass

        def manual_seed(self, seed: int) -> None:
            torch.manual_seed(seed)

        def manual_seed_all(self, seed: int) -> None:
            torch.manual_seed(seed)

        def set_allocator_settings(self, settings: str) -> None:
            pass

        def empty_cache(self) -> None:
            pass

        def get_device_capability(self, device_index: int = 0):
            return (None, None)

        def communication_backend_name(self) -> str:
            return "gloo"

        def visible_devices_envvar(self) -> str:
            return "CUDA_VISIBLE_DEVICES"

        def nvtx_range(self, msg: str):
            return contextlib.nullcontext()

        def profiler_start(self) -> None:
            pass

        def profiler_stop(self) -> None:
            pass

        def cudart(self):
            return None

        def is_ipc_supported(self) -> bool:
            return False

        def ray_resource_name(self) -> str:
            # verl's resource pools count GPU/NPU only (RayResourcePool, _check_resource_available) and Ray
            # rejects "CPU" as a custom resource: the V1 learner's Ray cluster declares a logical GPU per
            # worker rank (``ray_learner.ray_init_kwargs``), which this names
            return "GPU"

        def ray_noset_envvars(self) -> list[str]:
            return []

    return PlatformCPU


def _engine_class():
    """verl's FSDP language-model engine, building forward-only (reference) models without pinned memory.

    verl gives a forward-only FSDP2 engine ``CPUOffloadPolicy(pin_memory=True)``; pinning needs an
    accelerator. On the host CPU the offload is a no-op either way, so the model is built with the same
    policy unpinned; everything else is verl's ``_build_fsdp_module``."""
    from verl.workers.engine.fsdp import transformer_impl
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead

    class CPUFSDPEngineWithLMHead(FSDPEngineWithLMHead):
        def _build_fsdp_module(self, module):
            pinned = transformer_impl.CPUOffloadPolicy
            transformer_impl.CPUOffloadPolicy = lambda pin_memory=True, **kw: pinned(pin_memory=False, **kw)
            try:
                return super()._build_fsdp_module(module)
            finally:
                transformer_impl.CPUOffloadPolicy = pinned

    return CPUFSDPEngineWithLMHead


def install(*, engine: bool = True) -> None:
    """Make verl see this machine as the ``cpu`` platform (idempotent): the platform registered and made
    current (verl's ``set_platform``) and, with ``engine``, verl's FSDP language-model engine registered for
    device ``cpu`` (:func:`register_engine`)."""
    from verl.plugin.platform import platform_manager

    if getattr(platform_manager, "_current_platform", None).__class__.__name__ != "PlatformCPU":
        cls = _platform_class()
        platform_manager.PlatformRegistry.register(platform="cpu")(cls)
        platform_manager.set_platform(cls())
    if engine:
        register_engine()


def register_engine() -> None:
    """verl's FSDP language-model engine under device ``cpu`` (idempotent; the platform must be installed: verl's
    engine package asks for it on import)."""
    from verl.workers.engine.base import EngineRegistry

    # verl's registry asserts on a second registration of a key
    if "cpu" not in EngineRegistry._engines.get("language_model", {}).get("fsdp", {}):
        EngineRegistry.register(model_type="language_model", backend=["fsdp", "fsdp2"], device="cpu")(_engine_class())


#: verl's engine package (with peft, datasets, the FSDP engines: ~2 s of imports, docs/DEVELOPMENT.md)
ENGINE_PACKAGE = "verl.workers.engine"


class _RegisterEngineOnImport(importlib.abc.MetaPathFinder):
    """Registers the CPU engine right after verl's engine package is imported, in whichever process imports it:
    most of a V1 run's Ray processes (TransferQueue, the reward loop, the rollout server, the router) never do.
    It stays on ``sys.meta_path`` (other threads may be walking it) and answers once, under a lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._answered = False

    def find_spec(self, fullname, path, target=None):
        if fullname != ENGINE_PACKAGE or self._answered:
            return None
        with self._lock:
            if self._answered:
                return None
            self._answered = True
            spec = importlib.util.find_spec(fullname)  # the real finders' (this one answers no more)
        if spec is None or spec.loader is None:
            return spec
        # an installed package's loader is a per-module SourceFileLoader: wrapping its method touches this module only
        exec_module = spec.loader.exec_module

        def exec_then_register(module):
            exec_module(module)
            register_engine()

        spec.loader.exec_module = exec_then_register
        return spec


def register_engine_on_import() -> None:
    """:func:`register_engine` now if verl's engine package is imported, else the moment it is."""
    if ENGINE_PACKAGE in sys.modules:
        register_engine()
    elif not any(isinstance(f, _RegisterEngineOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _RegisterEngineOnImport())


@contextlib.contextmanager
def installed():
    """The CPU platform for a block, then verl's previous platform again (tests share processes)."""
    from verl.plugin.platform import platform_manager

    previous = getattr(platform_manager, "_current_platform", None)
    install()
    try:
        yield
    finally:
        platform_manager._current_platform = previous


def init_single_process_group() -> None:
    """This process as rank 0 of 1 for verl's workers: the environment verl's ``Worker`` reads (RANK,
    WORLD_SIZE, MASTER_ADDR/PORT) where unset, and a one-rank gloo group. verl's own initializer asks
    for ``cpu:gloo,<device>:<backend>``, which torch refuses when both are ``cpu``; it skips
    initializing when a group exists."""
    import torch.distributed as dist

    for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_WORLD_SIZE", "1"),
                       ("MASTER_ADDR", "127.0.0.1")):
        os.environ.setdefault(key, value)
    if not dist.is_initialized():
        # one rank: nobody else connects, so the store binds port 0 itself. A MASTER_PORT picked free and bound
        # later can be taken in between, and one inherited from a parent process is still that parent's
        # (both were a c10d EADDRINUSE under pytest-xdist)
        store = dist.TCPStore("127.0.0.1", 0, world_size=1, is_master=True)
        os.environ.setdefault("MASTER_PORT", str(store.port))
        dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    elif dist.get_world_size() != 1:
        raise RuntimeError("the CPU learner runs in one process; a process group of "
                           f"{dist.get_world_size()} ranks is already initialized")
