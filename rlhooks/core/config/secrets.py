"""Secret redaction: option values under secret-looking keys never reach a printed or saved config."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_SECRET_NAME = re.compile(r"key|token|secret|password|passwd", re.IGNORECASE)
#: option names that look secret but select things (e.g. top_bottom_k's sort key)
_NOT_SECRET = {"key", "keys", "sort_key", "metric_key"}
REDACTED = "***"


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(name)) and name.lower() not in _NOT_SECRET


def redact_secrets(value: Any) -> Any:
    """Copy of a nested structure with string values under secret-looking keys replaced."""
    if isinstance(value, Mapping):
        return {
            k: (REDACTED if isinstance(k, str) and is_secret_name(k) and isinstance(v, str) and v
                else redact_secrets(v))
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [redact_secrets(v) for v in value]
    return value
