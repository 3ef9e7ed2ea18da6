"""selective_rollout: GRESO-style pre-rollout filtering (arXiv 2506.02177), a prompt filter.

A prompt whose recent groups were all correct ("easy") or all wrong ("hard") tends to stay that
way, so generating for it again is mostly wasted. Before generation, a prompt whose latest
``z`` groups in a row had zero variance is skipped with probability

    skip = 1 - max(p ** z, min_keep)       (p = p_easy for an all-pass run, p_hard for all-fail)

so the first uninformative group halves its chance (p = 0.5), each further one halves it
again, and ``min_keep`` is the exploration floor: every prompt keeps a chance to be re-tried
as the policy changes. A prompt never sampled, or whose latest group had a spread, is kept.

Self-tuning (the paper's adaptive exploration probability): after each training step the
share of the step's generated groups that were all-pass (all-fail) is compared with its target
(``target_zero_variance`` split 1/3 easy, 2/3 hard: hard prompts are more likely to become
learnable as the policy improves); above target, ``p`` falls by ``adjust_step`` (skip more),
below it rises (skip less), within ``[min_p, max_p]``.

Defaults follow the paper's released scripts: p_easy = p_hard = 0.5, target 0.25, step 0.01,
p in [0.05, 0.95], keep floor 0.01. Deviations, on purpose:

* The record is the prompt-level learning state's zero-variance run (core/learning.py: all
  responses equal, pass = metric >= run.learning_pass_threshold), not a mean-reward threshold
  (the reference code treats mean >= 0.98 as easy and <= 0.11 as hard for its reward scale).
* The random draw is counter-based (a hash of seed, step, generation, draw and row index), so a
  decision is reproducible from the batch alone and resuming needs only ``p_easy``/``p_hard``.
* ``p`` is adjusted only after steps in which some drawn prompt had a zero-variance record
  (the reference starts adjusting after the first epoch, when records first exist).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from rlhooks import INDEX, LEARNING_COLUMN_PREFIX, Batch, BatchError, FilterDecision, hookimpl, keyed_uniforms

RUN_COLUMN = LEARNING_COLUMN_PREFIX + "zero_var_run"
STATE_VERSION = 1


def _probability(_inst: Any, attr: attrs.Attribute, value: float) -> None:
    if not 0 < value < 1:
        raise ValueError(f"must be in (0, 1), got {value!r}")


def _fraction(_inst: Any, attr: attrs.Attribute, value: float) -> None:
    if not 0 <= value <= 1:
        raise ValueError(f"must be in [0, 1], got {value!r}")


@attrs.frozen(kw_only=True)
class SelectiveRolloutOptions:
    #: initial keep base for prompts with an all-pass run (keep = p ** run)
    p_easy: float = attrs.field(default=0.5, validator=_probability)
    #: initial keep base for prompts with an all-fail run
    p_hard: float = attrs.field(default=0.5, validator=_probability)
    #: exploration floor: the smallest keep probability of any prompt
    min_keep: float = attrs.field(default=0.01, validator=_fraction)
    #: share of generated groups allowed to be zero-variance (1/3 of it all-pass, 2/3 all-fail)
    target_zero_variance: float = attrs.field(default=0.25, validator=_fraction)
    #: change of p per step toward the target (0 = fixed p)
    adjust_step: float = attrs.field(default=0.01, validator=_fraction)
    min_p: float = attrs.field(default=0.05, validator=_probability)
    max_p: float = attrs.field(default=0.95, validator=_probability)
    #: skip prompts with all-pass runs / with all-fail runs
    skip_easy: bool = True
    skip_hard: bool = True
    #: seed of the skip draws; null = the run's seed
    seed: int | None = None

    def __attrs_post_init__(self) -> None:
        if self.min_p > self.max_p:
            raise ValueError(f"min_p ({self.min_p}) must be <= max_p ({self.max_p})")


class SelectiveRollout:
    """Skip prompts with runs of zero-variance groups before generation (GRESO)."""

    Options = SelectiveRolloutOptions

    def __init__(self, options: SelectiveRolloutOptions | None = None) -> None:
        self.options = options if options is not None else SelectiveRolloutOptions()
        o = self.options
        self.p_easy = float(np.clip(o.p_easy, o.min_p, o.max_p))
        self.p_hard = float(np.clip(o.p_hard, o.min_p, o.max_p))
        self.seed = 0 if o.seed is None else int(o.seed)
        self._reset_counts()

    def _reset_counts(self) -> None:
        self._groups = 0
        self._all_pass = 0
        self._all_fail = 0
        self._decided = 0  # prompts with a zero-variance record seen this step

    # -- hooks ------------------------------------------------------------------------------
    @hookimpl
    def on_run_start(self, run: Any) -> None:
        if self.options.seed is None:
            self.seed = int(run.seed)
        self._learning = getattr(run, "learning", None)

    @hookimpl
    def on_rewards_computed(self, step: int, batch: Batch) -> dict[str, float]:
        """Count the generated groups that were all-pass / all-fail (the self-tuning signal)."""
        if not len(batch) or "uid" not in batch:
            return {}
        learning = getattr(self, "_learning", None)
        metric = learning.metric_column(batch) if learning is not None else ("acc" if "acc" in batch else "reward")
        threshold = learning.pass_threshold if learning is not None else 0.5
        v = np.asarray(batch[metric], dtype=np.float64)
        g = batch.groups
        lo, hi = g.min(v), g.max(v)
        const = (hi <= lo) & (g.sizes > 1) & np.isfinite(lo) & np.isfinite(hi)
        self._groups += g.n_groups
        self._all_pass += int(np.count_nonzero(const & (lo >= threshold)))
        self._all_fail += int(np.count_nonzero(const & (hi < threshold)))
        return {}

    @hookimpl
    def on_step_end(self, step: int) -> dict[str, float]:
        o = self.options
        metrics: dict[str, float] = {}
        if self._groups:
            easy = self._all_pass / self._groups
            hard = self._all_fail / self._groups
            metrics["selective_rollout/all_pass_ratio"] = easy
            metrics["selective_rollout/all_fail_ratio"] = hard
            if self._decided and o.adjust_step > 0:
                target_easy, target_hard = o.target_zero_variance / 3, o.target_zero_variance * 2 / 3
                d = o.adjust_step
                self.p_easy = float(np.clip(self.p_easy + (-d if easy >= target_easy else d), o.min_p, o.max_p))
                self.p_hard = float(np.clip(self.p_hard + (-d if hard >= target_hard else d), o.min_p, o.max_p))
        metrics["selective_rollout/p_easy"] = self.p_easy
        metrics["selective_rollout/p_hard"] = self.p_hard
        self._reset_counts()
        return metrics

    # -- the filter ---------------------------------------------------------------------------
    def keep_probability(self, zero_var_run: np.ndarray) -> np.ndarray:
        """Keep probability per prompt from its signed zero-variance run (+ all-pass, - all-fail)."""
        o = self.options
        run = np.asarray(zero_var_run, dtype=np.int64)
        keep = np.ones(len(run))
        if o.skip_easy:
            easy = run > 0
            keep[easy] = np.maximum(self.p_easy ** run[easy], o.min_keep)
        if o.skip_hard:
            hard = run < 0
            keep[hard] = np.maximum(self.p_hard ** (-run[hard]), o.min_keep)
        return keep

    def uniforms(self, batch: Batch) -> np.ndarray:
        """One reproducible U[0, 1) per prompt from (seed, step, generation, draw, row index)."""
        meta = batch.meta
        words = (self.seed, int(meta.get("step", 0)), int(meta.get("generation", 1)), int(meta.get("draw", 1)))
        return keyed_uniforms(words, batch[INDEX])  # a row drawn twice in one batch gets two draws

    def select(self, batch: Batch) -> FilterDecision:
        n = len(batch)
        if n == 0:
            return FilterDecision(np.zeros(0, dtype=bool), {})
        if RUN_COLUMN not in batch:
            raise BatchError(
                f"selective_rollout needs the prompt-level learning state ({RUN_COLUMN!r}); it is a prompt filter: "
                f"configure it under prompt_filters:, not filters: (batch columns: {', '.join(batch.columns)})"
            )
        run = np.asarray(batch[RUN_COLUMN], dtype=np.int64)
        p_keep = self.keep_probability(run)
        keep = self.uniforms(batch) < p_keep
        self._decided += int(np.count_nonzero(run != 0))
        return FilterDecision(keep, {
            "selective_rollout/skipped_easy": int(np.count_nonzero(~keep & (run > 0))),
            "selective_rollout/skipped_hard": int(np.count_nonzero(~keep & (run < 0))),
            "selective_rollout/candidates": int(np.count_nonzero(run != 0)),
        })

    # -- state ---------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION, "p_easy": self.p_easy, "p_hard": self.p_hard, "seed": self.seed,
            "counts": [self._groups, self._all_pass, self._all_fail, self._decided],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"selective_rollout: unsupported state version {state.get('version')!r}")
        self.p_easy = float(state["p_easy"])
        self.p_hard = float(state["p_hard"])
        self.seed = int(state["seed"])
        self._groups, self._all_pass, self._all_fail, self._decided = (int(x) for x in state["counts"])
