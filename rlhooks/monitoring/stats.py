"""Per-step reward statistics shared by the reward monitor and ``rlhooks.monitoring.RewardAnalyzer``.

Kept free of torch and of the plugin machinery so a training loop outside rlhooks can use it.
One implementation for both means the run-end analysis and a later analysis of the same rewards
compute the same numbers.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np


def reward_stats(reward: np.ndarray, bins: int = 20) -> dict[str, float]:
    """Aggregate metrics over one array of sequence rewards (non-finite values excluded)."""
    reward = np.asarray(reward, dtype=np.float64).ravel()
    ok = np.isfinite(reward)
    r = reward[ok]
    out: dict[str, float] = {"rewards/count": len(reward), "rewards/nonfinite": len(reward) - len(r)}
    if not len(r):
        return out
    mean, std = float(r.mean()), float(r.std())
    lo, hi = float(r.min()), float(r.max())
    if hi > lo:
        try:
            counts, _ = np.histogram(r, bins=bins, range=(lo, hi))
        except ValueError:  # a range too narrow for distinct float bin edges (1.0 vs 1.0000000000000002) or too wide
            counts = _bin_counts(r, lo, hi, bins)
        p = counts[counts > 0] / len(r)
        entropy = float(-(p * np.log(p)).sum())
    else:
        entropy = 0.0
    out.update({
        "rewards/mean": mean, "rewards/std": std, "rewards/min": lo, "rewards/max": hi,
        "rewards/total": float(r.sum()), "rewards/variance": std * std,
        "rewards/signal_to_noise": abs(mean) / std if std > 0 else 0.0,
        "rewards/entropy": entropy,
    })
    return out


def _bin_counts(r: np.ndarray, lo: float, hi: float, bins: int) -> np.ndarray:
    """Equal-width bin counts over [lo, hi] without bin edges; halved so hi - lo cannot overflow."""
    with np.errstate(over="ignore", invalid="ignore"):
        pos = (r / 2 - lo / 2) / (hi / 2 - lo / 2) * bins
    idx = np.clip(np.nan_to_num(np.floor(pos), nan=0.0), 0, bins - 1).astype(np.int64)
    return np.bincount(idx, minlength=bins)


def function_stats(components: Mapping[str, np.ndarray], weights: Mapping[str, float]) -> dict[str, float]:
    """Per-function mean/std of unweighted scores and each one's share of the weighted total."""
    out: dict[str, float] = {}
    weighted: dict[str, float] = {}
    for name, values in components.items():
        v = np.asarray(values, dtype=np.float64).ravel()
        v = v[np.isfinite(v)]
        if not len(v):
            continue
        mean = float(v.mean())
        out[f"rewards/functions/{name}"] = mean
        out[f"rewards/functions/{name}_std"] = float(v.std())
        weighted[name] = abs(weights.get(name, 1.0) * mean)
    total = sum(weighted.values())
    for name, w in weighted.items():
        out[f"contributions/{name}"] = 100.0 * w / total if total > 0 else 0.0
    return out
