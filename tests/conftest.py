"""Test-wide set-up: structlog writes readable lines to stderr, as the CLI configures it."""

import pytest
import structlog

from rlhooks.logging import configure_logging

configure_logging()
#: the configuration every test starts from
BASELINE_LOGGING = structlog.get_config()


@pytest.fixture(autouse=True)
def _restore_structlog_config():
    """Tests (and session fixtures) that run a CLI in-process (``rlhooks simulate`` quiets info logs)
    must not change what later tests' ``structlog.testing.capture_logs`` sees."""
    structlog.configure(**BASELINE_LOGGING)
    yield
    structlog.configure(**BASELINE_LOGGING)
