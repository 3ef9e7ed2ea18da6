"""rlhooks contract-test kit: reusable pytest contracts for plugins, and seeded input factories.

Subclass a contract in a ``Test*`` class and provide a fixture with your plugin::

    import pytest
    from rlhooks.testing import BackendContract, ReadBack

    class TestCsvBackend(BackendContract):
        @pytest.fixture
        def component(self):
            return CsvBackend

        def read_back(self, plugin, run_dir):
            return ReadBack(metrics=...)

The kit is a pytest plugin (the ``rlhooks`` pytest11 entry point): contract modules get
pytest's assertion rewriting, ``xfail_checks`` declared on a contract subclass become strict
xfail markers, and the ``rlhooks_run_factory`` fixture builds RunContexts over temp dirs.
"""

import pytest

# Before the contract modules are imported, so their plain asserts report values.
pytest.register_assert_rewrite(
    "rlhooks.testing.checks", "rlhooks.testing.contracts", "rlhooks.testing.components"
)

from rlhooks.testing.checks import PluginHarness  # noqa: E402
from rlhooks.testing.components import (  # noqa: E402
    COMPONENT_CONTRACTS,
    BackendContract,
    ComponentContract,
    FilterContract,
    PromptFilterContract,
    ReadBack,
    RewardFunctionContract,
    SamplerContract,
    default_filter_cases,
)
from rlhooks.testing.contracts import (  # noqa: E402
    HOOK_CONTRACTS,
    HookPluginContract,
    LogHistogramContract,
    LogMetricsContract,
    LogTableContract,
    OnBatchSampledContract,
    OnLoadCheckpointContract,
    OnRewardsComputedContract,
    OnRunEndContract,
    OnRunStartContract,
    OnSaveCheckpointContract,
    OnStepEndContract,
    OnValidationEndContract,
    capabilities,
    hook_checked_by,
    implemented_hooks,
    requires,
)
from rlhooks.testing.factories import (  # noqa: E402
    ODD_STRINGS,
    RecordingRun,
    batch_differences,
    make_config,
    make_dataset,
    make_prompt_batch,
    make_run_context,
    make_step_metrics,
    make_table_rows,
    make_trajectory_batch,
    make_validation_results,
)

__all__ = [
    "HookPluginContract", "OnRunStartContract", "OnBatchSampledContract", "OnRewardsComputedContract",
    "OnStepEndContract", "LogMetricsContract", "LogTableContract", "LogHistogramContract", "OnRunEndContract",
    "OnValidationEndContract", "OnSaveCheckpointContract", "OnLoadCheckpointContract", "make_validation_results",
    "ComponentContract", "SamplerContract", "FilterContract", "RewardFunctionContract", "BackendContract",
    "ReadBack", "PromptFilterContract", "HOOK_CONTRACTS", "COMPONENT_CONTRACTS", "PluginHarness", "RecordingRun",
    "make_dataset", "make_prompt_batch", "make_trajectory_batch", "make_step_metrics", "make_table_rows",
    "make_run_context", "make_config", "batch_differences", "ODD_STRINGS", "hook_checked_by", "implemented_hooks",
    "capabilities", "requires",
    "default_filter_cases",
]
