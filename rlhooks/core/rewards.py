"""RewardPipeline: the weighted combination of the reward functions named in ``rewards:``.

Engines call ``score(responses, targets)`` and get the total reward per row plus each
function's component (logged as ``reward_fn/<name>`` columns). A function that raises on one
sample is isolated: that sample's component is the entry's ``error_score`` (default 0.0) and
the failure is counted in ``errors[name]`` (reported as ``rewards/errors/<name>``). A NaN or
infinite score is the same kind of failure (it would turn the advantages of its whole group into
NaN): the row scores ``error_score``, counts in ``errors[name]`` and also in ``nonfinite[name]``
(``rewards/nonfinite_scores/<name>``), and is warned about once per function. A
``score_batch`` that returns the wrong shape, or raises while every row scores fine alone, is
a bug in the function: it is warned about once and the rows are scored one by one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import attrs
import numpy as np
import structlog

from rlhooks.core.components import make_reward_function, options_class
from rlhooks.core.errors import RLHooksError

log = structlog.get_logger("rlhooks.rewards")

#: per-function count of NaN/inf scores (they are also in rewards/errors/<name>)
NONFINITE_PREFIX = "rewards/nonfinite_scores/"


@attrs.define
class RewardEntry:
    name: str
    fn: Any  # callable(response, target, **info) -> float, maybe with score_batch()
    weight: float = 1.0
    error_score: float = 0.0


@attrs.frozen
class RewardResult:
    total: np.ndarray  # weighted sum per row
    components: dict[str, np.ndarray]  # unweighted score per function
    errors: dict[str, int]  # rows where a function raised or scored NaN/inf (scored error_score)
    nonfinite: dict[str, int] = attrs.field(factory=dict)  # of those, rows scored NaN/inf

    def metrics(self) -> dict[str, float]:
        out = {f"rewards/errors/{k}": float(v) for k, v in self.errors.items()}
        out.update({f"{NONFINITE_PREFIX}{k}": float(v) for k, v in self.nonfinite.items()})
        return out


class RewardPipeline:
    def __init__(self, entries: Sequence[RewardEntry] = ()):
        self.entries = list(entries)
        self._reported: set[str] = set()

    @classmethod
    def from_components(cls, comps: Iterable[Any]) -> RewardPipeline:
        """From ComponentConfigs of reward functions (classes are instantiated with options)."""
        entries = []
        for c in comps:
            try:
                fn = make_reward_function(c.obj, c.options)
            except Exception as exc:
                args = "options" if options_class(c.obj) else ""
                raise RLHooksError(f"reward function {c.name!r} at {c.path}: {c.obj.__qualname__}({args}) raised "
                                   f"{type(exc).__name__}: {exc}; a reward class must build from its Options alone "
                                   f"(or from no arguments)") from exc
            entries.append(RewardEntry(c.name, fn, c.weight, c.error_score))
        return cls(entries)

    @property
    def names(self) -> list[str]:
        return [e.name for e in self.entries]

    def __bool__(self) -> bool:
        return bool(self.entries)

    def score(self, responses: Sequence[str], targets: Sequence[str]) -> RewardResult:
        n = len(responses)
        total = np.zeros(n, dtype=np.float64)
        components: dict[str, np.ndarray] = {}
        errors: dict[str, int] = {}
        nonfinite: dict[str, int] = {}
        for e in self.entries:
            values, failed = self._score_one(e, responses, targets)
            finite = np.isfinite(values)
            bad = len(values) - int(np.count_nonzero(finite))
            if bad:
                values = np.where(finite, values, e.error_score)  # a new array: score_batch's own is not touched
                nonfinite[e.name] = bad
                self._report(f"{e.name}.nonfinite", f"reward function {e.name!r} returned NaN or inf for {bad} of "
                             f"{len(values)} rows; such rows score error_score={e.error_score} and are counted in "
                             f"rewards/errors/{e.name} and {NONFINITE_PREFIX}{e.name}", e.name)
            components[e.name] = values
            if failed or bad:
                errors[e.name] = failed + bad
            total += e.weight * values
        return RewardResult(total, components, errors, nonfinite)

    def _score_one(self, e: RewardEntry, responses: Sequence[str], targets: Sequence[str]) -> tuple[np.ndarray, int]:
        batch_fn = getattr(e.fn, "score_batch", None)
        if batch_fn is not None:
            try:
                values = np.asarray(batch_fn(np.asarray(responses, dtype=object), np.asarray(targets, dtype=object)), float)
                if values.shape == (len(responses),):
                    return values, 0
                # a wrong-length result would broadcast into the total: score row by row instead
                problem = f"returned shape {values.shape} for {len(responses)} rows"
            except Exception as exc:  # noqa: BLE001 - fall back to per-row isolation below
                problem = f"raised {type(exc).__name__}: {exc}"
        else:
            problem = None
        out = np.empty(len(responses), dtype=np.float64)
        failed = 0
        for i, (r, t) in enumerate(zip(responses, targets)):
            try:
                out[i] = float(e.fn(r, t))
            except Exception as exc:  # noqa: BLE001 - one bad sample must not stop the batch
                out[i] = e.error_score
                failed += 1
                if e.name not in self._reported:
                    self._reported.add(e.name)
                    log.warning(
                        f"reward function {e.name!r} raised; such samples score error_score={e.error_score}",
                        plugin=e.name, error=f"{type(exc).__name__}: {exc}",
                    )
        if problem is not None and (failed == 0 or problem.startswith("returned")):
            # score_batch itself is broken (a row raising is expected to fail it): say so once
            self._report(f"{e.name}.score_batch", f"reward function {e.name!r}: score_batch() {problem}; "
                         f"rows were scored one by one instead (slower)", e.name)
        return out, failed

    def _report(self, key: str, message: str, plugin: str) -> None:
        if key not in self._reported:
            self._reported.add(key)
            log.warning(message, plugin=plugin)
