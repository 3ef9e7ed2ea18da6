"""``rlhooks train`` on CPU, on the trainer verl's config selects (``trainer.use_v1``, verl's default true).

V1 (``cpu.ray_learner``): verl's own ``run_ppo`` with ``TaskRunnerV1`` on a local Ray. Another trainer
(``trainers.REMOVABLE``: the legacy one, ``trainer.use_v1=false``) runs its own CPU learner
(``run_cpu_learner``), in this process.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rlhooks.engines.verl.cpu import policy, tasks


def verl_overrides(policy_dir: str | Path, train_file: str | Path, val_file: str | Path | None = None, *,
                   micro_batch: int = 64) -> list[str]:
    """The verl settings the CPU learner needs (as Hydra overrides); the example config sets the
    same kinds of keys (its micro-batch sizes differ).
    ``micro_batch`` must divide every log-prob and update batch (verl asserts it): gen_batch_size * n."""
    return [
        f"data.train_files={train_file}", f"data.val_files={val_file or train_file}",
        "data.max_prompt_length=16", "data.max_response_length=24", "data.dataloader_num_workers=0",
        "data.filter_overlong_prompts=false",
        f"actor_rollout_ref.model.path={policy_dir}", "actor_rollout_ref.model.use_remove_padding=false",
        "actor_rollout_ref.actor.strategy=fsdp2", "actor_rollout_ref.ref.strategy=fsdp2",
        "actor_rollout_ref.actor.optim.lr=1e-4",  # 1e-3 undid the warm-start within 3 steps (accuracy 0.40 -> 0.22)
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro_batch}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={micro_batch}",
        f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={micro_batch}",
        "actor_rollout_ref.rollout.response_length=24", "actor_rollout_ref.rollout.temperature=1.0",
        "reward.custom_reward_function.path=pkg://rlhooks.engines.verl.reward_function",
        "reward.custom_reward_function.name=compute_score",
        "trainer.device=cpu", "trainer.n_gpus_per_node=1", "trainer.nnodes=1",
        # V1 (the legacy learner ignores these): the CPU rollout server, one model copy, and one process
        # each where verl defaults to 8 (agent-loop workers, reward workers, TransferQueue storage units)
        "actor_rollout_ref.rollout.name=cpu", "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.agent.num_workers=1", "reward.num_workers=1",
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
    ]


def separate_async_overrides(train_batch_size: int) -> list[str]:
    """What verl's ``separate_async`` needs on the CPU learner besides ``verl_overrides`` (checked by
    ``ray_learner.check_v1_config``): one standalone CPU rollout server on a logical GPU of its own, weights
    moved to it over gloo (``cpu.checkpoint_engine``), and one local update per weight sync
    (``parameter_sync_step=1``; see ray_learner's check for why). The trainer's pool keeps verl's default
    colocated (hybrid) replica, which verl puts to sleep at the first step and wakes for validation:
    verl 0.9.1's ``hybrid_engine=false`` path fails in ``_setup`` (async_trainers.check_hybrid_engine)."""
    from rlhooks.engines.verl.cpu import checkpoint_engine

    return [
        "trainer.v1.trainer_mode=rlhooks_separate_async",
        "actor_rollout_ref.rollout.nnodes=1", "actor_rollout_ref.rollout.n_gpus_per_node=1",
        f"actor_rollout_ref.rollout.checkpoint_engine.backend={checkpoint_engine.BACKEND}",
        f"actor_rollout_ref.rollout.checkpoint_engine.custom_backend_module={checkpoint_engine.__name__}",
        "trainer.v1.separate_async.parameter_sync_step=1",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={train_batch_size}",
    ]


def select_separate_async_settings(cfg: Any, chosen: Iterable[str]) -> dict[str, Any]:
    """``rlhooks train`` in ``separate_async`` on the CPU learner: the settings of :func:`separate_async_overrides`
    (all but the trainer mode) set here where the user chose none (``chosen``: the verl keys given on the
    command line or in the ``verl:`` section), said in one warning; a contrary value the user chose is kept,
    and ``ray_learner.check_v1_config`` refuses it naming the key. Returns what was set."""
    import structlog
    import yaml
    from omegaconf import OmegaConf

    chosen = set(chosen)
    set_here: dict[str, Any] = {}
    for override in separate_async_overrides(int(cfg.data.train_batch_size))[1:]:
        key, _, value = override.partition("=")
        if key not in chosen:
            OmegaConf.update(cfg, key, yaml.safe_load(value), force_add=True)
            set_here[key] = OmegaConf.select(cfg, key)
    if set_here:
        structlog.get_logger("rlhooks.verl").warning(
            "separate_async on the CPU learner: set " + " ".join(f"{k}={v}" for k, v in set_here.items())
            + " (one CPU rollout server of its own, weights over gloo, one update per weight sync; see "
            "docs/how-to/async.md, 'separate_async: trainer and rollout apart')")
    return set_here


def use_portable_attention(cfg: Any) -> None:
    """transformers' ``sdpa`` attention unless the config names one: verl's default, flash_attention_2,
    needs a GPU (and the Hydra key is absent from verl's config, so a YAML ``verl:`` section cannot add it)."""
    from omegaconf import open_dict

    with open_dict(cfg):
        cfg.actor_rollout_ref.model.override_config.setdefault("attn_implementation", "sdpa")


def local_file_issues(cfg: Any) -> list:
    """The CPU learner reads a local policy and local prompts (nothing is downloaded): what is missing or
    unreadable, as config issues saying how to make them, not a traceback from transformers or the dataset
    loader (``checks.start_issues``: the dry run and the real start both find them before Ray)."""
    from rlhooks.core.errors import ConfigIssue

    issues = []
    policy_dir = Path(str(cfg.actor_rollout_ref.model.path)).expanduser()
    if not (policy_dir / "config.json").is_file():
        issues.append(ConfigIssue("verl.actor_rollout_ref.model.path", f"no model at {policy_dir} (no config.json)"))
    for key in ("train_files", "val_files"):  # verl reads both before the first step
        files = cfg.data.get(key) or []
        for f in [files] if isinstance(files, str) else list(files):
            if not Path(str(f)).expanduser().is_file():
                issues.append(ConfigIssue(f"verl.data.{key}", f"no file {f}"))
    issues += policy.model_file_issues(cfg) + tasks.prompt_file_issues(cfg)  # unreadable or wrong layout
    if issues:
        hint = ("the CPU learner (trainer.device=cpu) trains a local policy: make the tiny one and its prompts "
                "with `python -m rlhooks.engines.verl.cpu prepare runs/tiny`, or point these keys at your own")
        issues.append(ConfigIssue("verl.trainer.device", hint))
    return issues


def check_local_files(cfg: Any) -> None:
    """:func:`local_file_issues` as one ConfigError."""
    from rlhooks.core.errors import ConfigError

    issues = local_file_issues(cfg)
    if issues:
        raise ConfigError(issues, "(the verl config)", kind="verl config")


def run(cfg: Any, task_runner_class: Any = None) -> None:
    """Train on the trainer the config selects: V1 through verl's ``run_ppo`` with ``task_runner_class``
    (verl's ``TaskRunnerV1`` by default), another trainer by its own CPU learner, in this process."""
    from rlhooks.engines.verl import trainers
    from rlhooks.engines.verl.config import trainer_in_use

    check_local_files(cfg)
    use_portable_attention(cfg)
    if trainer_in_use(cfg) == "v1":
        from rlhooks.engines.verl.cpu import ray_learner

        ray_learner.run(cfg, task_runner_class)
    else:
        trainers.removable(trainer_in_use(cfg)).run_cpu_learner(cfg)


def prepare(directory: str | Path) -> tuple[Path, Path]:
    """The warm-started policy (``<dir>/policy``) and the RL prompts (``<dir>/train.parquet``)."""
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise tasks.PrepareError(f"{directory} exists and is not a directory: prepare writes policy/ and "
                                 f"train.parquet into a directory. Give a directory, or a path that does not exist")
    policy.check_target(directory / "policy")  # both refusals before anything is written
    tasks.check_target(directory / "train.parquet")
    return policy.build_policy(directory / "policy"), tasks.write_dataset(directory / "train.parquet")
