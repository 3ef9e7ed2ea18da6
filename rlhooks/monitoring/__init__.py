"""Reward monitoring for any training loop: real-time alerts and reward-quality analysis.

The one documented import path for the monitoring API (the reward_monitoring document's names).
It needs no rlhooks run and imports neither torch, wandb, tensorboard nor matplotlib itself::

    from rlhooks.monitoring import AlertLevel, RealtimeMonitor, RewardAnalyzer

    monitor = RealtimeMonitor(print_alerts=True)
    monitor.add_threshold_alert(metric_name="signal_to_noise", threshold=0.5, condition="less",
                                level=AlertLevel.WARNING)
    monitor.add_trend_alert(metric_name="mean_reward", min_slope=-0.01, window_size=10,
                            level=AlertLevel.WARNING)
    for step in range(num_steps):
        ...
        monitor.check_metrics(step, metrics_dict)     # -> the alerts fired this step
    summary = monitor.get_alert_summary()

    analyzer = RewardAnalyzer()
    report = analyzer.analyze_quality(reward_history, steps)   # one {function: scores} dict per step
    importance = analyzer.analyze_function_importance(reward_history, function_names)
    hacking = analyzer.detect_reward_hacking(reward_history, function_names,
                                             performance_metrics=accuracy_over_time)
    RewardAnalyzer.from_jsonl("runs/demo").analyze_quality()  # a saved rlhooks run

Metric names in alerts may be short: ``signal_to_noise`` finds ``rewards/signal_to_noise`` and
``kl_divergence`` finds ``training/kl_divergence`` (see ``rlhooks.monitoring.alerts``). Inside
an rlhooks run the ``reward_monitor`` plugin does all this from its YAML options.

The package is a library below the plugins: ``alerts`` (alert specs, checking, episodes),
``analyzer`` (RewardAnalyzer), ``stats`` (per-step reward statistics), ``realtime``
(RealtimeMonitor). It imports only ``rlhooks``' plugin API and itself; the ``reward_monitor``
plugin and the dashboard import it. Its old home, ``rlhooks.plugins.rewards.{alerts,analyzer,stats}``,
still imports, with a DeprecationWarning.
"""

from __future__ import annotations

from rlhooks.monitoring.alerts import (
    DEFAULT_ALERTS,
    Alert,
    AlertLevel,
    AlertManager,  # noqa: F401 - importable from here before the package split
    AlertSpec,
    did_you_mean,
    log_alert,  # noqa: F401
    resolve_metric,
)
from rlhooks.monitoring.analyzer import AnalyzerError, HackingReport, QualityReport, RewardAnalyzer
from rlhooks.monitoring.realtime import RealtimeMonitor
from rlhooks.monitoring.stats import function_stats, reward_stats

__all__ = [
    "RealtimeMonitor", "AlertLevel", "Alert", "AlertSpec", "DEFAULT_ALERTS", "RewardAnalyzer", "QualityReport",
    "HackingReport", "AnalyzerError", "reward_stats", "function_stats", "resolve_metric", "did_you_mean",
]
