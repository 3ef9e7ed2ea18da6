"""Metric-name helpers shared by every reader of per-source metrics.

Per-source keys are ``source/<name>/<metric>``. ``<name>`` is a ``data_source`` value and may
contain anything, slashes included (verl's own datasets are ``openai/gsm8k``,
``lighteval/MATH``, ...); ``<metric>`` never contains ``/``. So a key splits at its *last* slash.
"""

from __future__ import annotations

SOURCE_PREFIX = "source/"
#: ``per_source[source][VALIDATION_SCORE]`` in ``on_validation_end``: a source's headline held-out score
VALIDATION_SCORE = "score"


def source_key(source: str, metric: str) -> str:
    """``source/<source>/<metric>``; ``metric`` must not contain '/'."""
    if "/" in metric:
        raise ValueError(f"a per-source metric name cannot contain '/': {metric!r}")
    return f"{SOURCE_PREFIX}{source}/{metric}"


def split_source_key(key: str) -> tuple[str, str] | None:
    """``(source, metric)`` of a ``source/<source>/<metric>`` key, or None for any other key.

    >>> split_source_key("source/openai/gsm8k/count")
    ('openai/gsm8k', 'count')
    """
    if not key.startswith(SOURCE_PREFIX):
        return None
    parts = key[len(SOURCE_PREFIX):].rsplit("/", 1)
    if len(parts) != 2 or not parts[0] or not parts[1]:
        return None
    return parts[0], parts[1]
