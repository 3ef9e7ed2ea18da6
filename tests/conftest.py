"""Test-wide set-up: structlog writes readable lines to stderr, as the CLI configures it."""

from rlhooks.logging import configure_logging

configure_logging()
