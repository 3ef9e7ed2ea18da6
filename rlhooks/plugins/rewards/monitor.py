"""RewardMonitor: reward-signal statistics, training dynamics, alerts and an end-of-run analysis.

Which rows: by default (``stats_on: generated``) the reward statistics cover every response
generated in the step (all ``on_rewards_computed`` batches of the step, before any filter),
because DAPO drops the all-correct / all-wrong groups and post-filter statistics would
describe a biased sample. ``stats_on: trained`` uses the rows that trained instead.
Training dynamics always come from ``on_step_end`` (engine metrics and the trained batch).

Metrics per step:

rewards/mean|std|min|max|total   over the finite ``reward`` values (std: population, ddof 0;
                                 total: sum); rewards/count rows, rewards/nonfinite NaN/inf rows
rewards/variance                 std squared
rewards/signal_to_noise          |mean| / std (0 when std is 0)
rewards/entropy                  Shannon entropy (nats) of a histogram of the rewards with
                                 ``entropy_bins`` equal-width bins over [min, max] (0 if all equal)
rewards/functions/<f>, <f>_std   mean and std of each function's unweighted score (reward_fn/<f>)
contributions/<f>                100 * |w_f * mean_f| / sum_g |w_g * mean_g| (weights from the
                                 ``rewards:`` config, 1 when unknown)
training/kl_divergence           KL to the reference policy: engine metric actor/kl_loss (verl's KL
                                 loss), else actor/reward_kl_penalty (verl's in-reward KL)
training/policy_update_kl        engine metric actor/ppo_kl: the old-to-new policy KL of the update
training/policy_entropy          engine metric actor/entropy
training/advantage_mean|std      over the trained batch's ``advantage`` column
task/<column>                    mean of a verifier column (``task_columns``, default ``acc``) over the
                                 same rows as the reward statistics: the reward-hacking check's task signal
alerts/count|info|warning|critical, alerts/total   see alerts.py

Distributions (``log_distributions: true``) go to backends through ``run.log_histogram`` as
``rewards/distribution`` and ``rewards/functions/<f>/distribution``. The step history used for
trend alerts and the run-end analysis is a deque of at most ``history`` steps.

At run end the monitor logs an alert summary and (``analyze_at_end``) the analyzer's quality
report, function importance and reward-hacking check, and writes them as JSON to
``<run_dir>/<summary_file>`` (with ``stop_reason`` / ``stopped_by`` when a plugin stopped the run).

``stop_on_critical`` / ``stop_on_hacking`` make the monitor stop the run (``run.request_stop``) on a
critical alert, or when the reward-hacking check, run on the history every ``hacking_check_every``
steps, finds hacking likely with high confidence.
"""

from __future__ import annotations

import json
import math
from collections import deque
from collections.abc import Mapping
from typing import Any, Literal

import attrs
import numpy as np
import structlog

from rlhooks import ADVANTAGE, REWARD, REWARD_FN_PREFIX, Batch, RunContext, hookimpl, write_atomic
from rlhooks.monitoring.alerts import DEFAULT_ALERTS, AlertManager, AlertSpec
from rlhooks.monitoring.analyzer import AnalyzerError, RewardAnalyzer
from rlhooks.monitoring.stats import function_stats, reward_stats

log = structlog.get_logger("rlhooks.rewards.monitor")

#: KL to the reference policy, in order of preference (the reward-hacking check reads it)
KL_KEYS = ("actor/kl_loss", "actor/reward_kl_penalty")
#: the PPO update's old-to-new KL: how far one step moved the policy, not the drift from the reference
UPDATE_KL_KEY = "actor/ppo_kl"
ENTROPY_KEY = "actor/entropy"


@attrs.frozen(kw_only=True)
class RewardMonitorOptions:
    #: rows the reward statistics cover: every generated response (pre-filter) or the trained rows
    stats_on: Literal["generated", "trained"] = "generated"
    #: steps kept in memory for trends and the run-end analysis
    history: int = attrs.field(default=1000, validator=attrs.validators.ge(1))
    entropy_bins: int = attrs.field(default=20, validator=attrs.validators.ge(2))
    #: send reward distributions to backends that support histograms
    log_distributions: bool = False
    #: ...every this many steps
    distribution_every: int = attrs.field(default=1, validator=attrs.validators.ge(1))
    alerts: tuple[AlertSpec, ...] = ()
    #: also watch the documented default alert set (alerts.DEFAULT_ALERTS)
    default_alerts: bool = False
    #: run the RewardAnalyzer on the in-memory history at run end
    analyze_at_end: bool = True
    #: a metric that measures real performance (e.g. val/acc), for the reward-hacking check; unset:
    #: task/<column> of the first task column the batches have (see analyzer.TASK_SIGNALS)
    performance_metric: str | None = None
    #: batch columns that score the task itself (a verifier's 0/1), logged as task/<column>
    task_columns: tuple[str, ...] = ("acc",)
    #: JSON file in the run directory for the run-end summary
    summary_file: str = "reward_monitor.json"
    #: stop the run (``run.request_stop``: status ``stopped``, a checkpoint) when a critical alert fires
    stop_on_critical: bool = False
    #: stop the run when the reward-hacking check, run on the history every ``hacking_check_every``
    #: steps, says "reward hacking likely" with high confidence
    stop_on_hacking: bool = False
    #: steps between in-run reward-hacking checks (with ``stop_on_hacking``; the first at this step)
    hacking_check_every: int = attrs.field(default=10, validator=attrs.validators.ge(3))


