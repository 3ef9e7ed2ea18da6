"""RealtimeMonitor: threshold and trend alerts on each step's metrics dict, in any training loop."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from rlhooks.monitoring.alerts import DEFAULT_ALERTS, Alert, AlertLevel, AlertManager, AlertSpec, log_alert


class RealtimeMonitor:
    """Threshold and trend alerts checked on each step's metrics dict, outside or inside an rlhooks run.

    ``print_alerts``: print each fired alert to stderr, one line each; ``False``: log them through
    structlog instead (to route them with the application's logging).
    ``default_alerts``: start with the documented default alert set (``DEFAULT_ALERTS``).
    """

    def __init__(self, print_alerts: bool = True, default_alerts: bool = False, keep: int = 1000) -> None:
        self.print_alerts = print_alerts
        self._keep = keep
        self._specs: list[AlertSpec] = list(DEFAULT_ALERTS) if default_alerts else []
        self._manager = AlertManager(self._specs, keep=keep, log_alerts=False)

    @property
    def alerts(self) -> list[AlertSpec]:
        return list(self._specs)

    def _add(self, spec: AlertSpec) -> AlertSpec:
        old = self._manager
        self._specs.append(spec)
        self._manager = AlertManager(self._specs, keep=self._keep, log_alerts=False)
        self._manager.load_state_dict(old.state_dict())  # keeps counts, history and trend windows
        self._manager.keys_seen = old.keys_seen
        return spec

    def add_threshold_alert(self, metric_name: str, threshold: float, condition: str = "less",
                            level: AlertLevel | str = AlertLevel.WARNING, message: str = "") -> AlertSpec:
        """Fire on a step whose ``metric_name`` is ``less`` / ``greater`` than ``threshold``."""
        return self._add(AlertSpec(metric=metric_name, condition=condition, threshold=float(threshold),
                                   level=level, message=message))

    def add_trend_alert(self, metric_name: str, min_slope: float | None = None, window_size: int = 10,
                        level: AlertLevel | str = AlertLevel.WARNING, max_slope: float | None = None,
                        message: str = "") -> AlertSpec:
        """Fire when the least-squares slope per step of the last ``window_size`` values is below
        ``min_slope`` (or above ``max_slope``)."""
        if min_slope is None and max_slope is None:
            raise ValueError(f"trend alert on {metric_name!r} needs min_slope and/or max_slope")
        return self._add(AlertSpec(metric=metric_name, min_slope=min_slope, max_slope=max_slope,
                                   window=int(window_size), level=level, message=message))

    def check_metrics(self, step: int, metrics: Mapping[str, Any]) -> list[Alert]:
        """Check one step's metrics; returns the alerts fired (non-numbers are ignored)."""
        numbers = {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
                   or type(v).__module__ == "numpy" and getattr(v, "ndim", 1) == 0}
        fired = self._manager.check(int(step), numbers)
        for a in fired:  # reported once: printed, or logged
            if self.print_alerts:
                print(f"[{a.level.upper()}] step {a.step}: {a.message}", file=sys.stderr)
            else:
                log_alert(a)
        return fired

    def get_alert_summary(self) -> dict[str, Any]:
        """total, by_level, by_metric (count, first/last step), recent alerts, watched keys, never-seen metrics."""
        return self._manager.summary()

    @property
    def history(self) -> list[Alert]:
        return list(self._manager.history)

    def state_dict(self) -> dict[str, Any]:
        return self._manager.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._manager.load_state_dict(state)
