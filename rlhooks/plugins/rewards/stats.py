"""Deprecated: moved to ``rlhooks.monitoring.stats`` (issue 39). This module is that one."""

import sys
import warnings

from rlhooks.monitoring import stats as _moved

warnings.warn("rlhooks.plugins.rewards.stats moved to rlhooks.monitoring.stats; import it from there "
              "(the old path will be removed)", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
