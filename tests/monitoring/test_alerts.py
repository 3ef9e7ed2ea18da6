"""Threshold and trend alerts: when they fire, what they emit, and bad alert configs."""

from __future__ import annotations

import numpy as np
import pytest

from rlhooks import ConfigError
from rlhooks.host import load_config
from rlhooks.monitoring.alerts import AlertManager, AlertSpec, slope


def test_slope_matches_least_squares():
    y = np.array([3.0, 1.0, 4.0, 1.0, 5.0, 9.0])
    assert slope(y) == pytest.approx(np.polyfit(np.arange(6), y, 1)[0])


@pytest.mark.parametrize(("condition", "values", "fires"), [
    ("less", [0.4, 0.5, 0.6], [True, False, False]),  # strict comparison
    ("greater", [0.4, 0.5, 0.6], [False, False, True]),
])
def test_threshold(condition, values, fires):
    am = AlertManager([AlertSpec(metric="signal_to_noise", condition=condition, threshold=0.5)])
    got = [bool(am.check(step, {"rewards/signal_to_noise": v})) for step, v in enumerate(values, 1)]
    assert got == fires


def test_trend_min_and_max_slope_need_a_full_window():
    am = AlertManager([
        AlertSpec(metric="mean_reward", min_slope=-0.1, window=3, level="critical"),
        AlertSpec(metric="rewards/std", max_slope=0.5, window=2, level="info"),
    ])
    series = [(1.0, 0.0), (0.5, 1.0), (0.0, 1.2), (0.0, 1.3)]
    fired = [am.check(step, {"rewards/mean": m, "rewards/std": s}) for step, (m, s) in enumerate(series, 1)]
    kinds = [[(a.metric, a.level) for a in f] for f in fired]
    # mean slopes: steps 1-3 -> -0.5 (fires), steps 2-4 -> -0.25 (fires); std slopes: 1.0, 0.2, 0.1
    assert kinds == [[], [("rewards/std", "info")], [("rewards/mean", "critical")], [("rewards/mean", "critical")]]
    assert fired[2][0].value == pytest.approx(-0.5) and fired[2][0].bound == -0.1
    assert AlertManager.step_metrics(fired[2], am.counts) == {
        "alerts/count": 1, "alerts/info": 0, "alerts/warning": 0, "alerts/critical": 1, "alerts/total": 3}
    s = am.summary()
    assert s["total"] == 3 and s["by_level"] == {"info": 1, "warning": 0, "critical": 2}
    assert s["by_metric"]["rewards/mean"] == {"count": 2, "first_step": 3, "last_step": 4}


def test_missing_and_nonfinite_metrics_are_skipped():
    am = AlertManager([AlertSpec(metric="rewards/mean", condition="less", threshold=1.0)])
    assert am.check(1, {}) == [] and am.check(2, {"rewards/mean": float("nan")}) == []
    assert len(am.check(3, {"rewards/mean": 0.0})) == 1


def test_alerts_log_through_structlog():
    from structlog.testing import capture_logs

    am = AlertManager([AlertSpec(metric="x/y", condition="greater", threshold=1, level="critical", message="too big")])
    with capture_logs() as logs:
        am.check(7, {"x/y": 2.0})
    assert logs[0]["log_level"] == "critical" and "too big" in logs[0]["event"] and logs[0]["step"] == 7


@pytest.mark.parametrize(("alert", "needle"), [
    ({"metric": "x", "condition": "less"}, "needs both condition (less | greater) and threshold"),
    ({"metric": "x"}, "needs either condition + threshold, or min_slope / max_slope"),
    ({"metric": "x", "condition": "less", "threshold": 1, "min_slope": 0}, "write two alerts"),
    ({"metric": "x", "condition": "below", "threshold": 1}, "condition must be one of less, greater; got 'below'"),
    ({"metric": "x", "min_slope": 0, "level": "fatal"}, "level must be one of info, warning, critical"),
    ({"metric": "x", "min_slope": 0, "window": 1}, "'window' must be >= 2"),
    ({"metric": "x", "min_slope": "steep"}, "expected a number"),
])
def test_bad_alert_config(alert, needle):
    with pytest.raises(ConfigError) as e:
        load_config({"rewards": [{"name": "reward_monitor", "alerts": [{"metric": "ok", "min_slope": 0}, alert]}]})
    msg = str(e.value)
    assert "rewards[0].alerts[1]" in msg and "(reward_monitor)" in msg and needle in msg


def test_an_alert_is_logged_when_it_starts_to_hold_and_counted_every_step():
    """No warning per step while a condition holds: logged at its start, one info line when it clears,
    and again when it returns; the counts (and so alerts/total) still cover every firing step."""
    import structlog

    am = AlertManager([AlertSpec(metric="filter/kept_ratio", condition="less", threshold=0.3, level="warning")])
    values = [0.5, 0.2, 0.1, 0.2, 0.4, 0.1, 0.1]  # holds on steps 2-4 and 6-7
    with structlog.testing.capture_logs() as logs:
        fired = [len(am.check(step, {"filter/kept_ratio": v})) for step, v in enumerate(values, 1)]
        # a resumed manager continues the streak instead of logging it anew
        resumed = AlertManager(am.specs)
        resumed.load_state_dict(am.state_dict())
        resumed.check(8, {"filter/kept_ratio": 0.1})
    assert fired == [0, 1, 1, 1, 0, 1, 1] and am.counts["warning"] == 5
    warnings = [e for e in logs if e["log_level"] == "warning"]
    assert [e["step"] for e in warnings] == [2, 6]
    cleared = [e for e in logs if "cleared" in e["event"]]
    assert len(cleared) == 1 and "steps 2-4" in cleared[0]["event"]
