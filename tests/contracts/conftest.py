"""Contract tests of the built-in plugins: shared set-up.

The catalog module next to this file is importable from the test modules whatever pytest's
import mode is.
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(autouse=True)
def _offline_services(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Backends that talk to services run offline, writing under the test's temp dir."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb"))
    monkeypatch.setenv("WANDB_CONSOLE", "off")
