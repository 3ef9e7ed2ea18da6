"""The CPU learner on verl's V1 trainer: verl's own ``run_ppo`` with its ``TaskRunnerV1`` on a local Ray.

Everything that runs is verl's: ``PPOTrainer.init``/``fit``/``step`` (the trainer ``trainer.v1.trainer_mode``
names), the replay buffer, TransferQueue, ``AgentLoopManagerTQ`` and its workers, the reward loop workers,
the ``naive`` checkpoint engine, ``ActorRolloutRefWorker`` with the FSDP2 engine. What makes it run on
the host CPU goes in through verl's extension points:

- every Ray process imports ``cpu.ray_process`` (``VERL_USE_EXTERNAL_MODULES`` in the Ray runtime env)
  and selects the ``cpu`` platform (``VERL_PLATFORM``): the platform, the CPU engine registration, the
  CPU rollout (``rollout.name=cpu``, ``cpu.rollout_server``), the workers' gloo group;
- Ray declares one logical GPU per worker rank (verl's resource pools place workers on GPUs).
"""

from __future__ import annotations

import os
from typing import Any

from rlhooks.engines.verl.cpu import platform

RAY_PROCESS_MODULE = "rlhooks.engines.verl.cpu.ray_process"
#: environment of every Ray process of the CPU learner
RAY_PROCESS_ENV = {"VERL_USE_EXTERNAL_MODULES": RAY_PROCESS_MODULE, "VERL_PLATFORM": "cpu"}
#: logical CPUs Ray schedules on: verl's actors (task runner, TransferQueue, agent-loop, reward and
#: rollout processes) each ask for one; they share the machine's real cores
RAY_LOGICAL_CPUS = 16
#: TransferQueue's threads for a put or get (its ``TQ_NUM_THREADS`` default)
TQ_DEFAULT_THREADS = 8


def transfer_queue_threads() -> int:
    """The threads TransferQueue uses here: its default, cut to the physical cores, as it cuts it itself."""
    import psutil

    return min(TQ_DEFAULT_THREADS, psutil.cpu_count(logical=False) or 1)


def uses_v1(cfg: Any) -> bool:
    """verl's own switch: ``trainer.use_v1`` (verl's default when unset: true)."""
    from rlhooks.engines.verl.config import trainer_in_use

    return trainer_in_use(cfg) == "v1"


def check_v1_config(cfg: Any) -> None:
    """The keys V1 on the CPU needs, as a ConfigError naming each, not a failure inside a Ray actor."""
    from rlhooks.core.errors import ConfigError

    issues = v1_config_issues(cfg)
    if issues:
        raise ConfigError(issues, "(the verl config)", kind="verl config")


def v1_config_issues(cfg: Any) -> list:
    """What :func:`check_v1_config` refuses, as ConfigIssues (``rlhooks train`` checks them before Ray, with
    its other checks: engines/verl/checks.py)."""
    from rlhooks.core.errors import ConfigIssue

    rollout = cfg.actor_rollout_ref.rollout
    issues = []
    if rollout.name != "cpu":
        issues.append(ConfigIssue("verl.actor_rollout_ref.rollout.name", f"is {rollout.name!r}: verl's V1 trainer on the "
                                  "CPU learner generates with the CPU rollout server; set it to 'cpu'"))
    if rollout.tensor_model_parallel_size * rollout.data_parallel_size * rollout.pipeline_model_parallel_size != 1:
        issues.append(ConfigIssue("verl.actor_rollout_ref.rollout.tensor_model_parallel_size",
                                  "the CPU rollout server runs one model copy per worker rank: set "
                                  "tensor/data/pipeline_model_parallel_size to 1"))
    if separate_async(cfg):
        issues += _separate_async_issues(cfg)
    return issues


def separate_async(cfg: Any) -> bool:
    """Whether the config runs verl's ``separate_async`` trainer (rlhooks's or verl's own)."""
    from omegaconf import OmegaConf

    mode = OmegaConf.select(cfg, "trainer.v1.trainer_mode", default="sync")
    return mode in ("separate_async", "rlhooks_separate_async")


def standalone_rollout_gpus(cfg: Any) -> int:
    """Logical GPUs of ``separate_async``'s standalone rollout pool (``rollout.nnodes * n_gpus_per_node``)."""
    rollout = cfg.actor_rollout_ref.rollout
    return int(rollout.nnodes or 0) * int(rollout.n_gpus_per_node or 0) if separate_async(cfg) else 0


