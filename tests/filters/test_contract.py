"""The dapo filter passes the contract-test kit (rlhooks.testing.FilterContract)."""

from __future__ import annotations

import pytest

from rlhooks.plugins.filters.dapo import DapoGroupFilter
from rlhooks.testing import FilterContract


class TestDapoContract(FilterContract):
    plugin_class = DapoGroupFilter

    @pytest.fixture
    def entry_point_name(self):
        return "dapo"


class TestDapoBandPassContract(FilterContract):
    plugin_class = DapoGroupFilter

    @pytest.fixture
    def component_options(self):
        return {"metric": "seq_reward", "min_mean": 0.2, "max_mean": 1.5}

    @pytest.fixture
    def entry_point_name(self):
        return "filter_groups"
