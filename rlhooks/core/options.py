"""Helpers for a component's ``Options`` (an ``@attrs.frozen(kw_only=True)`` class).

Validators (``attrs.field(validator=positive)``): their ``ValueError`` message becomes
``<key path> (<plugin>): <message>`` in a config error. ``build_options`` structures a mapping
into an Options class exactly as a config does (unknown keys, wrong types and failed validators
reported together, as a ``ConfigError``). ``DispatchOptions`` are the queue options a backend may
add to its own Options (the dispatcher reads ``queue_size``, ``flush_timeout_s``, ``put_timeout_s``, ``max_wait_s``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs

from rlhooks.core.config import structure_options
from rlhooks.core.dispatch import DEFAULT_FLUSH_TIMEOUT_S, DEFAULT_MAX_WAIT_S, DEFAULT_PUT_TIMEOUT_S, DEFAULT_QUEUE_SIZE
from rlhooks.core.errors import ConfigError


def positive(_inst: Any, attr: attrs.Attribute, value: Any) -> None:
    """``value > 0`` (None allowed, for optional fields)."""
    if value is not None and value <= 0:
        raise ValueError(f"must be > 0, got {value!r}")


def non_negative(_inst: Any, attr: attrs.Attribute, value: Any) -> None:
    """``value >= 0`` (None allowed, for optional fields)."""
    if value is not None and value < 0:
        raise ValueError(f"must be >= 0, got {value!r}")


def finite(_inst: Any, attr: attrs.Attribute, value: Any) -> None:
    """A finite number (not NaN or ±inf); None allowed, for optional fields."""
    if value is not None and not math.isfinite(value):
        raise ValueError(f"must be a finite number, got {value!r}")


def unit_interval(_inst: Any, attr: attrs.Attribute, value: Any) -> None:
    """``0 <= value <= 1`` (None allowed, for optional fields)."""
    if value is not None and not 0 <= value <= 1:
        raise ValueError(f"must be between 0 and 1, got {value!r}")


def build_options(options_cls: type, data: Mapping[str, Any] | None, *, path: str = "", plugin: str | None = None) -> Any:
    """``options_cls`` built from a mapping as a config would; a ``ConfigError`` lists every problem."""
    built, issues = structure_options(options_cls, {} if data is None else data, path, plugin)
    if issues:
        raise ConfigError(issues)
    return built


#: a larger queue is an unbounded one in practice: a slow backend would hold the run's calls in memory
MAX_QUEUE_SIZE = 1_000_000


def _queue_size(_inst: Any, attr: attrs.Attribute, value: Any) -> None:
    positive(_inst, attr, value)
    if value > MAX_QUEUE_SIZE:
        raise ValueError(f"must be at most {MAX_QUEUE_SIZE:,}, got {value!r}")


@attrs.frozen(kw_only=True)
class DispatchOptions:
    """Queue options of a backend (see rlhooks/core/dispatch.py); the built-in backends have them."""

    #: calls the backend may have queued before the training thread waits for it
    queue_size: int = attrs.field(default=DEFAULT_QUEUE_SIZE, validator=_queue_size)
    #: at on_run_end, how long to wait for the queue to drain before declaring the backend hung
    flush_timeout_s: float = attrs.field(default=DEFAULT_FLUSH_TIMEOUT_S, validator=positive)
    #: how long the training thread waits on a full queue before declaring the backend hung
    put_timeout_s: float = attrs.field(default=DEFAULT_PUT_TIMEOUT_S, validator=positive)
    #: total seconds per run the training thread may wait for this backend; past it, its calls are dropped
    max_wait_s: float = attrs.field(default=DEFAULT_MAX_WAIT_S, validator=positive)
