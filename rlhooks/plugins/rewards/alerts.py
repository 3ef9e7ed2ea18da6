"""Threshold and trend alerts on step metrics, configured in YAML under ``reward_monitor``.

    rewards:
      - name: reward_monitor
        alerts:
          - {metric: rewards/signal_to_noise, condition: less, threshold: 0.5, level: warning}
          - {metric: rewards/mean, min_slope: -0.01, window: 10, level: critical}

A threshold alert fires on a step whose metric is ``less`` / ``greater`` than ``threshold``.
A trend alert fires when the least-squares slope (per step) of the metric's last ``window``
values is below ``min_slope`` or above ``max_slope``; it needs ``window`` values first.
A metric missing from a step is skipped for that step (a trend keeps its earlier values).
The monitor's ``on_step_end`` runs last (``trylast``), so alerts see every metric of the step:
the engine's, the filters', what plugins returned from ``on_batch_sampled`` /
``on_rewards_computed`` and from their own ``on_step_end`` (e.g. ``source/<name>/...``).
Short names are accepted: ``signal_to_noise`` means ``rewards/signal_to_noise``;
``mean_reward`` means ``rewards/mean``.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np
import structlog

log = structlog.get_logger("rlhooks.rewards.alerts")

LEVELS = ("info", "warning", "critical")
ALIASES = {"mean_reward": "rewards/mean", "reward_std": "rewards/std"}


def _finite_or_none(_inst: Any, attr: attrs.Attribute, value: float | None) -> None:
    if value is not None and not math.isfinite(value):
        raise ValueError(f"must be a finite number, got {value!r}")


def _one_of(*choices: str) -> Any:
    def check(_inst: Any, attr: attrs.Attribute, value: str | None) -> None:
        if value is not None and value not in choices:
            raise ValueError(f"{attr.name} must be one of {', '.join(choices)}; got {value!r}")

    return check


@attrs.frozen(kw_only=True)
class AlertSpec:
    """One alert: either (condition, threshold) or (min_slope and/or max_slope, window)."""

    metric: str
    condition: str | None = attrs.field(default=None, validator=_one_of("less", "greater"))
    threshold: float | None = attrs.field(default=None, validator=_finite_or_none)
    min_slope: float | None = attrs.field(default=None, validator=_finite_or_none)
    max_slope: float | None = attrs.field(default=None, validator=_finite_or_none)
    window: int = attrs.field(default=10, validator=attrs.validators.ge(2))
    level: str = attrs.field(default="warning", validator=_one_of(*LEVELS))
    #: optional text shown with the alert
    message: str = ""

    def __attrs_post_init__(self) -> None:
        threshold = self.condition is not None or self.threshold is not None
        trend = self.min_slope is not None or self.max_slope is not None
        if threshold and trend:
            raise ValueError(
                f"alert on {self.metric!r} mixes a threshold (condition/threshold) with a trend "
                f"(min_slope/max_slope); write two alerts"
            )
        if not threshold and not trend:
            raise ValueError(
                f"alert on {self.metric!r} needs either condition + threshold, "
                f"or min_slope / max_slope (+ window)"
            )
        if threshold and (self.condition is None or self.threshold is None):
            raise ValueError(
                f"threshold alert on {self.metric!r} needs both condition (less | greater) and threshold"
            )

    @property
    def kind(self) -> str:
        return "threshold" if self.threshold is not None else "trend"

    @property
    def metric_name(self) -> str:
        m = ALIASES.get(self.metric, self.metric)
        return m if "/" in m else f"rewards/{m}"


@attrs.frozen
class Alert:
    step: int
    metric: str
    level: str
    kind: str
    value: float  # the metric value (threshold) or the slope (trend)
    bound: float  # the threshold or slope bound crossed
    message: str

    def row(self) -> dict[str, Any]:
        return attrs.asdict(self)


def slope(values: np.ndarray) -> float:
    """Least-squares slope of values against 0..n-1."""
    y = np.asarray(values, dtype=np.float64)
    x = np.arange(len(y), dtype=np.float64)
    x -= x.mean()
    return float(np.dot(x, y - y.mean()) / np.dot(x, x))


class AlertManager:
    """Evaluates alerts step after step; bounded memory (one deque of ``window`` per trend)."""

    def __init__(self, specs: tuple[AlertSpec, ...] | list[AlertSpec], keep: int = 1000) -> None:
        self.specs = list(specs)
        self._series = {i: deque(maxlen=s.window) for i, s in enumerate(self.specs) if s.kind == "trend"}
        self.history: deque[Alert] = deque(maxlen=keep)  # recent alerts, for the summary
        self.counts: Counter[str] = Counter()  # by level, whole run
        self.by_metric: Counter[str] = Counter()
        self.first_step: dict[str, int] = {}
        self.last_step: dict[str, int] = {}

    # -- resumable state: trend windows and run-wide counts, so a resumed run alerts as an uninterrupted one
    @staticmethod
    def _trend_key(spec: AlertSpec) -> str:
        return f"{spec.metric_name}|{spec.min_slope}|{spec.max_slope}|{spec.window}"

    def state_dict(self) -> dict[str, Any]:
        return {
            "series": {self._trend_key(self.specs[i]): list(d) for i, d in self._series.items()},
            "history": [a.row() for a in self.history],
            "counts": dict(self.counts),
            "by_metric": dict(self.by_metric),
            "first_step": dict(self.first_step),
            "last_step": dict(self.last_step),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        series = state.get("series", {})
        for i, d in self._series.items():  # trend alerts not in the saved state start empty
            d.clear()
            d.extend(float(v) for v in series.get(self._trend_key(self.specs[i]), ()))
        self.history.clear()
        self.history.extend(Alert(**row) for row in state.get("history", ()))
        self.counts = Counter({k: int(v) for k, v in state.get("counts", {}).items()})
        self.by_metric = Counter({k: int(v) for k, v in state.get("by_metric", {}).items()})
        self.first_step = {k: int(v) for k, v in state.get("first_step", {}).items()}
        self.last_step = {k: int(v) for k, v in state.get("last_step", {}).items()}

    def check(self, step: int, metrics: Mapping[str, float]) -> list[Alert]:
        fired = []
        for i, spec in enumerate(self.specs):
            name = spec.metric_name
            value = metrics.get(name, metrics.get(spec.metric))
            if value is None:
                continue
            value = float(value)
            if not math.isfinite(value):
                continue
            if spec.kind == "threshold":
                alert = self._threshold(step, spec, name, value)
            else:
                alert = self._trend(step, i, spec, name, value)
            if alert is not None:
                fired.append(alert)
        for a in fired:
            self._record(a)
        return fired

    def _threshold(self, step: int, spec: AlertSpec, name: str, value: float) -> Alert | None:
        crossed = value < spec.threshold if spec.condition == "less" else value > spec.threshold
        if not crossed:
            return None
        msg = spec.message or f"{name} = {value:.4g} is {spec.condition} than {spec.threshold:g}"
        return Alert(step, name, spec.level, "threshold", value, float(spec.threshold), msg)

    def _trend(self, step: int, i: int, spec: AlertSpec, name: str, value: float) -> Alert | None:
        series = self._series[i]
        series.append(value)
        if len(series) < spec.window:
            return None
        s = slope(np.fromiter(series, float, len(series)))
        if spec.min_slope is not None and s < spec.min_slope:
            bound, how = spec.min_slope, "below"
        elif spec.max_slope is not None and s > spec.max_slope:
            bound, how = spec.max_slope, "above"
        else:
            return None
        msg = spec.message or f"{name} slope {s:.4g}/step over {spec.window} steps is {how} {bound:g}"
        return Alert(step, name, spec.level, "trend", s, float(bound), msg)

    def _record(self, a: Alert) -> None:
        self.history.append(a)
        self.counts[a.level] += 1
        self.by_metric[a.metric] += 1
        self.first_step.setdefault(a.metric, a.step)
        self.last_step[a.metric] = a.step
        emit = {"info": log.info, "warning": log.warning, "critical": log.critical}[a.level]
        emit(f"reward alert: {a.message}", step=a.step, metric=a.metric, level=a.level, kind=a.kind,
             value=a.value)

    @staticmethod
    def step_metrics(fired: list[Alert], counts: Counter[str]) -> dict[str, float]:
        """``alerts/count`` and ``alerts/<level>`` this step, ``alerts/total`` over the run."""
        out: dict[str, float] = {"alerts/count": len(fired)}
        for level in LEVELS:
            out[f"alerts/{level}"] = sum(1 for a in fired if a.level == level)
        out["alerts/total"] = sum(counts.values())
        return out

    def summary(self) -> dict[str, Any]:
        return {
            "total": sum(self.counts.values()),
            "by_level": {lvl: self.counts.get(lvl, 0) for lvl in LEVELS},
            "by_metric": {
                m: {"count": c, "first_step": self.first_step[m], "last_step": self.last_step[m]}
                for m, c in self.by_metric.most_common()
            },
            "recent": [a.row() for a in list(self.history)[-20:]],
        }
