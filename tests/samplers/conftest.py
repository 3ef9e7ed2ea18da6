"""Fixtures for sampler tests (helpers live in sampler_helpers.py)."""

from __future__ import annotations

import pytest
from .sampler_helpers import two_sources

from rlhooks import DatasetColumns


@pytest.fixture
def data() -> DatasetColumns:
    return two_sources()
