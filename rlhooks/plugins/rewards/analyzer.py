"""Deprecated: moved to ``rlhooks.monitoring.analyzer`` (issue 39). This module is that one."""

import sys
import warnings

from rlhooks.monitoring import analyzer as _moved

warnings.warn("rlhooks.plugins.rewards.analyzer moved to rlhooks.monitoring.analyzer; import it from there "
              "(the old path will be removed)", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
