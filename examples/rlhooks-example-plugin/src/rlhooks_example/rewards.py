"""LengthPenalty: a reward function that prefers responses up to ``max_chars`` long."""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np

from rlhooks import RewardFunction


def _positive(_inst: Any, attr: attrs.Attribute, value: int) -> None:
    if value <= 0:
        raise ValueError(f"must be > 0, got {value!r}")


class LengthPenalty(RewardFunction):
    """1.0 up to ``max_chars`` characters, then falling linearly to 0.0 at ``2 * max_chars``."""

    name = "length_penalty"

    @attrs.frozen(kw_only=True)
    class Options:
        #: responses up to this many characters score 1.0
        max_chars: int = attrs.field(default=2000, validator=_positive)

    def __call__(self, response: str, target: str, **info: Any) -> float:
        over = max(len(response) - self.options.max_chars, 0)
        return float(max(0.0, 1.0 - over / self.options.max_chars))

    def score_batch(self, responses: np.ndarray, targets: np.ndarray) -> np.ndarray:
        # lengths once per batch, then one vectorized expression
        lengths = np.fromiter(map(len, responses), dtype=np.float64, count=len(responses))
        m = float(self.options.max_chars)
        return np.clip(1.0 - np.maximum(lengths - m, 0.0) / m, 0.0, 1.0)
