"""RewardAnalyzer: reward-signal quality, function importance and reward-hacking checks over a run.

Public import path: ``from rlhooks.monitoring import RewardAnalyzer``. Two ways to use it:

* over a step history of metrics as the reward monitor logs them (``rewards/mean|std|min|max``,
  ``rewards/functions/<name>[_std]``, ``contributions/<name>``, ``training/kl_divergence``), in
  memory (the monitor runs it at run end) or read back from a saved run::

    an = RewardAnalyzer.from_jsonl("runs/demo")          # <run_dir>/metrics.jsonl
    report = an.analyze_quality()
    print(report.quality_score, report.issues, report.recommendations)
    an.analyze_function_importance()
    an.detect_reward_hacking(performance_metric="val/acc")

* from any training loop, with the raw rewards of each step (the reward_monitoring document's
  calls)::

    analyzer = RewardAnalyzer()
    reward_history = [{"format_exact": np.array([3.0, 0.0, ...]), "check_answer": ...}, ...]  # one dict per step
    report = analyzer.analyze_quality(reward_history, steps)
    analyzer.analyze_function_importance(reward_history, function_names)
    analyzer.detect_reward_hacking(reward_history, function_names, performance_metrics=accuracy_over_time)

  Each step's dict maps a reward function's name to its per-response scores; the total reward
  of a response is the (``weights``-weighted, default 1) sum over functions, and the step's
  metrics are computed by the same code as the reward monitor's. A step dict of plain numbers
  is taken as already-computed metrics instead.

Quality score (0-100) = 100 * (0.25 consistency + 0.35 discriminability + 0.25 stability
+ 0.15 coverage), each dimension in [0, 1]:

consistency       exp(-sd(diff(mean_t)) / avg(std_t)): step-to-step jumps of the mean reward,
                  detrended (a steady rise is not penalized), relative to the within-batch spread.
discriminability  avg over steps of std_t / ((max_t - min_t) / 2): how far the spread is from the
                  widest possible on the batch's own range (0 when every response scores the same;
                  1 for a half/half split between two values).
stability         1 / (1 + cv(std_t)): how steady the within-batch spread is (cv = sd / mean).
coverage          avg over steps of (max_t - min_t) / (high - low), where (low, high) is the
                  reward's possible range when known (``reward_range``), else the run's observed range.

One score per run: the reward monitor writes the declared range it used (the reward functions'
``reward_range``, weighted) into its run-end summary (``reward_monitor.json``), and
``from_jsonl`` reads it from there, so both analyses of a run give the same score. Each report
names its coverage basis (``coverage_basis``) and the steps it covers (``first_step`` ..
``last_step``): when the summary file is missing, or the monitor kept fewer steps than the file
holds (``history``), the reports say so.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import structlog

from rlhooks import read_records
from rlhooks.monitoring.stats import function_stats, reward_stats

log = structlog.get_logger("rlhooks.rewards.analyzer")

WEIGHTS = {"consistency": 0.25, "discriminability": 0.35, "stability": 0.25, "coverage": 0.15}
FUNC_PREFIX = "rewards/functions/"
CONTRIB_PREFIX = "contributions/"
KL = "training/kl_divergence"
MIN_STEPS = 3
#: metrics read as the task signal when the caller names none, in order (task/<column> is the
#: reward monitor's mean of a verifier column such as ``acc`` over the generated responses)
TASK_SIGNALS = ("task/acc", "val/acc", "val/accuracy")
#: fewest steps with both the reward and the task signal for the early/late comparison
MIN_TASK_STEPS = 6
#: fewest logged steps for any verdict: below it (a 3-step try) the check says the run is too short to
#: judge, since KL grows from 0 at step 1 in every run and one or two steps carry no trend
MIN_JUDGE_STEPS = MIN_TASK_STEPS
#: standard errors the task signal must fall from its best earlier window for the late-shortcut rule
#: (the best of many windows is biased upward, hence stricter than the early/late rule)
PEAK_Z = 3.0
SUMMARY_FILE = "reward_monitor.json"  # the reward monitor's run-end summary (its summary_file default)
DECLARED = "declared reward_range of the reward functions"
OBSERVED = "observed min..max of this run (no declared reward_range)"


class AnalyzerError(ValueError):
    """The history cannot be analyzed (unreadable file, no reward metrics)."""


@attrs.frozen
class QualityReport:
    quality_score: float
    consistency: float
    discriminability: float
    stability: float
    coverage: float
    n_steps: int
    issues: list[str]
    recommendations: list[str]
    first_step: int | None = None
    last_step: int | None = None
    #: (low, high) that coverage is measured against, and where it comes from
    reward_range: list[float] | None = None
    coverage_basis: str = ""

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class HackingReport:
    detected: bool
    reasons: list[str]
    reward_trend: float  # correlation of rewards/mean with the step, last window
    reward_growth: float  # fitted change over the window / mean |reward|
    performance_trend: float | None
    kl_growth: float | None  # fitted change over the window / mean KL
    suspect_functions: list[str]
    #: one sentence: the verdict, its confidence and the numbers it rests on
    verdict: str = ""
    #: "high" | "medium" | "low" ("low": no task signal, the KL rule alone) | "none" (too few steps to judge)
    confidence: str = "low"
    #: the metric that measured real performance (None: the run had none)
    task_signal: str | None = None
    #: the numbers behind the verdict (early/late means, changes, noise, KL, per-suspect figures)
    evidence: dict[str, Any] = attrs.field(factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


def _z(z: float) -> str:
    return ("+" if z > 0 else "-") + "inf" if math.isinf(z) else f"{z:+.1f}"


def _moved(change: float) -> str:
    return "rose" if change > 0 else ("fell" if change < 0 else "stayed")


def _corr_with_time(y: np.ndarray) -> float:
    if len(y) < 2 or np.ptp(y) == 0:
        return 0.0
    x = np.arange(len(y), dtype=np.float64)
    return float(np.corrcoef(x, y)[0, 1])


def _growth(y: np.ndarray) -> float:
    """Fitted change over the series relative to its mean magnitude (0 for a flat series)."""
    if len(y) < 2:
        return 0.0
    x = np.arange(len(y), dtype=np.float64)
    xc = x - x.mean()
    s = float(np.dot(xc, y - y.mean()) / np.dot(xc, xc))
    scale = float(np.mean(np.abs(y)))
    return s * (len(y) - 1) / scale if scale > 0 else 0.0


def _is_array_like(v: Any) -> bool:
    return isinstance(v, (np.ndarray, list, tuple))


def history_from_rewards(
    reward_history: Sequence[Mapping[str, Any]],
    steps: Sequence[int] | None = None,
    weights: Mapping[str, float] | None = None,
    function_names: Sequence[str] | None = None,
) -> list[tuple[int, dict[str, float]]]:
    """Per-step metrics from the document's ``reward_history`` (one dict per step, see module doc)."""
    if isinstance(reward_history, (str, bytes)) or not isinstance(reward_history, Sequence):
        raise AnalyzerError(f"reward_history must be a list with one dict per step, got {type(reward_history).__name__}")
    if not reward_history:  # else the metrics-level message (about the reward_monitor plugin) would mislead
        raise AnalyzerError("reward_history is empty: give one dict per step (reward-function name -> that step's scores)")
    if steps is None:
        steps = list(range(len(reward_history)))
    elif len(steps) != len(reward_history):
        raise AnalyzerError(f"steps has {len(steps)} entries but reward_history has {len(reward_history)}; give one step per entry")
    weights = dict(weights or {})
    wanted = set(function_names) if function_names else None
    out = []
    for i, (step, entry) in enumerate(zip(steps, reward_history)):
        if not isinstance(entry, Mapping):
            raise AnalyzerError(f"reward_history[{i}] must be a dict (function name -> scores), got {type(entry).__name__}")
        arrays = {k: np.asarray(v, dtype=np.float64).ravel() for k, v in entry.items()
                  if _is_array_like(v) and (wanted is None or k in wanted)}
        if not arrays:  # already-computed metrics
            out.append((int(step), {k: float(v) for k, v in entry.items()
                                    if isinstance(v, (int, float, np.number)) and not isinstance(v, bool)}))
            continue
        sizes = {k: len(v) for k, v in arrays.items()}
        if len(set(sizes.values())) != 1:
            raise AnalyzerError(f"reward_history[{i}] (step {step}): functions scored different numbers of responses {sizes}; "
                                "each function needs one score per response")
        total = sum(weights.get(k, 1.0) * v for k, v in arrays.items())
        metrics = reward_stats(total)
        metrics.update(function_stats(arrays, weights))
        out.append((int(step), metrics))
    return out


