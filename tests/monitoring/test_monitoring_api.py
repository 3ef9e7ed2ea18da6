"""rlhooks.monitoring: the reward_monitoring document's calls, as written, outside any rlhooks run."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from rlhooks import Batch
from rlhooks.host import RunManager, load_config
from rlhooks.monitoring import DEFAULT_ALERTS, AlertLevel, RealtimeMonitor, RewardAnalyzer


def fake_training_loop(num_steps=30, seed=0):
    """Rewards of four functions per step (the document's names) and a metrics dict per step."""
    rng = np.random.default_rng(seed)
    reward_history, steps, accuracy_over_time, metrics = [], [], [], []
    for step in range(num_steps):
        p = min(0.9, 0.2 + 0.02 * step)
        correct = rng.random(32) < p
        rewards = {
            "format_exact": np.where(rng.random(32) < 0.7, 3.0, 0.0),
            "format_approx": rng.uniform(-2.5, 2.5, 32),
            "check_answer": np.where(correct, 3.0, -1.0),
            "check_numbers": np.where(correct, 1.5, 0.0),
        }
        reward_history.append(rewards)
        steps.append(step)
        accuracy_over_time.append(float(correct.mean()))
        total = sum(rewards.values())
        metrics.append({"rewards/mean": float(total.mean()), "rewards/signal_to_noise": float(abs(total.mean()) / total.std()),
                        "training/kl_divergence": 0.01 * step})
    return reward_history, steps, accuracy_over_time, metrics


def test_realtime_alerting_example_as_written(capsys):
    # the document's "Real-time Alerting" example, verbatim apart from the data
    monitor = RealtimeMonitor(print_alerts=True)

    monitor.add_threshold_alert(
        metric_name='signal_to_noise',
        threshold=0.5,
        condition='less',
        level=AlertLevel.WARNING
    )

    monitor.add_trend_alert(
        metric_name='mean_reward',
        min_slope=-0.01,  # Alert if declining
        window_size=10,
        level=AlertLevel.WARNING
    )

    for step in range(12):
        metrics_dict = {"rewards/signal_to_noise": 0.2 if step == 4 else 1.0, "rewards/mean": 5.0 - 0.5 * step}
        monitor.check_metrics(step, metrics_dict)

    summary = monitor.get_alert_summary()
    assert summary["by_metric"]["rewards/signal_to_noise"] == {"count": 1, "first_step": 4, "last_step": 4}
    assert summary["by_metric"]["rewards/mean"] == {"count": 3, "first_step": 9, "last_step": 11}  # full window from step 9
    assert summary["total"] == 4 and summary["by_level"]["warning"] == 4
    assert summary["watching"] == {"signal_to_noise": "rewards/signal_to_noise", "mean_reward": "rewards/mean"}
    err = capsys.readouterr().err
    assert "[WARNING] step 4: rewards/signal_to_noise = 0.2 is less than 0.5" in err


def test_best_practices_alert_calls_and_plain_metric_names():
    # the document's "Alert Configuration" calls (positional, level defaulted), on a loop's own metric names
    monitor = RealtimeMonitor(print_alerts=False)
    monitor.add_threshold_alert('signal_to_noise', threshold=0.3, condition='less')
    monitor.add_trend_alert('mean_reward', min_slope=0, window_size=20)
    fired = [monitor.check_metrics(s, {"signal_to_noise": 0.1, "mean_reward": -float(s)}) for s in range(20)]
    assert all(a.metric == "signal_to_noise" for f in fired for a in f if a.kind == "threshold")
    assert [a.metric for a in fired[19] if a.kind == "trend"] == ["mean_reward"]
    assert monitor.get_alert_summary()["by_level"]["warning"] == 21


def test_short_names_resolve_in_every_namespace():
    monitor = RealtimeMonitor(print_alerts=False)
    monitor.add_threshold_alert("kl_divergence", threshold=0.1, condition="greater", level=AlertLevel.CRITICAL)
    monitor.add_threshold_alert("kept_ratio", threshold=0.5, condition="less")
    monitor.add_threshold_alert("mean", threshold=0.0, condition="less")  # rewards/mean before response_length/mean
    metrics = {"training/kl_divergence": 0.3, "filter/kept_ratio": 0.2, "response_length/mean": -5.0, "rewards/mean": -1.0}
    fired = monitor.check_metrics(1, metrics)
    assert sorted((a.metric, a.level) for a in fired) == [
        ("filter/kept_ratio", "warning"), ("rewards/mean", "warning"), ("training/kl_divergence", "critical")]


def test_unknown_metric_is_reported_with_did_you_mean():
    monitor = RealtimeMonitor(print_alerts=False)
    monitor.add_threshold_alert("kl_divergense", threshold=0.1, condition="greater")
    monitor.check_metrics(1, {"training/kl_divergence": 0.3, "rewards/mean": 1.0})
    assert monitor.get_alert_summary()["never_seen"] == [
        {"metric": "kl_divergense", "kind": "threshold", "did_you_mean": ["training/kl_divergence"]}]


def test_reward_analyzer_examples_as_written():
    reward_history, steps, accuracy_over_time, _ = fake_training_loop()
    function_names = ["format_exact", "format_approx", "check_answer", "check_numbers"]

    analyzer = RewardAnalyzer()

    # Analyze reward quality
    report = analyzer.analyze_quality(reward_history, steps)
    text = f"Quality Score: {report.quality_score:.1f}/100"
    assert 0 < report.quality_score <= 100 and text.startswith("Quality Score: ")
    assert isinstance(report.issues, list) and isinstance(report.recommendations, list)
    assert report.n_steps == 30 and (report.first_step, report.last_step) == (0, 29)

    # Analyze function importance
    importance = analyzer.analyze_function_importance(reward_history, function_names)
    lines = [f"{func}: {metrics['contribution']:.1f}% contribution" for func, metrics in importance.items()]
    assert len(lines) == 4 and sum(m["contribution"] for m in importance.values()) == pytest.approx(100.0)
    # the per-step contribution agrees with the scores: check_answer's mean |score| dominates format_approx's
    assert importance["check_answer"]["contribution"] > importance["format_approx"]["contribution"]

    # Detect reward hacking: reward and accuracy rise together -> no hacking
    hacking_report = analyzer.detect_reward_hacking(
        reward_history,
        function_names,
        performance_metrics=accuracy_over_time
    )
    assert not hacking_report.detected and hacking_report.performance_trend > 0.5
    # the same rewards with a falling accuracy -> flagged, the rising functions named
    hacked = analyzer.detect_reward_hacking(reward_history, function_names, performance_metrics=accuracy_over_time[::-1])
    assert hacked.detected and "check_answer" in hacked.suspect_functions


def test_reward_history_metrics_equal_the_monitors_own():
    """The analyzer turns raw scores into the same step metrics as the reward_monitor plugin."""
    from rlhooks.monitoring.stats import function_stats, reward_stats

    reward_history, steps, _, _ = fake_training_loop(5)
    an = RewardAnalyzer()._over(reward_history, steps)
    for step, raw in zip(steps, reward_history):
        expected = reward_stats(sum(raw.values()))
        expected.update(function_stats(raw, {}))
        assert an.metrics[steps.index(step)] == expected


def test_reward_history_errors_are_clear():
    with pytest.raises(ValueError, match=r"reward_history\[1\] \(step 1\): functions scored different numbers"):
        RewardAnalyzer().analyze_quality([{"a": [1.0, 2.0]}, {"a": [1.0], "b": [1.0, 2.0]}], [0, 1])
    with pytest.raises(ValueError, match="steps has 1 entries but reward_history has 2"):
        RewardAnalyzer().analyze_quality([{"a": [1.0]}, {"a": [2.0]}], [0])


def test_default_alert_switch_in_a_run(tmp_path):
    cfg = load_config({
        "run": {"name": "defaults", "out_dir": str(tmp_path)},
        "rewards": ["check_answer", {"name": "reward_monitor", "default_alerts": True,
                                     "alerts": [{"metric": "kl_divergense", "condition": "greater", "threshold": 1}]}],
        "backends": ["jsonl"],
    })
    m = RunManager(cfg)
    with m.running():
        for step in range(1, 4):
            reward = np.full(8, 3.0) if step == 2 else np.linspace(-1, 3, 8)  # step 2: no spread
            batch = Batch({"uid": np.repeat(np.arange(2), 4).astype(str), "reward": reward,
                           "reward_fn/check_answer": reward}, meta={"reward_functions": ["check_answer"]})
            m.rewards_computed(step, batch)
            metrics = {"actor/kl_loss": 0.5, "actor/entropy": 1.0}
            m.log_metrics(step, {**metrics, **m.step_end(step, batch, metrics)})
            m.dispatch_emitted()
    summary = json.loads((tmp_path / "defaults" / "reward_monitor.json").read_text())
    alerts = summary["alerts"]
    assert len(alerts["watching"]) >= 5  # the defaults that this run's metrics feed
    assert alerts["by_metric"]["rewards/std"] == {"count": 1, "first_step": 2, "last_step": 2}
    assert alerts["by_metric"]["training/kl_divergence"]["count"] == 3  # actor/kl_loss (KL to the reference) 0.5 > 0.2
    never = {n["metric"]: n["did_you_mean"] for n in alerts["never_seen"]}
    assert never["kl_divergense"] == ["training/kl_divergence"]
    assert "filter/kept_ratio" in never  # no filter in this run
    assert {s.metric for s in DEFAULT_ALERTS} >= {"rewards/signal_to_noise", "training/kl_divergence"}


def test_import_pulls_no_heavy_dependency():
    """``import rlhooks.monitoring`` loads none of torch/wandb/tensorboard/matplotlib (nor the dashboard's
    streamlit/plotly/pandas): a training loop outside rlhooks pays only for numpy, attrs and structlog."""
    code = (
        "import sys; import rlhooks.monitoring; "
        "heavy = ('torch', 'wandb', 'tensorboard', 'matplotlib', 'streamlit', 'plotly', 'pandas'); "
        "print(sorted({m.split('.')[0] for m in sys.modules} & set(heavy)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"


@pytest.mark.parametrize("print_alerts", [True, False])
def test_each_fired_alert_is_reported_once(print_alerts, capsys):
    """print_alerts=True: one printed line per alert (not a structlog line as well); False: one structlog
    event per alert (for the application's logging), nothing printed."""
    from structlog.testing import capture_logs

    monitor = RealtimeMonitor(print_alerts=print_alerts)
    monitor.add_threshold_alert("signal_to_noise", threshold=0.5, condition="less")
    with capture_logs() as logs:
        for step in range(3):
            monitor.check_metrics(step, {"signal_to_noise": 0.1})
    printed = [ln for ln in capsys.readouterr().err.splitlines() if "signal_to_noise = 0.1 is less than 0.5" in ln]
    events = [e for e in logs if e["event"].startswith("reward alert:")]
    assert (len(printed), len(events)) == ((3, 0) if print_alerts else (0, 3))
    assert monitor.get_alert_summary()["total"] == 3


def test_an_empty_reward_history_is_named_as_such():
    from rlhooks.monitoring import AnalyzerError

    with pytest.raises(AnalyzerError, match="reward_history is empty: give one dict per step"):
        RewardAnalyzer().analyze_quality([], [])


@pytest.mark.parametrize("name", ["alerts", "analyzer", "stats"])
def test_the_old_import_paths_still_work_with_a_deprecation_warning(name, monkeypatch):
    """Issue 39: the library moved from rlhooks.plugins.rewards to its own package; the old module is the
    new one (private names included), with a DeprecationWarning naming the new path."""
    import importlib

    old = f"rlhooks.plugins.rewards.{name}"
    monkeypatch.delitem(sys.modules, old, raising=False)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to rlhooks.monitoring.{name}"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(f"rlhooks.monitoring.{name}")


def test_a_checkpoint_saved_before_the_move_still_loads():
    """reward_monitor's state holds AlertLevel members: a checkpoint pickled them under the old module."""
    import pickle
    import warnings

    from rlhooks.monitoring.alerts import AlertLevel

    saved = pickle.dumps({"level": AlertLevel.CRITICAL}, protocol=0)
    assert b"rlhooks.monitoring.alerts" in saved
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        loaded = pickle.loads(saved.replace(b"rlhooks.monitoring.alerts", b"rlhooks.plugins.rewards.alerts"))
    assert loaded == {"level": AlertLevel.CRITICAL} and loaded["level"] is AlertLevel.CRITICAL
