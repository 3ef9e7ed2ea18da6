"""Contract tests of the built-in plugins: shared set-up (the catalog and readers are imported
relatively: tests/ is a package)."""

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _offline_services(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Backends that talk to services run offline, writing under the test's temp dir."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb"))
    monkeypatch.setenv("WANDB_CONSOLE", "off")
