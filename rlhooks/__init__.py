"""rlhooks: a plugin framework for RL post-training of language models on verl.

Plugins import what they need from here only::

    from rlhooks import hookimpl, Batch
"""

from rlhooks.core.batch import Batch, GroupIndex, RowLazy
from rlhooks.core.components import FilterDecision, NoOptions, RewardFunction, Sampler
from rlhooks.core.config import Config, ComponentConfig, RunOptions, load_config
from rlhooks.core.data import DatasetColumns
from rlhooks.core.driver import GroupAccumulator, Rollout, StepDriver
from rlhooks.core.errors import (
    BrokenPluginError,
    ConfigError,
    DuplicateComponentError,
    GenerationLimitError,
    PluginError,
    RegistryError,
    RLHooksError,
    UnknownComponentError,
)
from rlhooks.core.hookspecs import hookimpl, hookspec
from rlhooks.core.learning import LearningState
from rlhooks.core.manager import RunManager
from rlhooks.core.registry import Registry
from rlhooks.core.run import RunContext

__version__ = "0.1.0"

__all__ = [
    "Batch", "GroupIndex", "RowLazy", "FilterDecision", "NoOptions", "RewardFunction", "Sampler",
    "Config", "ComponentConfig", "RunOptions", "load_config", "DatasetColumns",
    "GroupAccumulator", "Rollout", "StepDriver", "RunManager", "Registry", "RunContext", "LearningState",
    "hookimpl", "hookspec", "RLHooksError", "ConfigError", "RegistryError", "UnknownComponentError",
    "DuplicateComponentError", "BrokenPluginError", "PluginError", "GenerationLimitError",
    "__version__",
]
