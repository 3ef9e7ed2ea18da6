"""The reward functions and reward observers pass the contract-test kit."""

from __future__ import annotations

import pytest

from rlhooks.plugins.rewards import functions as F
from rlhooks.plugins.rewards.monitor import RewardMonitor
from rlhooks.plugins.rewards.source_metrics import SourceMetrics
from rlhooks.testing import ComponentContract, RewardFunctionContract


@pytest.fixture(params=sorted(F.BUILTIN_FUNCTIONS))
def builtin_name(request):
    return request.param


class TestBuiltinRewardFunctions(RewardFunctionContract):
    plugin_class = F.format_exact  # plain functions: no hooks
    @pytest.fixture
    def component(self, builtin_name):
        return F.BUILTIN_FUNCTIONS[builtin_name]

    @pytest.fixture
    def entry_point_name(self, builtin_name):
        return builtin_name

    @pytest.fixture
    def reward_cases(self):
        return [
            ("<reasoning>r</reasoning><answer>42</answer>", "42"),
            ("<reasoning>r</reasoning><answer>40</answer>", "42"),
            ("42", "42"),
            ("", ""),
        ]


class TestSourceMetricsContract(ComponentContract):
    kind = "reward"
    plugin_class = SourceMetrics

    @pytest.fixture
    def entry_point_name(self):
        return "source_metrics"


class TestRewardMonitorContract(ComponentContract):
    kind = "reward"
    plugin_class = RewardMonitor

    @pytest.fixture
    def component_options(self):
        return {
            "log_distributions": True,
            "alerts": [
                {"metric": "signal_to_noise", "condition": "less", "threshold": 100.0},
                {"metric": "rewards/mean", "max_slope": -1.0, "window": 2, "level": "info"},
            ],
        }

    @pytest.fixture
    def entry_point_name(self):
        return "reward_monitor"
