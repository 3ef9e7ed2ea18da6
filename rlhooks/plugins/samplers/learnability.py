"""Samplers driven by learnability: prompt/source weights from p(1-p), and DUMP's UCB over |advantage|.

Both are MultiSourceSamplers (same batch composition, without-replacement pools, counter-based
randomness and exact resume); they replace how the per-source weights, and for the prompt-level
learnability sampler which rows of a source, are chosen.

``learnability`` (LearnabilitySampler)
    Learnability of a prompt is ``p(1-p)`` with ``p`` its pass-rate EMA from the run's prompt-level
    learning state (``RunContext.learning``, core/learning.py); a prompt never sampled counts 0.25
    (the maximum: nothing is known yet). ``level: prompt`` keeps the sources' configured weights
    and, within a source, accepts a candidate drawn from the source's pool with probability
    ``floor + (1 - floor) * learnability / 0.25``. Candidates are taken from the pool in chunks of
    twice what is still needed (plus 8); the rejected ones, and accepted ones past the batch's need,
    are used up for this pass and come back in the next one (a pass is a without-replacement sweep
    of the source, as in the multi-source sampler), so a pass favours learnable rows without ever
    dropping a row for good.
    ``level: source`` draws rows uniformly and weights sources by ``floor + mean learnability``
    of their rows, clamped to ``max_source_ratio``.

``dump_ucb`` (UCBSampler), after DUMP (arXiv 2504.09710)
    Per source, the mean ``|advantage|`` of its latest ``window`` trajectories (GRPO advantages
    computed from the rewards of each generation batch, before filtering) plus the UCB bonus
    ``c * sqrt(2 ln N / n_source)`` (N = trajectories seen over all sources); weights =
    softmax(UCB / temperature), clamped to ``max_source_ratio``. Sources not seen yet come first.
    Defaults are the paper's: window 300, temperature 0.1, c = 1.

Without a shared learning state (e.g. a sampler used outside a run), the learnability sampler
keeps its own from ``on_rewards_computed`` and saves it in its state_dict.

Stale evidence (asynchronous training): ``learnability`` reads the learning state's pass rates, in
which a group ``policy_lag`` updates old counts ``learning_lag_discount ** lag`` times a fresh one
(core/learning.py). ``dump_ucb``'s window takes groups as they arrive, whatever their lag.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

import attrs
import numpy as np

from rlhooks import (
    ADVANTAGE,
    DATA_SOURCE,
    REWARD,
    UNSEEN_LEARNABILITY,
    Batch,
    LearningState,
    factorize,
    hookimpl,
    keyed_uniforms,
)
from rlhooks.plugins.samplers._draw import clamp_ratio, stratum_id
from rlhooks.plugins.samplers.multi_source import (
    MultiSourceOptions,
    MultiSourceSampler,
    _positive_int,
    _ratio,
)

_ACCEPT_SALT = 0xACCE
#: candidate chunks tried per source and batch before filling with rejected candidates
MAX_ATTEMPTS = 16


def _floor(_inst: Any, attr: attrs.Attribute, value: float) -> None:
    if not 0 < value <= 1:
        raise ValueError(f"must be in (0, 1], got {value!r}")


def _positive_finite(_inst: Any, attr: attrs.Attribute, value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"must be a finite number > 0, got {value!r}")


def _non_negative_finite(_inst: Any, attr: attrs.Attribute, value: float) -> None:
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"must be a finite number >= 0, got {value!r}")


@attrs.frozen(kw_only=True)
class LearnabilityOptions(MultiSourceOptions):
    #: prompt: accept rows within a source by learnability; source: weight sources by mean learnability
    level: Literal["prompt", "source"] = "prompt"
    #: smallest acceptance probability (prompt) / weight added to each source (source)
    floor: float = attrs.field(default=0.1, validator=_floor)
    #: source level: feedback batches between weight updates
    update_frequency: int = attrs.field(default=1, validator=_positive_int)


@attrs.frozen(kw_only=True)
class UCBOptions(MultiSourceOptions):
    #: trajectories per source in the sliding window of |advantage|
    window: int = attrs.field(default=300, validator=_positive_int)
    #: weight of the exploration bonus sqrt(2 ln N / n)
    c: float = attrs.field(default=1.0, validator=_non_negative_finite)
    #: softmax temperature over the UCB scores
    temperature: float = attrs.field(default=0.1, validator=_positive_finite)
    #: largest allowed max(weight) / min(weight) (DUMP itself has no bound)
    max_source_ratio: float = attrs.field(default=20.0, validator=_ratio)
    update_frequency: int = attrs.field(default=1, validator=_positive_int)


class LearnabilitySampler(MultiSourceSampler):
    """Prefer prompts (or sources) the policy solves sometimes: learnability p(1-p)."""

    Options: ClassVar[type] = LearnabilityOptions

    def _init_extra(self) -> None:
        self._shared: LearningState | None = None
        self._own: LearningState | None = None

    @property
    def learning(self) -> LearningState:
        """The run's learning state, or the sampler's own when it runs outside a run."""
        if self._shared is not None:
            return self._shared
        if self._own is None:
            self._own = LearningState(len(self.data), source_codes=self.data.source_codes, source_names=self.data.source_names)
        return self._own

    @hookimpl
    def on_run_start(self, run: Any) -> None:
        shared = getattr(run, "learning", None)
        if shared is not None and len(shared) == len(self.data):
            self._shared = shared

    @hookimpl
    def on_rewards_computed(self, step: int, batch: Batch) -> dict[str, float]:
        if self._shared is None and len(batch):
            self.learning.update(batch, step)  # the run's driver updates the shared one
        return super().on_rewards_computed(step, batch)

    def _source_learnability(self) -> np.ndarray:
        codes = [self.data.source_names.index(s) for s in self.sources]
        return self.learning.source_mean_learnability()[codes]

    def _after_feedback(self, step: int, means: np.ndarray, counts: np.ndarray) -> None:
        o = self.options
        if o.level == "source" and self._feedback % o.update_frequency == 0:
            w = (o.floor + self._source_learnability()) * self.base_weights
            self._weights = clamp_ratio(w / w.sum(), o.max_source_ratio)

    def _draw_source(self, i: int, count: int) -> np.ndarray:
        if self.options.level != "prompt" or count <= 0:
            return super()._draw_source(i, count)
        floor = self.options.floor
        name = f"source:{self.sources[i]}"
        got: list[np.ndarray] = []
        rejected: list[np.ndarray] = []
        need = count
        for attempt in range(MAX_ATTEMPTS):
            cand = self._pools.draw(name, self._rows[i], need * 2 + 8)
            u = keyed_uniforms((self.seed, _ACCEPT_SALT, stratum_id(name), self._batch_no, attempt), cand)
            accept = u < floor + (1 - floor) * self.learning.learnability(cand) / UNSEEN_LEARNABILITY
            ok = cand[accept]
            got.append(ok[:need])  # accepted ones past the need return with the next pass, like the rejected
            rejected.append(cand[~accept])
            need -= len(got[-1])
            if need <= 0:
                break
        if need > 0:  # nearly everything is solved or hopeless: fill with rejected candidates
            pool = np.concatenate(rejected)
            got.append(pool[:need])
        return np.concatenate(got).astype(np.int64)

    def _extra_metrics(self) -> dict[str, float]:
        out = {}
        if len(self.learning.source_seen):
            for s, v in zip(self.sources, self._source_learnability()):
                out[f"sampler/learnability/{s}"] = float(v)
        return out

    def _extra_state(self) -> dict[str, Any]:
        return {"own_learning": self._own.state_dict() if self._own is not None and self._shared is None else None}

    def _load_extra(self, state: Mapping[str, Any]) -> None:
        own = state.get("own_learning")
        if own is not None:
            self._own = None
            self.learning.load_state_dict(own)


class UCBSampler(MultiSourceSampler):
    """DUMP: sources weighted by softmax(UCB of mean |advantage| / temperature)."""

    Options: ClassVar[type] = UCBOptions

    def _init_extra(self) -> None:
        n = len(self.sources)
        self._window = np.zeros((n, self.options.window))
        self._filled = np.zeros(n, np.int64)  # values in the window (<= window)
        self._head = np.zeros(n, np.int64)  # next write position in the ring
        self._seen = np.zeros(n, np.int64)  # trajectories seen in total

    @hookimpl
    def on_rewards_computed(self, step: int, batch: Batch) -> dict[str, float]:
        if len(batch):
            self._observe(batch)
        return super().on_rewards_computed(step, batch)

    def _observe(self, batch: Batch) -> None:
        if ADVANTAGE in batch:
            adv = np.abs(np.asarray(batch[ADVANTAGE], dtype=np.float64))
        else:
            adv = np.abs(grpo_advantage(np.asarray(batch[REWARD], dtype=np.float64), batch))
        names, codes = factorize(np.asarray(batch[DATA_SOURCE]))
        lut = np.array([self._name_to_active.get(str(nm), -1) for nm in names.tolist()], dtype=np.int64)
        src = lut[codes]
        ok = (src >= 0) & np.isfinite(adv)
        w = self.options.window
        for s in np.unique(src[ok]).tolist():  # a few sources, not rows
            vals = adv[ok & (src == s)][-w:]
            pos = (self._head[s] + np.arange(len(vals))) % w
            self._window[s, pos] = vals
            self._head[s] = (self._head[s] + len(vals)) % w
            self._filled[s] = min(w, self._filled[s] + len(vals))
            self._seen[s] += int(np.count_nonzero(ok & (src == s)))

    def ucb(self) -> np.ndarray:
        """UCB score per source; +inf for sources not seen yet."""
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = self._window.sum(1) / self._filled
            total = max(int(self._seen.sum()), 1)
            bonus = self.options.c * np.sqrt(2 * math.log(total) / self._seen)
        return np.where(self._seen > 0, mean + bonus, np.inf)

    def _after_feedback(self, step: int, means: np.ndarray, counts: np.ndarray) -> None:
        o = self.options
        if self._feedback % o.update_frequency:
            return
        score = self.ucb()
        unseen = ~np.isfinite(score)
        if unseen.all():
            return
        if unseen.any():  # explore unseen sources first: they get the best score plus a margin
            score = np.where(unseen, score[~unseen].max() + o.temperature * 3, score)
        z = (score - score.max()) / o.temperature
        w = np.exp(z) * self.base_weights
        self._weights = clamp_ratio(w / w.sum(), o.max_source_ratio)

    def _extra_metrics(self) -> dict[str, float]:
        out = {}
        score = self.ucb()
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = self._window.sum(1) / self._filled
        for s, u, m in zip(self.sources, score, mean):
            if np.isfinite(u):
                out[f"sampler/ucb/{s}"] = float(u)
                out[f"sampler/mean_abs_advantage/{s}"] = float(m)
        return out

    def _extra_state(self) -> dict[str, Any]:
        return {
            "window": self._window.tolist(), "filled": self._filled.tolist(),
            "head": self._head.tolist(), "seen": self._seen.tolist(),
        }

    def _load_extra(self, state: Mapping[str, Any]) -> None:
        window = np.asarray(state["window"], dtype=np.float64)
        if window.shape != self._window.shape:
            raise ValueError(f"saved UCB window has shape {window.shape}, this sampler needs {self._window.shape}")
        self._window = window
        self._filled = np.asarray(state["filled"], dtype=np.int64)
        self._head = np.asarray(state["head"], dtype=np.int64)
        self._seen = np.asarray(state["seen"], dtype=np.int64)


def grpo_advantage(reward: np.ndarray, batch: Batch) -> np.ndarray:
    """(reward - group mean) / (unbiased group std + 1e-6); 0 for single-response groups (verl's GRPO)."""
    g = batch.groups
    r = np.where(np.isfinite(reward), reward, np.nan)
    mean = g.mean(r)
    sizes = g.sizes.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        std = g.std(r) * np.sqrt(sizes / np.maximum(sizes - 1, 1))
        adv = (r - mean[g.codes]) / (std[g.codes] + 1e-6)
    adv[(g.sizes == 1)[g.codes]] = 0.0
    return adv
