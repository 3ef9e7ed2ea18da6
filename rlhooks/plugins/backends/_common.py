"""Pieces shared by the built-in backends: dispatch options, value cleaning, text truncation."""

from __future__ import annotations

import math
from collections.abc import Mapping
from numbers import Number
from typing import Any

import numpy as np

# re-exported for the built-in backends (the validators and DispatchOptions are public API now)
from rlhooks import DispatchOptions, non_negative, positive  # noqa: F401


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
