"""rlhooks: a plugin framework for RL post-training of language models on verl.

This module is the plugin author's API, and the only rlhooks module a plugin needs::

    from rlhooks import hookimpl, Batch, REWARD, DATA_SOURCE, FilterDecision, positive

Hosts and engines (the code that builds and drives a run) use ``rlhooks.host``. Importing
``rlhooks`` is light: it imports neither torch nor any backend library (``Sampler``, a torch
``Sampler`` subclass, is resolved on first access).
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from rlhooks.core.batch import (
    ADVANTAGE,
    COMPLEXITY,
    DATA_SOURCE,
    FINAL_REWARD,
    INDEX,
    POLICY_LAG,
    POLICY_VERSION,
    PROMPT,
    PROMPT_LENGTH,
    RESPONSE,
    RESPONSE_LENGTH,
    REWARD,
    REWARD_FN_PREFIX,
    SAMPLE_ID,
    TARGET,
    TRAINED_VERSION,
    UID,
    Batch,
    BatchError,
    GroupIndex,
    RowLazy,
    factorize,
    factorize_runs,
    run_starts,
)
from rlhooks.core.components import FilterDecision, NoOptions, RewardFunction
from rlhooks.core.data import DataError, DatasetColumns
from rlhooks.core.errors import (
    BrokenPluginError,
    ConfigError,
    ConfigIssue,
    DuplicateComponentError,
    GenerationLimitError,
    PluginError,
    RegistryError,
    RLHooksError,
    UnknownComponentError,
)
from rlhooks.core.hookspecs import hookimpl
from rlhooks.core.learning import COLUMN_PREFIX as LEARNING_COLUMN_PREFIX
from rlhooks.core.learning import UNSEEN_LEARNABILITY, LearningState, keyed_uniforms
from rlhooks.core.metrics import source_key, split_source_key
from rlhooks.core.options import DispatchOptions, build_options, finite, non_negative, positive, unit_interval
from rlhooks.core.records import METRICS_FILE, encode_record, nonfinite_name, read_records
from rlhooks.core.run import RunContext
from rlhooks.core.rundir import claim_output
from rlhooks.core.rundir import open_output, write_atomic

if TYPE_CHECKING:
    from rlhooks.core.sampler import Sampler

__version__ = "0.1.0"

__all__ = [
    # hooks
    "hookimpl",
    # the batch, its standard column names and group helpers
    "Batch", "BatchError", "GroupIndex", "RowLazy", "factorize", "factorize_runs", "run_starts",
    "UID", "INDEX", "DATA_SOURCE", "COMPLEXITY", "REWARD", "FINAL_REWARD", "ADVANTAGE", "PROMPT",
    "RESPONSE", "TARGET", "PROMPT_LENGTH", "RESPONSE_LENGTH", "REWARD_FN_PREFIX", "SAMPLE_ID", "POLICY_VERSION",
    "TRAINED_VERSION", "POLICY_LAG",
    # per-source metric keys (source/<name>/<metric>; names may contain '/')
    "source_key", "split_source_key",
    # component bases and what hooks receive
    "Sampler", "FilterDecision", "RewardFunction", "NoOptions", "DatasetColumns", "RunContext",
    # the run's prompt-level learning state (RunContext.learning; learning/* columns of prompt batches)
    "LearningState", "LEARNING_COLUMN_PREFIX", "UNSEEN_LEARNABILITY", "keyed_uniforms",
    # Options helpers and validators
    "build_options", "positive", "non_negative", "finite", "unit_interval", "DispatchOptions",
    # the JSONL record format (metrics.jsonl), for backends and readers
    "METRICS_FILE", "encode_record", "nonfinite_name", "read_records",
    # files a plugin writes at run end (temp file + rename: never a truncated file)
    "write_atomic",
    # a file or directory a plugin creates in the run directory: claimed first, so a rerun may replace it
    "claim_output", "open_output",
    # errors
    "RLHooksError", "ConfigError", "ConfigIssue", "DataError", "PluginError", "RegistryError",
    "UnknownComponentError", "DuplicateComponentError", "BrokenPluginError", "GenerationLimitError",
    "__version__",
]

#: host names that ``rlhooks`` exported before 0.2; they now live in ``rlhooks.host``
_MOVED_TO_HOST = frozenset({
    "Config", "ComponentConfig", "RunOptions", "load_config", "GroupAccumulator", "Rollout", "StepDriver",
    "RunManager", "Registry", "hookspec",
})


def __getattr__(name: str) -> Any:
    if name == "Sampler":  # the one base class that needs torch: imported on first use
        from rlhooks.core.sampler import Sampler

        return Sampler
    if name in _MOVED_TO_HOST:
        warnings.warn(
            f"rlhooks.{name} moved to rlhooks.host (rlhooks exports only the plugin API); "
            f"use 'from rlhooks.host import {name}'",
            DeprecationWarning,
            stacklevel=2,
        )
        import rlhooks.host

        return getattr(rlhooks.host, name)
    raise AttributeError(f"module 'rlhooks' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
