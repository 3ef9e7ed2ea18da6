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
Every firing step is counted (``alerts/*`` metrics, the run-end summary), but an alert is logged
when its condition starts to hold, not again on each following step while it holds; when it
stops holding, one info line says on which steps it held. Those runs of consecutive firing steps
are *episodes*: the summary lists each once (``episodes``: metric, level, start, end, steps, peak,
ongoing), as do the report and the dashboard (``episodes_from_rows`` groups logged alert rows the
same way).
The monitor's ``on_step_end`` runs last (``trylast``), so alerts see every metric of the step:
the engine's, the filters', what plugins returned from ``on_batch_sampled`` /
``on_rewards_computed`` and from their own ``on_step_end`` (e.g. ``source/<name>/...``).

Metric names: a full key (``training/kl_divergence``) is used as it is. A short name is looked up
in every namespace the run logs: the key itself if a step has it, else an alias (``mean_reward`` =
``rewards/mean``, ``reward_std`` = ``rewards/std``), else any key ending in ``/<name>``
(``kl_divergence`` finds ``training/kl_divergence``, ``kept_ratio`` finds ``filter/kept_ratio``).
When several keys end that way the first namespace of ``NAMESPACE_ORDER`` wins
(``mean`` is ``rewards/mean``, not ``response_length/mean``) and the choice is logged once.
An alert whose metric never appeared in any step is listed at run end under ``never_seen`` in
the summary, with the closest logged keys as a did-you-mean.

``default_alerts: true`` on ``reward_monitor`` adds ``DEFAULT_ALERTS`` (see docs/how-to/rewards.md).
"""

from __future__ import annotations

import difflib
import enum
import math
from collections import Counter, deque
from collections.abc import Iterable, Mapping
from typing import Any

import attrs
import numpy as np
import structlog

log = structlog.get_logger("rlhooks.rewards.alerts")

LEVELS = ("info", "warning", "critical")
ALIASES = {"mean_reward": "rewards/mean", "reward_std": "rewards/std"}
#: namespaces tried first, in this order, when a short name matches keys of several namespaces
NAMESPACE_ORDER = ("rewards/", "training/", "contributions/", "filter/", "curriculum/", "sampler/", "source/")


class AlertLevel(str, enum.Enum):
    """Alert severity; a plain string too (``AlertLevel.WARNING == "warning"``)."""

    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"

    def __str__(self) -> str:
        return self.value


def _level(value: Any) -> Any:
    if isinstance(value, AlertLevel):
        return value.value
    return value.lower() if isinstance(value, str) else value


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
    level: str = attrs.field(default="warning", converter=_level, validator=_one_of(*LEVELS))
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


def _namespace_rank(key: str) -> int:
    for i, ns in enumerate(NAMESPACE_ORDER):
        if key.startswith(ns):
            return i
    return len(NAMESPACE_ORDER)


def resolve_metric(name: str, keys: Iterable[str]) -> tuple[str | None, list[str]]:
    """The key a (possibly short) alert metric name means among ``keys``, and the other candidates."""
    keys = keys if isinstance(keys, (set, frozenset, dict)) else set(keys)
    if name in keys:
        return name, []
    alias = ALIASES.get(name)
    if alias is not None and alias in keys:
        return alias, []
    suffix = "/" + name
    found = sorted((k for k in keys if k.endswith(suffix)), key=lambda k: (_namespace_rank(k), len(k), k))
    if not found:
        return None, []
    return found[0], found[1:]


def did_you_mean(name: str, keys: Iterable[str], n: int = 3) -> list[str]:
    """Logged keys closest to ``name`` (by the whole key, or by its last part for a short name)."""
    keys = sorted(set(keys))
    by_last: dict[str, str] = {}
    for k in keys:
        by_last.setdefault(k.rsplit("/", 1)[-1], k)
    close = difflib.get_close_matches(name, keys, n=n, cutoff=0.6)
    for last in difflib.get_close_matches(name.rsplit("/", 1)[-1], list(by_last), n=n, cutoff=0.6):
        if by_last[last] not in close:
            close.append(by_last[last])
    return close[:n]


#: the alert set ``default_alerts: true`` turns on (documented in docs/how-to/rewards.md)
DEFAULT_ALERTS: tuple[AlertSpec, ...] = (
    AlertSpec(metric="rewards/signal_to_noise", condition="less", threshold=0.5, level="warning",
              message="weak reward signal: |mean| / std below 0.5"),
    AlertSpec(metric="rewards/mean", min_slope=-0.01, window=10, level="warning",
              message="mean reward declining over the last 10 steps"),
    AlertSpec(metric="rewards/std", condition="less", threshold=1e-6, level="critical",
              message="every response got the same reward: no learning signal for group-relative advantages"),
    AlertSpec(metric="rewards/nonfinite", condition="greater", threshold=0, level="critical",
              message="NaN/inf rewards in this step"),
    AlertSpec(metric="training/kl_divergence", condition="greater", threshold=0.2, level="warning",
              message="policy drifting far from the reference (KL above 0.2)"),
    AlertSpec(metric="training/policy_entropy", condition="less", threshold=0.05, level="warning",
              message="policy entropy collapsed (below 0.05)"),
    AlertSpec(metric="filter/kept_ratio", condition="less", threshold=0.1, level="warning",
              message="the DAPO filter keeps under 10% of the generated groups"),
)


def _worse(spec: AlertSpec, a: float, b: float) -> float:
    """The more extreme of two values in the alert's direction (its peak)."""
    low = spec.condition == "less" if spec.kind == "threshold" else spec.min_slope is not None and b < spec.min_slope
    return min(a, b) if low else max(a, b)


def episodes_from_rows(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Logged alert rows (one per firing step) grouped into episodes: consecutive steps of one alert
    (same metric, level, kind and bound), each with start, end, steps and peak (most extreme value)."""
    open_: dict[tuple, dict[str, Any]] = {}
    out: list[dict[str, Any]] = []
    for row in sorted(rows, key=lambda r: r.get("step", 0)):
        key = (row.get("metric"), row.get("level"), row.get("kind"), row.get("bound"))
        step, value = int(row.get("step", 0)), float(row.get("value", math.nan))
        ep = open_.get(key)
        if ep is not None and ep["end"] == step - 1:
            low = value < float(row.get("bound", 0.0))
            ep["end"], ep["steps"] = step, ep["steps"] + 1
            ep["peak"] = min(ep["peak"], value) if low else max(ep["peak"], value)
            continue
        ep = {"metric": key[0], "level": key[1], "kind": key[2], "message": row.get("message", ""),
              "start": step, "end": step, "steps": 1, "peak": value, "bound": key[3]}
        open_[key] = ep
        out.append(ep)
    return out


def log_alert(a: Alert) -> None:
    """A fired alert as a structlog event at its level."""
    emit = {"info": log.info, "warning": log.warning, "critical": log.critical}[a.level]
    emit(f"reward alert: {a.message}", step=a.step, metric=a.metric, level=a.level, kind=a.kind, value=a.value)


class AlertManager:
    """Evaluates alerts step after step; bounded memory (one deque of ``window`` per trend)."""

    def __init__(self, specs: tuple[AlertSpec, ...] | list[AlertSpec], keep: int = 1000, log_alerts: bool = True) -> None:
        self.specs = list(specs)
        self.log_alerts = log_alerts  # False: the caller reports fired alerts itself (RealtimeMonitor)
        self._series = {i: deque(maxlen=s.window) for i, s in enumerate(self.specs) if s.kind == "trend"}
        self.history: deque[Alert] = deque(maxlen=keep)  # recent alerts, for the summary
        self.counts: Counter[str] = Counter()  # by level, whole run
        self.by_metric: Counter[str] = Counter()
        self.first_step: dict[str, int] = {}
        self.last_step: dict[str, int] = {}
        self.resolved: dict[int, str] = {}  # spec index -> the logged key it watches
        self.keys_seen: set[str] = set()  # every metric key seen, for the did-you-mean
        self._streaks: dict[int, tuple[int, int]] = {}  # spec index -> (first, last) step of its current firing
        self.episodes: deque[dict[str, Any]] = deque(maxlen=keep)  # one per run of consecutive firing steps
        self._open: dict[int, dict[str, Any]] = {}  # spec index -> its ongoing episode (also in self.episodes)

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
            "resolved": {self.specs[i].metric: k for i, k in self.resolved.items()},
            "streaks": {str(i): list(v) for i, v in self._streaks.items()},
            "episodes": [dict(e) for e in self.episodes],
            "open": {str(i): list(self.episodes).index(e) for i, e in self._open.items() if e in self.episodes},
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
        resolved = state.get("resolved", {})
        self.resolved = {i: resolved[s.metric] for i, s in enumerate(self.specs) if s.metric in resolved}
        self._streaks = {int(i): (int(v[0]), int(v[1])) for i, v in state.get("streaks", {}).items()
                         if int(i) < len(self.specs)}
        self.episodes.clear()
        self.episodes.extend(dict(e) for e in state.get("episodes", ()))
        eps = list(self.episodes)
        self._open = {int(i): eps[j] for i, j in state.get("open", {}).items() if int(i) < len(self.specs) and j < len(eps)}

    def check(self, step: int, metrics: Mapping[str, float]) -> list[Alert]:
        self.keys_seen.update(metrics)
        fired = []
        for i, spec in enumerate(self.specs):
            name = self._resolve(i, spec, metrics)
            if name is None:
                continue
            value = metrics[name]
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
                self._log_streak(i, alert)
            else:
                self._end_streak(i, step)
        for a in fired:
            self._record(a)
        return fired

    def _log_streak(self, i: int, a: Alert) -> None:
        """Log an alert when its condition starts to hold; while it keeps holding, every step is still
        counted and kept in the history, but not logged again (no warning per step for hours)."""
        start = self._streaks.get(i)
        if start is None or start[1] != a.step - 1:
            self._streaks[i] = (a.step, a.step)
            ep = {"metric": a.metric, "level": a.level, "kind": a.kind, "message": a.message, "start": a.step,
                  "end": a.step, "steps": 1, "peak": a.value, "bound": a.bound, "ongoing": True}
            self._open[i] = ep
            self.episodes.append(ep)
            if self.log_alerts:
                log_alert(a)
        else:
            self._streaks[i] = (start[0], a.step)
            ep = self._open.get(i)
            if ep is not None:
                ep["end"], ep["steps"] = a.step, ep["steps"] + 1
                ep["peak"] = _worse(self.specs[i], ep["peak"], a.value)

    def _end_streak(self, i: int, step: int) -> None:
        ep = self._open.pop(i, None)
        if ep is not None:
            ep["ongoing"] = False
        streak = self._streaks.pop(i, None)
        if streak is not None and self.log_alerts and streak[1] > streak[0]:
            log.info(f"reward alert cleared: {self.specs[i].metric} held on steps {streak[0]}-{streak[1]}",
                     metric=self.specs[i].metric, step=step)

    def _resolve(self, i: int, spec: AlertSpec, metrics: Mapping[str, Any]) -> str | None:
        known = self.resolved.get(i)
        if known is not None and known in metrics:
            return known
        name, others = resolve_metric(spec.metric, metrics)
        if name is None:
            return None
        if name != known:
            self.resolved[i] = name
            if name != spec.metric:
                log.info(f"alert metric {spec.metric!r} watches {name!r}", also_matching=others[:5] or None)
        return name

    def never_seen(self) -> list[dict[str, Any]]:
        """Alerts whose metric no step has logged so far, each with a did-you-mean."""
        out = []
        for i, spec in enumerate(self.specs):
            if i in self.resolved:
                continue
            out.append({"metric": spec.metric, "kind": spec.kind, "did_you_mean": did_you_mean(spec.metric, self.keys_seen)})
        return out

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
            "episodes": [dict(e) for e in self.episodes],
            "watching": {s.metric: self.resolved[i] for i, s in enumerate(self.specs) if i in self.resolved},
            "never_seen": self.never_seen(),
        }
