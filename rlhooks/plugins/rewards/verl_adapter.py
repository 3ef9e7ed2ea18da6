"""Deprecated: moved to ``rlhooks.engines.verl.reward_function`` (issue 39). A verl config that names this module
(``pkg://rlhooks.plugins.rewards.verl_adapter`` or this file's path) still gets the same ``compute_score``."""

import sys
import warnings

import rlhooks.engines.verl.reward_function as _moved
from rlhooks.engines.verl.reward_function import *  # noqa: F403 - verl loads a file path with getattr on this module

warnings.warn("rlhooks.plugins.rewards.verl_adapter moved to rlhooks.engines.verl.reward_function; name "
              "pkg://rlhooks.engines.verl.reward_function in reward.custom_reward_function.path (the old path "
              "will be removed)", DeprecationWarning, stacklevel=2)
if __name__ == "rlhooks.plugins.rewards.verl_adapter":  # imported by name: the moved module itself
    sys.modules[__name__] = _moved
