"""Test-wide set-up: structlog writes readable lines to stderr, as the CLI configures it."""

import pytest
import structlog

from rlhooks.logging import configure_logging

configure_logging()


@pytest.fixture(autouse=True)
def _restore_logging_config():
    """A test that runs a command in-process (``rlhooks simulate`` quiets plugin logs) must not change
    what later tests' log captures see."""
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)
