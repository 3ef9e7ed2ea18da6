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

from typing import Any

from rlhooks.engines.verl.cpu import platform

RAY_PROCESS_MODULE = "rlhooks.engines.verl.cpu.ray_process"
#: environment of every Ray process of the CPU learner
RAY_PROCESS_ENV = {"VERL_USE_EXTERNAL_MODULES": RAY_PROCESS_MODULE, "VERL_PLATFORM": "cpu"}
#: logical CPUs Ray schedules on: verl's actors (task runner, TransferQueue, agent-loop, reward and
#: rollout processes) each ask for one; they share the machine's real cores
RAY_LOGICAL_CPUS = 16


def uses_v1(cfg: Any) -> bool:
    """verl's own switch: ``trainer.use_v1`` (verl's default: true)."""
    return bool(cfg.trainer.get("use_v1", True))


def check_v1_config(cfg: Any) -> None:
    """The keys V1 on the CPU needs, as a ConfigError naming each, not a failure inside a Ray actor."""
    from rlhooks.core.errors import ConfigError, ConfigIssue

    rollout = cfg.actor_rollout_ref.rollout
    issues = []
    if rollout.name != "cpu":
        issues.append(ConfigIssue("verl.actor_rollout_ref.rollout.name", f"is {rollout.name!r}: verl's V1 trainer on the "
                                  "CPU learner generates with the CPU rollout server; set it to 'cpu'"))
    if rollout.tensor_model_parallel_size * rollout.data_parallel_size * rollout.pipeline_model_parallel_size != 1:
        issues.append(ConfigIssue("verl.actor_rollout_ref.rollout.tensor_model_parallel_size",
                                  "the CPU rollout server runs one model copy per worker rank: set "
                                  "tensor/data/pipeline_model_parallel_size to 1"))
    if issues:
        raise ConfigError(issues, "(the verl config)", kind="verl config")


def ray_init_kwargs(cfg: Any) -> dict[str, Any]:
    """What ``run_ppo`` passes to ``ray.init`` for this config (verl's runtime env, the config's
    ``ray_kwargs.ray_init``), with the CPU learner's runtime env and logical resources added where the
    config does not set them. Tests that start Ray once for several runs use it too."""
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
    if ray_init.get("num_gpus") is None:
        ray_init["num_gpus"] = int(cfg.trainer.n_gpus_per_node) * int(cfg.trainer.nnodes)
    if ray_init.get("num_cpus") is None:
        ray_init["num_cpus"] = RAY_LOGICAL_CPUS
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
