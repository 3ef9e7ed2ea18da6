from __future__ import annotations

from pathlib import Path

import pytest
from monitoring_helpers import simulate


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory) -> Path:
    return simulate(tmp_path_factory.mktemp("demo"), steps=16)
