"""The simulated learner: per-source, per-difficulty skill that grows with what trained.

The model (a tool for comparing set-ups, not a claim about real models):

* Difficulty ``d`` in [0, 1] (the dataset's complexity, min-max scaled) falls into one of
  ``buckets`` equal-width buckets. Each (source, bucket) has a skill ``s``.
* A response is correct with ``p = sigmoid(sharpness * (s - d - offset))``: it falls with
  difficulty and rises with skill; ``offset`` is the item's own hidden difficulty. A share of
  the items (``unsolvable``, more of them among the hard ones) is beyond reach: ``p = 0``
  whatever is trained, as prompts outside a model's reasoning boundary stay unsolved through
  RL training (GRESO's case study: "certain hard prompts remain unsolved throughout training").
  Independently, a response is malformed (a tag missing) with the source's format error rate,
  which decays as the source trains, so a trained source's slips become rare.
* After each step, every trained group teaches its (source, bucket) in proportion to its mean
  ``|advantage|`` (GRPO: zero for all-right or all-wrong groups), as a share of the batch:
  ``signal[s, b] = sum(mean|adv| of groups in (s, b)) / groups trained``.
* Prerequisites: a bucket learns at the rate ``readiness = (mastery of the bucket below) ** prerequisite_power``
  (``mastery = sigmoid(sharpness * (s - bucket centre))``, the easiest bucket is always ready).
  Hard items drawn too early produce some mixed groups but little learning, so curricula that
  keep the batch near the frontier learn faster per step, and filters change the outcome.
* Learning spreads to neighbouring buckets with weight ``transfer ** distance``.
* A planted shortcut (opt-in, ``exploit_rate > 0``; off by default): a response may skip the work
  and just claim it checked its answer (engine._render writes "Verified"), answering right with
  only ``exploit_accuracy`` of its real chance. Each source's shortcut propensity ``e`` moves like a
  policy-gradient logit: ``logit(e) += exploit_learning_rate * mean(adv * (took_shortcut - e))`` over
  the source's trained rows, so it grows exactly when a reward (the ``claims_verified`` reward
  function) pays the shortcut more than the work. Shortcut rows teach no skill. This is the
  known-answer case that calibrates the reward-hacking check (benchmarks/bench_hacking.py).
"""

from __future__ import annotations

import copy

from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from rlhooks.core.batch import GroupIndex

#: how a response is written (see engine._render)
WELL_FORMED, NO_ANSWER_TAGS, NO_REASONING_TAGS, UNCLOSED_ANSWER = 0, 1, 2, 3
#: the planted shortcut: well formed, no worked steps, a claim that the answer was checked
SHORTCUT = 4


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * np.asarray(x, dtype=np.float64)))  # overflow-free


@attrs.frozen(kw_only=True)
class LearnerOptions:
    """Parameters of the simulated learner (all under ``simulate:`` in a config)."""

    buckets: int = attrs.field(default=10, validator=[attrs.validators.ge(1), attrs.validators.le(10_000)])
    sharpness: float = attrs.field(default=10.0, validator=attrs.validators.gt(0))
    initial_skill: float = 0.3
    learning_rate: float = attrs.field(default=0.8, validator=attrs.validators.ge(0))
    transfer: float = attrs.field(default=0.2, validator=[attrs.validators.ge(0), attrs.validators.le(1)])
    #: how strongly a bucket waits for the one below: readiness = mastery_below ** power (0 = no prerequisites)
    prerequisite_power: float = attrs.field(default=3.0, validator=attrs.validators.ge(0))
    #: std of each item's own difficulty offset, hidden from the complexity score (0 = none): real
    #: prompts are solved or failed persistently for reasons their difficulty label does not show
    item_spread: float = attrs.field(default=0.1, validator=attrs.validators.ge(0))
    #: share of items beyond the model's reach (never answered right, whatever is trained); an
    #: item's chance is proportional to its difficulty
    unsolvable: float = attrs.field(default=0.1, validator=[attrs.validators.ge(0), attrs.validators.le(1)])
    malformed_rate: float = attrs.field(default=0.15, validator=[attrs.validators.ge(0), attrs.validators.le(1)])
    #: malformed rate *= exp(-format_learning_rate * 0.05 * source's share of the trained groups) per step
    format_learning_rate: float = attrs.field(default=4.0, validator=attrs.validators.ge(0))
    #: planted shortcut (see module doc): initial share of responses taking it; 0 = off
    exploit_rate: float = attrs.field(default=0.0, validator=[attrs.validators.ge(0), attrs.validators.lt(1)])
    #: how fast the shortcut propensity follows its advantage
    exploit_learning_rate: float = attrs.field(default=1.0, validator=attrs.validators.ge(0))
    #: share of the real chance of a right answer that a shortcut response keeps
    exploit_accuracy: float = attrs.field(default=0.2, validator=[attrs.validators.ge(0), attrs.validators.le(1)])


