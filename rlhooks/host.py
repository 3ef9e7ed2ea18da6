"""rlhooks' host API: what builds and drives a run (engines, the CLI, tests of whole runs).

Plugins do not need this module; they import from ``rlhooks``. An engine loads a config,
builds a ``RunManager`` (components registered on one pluggy PluginManager, with their error
policy), gives ``StepDriver.collect`` a ``Rollout`` over its own batch objects each step and
calls ``StepDriver.finish_step`` after its update. An engine whose own loop generates and keeps groups
(verl's V1 replay buffer) hands each scored batch to ``StepDriver.scored``, the one entry that runs the
learning state, ``on_rewards_computed`` and the filters in order (``collect`` calls it too)::

    from rlhooks.host import RunManager, StepDriver, load_config
"""

from __future__ import annotations

from rlhooks.core.components import instantiate, is_reward_function, options_class
from rlhooks.core.config import ComponentConfig, Config, RunOptions, load_config
from rlhooks.core.config.schema import DEFAULT_REWARD_TIMEOUT_S
from rlhooks.core.driver import GroupAccumulator, Rollout, StepDriver
from rlhooks.core.hookspecs import hookspec
from rlhooks.core.manager import RunManager
from rlhooks.core.registry import Registry
from rlhooks.core.rewards import RewardTimeout, call_bounded, timeout_message
from rlhooks.core.run import RunContext

__all__ = [
    "Config", "ComponentConfig", "RunOptions", "load_config", "RunManager", "StepDriver", "Rollout",
    "GroupAccumulator", "Registry", "RunContext", "hookspec", "instantiate", "is_reward_function",
    "options_class", "DEFAULT_REWARD_TIMEOUT_S", "RewardTimeout", "call_bounded", "timeout_message",
]
