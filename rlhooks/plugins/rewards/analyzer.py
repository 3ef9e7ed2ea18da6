"""RewardAnalyzer: reward-signal quality, function importance and reward-hacking checks over a run.

Input is a step history of metrics as the reward monitor logs them (``rewards/mean|std|min|max``,
``rewards/functions/<name>[_std]``, ``contributions/<name>``, ``training/kl_divergence``), either
in memory (the monitor runs it at run end) or read back from a saved run::

    from rlhooks.plugins.rewards.analyzer import RewardAnalyzer
    an = RewardAnalyzer.from_jsonl("runs/demo")          # <run_dir>/metrics.jsonl
    report = an.analyze_quality()
    print(report.quality_score, report.issues, report.recommendations)
    an.analyze_function_importance()
    an.detect_reward_hacking(performance_metric="val/acc")

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
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import structlog

from rlhooks.core.records import read_records

log = structlog.get_logger("rlhooks.rewards.analyzer")

WEIGHTS = {"consistency": 0.25, "discriminability": 0.35, "stability": 0.25, "coverage": 0.15}
FUNC_PREFIX = "rewards/functions/"
CONTRIB_PREFIX = "contributions/"
KL = "training/kl_divergence"
MIN_STEPS = 3


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

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


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


class RewardAnalyzer:
    def __init__(
        self,
        history: Iterable[tuple[int, Mapping[str, float]]],
        reward_range: tuple[float, float] | None = None,
    ) -> None:
        merged: dict[int, dict[str, float]] = {}
        for step, metrics in history:
            merged.setdefault(int(step), {}).update(metrics)
        self.steps = sorted(merged)
        self.metrics = [merged[s] for s in self.steps]
        self.reward_range = reward_range

    # -- loading ------------------------------------------------------------------------
    @classmethod
    def from_jsonl(cls, path: str | Path, reward_range: tuple[float, float] | None = None) -> RewardAnalyzer:
        """Read the ``"metrics"`` lines of a JSONL backend file (or ``<run_dir>/metrics.jsonl``).

        A last line without its newline (a run still writing) is skipped; any other bad line is
        an error. Null metric values (NaN/inf in the run) are left out.
        """
        p = Path(path)
        if p.is_dir():
            p = p / "metrics.jsonl"
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
    def analyze_quality(self) -> QualityReport:
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
            full = self.reward_range[1] - self.reward_range[0]
        else:
            full = float(hi.max() - lo.min())
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
        return QualityReport(round(score, 4), consistency, discriminability, stability, coverage, n, issues, recs)

    # -- functions --------------------------------------------------------------------------
    def analyze_function_importance(self) -> dict[str, dict[str, float]]:
        """Per function: mean, std, contribution (%), variance share (%), correlation with the total."""
        names = self.function_names()
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
    def detect_reward_hacking(
        self,
        performance_metric: str | Sequence[float] | None = None,
        *,
        window: int | None = None,
        rise_threshold: float = 0.5,
        kl_ratio: float = 3.0,
        min_kl_growth: float = 0.5,
    ) -> HackingReport:
        """Flags (1) reward rising (trend >= rise_threshold) while the performance metric is not
        (trend < 0.1), and (2) KL growing by >= min_kl_growth of its mean and kl_ratio times
        faster (relative) than the reward. ``window`` limits the check to the last steps."""
        reward = self.series("rewards/mean")
        if window:
            reward = reward[-window:]
        r_trend, r_growth = _corr_with_time(reward), _growth(reward)
        reasons: list[str] = []
        p_trend = None
        if performance_metric is not None:
            perf = (self.series(performance_metric) if isinstance(performance_metric, str)
                    else np.asarray(performance_metric, dtype=np.float64))
            perf = perf[np.isfinite(perf)]
            if window:
                perf = perf[-window:]
            if len(perf) >= 2:
                p_trend = _corr_with_time(perf)
                if r_trend >= rise_threshold and r_growth > 0 and p_trend < 0.1:
                    name = performance_metric if isinstance(performance_metric, str) else "performance"
                    reasons.append(
                        f"reward is rising (trend {r_trend:.2f}) while {name} is not (trend {p_trend:.2f})"
                    )
        kl = self.series(KL)
        if window:
            kl = kl[-window:]
        kl_growth = _growth(kl) if len(kl) >= 2 else None
        if kl_growth is not None and kl_growth >= min_kl_growth and kl_growth > kl_ratio * max(r_growth, 0.0):
            reasons.append(
                f"KL grew by {kl_growth:.0%} of its mean while the reward grew by {r_growth:.0%} "
                f"(more than {kl_ratio:g}x faster)"
            )
        suspects = []
        if reasons:
            for f in self.function_names():
                fv = self.series(FUNC_PREFIX + f)
                if window:
                    fv = fv[-window:]
                if _corr_with_time(fv) >= rise_threshold:
                    suspects.append(f)
        return HackingReport(bool(reasons), reasons, r_trend, r_growth, p_trend, kl_growth, suspects)
