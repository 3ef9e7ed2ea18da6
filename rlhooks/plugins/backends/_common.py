"""Pieces shared by the built-in backends: dispatch options, value cleaning, text truncation."""

from __future__ import annotations

import math
from collections.abc import Mapping
from numbers import Number
from typing import Any

import attrs
import numpy as np

from rlhooks.core.dispatch import DEFAULT_FLUSH_TIMEOUT_S, DEFAULT_MAX_WAIT_S, DEFAULT_PUT_TIMEOUT_S, DEFAULT_QUEUE_SIZE


def positive(_inst: Any, attr: attrs.Attribute, value: Any) -> None:
    if value is not None and value <= 0:
        raise ValueError(f"must be > 0, got {value!r}")


def non_negative(_inst: Any, attr: attrs.Attribute, value: Any) -> None:
    if value is not None and value < 0:
        raise ValueError(f"must be >= 0, got {value!r}")


@attrs.frozen(kw_only=True)
class DispatchOptions:
    """Options every built-in backend has: its queue (see rlhooks/core/dispatch.py)."""

    #: calls the backend may have queued before the training thread waits for it
    queue_size: int = attrs.field(default=DEFAULT_QUEUE_SIZE, validator=positive)
    #: at on_run_end, how long to wait for the queue to drain before declaring the backend hung
    flush_timeout_s: float = attrs.field(default=DEFAULT_FLUSH_TIMEOUT_S, validator=positive)
    #: how long the training thread waits on a full queue before declaring the backend hung
    put_timeout_s: float = attrs.field(default=DEFAULT_PUT_TIMEOUT_S, validator=positive)
    #: total seconds per run the training thread may wait for this backend; past it, its calls are dropped
    max_wait_s: float = attrs.field(default=DEFAULT_MAX_WAIT_S, validator=positive)


def to_number(value: Any) -> float | int | None:
    """A metric value as a Python number, or None when it is not a number."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, (np.number, np.bool_)):
        return value.item()
    if isinstance(value, Number) and not isinstance(value, complex):
        return float(value)
    return None


def plain(value: Any) -> Any:
    """A table cell as str/int/float/bool/None (numpy scalars unwrapped, other objects as str)."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def json_safe(value: Any) -> Any:
    """A nested value with NaN/inf floats as None (JSON has no NaN) and numpy unwrapped."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, np.ndarray):
        return json_safe(value.tolist())
    if isinstance(value, np.generic):
        return json_safe(value.item())
    return str(value)


def truncate(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters with a note of how much was cut (0 = no limit)."""
    if limit <= 0 or len(text) <= limit:
        return text
    return f"{text[:limit]}… [+{len(text) - limit} chars]"


def columns_of(rows: list[Mapping[str, Any]]) -> list[str]:
    """Union of the rows' keys, in first-seen order."""
    seen: dict[str, None] = {}
    for row in rows:
        for k in row:
            seen.setdefault(k, None)
    return list(seen)