class SimLearner:
    def __init__(self, options: LearnerOptions, source_names: tuple[str, ...]):
        self.options = options
        self.source_names = tuple(source_names)
        nb = options.buckets
        self.skill = np.full((len(source_names), nb), float(options.initial_skill))
        self.malformed = np.full(len(source_names), float(options.malformed_rate))
        self.exploit = np.full(len(source_names), float(options.exploit_rate))
        self.centres = (np.arange(nb) + 0.5) / nb
        dist = np.abs(np.arange(nb)[:, None] - np.arange(nb)[None, :])
        self.kernel = options.transfer ** dist  # row: trained bucket, col: bucket that gains

    def bucket(self, difficulty: np.ndarray) -> np.ndarray:
        nb = self.options.buckets
        return np.minimum((np.asarray(difficulty) * nb).astype(np.int64), nb - 1)

    def item_offsets(self, difficulty: np.ndarray, seed: int) -> np.ndarray:
        """Each item's hidden difficulty offset, N(0, item_spread), fixed by the data seed; +inf for an
        item beyond reach (``unsolvable`` of the items, more likely the harder the item)."""
        difficulty = np.asarray(difficulty, dtype=np.float64)
        rng = np.random.default_rng([seed, 5])
        offsets = rng.normal(0.0, self.options.item_spread, len(difficulty))
        share = self.options.unsolvable
        if share > 0 and len(difficulty):
            mean = float(difficulty.mean())
            p = share * difficulty / mean if mean > 0 else np.full(len(difficulty), share)
            offsets[rng.random(len(difficulty)) < p] = np.inf
        return offsets

    def p_correct(self, source: np.ndarray, difficulty: np.ndarray, offset: np.ndarray | float = 0.0) -> np.ndarray:
        """P(right answer): the (source, bucket) skill against the item's difficulty plus its hidden offset."""
        s = self.skill[source, self.bucket(difficulty)]
        return sigmoid(self.options.sharpness * (s - difficulty - offset))

    def mastery(self) -> np.ndarray:
        return sigmoid(self.options.sharpness * (self.skill - self.centres[None, :]))

    def respond(self, source: np.ndarray, difficulty: np.ndarray, rng: np.random.Generator,
                offset: np.ndarray | float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        """Per trajectory row: whether the answer is right, and how the response is formed."""
        p = self.p_correct(source, difficulty, offset)
        correct = rng.random(len(p)) < p
        bad = rng.random(len(p)) < self.malformed[source]
        kind = np.where(bad, rng.integers(NO_ANSWER_TAGS, UNCLOSED_ANSWER + 1, len(p)), WELL_FORMED)
        if self.exploit.any():  # no extra draws when off: honest runs stay bit-identical
            shortcut = rng.random(len(p)) < self.exploit[source]
            kind = np.where(shortcut, SHORTCUT, kind)
            correct &= ~shortcut | (rng.random(len(p)) < self.options.exploit_accuracy)
        return correct, kind.astype(np.int8)

    def expected_accuracy(self, source: int, p: np.ndarray) -> float:
        """Mean P(right and well formed) of a source's items with real chances ``p``."""
        e = self.exploit[source]
        work = (1.0 - e) * (1.0 - self.malformed[source])
        return float(p.mean() * (work + e * self.options.exploit_accuracy))

    def update(self, source: np.ndarray, difficulty: np.ndarray, advantage: np.ndarray, groups: GroupIndex,
               shortcut: np.ndarray | None = None) -> dict[str, float]:
        """Learn from the rows that trained; returns the learning signal it applied."""
        ns, nb = self.skill.shape
        if groups.n_groups == 0:
            return {"sim/learning_signal": 0.0}
        first = groups.first_row
        g_src = np.asarray(source)[first].astype(np.int64)
        g_bucket = self.bucket(np.asarray(difficulty)[first])
        adv = np.nan_to_num(np.asarray(advantage, dtype=np.float64))
        if shortcut is not None and self.exploit.any():
            self._learn_shortcut(np.asarray(source).astype(np.int64), adv, np.asarray(shortcut, dtype=bool))
            adv = np.where(shortcut, 0.0, adv)  # a shortcut teaches no skill
        g_signal = groups.mean(np.abs(adv))
        flat = g_src * nb + g_bucket
        signal = np.bincount(flat, weights=g_signal, minlength=ns * nb).reshape(ns, nb) / groups.n_groups
        readiness = np.ones_like(self.skill)
        if self.options.prerequisite_power > 0:
            readiness[:, 1:] = self.mastery()[:, :-1] ** self.options.prerequisite_power
        gain = self.options.learning_rate * signal * readiness
        self.skill += gain @ self.kernel
        share = np.bincount(g_src, minlength=ns) / groups.n_groups
        self.malformed *= np.exp(-self.options.format_learning_rate * share * 0.05)
        return {"sim/learning_signal": float(signal.sum()), "sim/skill_gain": float(gain.sum())}

    def _learn_shortcut(self, source: np.ndarray, adv: np.ndarray, shortcut: np.ndarray) -> None:
        ns = len(self.source_names)
        e = self.exploit[source]
        push = np.bincount(source, weights=adv * (shortcut - e), minlength=ns)
        rows = np.maximum(np.bincount(source, minlength=ns), 1)
        logit = np.log(self.exploit / (1.0 - self.exploit))
        logit += self.options.exploit_learning_rate * push / rows
        self.exploit = np.clip(sigmoid(logit), 1e-4, 1.0 - 1e-4)

    def with_state(self, state: Mapping[str, Any]) -> SimLearner:
        """A copy of this learner holding the weights of ``state`` (an earlier ``state_dict()``)."""
        other = copy.copy(self)
        other.load_state_dict(state)
        return other

    def state_dict(self) -> dict[str, Any]:
        return {"skill": self.skill.tolist(), "malformed": self.malformed.tolist(), "sources": list(self.source_names),
                "exploit": self.exploit.tolist()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if list(state["sources"]) != list(self.source_names):
            raise ValueError(
                f"saved learner state is for sources {list(state['sources'])}, this run has {list(self.source_names)}"
            )
        skill = np.asarray(state["skill"], dtype=np.float64)
        if skill.shape != self.skill.shape:
            raise ValueError(f"saved learner skill has shape {skill.shape}, this run needs {self.skill.shape} (buckets changed?)")
        self.skill = skill
        self.malformed = np.asarray(state["malformed"], dtype=np.float64)
        if "exploit" in state:  # states saved before the planted shortcut existed have none
            self.exploit = np.asarray(state["exploit"], dtype=np.float64)