class RewardMonitor:
    """Reward statistics, training dynamics, alerts and run-end analysis (see module docstring)."""

    #: reward_monitor.json states the outcome: it ends after the backends that may lose data
    records_outcome = True

    Options = RewardMonitorOptions

    def __init__(self, options: RewardMonitorOptions | None = None) -> None:
        self.options = options if options is not None else RewardMonitorOptions()
        specs = (*DEFAULT_ALERTS, *self.options.alerts) if self.options.default_alerts else self.options.alerts
        self.alerts = AlertManager(specs)
        self.history: deque[tuple[int, dict[str, float]]] = deque(maxlen=self.options.history)
        self.run: RunContext | None = None
        self.weights: dict[str, float] = {}
        self.reward_range: tuple[float, float] | None = None
        self._step: int | None = None
        self._rewards: list[np.ndarray] = []
        self._components: dict[str, list[np.ndarray]] = {}
        self._task: dict[str, list[np.ndarray]] = {}
        #: the columns it reads (an engine reading from a store reads only what its plugins declare)
        self.batch_columns = (REWARD, REWARD_FN_PREFIX + "*", ADVANTAGE, *self.options.task_columns)

    # -- hooks ----------------------------------------------------------------------------
    @hookimpl
    def on_run_start(self, run: RunContext) -> None:
        self.run = run
        fns = [c for c in run.config.rewards if c.is_reward_function]
        self.weights = {c.name: float(c.weight) for c in fns}
        self.reward_range = _total_range([(c.weight, getattr(c.obj, "reward_range", None)) for c in fns])

    @hookimpl
    def on_rewards_computed(self, step: int, batch: Batch) -> None:
        if self.options.stats_on != "generated":
            return None
        if self._step != step:
            self._reset(step)
        self._add_rows(batch)
        return None

    @hookimpl(trylast=True)  # last: ``metrics`` then holds every other plugin's step metrics for alerts
    def on_step_end(self, step: int, batch: Batch, metrics: Mapping[str, float]) -> dict[str, float]:
        if self.options.stats_on == "trained" or self._step != step or not self._rewards:
            self._reset(step)  # also an engine that never called on_rewards_computed
            self._add_rows(batch)
        reward = np.concatenate(self._rewards) if self._rewards else np.zeros(0)
        components = {k: np.concatenate(v) for k, v in self._components.items()}
        out = reward_stats(reward, self.options.entropy_bins)
        out.update(function_stats(components, self.weights))
        for col, parts in self._task.items():
            values = np.concatenate(parts)
            values = values[np.isfinite(values)]
            if len(values):
                out[f"task/{col}"] = float(values.mean())
        out.update(self._dynamics(batch, metrics))
        fired = self.alerts.check(step, {**metrics, **out})
        out.update(AlertManager.step_metrics(fired, self.alerts.counts))
        if fired and self.run is not None:
            self.run.log_table("alerts", [a.row() for a in fired], step=step)
        opts = self.options
        if opts.log_distributions and self.run is not None and step % opts.distribution_every == 0:
            self.run.log_histogram("rewards/distribution", reward, step=step)
            for name, values in components.items():
                self.run.log_histogram(f"rewards/functions/{name}/distribution", values, step=step)
        kept = dict(out)
        perf = self.options.performance_metric
        if perf and perf in metrics:
            kept[perf] = float(metrics[perf])
        self.history.append((step, kept))
        self._reset(None)
        self._maybe_stop(step, fired)
        return out

    def _maybe_stop(self, step: int, fired: list[Any]) -> None:
        """``stop_on_critical`` / ``stop_on_hacking``: ask the engine to end the run after this step."""
        if self.run is None or self.run.stop_requested:
            return
        opts = self.options
        critical = [a for a in fired if str(a.level) == "critical"] if opts.stop_on_critical else []
        if critical:
            a = critical[0]
            self.run.request_stop(f"critical alert at step {step}: {a.message} (reward_monitor stop_on_critical)")
            return
        if opts.stop_on_hacking and len(self.history) >= opts.hacking_check_every and step % opts.hacking_check_every == 0:
            try:
                report = RewardAnalyzer(self.history, reward_range=self.reward_range).detect_reward_hacking(
                    performance_metric=opts.performance_metric)
            except AnalyzerError as exc:
                log.info(f"in-run reward-hacking check skipped at step {step}: {exc}")
                return
            if report.detected and report.confidence == "high":
                self.run.request_stop(f"{report.verdict} (checked at step {step}; reward_monitor stop_on_hacking)")

    @hookimpl
    def on_run_end(self, status: str) -> None:
        summary = self.summary(status)
        a = summary["alerts"]
        for miss in a["never_seen"]:
            hint = f"; did you mean {' or '.join(repr(k) for k in miss['did_you_mean'])}?" if miss["did_you_mean"] else ""
            log.warning(f"alert on {miss['metric']!r} never fired nor checked: no step logged that metric{hint}",
                        metric=miss["metric"])
        log.info(
            "reward monitor summary", status=status, alerts=a["total"], by_level=a["by_level"],
            quality_score=(summary.get("quality") or {}).get("quality_score"),
            coverage_basis=(summary.get("quality") or {}).get("coverage_basis"),
            reward_hacking=(summary.get("reward_hacking") or {}).get("detected"),
        )
        verdict = (summary.get("reward_hacking") or {}).get("verdict")
        if verdict:
            (log.warning if summary["reward_hacking"]["detected"] else log.info)(f"reward hacking check: {verdict}")
        if self.run is not None:
            path = self.run.run_dir / self.options.summary_file
            write_atomic(path, json.dumps(summary, indent=2, default=_json_default))  # never a 0-byte file

    # -- resumable state ------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Step history and alert state (between steps; a step's partial rows are not kept)."""
        return {
            "version": 1,
            "history": [[step, dict(m)] for step, m in self.history],
            "alerts": self.alerts.state_dict(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state.get("version") != 1:
            raise ValueError(f"reward_monitor: unsupported saved state version {state.get('version')!r} (expected 1)")
        self.history.clear()
        self.history.extend((int(step), dict(m)) for step, m in state["history"])
        self.alerts.load_state_dict(state["alerts"])
        self._reset(None)

    # -- helpers --------------------------------------------------------------------------
    def summary(self, status: str = "") -> dict[str, Any]:
        """Alert summary plus, when enabled and possible, the analyzer's reports."""
        out: dict[str, Any] = {
            "status": status, "steps": len(self.history), "alerts": self.alerts.summary(),
            "reward_range": list(self.reward_range) if self.reward_range is not None else None,
        }
        if self.run is not None and self.run.stop_reason:  # a requested stop (this monitor's or another plugin's)
            out["stop_reason"], out["stopped_by"] = self.run.stop_reason, self.run.stopped_by
        if not self.options.analyze_at_end or not self.history:
            return out
        an = RewardAnalyzer(self.history, reward_range=self.reward_range)
        try:
            out["quality"] = an.analyze_quality().to_dict()
        except AnalyzerError as exc:
            out["quality_error"] = str(exc)
        out["function_importance"] = an.analyze_function_importance()
        out["reward_hacking"] = an.detect_reward_hacking(self.options.performance_metric).to_dict()
        return out

    def _reset(self, step: int | None) -> None:
        self._step, self._rewards, self._components, self._task = step, [], {}, {}

    def _add_rows(self, batch: Batch) -> None:
        if not len(batch):
            return
        if REWARD in batch:
            self._rewards.append(np.asarray(batch[REWARD], dtype=np.float64))
        for col in self.options.task_columns:
            if col in batch:
                self._task.setdefault(col, []).append(np.asarray(batch[col], dtype=np.float64))
        names = batch.meta.get("reward_functions") or [
            c[len(REWARD_FN_PREFIX):] for c in batch.columns if c.startswith(REWARD_FN_PREFIX)
        ]
        for name in names:
            col = REWARD_FN_PREFIX + name
            if col in batch:
                self._components.setdefault(name, []).append(np.asarray(batch[col], dtype=np.float64))

    @staticmethod
    def _dynamics(batch: Batch, metrics: Mapping[str, float]) -> dict[str, float]:
        out: dict[str, float] = {}
        for key in KL_KEYS:
            if key in metrics:
                out["training/kl_divergence"] = float(metrics[key])
                break
        if UPDATE_KL_KEY in metrics:
            out["training/policy_update_kl"] = float(metrics[UPDATE_KL_KEY])
        if ENTROPY_KEY in metrics:
            out["training/policy_entropy"] = float(metrics[ENTROPY_KEY])
        if ADVANTAGE in batch and len(batch):
            adv = np.asarray(batch[ADVANTAGE], dtype=np.float64)
            adv = adv[np.isfinite(adv)]
            if len(adv):
                out["training/advantage_mean"] = float(adv.mean())
                out["training/advantage_std"] = float(adv.std())
        return out


def _total_range(parts: list[tuple[float, tuple[float, float] | None]]) -> tuple[float, float] | None:
    """Possible range of the weighted total, when every function declares its reward_range."""
    if not parts or any(r is None for _, r in parts):
        return None
    lo = hi = 0.0
    for w, (a, b) in parts:  # type: ignore[misc]
        lo += min(w * a, w * b)
        hi += max(w * a, w * b)
    return (lo, hi)


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, float) and not math.isfinite(o):
        return None
    return str(o)
