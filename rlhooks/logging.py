"""structlog set-up: readable console lines by default, JSON lines with ``json=True``."""

from __future__ import annotations

import logging
import sys

import structlog


class _StderrLogger:
    """Prints to whatever sys.stderr is at call time (pytest capture and redirection friendly)."""

    def msg(self, message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    log = debug = info = warn = warning = error = critical = exception = fatal = failure = err = msg


def _stderr_factory(*_args: object) -> _StderrLogger:
    return _StderrLogger()


def configure_logging(json: bool = False, verbose: bool = False) -> None:
    level = logging.DEBUG if verbose else logging.INFO
    processors: list = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="%Y-%m-%d %H:%M:%S" if not json else "iso"),
    ]
    if json:
        processors += [structlog.processors.format_exc_info, structlog.processors.JSONRenderer()]
    else:
        processors += [structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=_stderr_factory,
        cache_logger_on_first_use=False,
    )