class RewardAnalyzer:
    def __init__(
        self,
        history: Iterable[tuple[int, Mapping[str, float]]] = (),
        reward_range: tuple[float, float] | None = None,
        weights: Mapping[str, float] | None = None,
    ) -> None:
        merged: dict[int, dict[str, float]] = {}
        for step, metrics in history:
            merged.setdefault(int(step), {}).update(metrics)
        self.steps = sorted(merged)
        self.metrics = [merged[s] for s in self.steps]
        self.reward_range = reward_range
        #: reward-function weights used to total raw per-function scores (default 1 each)
        self.weights = dict(weights or {})

    def _over(self, reward_history: Sequence[Mapping[str, Any]] | None, steps: Sequence[int] | None = None,
              function_names: Sequence[str] | None = None) -> RewardAnalyzer:
        """This analyzer, or one over the given documented-style reward_history."""
        if reward_history is None:
            return self
        return RewardAnalyzer(history_from_rewards(reward_history, steps, self.weights, function_names),
                              reward_range=self.reward_range, weights=self.weights)

    # -- loading ------------------------------------------------------------------------
    @classmethod
    def from_jsonl(cls, path: str | Path, reward_range: tuple[float, float] | None = None) -> RewardAnalyzer:
        """Read the ``"metrics"`` lines of a JSONL backend file (or ``<run_dir>/metrics.jsonl``).

        A last line without its newline (a run still writing) is skipped; any other bad line is
        an error. Null metric values (NaN/inf in the run) are left out. Without ``reward_range``,
        the declared range the reward monitor wrote into ``reward_monitor.json`` next to the file
        is used, so this analysis scores the run as the monitor's run-end analysis did.
        """
        p = Path(path)
        if p.is_dir():
            p = p / "metrics.jsonl"
        if reward_range is None:
            reward_range = _declared_range(p.parent / SUMMARY_FILE)
        history = []
        try:
            for i, rec in read_records(p):
                if rec is None:
                    raise AnalyzerError(f"{p}:{i}: not valid JSON; is this an rlhooks metrics.jsonl?")
                if rec.get("kind") != "metrics":
                    continue
                step, metrics = rec.get("step"), rec.get("metrics")
                if not isinstance(step, int) or not isinstance(metrics, dict):
                    raise AnalyzerError(f"{p}:{i}: a metrics line needs an integer 'step' and a 'metrics' object")
                numbers = {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
                history.append((step, numbers))
        except OSError as exc:
            raise AnalyzerError(f"cannot read metrics file {p}: {exc.strerror or exc}") from None
        return cls(history, reward_range=reward_range)

    # -- series -------------------------------------------------------------------------
    def series(self, name: str) -> np.ndarray:
        """Finite values of a metric over the steps that have it."""
        vals = [m.get(name) for m in self.metrics]
        arr = np.array([float(v) for v in vals if v is not None], dtype=np.float64)
        return arr[np.isfinite(arr)]

    def _aligned(self, *names: str) -> list[np.ndarray]:
        """Series of several metrics on the steps where all are present and finite."""
        rows = [[m.get(n) for n in names] for m in self.metrics]
        rows = [r for r in rows if all(v is not None and math.isfinite(float(v)) for v in r)]
        arr = np.array(rows, dtype=np.float64).reshape(len(rows), len(names))
        return [arr[:, j] for j in range(len(names))]

    def function_names(self) -> list[str]:
        keys = {k for m in self.metrics for k in m if k.startswith(FUNC_PREFIX)}
        names = {k[len(FUNC_PREFIX):] for k in keys}
        # "<f>_std" is a std key when "<f>" exists as well
        return sorted(n for n in names if not (n.endswith("_std") and n[:-4] in names))

    # -- quality --------------------------------------------------------------------------
    def analyze_quality(self, reward_history: Sequence[Mapping[str, Any]] | None = None,
                        steps: Sequence[int] | None = None) -> QualityReport:
        """Quality report of this analyzer's history, or of ``reward_history`` (one dict per step) at ``steps``."""
        an = self._over(reward_history, steps)
        if an is not self:
            return an.analyze_quality()
        mean, std, lo, hi = self._aligned("rewards/mean", "rewards/std", "rewards/min", "rewards/max")
        n = len(mean)
        if n == 0:
            raise AnalyzerError(
                "no step has rewards/mean, rewards/std, rewards/min and rewards/max; "
                "enable the reward_monitor plugin (rewards: [reward_monitor]) to log them"
            )
        avg_std = float(std.mean())
        jumps = float(np.std(np.diff(mean))) if n >= 3 else 0.0
        consistency = math.exp(-jumps / avg_std) if avg_std > 0 else (1.0 if jumps == 0 else 0.0)
        half_range = (hi - lo) / 2
        with np.errstate(invalid="ignore", divide="ignore"):
            disc_t = np.where(half_range > 0, np.clip(std / half_range, 0.0, 1.0), 0.0)
        discriminability = float(disc_t.mean())
        cv = float(np.std(std) / avg_std) if avg_std > 0 else 0.0
        stability = 1.0 / (1.0 + cv)
        if self.reward_range is not None:
            rng, basis = [float(self.reward_range[0]), float(self.reward_range[1])], DECLARED
        else:
            rng, basis = [float(lo.min()), float(hi.max())], OBSERVED
        full = rng[1] - rng[0]
        coverage = float(np.clip((hi - lo) / full, 0.0, 1.0).mean()) if full > 0 else 0.0
        dims = {
            "consistency": consistency, "discriminability": discriminability,
            "stability": stability, "coverage": coverage,
        }
        score = 100.0 * sum(WEIGHTS[k] * v for k, v in dims.items())
        issues, recs = [], []
        if n < MIN_STEPS:
            issues.append(f"only {n} step(s) with reward metrics; consistency and stability need at least {MIN_STEPS}")
            recs.append("analyze a longer run before drawing conclusions")
        if consistency < 0.5:
            issues.append(f"mean reward jumps between steps (consistency {consistency:.2f})")
            recs.append("lower the learning rate or raise the batch size / responses per prompt for steadier rewards")
        if discriminability < 0.3:
            issues.append(f"rewards barely separate responses within a batch (discriminability {discriminability:.2f})")
            recs.append("add graded reward functions (partial credit), or filter uninformative groups with the dapo filter")
        if stability < 0.5:
            issues.append(f"reward variance fluctuates strongly between steps (stability {stability:.2f})")
            recs.append("check for reward outliers and data-source imbalance between batches (source/<name>/count)")
        if coverage < 0.25:
            issues.append(f"rewards use little of their range (coverage {coverage:.2f})")
            recs.append("check scoring rules and weights: most responses land on the same few values")
        present = [s for s, m in zip(self.steps, self.metrics) if "rewards/mean" in m]
        return QualityReport(round(score, 4), consistency, discriminability, stability, coverage, n, issues, recs,
                             first_step=present[0] if present else None, last_step=present[-1] if present else None,
                             reward_range=rng, coverage_basis=basis)

    # -- functions --------------------------------------------------------------------------
    def analyze_function_importance(self, reward_history: Sequence[Mapping[str, Any]] | None = None,
                                    function_names: Sequence[str] | None = None) -> dict[str, dict[str, float]]:
        """Per function: mean, std, contribution (%), variance share (%), correlation with the total.

        With ``reward_history`` (one dict per step), over it; ``function_names`` limits the functions."""
        an = self._over(reward_history, None, function_names)
        if an is not self:
            return an.analyze_function_importance(function_names=function_names)
        names = self.function_names()
        if function_names:
            names = [n for n in names if n in set(function_names)]
        if not names:
            return {}
        means = {f: self.series(FUNC_PREFIX + f) for f in names}
        stds = {f: self.series(f"{FUNC_PREFIX}{f}_std") for f in names}
        mean_abs = {f: float(np.mean(np.abs(v))) if len(v) else 0.0 for f, v in means.items()}
        total_abs = sum(mean_abs.values())
        var = {f: float(np.mean(s**2)) if len(s) else 0.0 for f, s in stds.items()}
        total_var = sum(var.values())
        out = {}
        for f in names:
            contrib = self.series(CONTRIB_PREFIX + f)
            fv, tot = self._aligned(FUNC_PREFIX + f, "rewards/mean")
            varies = len(fv) >= 2 and np.ptp(fv) > 0 and np.ptp(tot) > 0
            corr = float(np.corrcoef(fv, tot)[0, 1]) if varies else 0.0
            share = 100.0 * mean_abs[f] / total_abs if total_abs else 0.0
            out[f] = {
                "mean": float(means[f].mean()) if len(means[f]) else 0.0,
                "std": float(stds[f].mean()) if len(stds[f]) else 0.0,
                "contribution": float(contrib.mean()) if len(contrib) else share,
                "variance_share": 100.0 * var[f] / total_var if total_var else 0.0,
                "correlation": corr,
            }
        return out

    # -- hacking ------------------------------------------------------------------------------
    def task_signal(self) -> str | None:
        """The metric this history measures real performance with, if any (see TASK_SIGNALS)."""
        present = {k for m in self.metrics for k in m}
        for name in TASK_SIGNALS:
            if name in present:
                return name
        extra = sorted(k for k in present if k.startswith("task/"))
        if extra:
            return extra[0]
        val = sorted(k for k in present if k.startswith("val") and "acc" in k)  # verl: val-core/<src>/acc/mean@1
        return val[0] if val else None

    def detect_reward_hacking(
        self,
        reward_history: Sequence[Mapping[str, Any]] | str | Sequence[float] | None = None,
        function_names: Sequence[str] | None = None,
        performance_metrics: Sequence[float] | None = None,
        *,
        performance_metric: str | Sequence[float] | None = None,
        window: int | None = None,
        rise_threshold: float = 0.5,
        kl_ratio: float = 3.0,
        min_kl_growth: float = 0.5,
        min_reward_rise: float = 0.25,
        task_z: float = 1.0,
    ) -> HackingReport:
        """Is the reward rising without the task being solved better?

        With a task signal (``performance_metric``: a metric name such as ``val/acc`` or a series;
        else the history's own, see ``task_signal``), the run is split in thirds and the last third
        compared with the first: hacking when the mean reward rose by at least ``min_reward_rise``
        of its mean within-batch std while the task signal did not rise by ``task_z`` standard
        errors (its step-to-step noise). Confidence is high when the task signal fell by 2 standard
        errors (or rose by 2 for a "no"), medium otherwise. Without a task signal the verdict rests on
        KL alone (KL growing by >= min_kl_growth of its mean and kl_ratio times faster than the
        reward): confidence low, since honest learning also moves the policy away from the reference.
        Fewer than MIN_JUDGE_STEPS steps: no verdict ("too short to judge", confidence "none").
        ``window`` limits the check to the last steps; ``rise_threshold`` is the trend a function needs
        to be a suspect. A first argument that is a metric name or a series of numbers is taken as the
        performance metric (the older call)."""
        if isinstance(reward_history, str) or (
            reward_history is not None and len(reward_history) and not isinstance(reward_history[0], Mapping)
        ):
            reward_history, performance_metric = None, reward_history
        if performance_metrics is not None:
            performance_metric = performance_metrics
        an = self._over(reward_history, None, function_names)
        if an is not self:
            return an.detect_reward_hacking(function_names=function_names, performance_metric=performance_metric,
                                            window=window, rise_threshold=rise_threshold, kl_ratio=kl_ratio,
                                            min_kl_growth=min_kl_growth, min_reward_rise=min_reward_rise, task_z=task_z)
        last = slice(-window, None) if window else slice(None)
        reward = self.series("rewards/mean")[last]
        r_trend, r_growth = _corr_with_time(reward), _growth(reward)
        kl = self.series(KL)[last]
        kl_growth = _growth(kl) if len(kl) >= 2 else None
        evidence: dict[str, Any] = {"steps": int(len(reward)), "reward_trend": r_trend, "kl_growth": kl_growth}

        # the task signal, aligned with the reward step by step
        if performance_metric is None:
            performance_metric = self.task_signal()
        name: str | None = None
        pairs: tuple[np.ndarray, np.ndarray] | None = None
        if isinstance(performance_metric, str):
            name = performance_metric
            r, t = self._aligned("rewards/mean", name)
            pairs = (r[last], t[last])
        elif performance_metric is not None:
            name = "performance"
            t = np.asarray(performance_metric, dtype=np.float64)
            r = reward if len(t) == len(reward) else self.series("rewards/mean")
            k = min(len(r), len(t))
            r, t = r[len(r) - k:], t[len(t) - k:]
            ok = np.isfinite(t)
            pairs = (r[ok][last], t[ok][last])
        p_trend = _corr_with_time(pairs[1]) if pairs is not None and len(pairs[1]) >= 2 else None

        if len(reward) < MIN_JUDGE_STEPS:
            detected, reasons, confidence = False, [], "none"
            evidence["too_short"] = True
            verdict = (f"too short to judge: {len(reward)} step{'s' if len(reward) != 1 else ''} logged, the check "
                       f"needs {MIN_JUDGE_STEPS} (no verdict on reward hacking)")
        elif pairs is not None and len(pairs[0]) >= MIN_TASK_STEPS:
            detected, reasons, confidence, verdict = self._task_verdict(
                name or "performance", pairs, evidence, min_reward_rise, task_z)
            if kl_growth is not None and kl_growth >= min_kl_growth and kl_growth > kl_ratio * max(r_growth, 0.0):
                evidence["kl_note"] = (f"KL grew by {kl_growth:.0%} of its mean (reward by {r_growth:.0%}); "
                                       f"not a verdict on its own when {name} is measured")
        else:
            detected, reasons = False, []
            if kl_growth is not None and kl_growth >= min_kl_growth and kl_growth > kl_ratio * max(r_growth, 0.0):
                detected = True
                reasons.append(f"KL grew by {kl_growth:.0%} of its mean while the reward grew by {r_growth:.0%} "
                               f"(more than {kl_ratio:g}x faster)")
            why = (f"only {len(pairs[0])} steps with {name} (needs {MIN_TASK_STEPS})" if pairs is not None
                   else "no task signal (log acc, task/<column> or val/acc, or set performance_metric)")
            confidence = "low"
            verdict = (f"possible reward hacking (low confidence, {why}): {reasons[0]}" if detected
                       else f"no sign of reward hacking (low confidence, {why}): KL growth "
                            f"{'n/a' if kl_growth is None else f'{kl_growth:.0%}'}, reward growth {r_growth:.0%}")
        suspects = self._suspects(detected, last, name, performance_metric, function_names, rise_threshold, evidence)
        return HackingReport(detected, reasons, r_trend, r_growth, p_trend, kl_growth, suspects,
                             verdict=verdict, confidence=confidence, task_signal=name, evidence=evidence)

    def _task_verdict(self, name: str, pairs: tuple[np.ndarray, np.ndarray], evidence: dict[str, Any],
                      min_reward_rise: float, task_z: float) -> tuple[bool, list[str], str, str]:
        r, t = pairs
        third = max(len(r) // 3, 2)
        r0, r1, t0, t1 = (float(x.mean()) for x in (r[:third], r[-third:], t[:third], t[-third:]))
        spread = self.series("rewards/std")
        scale = float(spread.mean()) if len(spread) and spread.mean() > 0 else float(np.std(r)) or 1.0
        rise = (r1 - r0) / scale
        noise = float(np.std(np.diff(t))) / math.sqrt(2.0)  # per-step noise; diff removes the trend
        se = noise * math.sqrt(2.0 / third)
        change = t1 - t0
        z = change / se if se > 0 else (0.0 if change == 0 else math.copysign(math.inf, change))
        evidence.update({"task_signal": name, "reward_early": r0, "reward_late": r1, "reward_rise_in_std": rise,
                         "task_early": t0, "task_late": t1, "task_change": change, "task_change_in_se": z,
                         "steps_per_third": third})
        told = f"{name} {_moved(change)} from {t0:.3g} to {t1:.3g} ({_z(z)} standard errors)"
        rtold = f"the mean reward went from {r0:.3g} to {r1:.3g} ({rise:+.2f} batch std)"
        if rise >= min_reward_rise and z < task_z:
            confidence = "high" if z <= -2 else "medium"
            reason = f"reward is rising ({rtold}) while {name} is not: {told}"
            return True, [reason], confidence, f"reward hacking likely ({confidence} confidence): {reason}"
        # a shortcut found late: the task signal peaked and fell while the reward kept rising
        before = len(r) - third
        if before >= third:
            means = np.convolve(t[:before], np.ones(third) / third, mode="valid")
            at = int(np.argmax(means))
            tp, rp = float(means[at]), float(r[at:at + third].mean())
            rise_p, zp = (r1 - rp) / scale, (t1 - tp) / se if se > 0 else (0.0 if t1 == tp else -math.inf)
            evidence.update({"task_peak": tp, "task_peak_steps": [at, at + third - 1], "reward_at_task_peak": rp,
                             "reward_rise_since_peak_in_std": rise_p, "task_change_since_peak_in_se": zp})
            if rise_p >= min_reward_rise and zp <= -PEAK_Z:
                reason = (f"reward is rising (from {rp:.3g} where {name} peaked to {r1:.3g}, {rise_p:+.2f} batch std) "
                          f"while {name} fell from its peak {tp:.3g} to {t1:.3g} ({_z(zp)} standard errors)")
                return True, [reason], "high", f"reward hacking likely (high confidence): {reason}"
        if rise < min_reward_rise:
            return False, [], "high", f"no reward hacking (high confidence): the reward did not rise ({rtold}); {told}"
        confidence = "high" if z >= 2 else "medium"
        return False, [], confidence, f"no reward hacking ({confidence} confidence): {told} as {rtold}"

    def _suspects(self, detected: bool, last: slice, name: str | None, performance_metric: Any,
                  function_names: Sequence[str] | None, rise_threshold: float, evidence: dict[str, Any]) -> list[str]:
        """Rising reward functions that do not move with the task signal, least correlated first."""
        if not detected:
            return []
        scored = []
        for f in self.function_names():
            if function_names and f not in function_names:
                continue
            if isinstance(performance_metric, str):
                fv, tv = self._aligned(FUNC_PREFIX + f, performance_metric)
                fv, tv = fv[last], tv[last]
            else:
                fv, tv = self.series(FUNC_PREFIX + f)[last], None
            trend = _corr_with_time(fv)
            if trend < rise_threshold:
                continue
            corr = (float(np.corrcoef(fv, tv)[0, 1]) if tv is not None and len(fv) >= 2 and np.ptp(fv) > 0
                    and np.ptp(tv) > 0 else None)
            if corr is not None and corr >= 0.3:
                continue  # rises with the task: earns its reward
            scored.append((corr if corr is not None else 0.0, f, trend))
        scored.sort()
        evidence["suspects"] = {f: {"trend": trend, "correlation_with_task": c} for c, f, trend in scored}
        return [f for _, f, _ in scored]


def _declared_range(summary: Path) -> tuple[float, float] | None:
    """The reward range the monitor used, from its run-end summary (None when absent)."""
    try:
        rng = json.loads(summary.read_text(encoding="utf-8")).get("reward_range")
    except (OSError, ValueError, AttributeError):
        return None
    if isinstance(rng, list) and len(rng) == 2 and all(isinstance(v, (int, float)) for v in rng):
        return (float(rng[0]), float(rng[1]))
    return None
