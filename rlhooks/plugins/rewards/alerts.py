"""Deprecated: moved to ``rlhooks.monitoring.alerts`` (issue 39). This module is that one."""

import sys
import warnings

from rlhooks.monitoring import alerts as _moved

warnings.warn("rlhooks.plugins.rewards.alerts moved to rlhooks.monitoring.alerts; import it from there "
              "(the old path will be removed)", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
