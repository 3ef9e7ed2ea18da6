"""rlhooks on verl's V1 trainer (``trainer.use_v1=true``, verl's default; verl/trainer/ppo/v1/).

Through verl's own extension points, no copy of V1's ``fit()``/``step()``:

* :mod:`.trainer`: ``RLHooksPPOTrainerSync``, verl's ``PPOTrainerSync`` registered with
  ``register_trainer("rlhooks_sync")`` (``trainer.v1.trainer_mode``): the rlhooks sampler on verl's
  dataloader, ``on_batch_sampled`` (and prompt filters) for the prompts fed to the agent loop,
  ``on_step_end`` with verl's metrics merged before verl logs, ``rlhooks.pt`` with V1's checkpoints;
* :mod:`.replay_buffer`: ``RLHooksReplayBuffer``, verl's ``ReplayBuffer`` as a custom sampler
  (``trainer.v1.sampler.custom_sampler``): each scored group read from TransferQueue as an rlhooks
  ``Batch``, ``on_rewards_computed``, the rlhooks filters deciding which groups verl evicts and refills;
* :mod:`.runner`: verl's ``TaskRunnerV1``, importing the two so verl finds them in its process.

This module itself imports nothing from verl: ``rlhooks train`` reads the names below before Ray starts.
"""

from __future__ import annotations

from typing import Any

#: the trainer mode rlhooks registers (verl's sync trainer with the rlhooks hooks)
TRAINER_MODE = "rlhooks_sync"
#: verl's trainer mode it extends
BASE_TRAINER_MODE = "sync"
#: trainer.v1.sampler.custom_sampler.{path,name} of the rlhooks replay buffer
REPLAY_BUFFER_PATH = "pkg://rlhooks.engines.verl.v1.replay_buffer"
REPLAY_BUFFER_NAME = "RLHooksReplayBuffer"
#: verl's asynchronous trainer modes rlhooks extends -> the rlhooks trainer mode (v1/async_trainers.py)
ASYNC_TRAINER_MODES = {"colocate_async": "rlhooks_colocate_async", "separate_async": "rlhooks_separate_async"}
#: trainer.v1.sampler.custom_sampler.{path,name} of the rlhooks replay buffer in an asynchronous mode
ASYNC_REPLAY_BUFFER_PATH = "pkg://rlhooks.engines.verl.v1.async_trainers"
ASYNC_REPLAY_BUFFER_NAME = "RLHooksReplayBufferAsync"

#: the rlhooks reward adapter, as reward.custom_reward_function.path names it
ADAPTER_MODULE = "rlhooks.engines.verl.reward_function"
#: ... and as a config may still name it: its path before issue 39 moved it (deprecated)
ADAPTER_MODULES = (ADAPTER_MODULE, "rlhooks.plugins.rewards.verl_adapter")


def check_v1_settings(config: Any) -> None:
    """verl V1 settings that would not mean on the rlhooks path what they mean in verl: refused here (before
    Ray starts) with the key named, or carried over where verl reads them by the mode's name.

    * a colocated reward model (``reward.reward_model.enable=true``, ``enable_resource_pool=false``) scores only
      after the replay buffer has sampled; the rlhooks buffer reads every group's scores as it finishes
      (on_rewards_computed, the filters), so verl's own guard (``_resolve_filter_groups_metric``, which verl
      runs only for its built-in buffer) is applied to every rlhooks run;
    * ``trainer.v1.<mode>.parameter_sync_step``: verl's rollout skip reads it under the *registered* mode's
      name (``trainer.v1.rlhooks_separate_async``), the trainer under verl's; the value is mirrored there.
    """
    from omegaconf import OmegaConf, open_dict

    from rlhooks.core.errors import ConfigError, ConfigIssue

    issues = []
    model = OmegaConf.select(config, "reward.reward_model", default=None) or {}
    if model.get("enable", False) and not model.get("enable_resource_pool", False):
        issues.append(ConfigIssue(
            "reward.reward_model.enable_resource_pool",
            "is false with reward.reward_model.enable=true (a reward model colocated with the trainer): verl scores "
            "it only after the replay buffer samples, but on the rlhooks path the replay buffer reads each group's "
            "scores as it finishes (on_rewards_computed, the rlhooks filters). Set "
            "reward.reward_model.enable_resource_pool=true (the reward model on its own pool, scoring while "
            "generating, as verl requires for filtering), or score with rule-based reward functions",
        ))
    mode = OmegaConf.select(config, "trainer.v1.trainer_mode", default=None)
    base = {TRAINER_MODE: BASE_TRAINER_MODE, **{v: k for k, v in ASYNC_TRAINER_MODES.items()}}.get(mode)
    if base is not None:
        verls = OmegaConf.select(config, f"trainer.v1.{base}.parameter_sync_step", default=None)
        ours = OmegaConf.select(config, f"trainer.v1.{mode}.parameter_sync_step", default=None)
        if ours is not None and verls is not None and ours != verls:
            issues.append(ConfigIssue(
                f"trainer.v1.{mode}.parameter_sync_step",
                f"is {ours!r} but verl's trainer.v1.{base}.parameter_sync_step is {verls!r}: the trainer reads the "
                f"latter; remove trainer.v1.{mode} (rlhooks mirrors verl's value there for verl's rollout skip)",
            ))
        elif verls is not None and ours is None:
            with open_dict(config):
                OmegaConf.update(config, f"trainer.v1.{mode}.parameter_sync_step", verls, force_add=True)
    if issues:
        raise ConfigError(issues, "verl config")


def adapter_functions(config: Any) -> tuple[str, ...]:
    """The reward functions verl's reward loop runs through the rlhooks adapter (none when
    ``reward.custom_reward_function`` is another function)."""
    from omegaconf import OmegaConf

    custom = OmegaConf.select(config, "reward.custom_reward_function", default=None) or {}
    path = str(custom.get("path") or "")
    dotted = path.removesuffix(".py").replace("/", ".")
    if not any(dotted.endswith(module) for module in ADAPTER_MODULES):
        return ()
    from rlhooks.engines.verl.reward_function import function_names

    kwargs = custom.get("reward_kwargs") or {}
    functions = kwargs.get("functions") if hasattr(kwargs, "get") else None
    if functions is not None and not isinstance(functions, str):
        functions = list(functions)
    return function_names(functions)
