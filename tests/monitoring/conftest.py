from __future__ import annotations

from pathlib import Path

import pytest
from .monitoring_helpers import demo_config_with, simulate

DEMO_STEPS = 10


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory) -> Path:
    """One simulated run shared by the monitoring tests: the demo config with the default alert set,
    an alert that fires (a short name) and one on a misspelt metric."""
    tmp = tmp_path_factory.mktemp("demo")
    cfg = demo_config_with(tmp, monitor={"default_alerts": True, "alerts": [
        {"metric": "kept_ratio", "condition": "less", "threshold": 0.9, "level": "warning",
         "message": "DAPO keeps under 90% of the groups"},
        {"metric": "kl_divergense", "condition": "greater", "threshold": 1.0}]})
    return simulate(tmp / "out", str(cfg), steps=DEMO_STEPS)