def _separate_async_issues(cfg: Any) -> list:
    """What verl's separate_async asserts (inside a Ray actor) and what the host CPU adds, as ConfigIssues."""
    from omegaconf import OmegaConf

    from rlhooks.core.errors import ConfigIssue
    from rlhooks.engines.verl.cpu import checkpoint_engine

    rollout, issues = cfg.actor_rollout_ref.rollout, []
    if not (int(rollout.nnodes or 0) > 0 and int(rollout.n_gpus_per_node or 0) > 0):
        issues.append(ConfigIssue("verl.actor_rollout_ref.rollout.nnodes", "separate_async generates on a standalone "
                                  "rollout pool of its own: set actor_rollout_ref.rollout.nnodes=1 and "
                                  "n_gpus_per_node=1 (one CPU rollout server; logical GPUs on the CPU learner)"))
    engine = rollout.checkpoint_engine
    if engine.backend != checkpoint_engine.BACKEND or engine.get("custom_backend_module") != checkpoint_engine.__name__:
        issues.append(ConfigIssue("verl.actor_rollout_ref.rollout.checkpoint_engine", f"is backend={engine.backend!r}: "
                                  "separate_async moves weights to the standalone rollout through a checkpoint engine "
                                  "other than 'naive', and verl's need GPUs; set checkpoint_engine.backend="
                                  f"{checkpoint_engine.BACKEND} and checkpoint_engine.custom_backend_module="
                                  f"{checkpoint_engine.__name__} (gloo on the host CPU)"))
    sync_step = OmegaConf.select(cfg, "trainer.v1.separate_async.parameter_sync_step", default=1)
    if sync_step != 1 or isinstance(sync_step, bool):  # as written: 0 is not 1
        # DetachActorWorker keeps pi_old with fsdp2_sharded_save_to_cpu, whose .cpu() of a CPU tensor is the
        # tensor itself: the optimizer would update the saved copy in place and pi_old would be the new policy
        issues.append(ConfigIssue("verl.trainer.v1.separate_async.parameter_sync_step", f"is {sync_step!r}: on the CPU "
                                  "learner it must be 1 (verl keeps the old policy's weights with .cpu(), which does "
                                  "not copy a tensor already on the CPU); set it to 1 and "
                                  "actor_rollout_ref.actor.ppo_mini_batch_size=data.train_batch_size"))
    return issues


def ray_init_kwargs(cfg: Any) -> dict[str, Any]:
    """What ``run_ppo`` passes to ``ray.init`` for this config (verl's runtime env, the config's
    ``ray_kwargs.ray_init``), with the CPU learner's runtime env and, for a Ray started here, logical
    resources and no web dashboard where the config does not set them. Tests that start Ray once for several
    runs use it too."""
    from omegaconf import OmegaConf
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    ray_init = OmegaConf.to_container(cfg.ray_kwargs.get("ray_init", {}), resolve=True) or {}
    runtime_env = OmegaConf.to_container(OmegaConf.merge(get_ppo_ray_runtime_env(cfg),
                                                         ray_init.get("runtime_env") or {}), resolve=True)
    env_vars = runtime_env.setdefault("env_vars", {})
    env_vars["TRANSFER_QUEUE_ENABLE"] = "1"  # run_ppo sets it where config.transfer_queue.enable (V1 sets that)
    modules = [m for m in str(env_vars.get("VERL_USE_EXTERNAL_MODULES", "")).split(",") if m]
    env_vars["VERL_USE_EXTERNAL_MODULES"] = ",".join([*modules, RAY_PROCESS_MODULE] if RAY_PROCESS_MODULE not in modules
                                                     else modules)
    env_vars.setdefault("VERL_PLATFORM", "cpu")
    ray_init["runtime_env"] = runtime_env
    if ray_init.get("address") or os.environ.get("RAY_ADDRESS"):
        # joining a running Ray: its nodes declare their resources (`ray start --num-gpus=1`), and Ray
        # refuses num_cpus/num_gpus from a process that connects to a cluster
        return ray_init
    # TransferQueue cuts its 8 threads to the physical cores with a warning on every put and get (~800 log records a
    # step on 2 cores, through Ray's log monitor); the count it would use, set, keeps it quiet. Not on a joined
    # cluster (its nodes' cores are not this machine's), nor over a value this process's environment has
    if "TQ_NUM_THREADS" not in os.environ:
        env_vars.setdefault("TQ_NUM_THREADS", str(transfer_queue_threads()))
    if ray_init.get("num_gpus") is None:  # the trainer's pool, and separate_async's standalone rollout pool
        ray_init["num_gpus"] = int(cfg.trainer.n_gpus_per_node) * int(cfg.trainer.nnodes) + standalone_rollout_gpus(cfg)
    if ray_init.get("num_cpus") is None:
        ray_init["num_cpus"] = RAY_LOGICAL_CPUS
    # Ray's web dashboard: a dozen processes polling all run long (~10-17 CPU-s of a short run on 2 cores);
    # `+ray_kwargs.ray_init.include_dashboard=true` (a key verl's config lacks: the "+") brings it back
    ray_init.setdefault("include_dashboard", False)
    return ray_init


def configure(cfg: Any) -> None:
    """The config ``run_ppo`` gets: ``ray_kwargs.ray_init`` completed (``ray_init_kwargs``)."""
    from omegaconf import OmegaConf, open_dict

    check_v1_config(cfg)
    with open_dict(cfg):
        cfg.ray_kwargs.ray_init = OmegaConf.create(ray_init_kwargs(cfg))


def run(cfg: Any, task_runner_class: Any = None) -> None:
    """verl's ``run_ppo`` (Ray started here unless it runs already) with ``task_runner_class``, verl's
    ``TaskRunnerV1`` by default."""
    from verl.trainer.main_ppo import TaskRunnerV1, run_ppo

    platform.install()
    configure(cfg)
    run_ppo(cfg, task_runner_class=task_runner_class or TaskRunnerV1)
