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

#: the rlhooks reward adapter, as reward.custom_reward_function.path may name it
ADAPTER_MODULE = "rlhooks.plugins.rewards.verl_adapter"


def adapter_functions(config: Any) -> tuple[str, ...]:
    """The reward functions verl's reward loop runs through the rlhooks adapter (none when
    ``reward.custom_reward_function`` is another function)."""
    from omegaconf import OmegaConf

    custom = OmegaConf.select(config, "reward.custom_reward_function", default=None) or {}
    path = str(custom.get("path") or "")
    if not (path.endswith("rewards/verl_adapter.py") or path.replace("/", ".").endswith(ADAPTER_MODULE)):
        return ()
    from rlhooks.plugins.rewards.verl_adapter import _names

    kwargs = custom.get("reward_kwargs") or {}
    functions = kwargs.get("functions") if hasattr(kwargs, "get") else None
    if functions is not None and not isinstance(functions, str):
        functions = list(functions)
    return _names(functions)
