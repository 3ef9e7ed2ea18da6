"""A simulated run from a config to its summary: the run directory, the run, the summary and report.

Used by ``rlhooks simulate`` (cli.py) and ``--compare`` (compare.py).
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import structlog

from rlhooks.core import interrupt
from rlhooks.core.config import Config
from rlhooks.core.errors import RLHooksError
from rlhooks.core.metrics import split_source_key
from rlhooks.core.rundir import BOOKKEEPING, MARKER_FILE, RunDirectory, write_atomic
from rlhooks.engines.sim.engine import (
    CHECKPOINT_DIR,
    CHECKPOINT_FILE,
    SimEngine,
    load_sim_config,
    prepare_data,
    sim_options,
)

log = structlog.get_logger("rlhooks.sim")

#: marks a run directory made by ``rlhooks simulate`` (only such directories are replaced on a rerun)
MARKER = MARKER_FILE


def default_config_path() -> Path:
    return Path(str(resources.files("rlhooks.engines.sim") / "default.yaml"))


def fresh_run_dir(config: Config) -> RunDirectory:
    """``<out_dir>/<name>``, locked for this run; a finished earlier ``rlhooks simulate`` run there is
    replaced (see core/rundir.py for what is and is not deleted)."""
    return RunDirectory.create(config.run.out_dir, config.run.name, command="rlhooks simulate")


#: the report's default time bound (``--report-timeout``); past it the run ends without a report
DEFAULT_REPORT_TIMEOUT_S = 120.0


def simulate_run(
    source: str | Path | None,
    overrides: Sequence[str] = (),
    *,
    data: str | Path | None = None,
    progress: bool = False,
    report: bool = True,
    report_timeout_s: float | None = DEFAULT_REPORT_TIMEOUT_S,
) -> dict[str, Any]:
    """One simulated run from a config file (None: the embedded default); returns its summary.

    The run's end is ordered: the training's outcome first (the backends' ``on_run_end`` with the
    JSONL ``run_end``, then summary.json and the run marker, each written atomically), then the
    derived files (the report), bounded by ``report_timeout_s`` and stopped by a signal; a failure
    there is a warning naming the file, never a change of the status. ``summary["status"]`` is
    the run's status as the plugins saw it in ``on_run_end`` ("failed" also when a backend lost
    logged data). An interrupted or failed run's summary is written too; then the KeyboardInterrupt
    or error is raised again.
    """
    problem = interrupt.check_time_bound(report_timeout_s)
    if problem:  # before the run: an unusable bound would otherwise silently mean "no report"
        raise RLHooksError(f"report_timeout_s (--report-timeout) {problem}")
    config = load_sim_config(source if source is not None else default_config_path(), overrides=list(overrides))
    warn_without_backends(config)
    with fresh_run_dir(config) as rd:
        run_dir = rd.path
        write_atomic(run_dir / "config.yaml", config.to_yaml())
        dataset = prepare_data(sim_options(config), run_dir, data)
        engine = SimEngine(config, dataset, run_dir=run_dir)
        t0 = time.perf_counter()
        stopped = None  # the signal that arrived while the run was ending (its outcome stands)
        try:
            engine.run(progress=progress)
        except KeyboardInterrupt as exc:
            ended = engine.manager.final_status
            if ended is None or ended == "interrupted":  # stopped while training: that is the outcome
                _record_after_error(engine, time.perf_counter() - t0, rd)
                raise
            stopped = exc.signal_name if isinstance(exc, interrupt.Interrupted) else "SIGINT"
        except BaseException:
            _record_after_error(engine, time.perf_counter() - t0, rd)
            raise
        with interrupt.held() as late:  # the outcome is recorded whole, even under a signal
            summary = _record_outcome(engine, time.perf_counter() - t0, rd, report=report)
        stopped = stopped or late.signal_name or None
        if report and summary["status"] != "interrupted":
            if stopped:
                log.warning(f"no report: {stopped} arrived as the run ended; the run's outcome "
                            f"({summary['status']}) is recorded. Draw it later: rlhooks report {run_dir}")
            else:
                _add_report(summary, rd, report_timeout_s)
        rd.finish()
    return summary


def warn_without_backends(config: Any) -> None:
    """A simulated run without backends writes its metrics nowhere (verl runs have verl's logger)."""
    if config.backends:
        return
    plugins = [c.written_name or c.name for c in config.plugins]
    lost = f"its plugins' metrics ({', '.join(plugins)}) included" if plugins else "every step's"
    log.warning(f"no backends configured (backends: []): the run's metrics, {lost}, are written nowhere "
                f"(only summary.json is); add backends, e.g. backends: [console, jsonl]")


def _record_after_error(engine: SimEngine, elapsed: float, rd: RunDirectory) -> None:
    with interrupt.deferred():
        try:
            _record_outcome(engine, elapsed, rd)
        except OSError as exc:  # the run's own error (or the interrupt) is the one to report
            log.error(f"cannot write {rd.path / 'summary.json'}: {exc.strerror or exc}")
            rd.record_outcome(engine.manager.final_status or "failed")
        rd.finish()


def _record_outcome(engine: SimEngine, elapsed: float, rd: RunDirectory, *, report: bool = False) -> dict[str, Any]:
    """summary.json then the marker: the training's outcome, before anything derived."""
    summary = build_summary(engine, elapsed, rd.path)
    if report and summary["status"] != "interrupted":
        summary["report"] = None  # until it is drawn
    summary["files"] = sorted({*summary["files"], "summary.json"})
    _write_summary(rd.path, summary)
    rd.record_outcome(summary["status"])
    return summary


def _write_summary(run_dir: Path, summary: dict[str, Any]) -> None:
    write_atomic(run_dir / "summary.json", json.dumps(summary, indent=2, default=str) + "\n")


def _add_report(summary: dict[str, Any], rd: RunDirectory, timeout_s: float | None) -> None:
    """The report (derived): bounded, stopped by a signal; a failure is a warning, the status stays."""
    page = try_report([rd.path], rd.path / "report", timeout_s=timeout_s)
    if page is None:
        return
    summary["report"] = page
    summary["files"] = sorted({*summary["files"], "report/"})
    try:
        _write_summary(rd.path, summary)
    except OSError as exc:
        log.warning(f"the report is at {page}, but {rd.path / 'summary.json'} could not name it: "
                    f"{exc.strerror or exc}; the run's outcome ({summary['status']}) is recorded there")


def load_plotting() -> bool:
    """Import matplotlib (Agg) and the report whole, signals held till the end; False if not installed.

    Done before the report's time bound starts: an import stopped halfway leaves a matplotlib that
    breaks every later chart in the process (``module 'matplotlib' has no attribute ...``).
    """
    with interrupt.deferred():
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.backends.backend_agg  # noqa: F401 - else loaded by the first figure
            import matplotlib.pyplot  # noqa: F401

            import rlhooks.report  # noqa: F401
        except ImportError:  # matplotlib is the optional 'report' extra
            return False
    return True


def try_report(run_dirs: list[Path], out: Path, *, timeout_s: float | None = DEFAULT_REPORT_TIMEOUT_S) -> str | None:
    """The report page's path, or None with a warning naming what was not written and why.

    Derived work: never raises (but a second signal exits), never changes a run's status.
    """
    page = out / "report.html"
    later = f"draw it later: rlhooks report {' '.join(str(d) for d in run_dirs)}"
    try:
        if not load_plotting():
            log.warning("no report: matplotlib is not installed (the 'report' extra: pip install -e '.[report]' in the rlhooks clone)")
            return None
        from rlhooks.report import write_report

        with interrupt.bounded(timeout_s):
            return str(write_report(run_dirs, out))
    except interrupt.TimeBoundExceeded:
        log.warning(f"no report: {page} was not finished within the report time bound ({timeout_s:g} s, "
                    f"--report-timeout); {later}")
    except KeyboardInterrupt as exc:
        name = exc.signal_name if isinstance(exc, interrupt.Interrupted) else "SIGINT"
        log.warning(f"no report: {name} stopped drawing {page}; the run's outcome is recorded; {later}")
    except RLHooksError as exc:  # e.g. no jsonl backend, or it lost its file
        log.warning(f"no report: {exc}")
    except OSError as exc:  # e.g. a full disk: the run's own files come first
        log.warning(f"no report: cannot write {exc.filename or page}: {exc.strerror or exc}; {later}")
    except Exception as exc:  # noqa: BLE001 - derived work never changes the run's status
        log.warning(f"no report: {page}: {type(exc).__name__}: {exc}; {later}")
    return None


def build_summary(engine: SimEngine, elapsed: float, run_dir: Path) -> dict[str, Any]:
    m = engine.last_metrics
    acc = engine.accuracy()
    per_source: dict[str, dict[str, Any]] = {}  # source/<name>/<metric> of the last step; names may hold '/'
    for key, value in m.items():
        split = split_source_key(key)
        if split is not None:
            per_source.setdefault(split[0], {})[split[1]] = value
    sources = {}
    mastery = engine.learner.mastery()  # once: per source it is a (sources x buckets) array each time
    for s, name in enumerate(engine.data.source_names):
        sources[name] = {
            "accuracy": acc.get(name),
            "skill": engine.skill(s, mastery),
            "steps_to_target": engine.reached.get(name),
            "last_step": per_source.get(name, {}),
        }
    curriculum = {k.split("/", 1)[1]: v for k, v in m.items() if k.startswith("curriculum/")}
    filt = {k: v for k, v in m.items() if k.startswith("filter/")}
    generated = engine.generated_trajectories
    trained = engine.trained_trajectories
    alerts = {k.split("/", 1)[1]: v for k, v in m.items() if k.startswith("alerts/")}
    return {
        "name": engine.config.run.name,
        "status": engine.manager.final_status or "failed",
        "run_dir": str(run_dir),
        "steps": engine.step,
        "seed": engine.config.run.seed,
        "seconds": round(elapsed, 2),
        "target_accuracy": engine.options.target_accuracy,
        "sources": sources,
        "mean_accuracy": float(sum(a for a in acc.values()) / len(acc)) if acc else None,
        # the mean accuracy's first step at the target, and the trajectories generated until then
        "steps_to_target": engine.steps_to_target,
        "generated_to_target": engine.generated_to_target,
        "curriculum": curriculum,
        "sampler_weights": {k[len("sampler/weight/"):]: v for k, v in m.items() if k.startswith("sampler/weight/")},
        "filter": filt,
        "generated_trajectories": generated,
        "trained_trajectories": trained,
        "filter_efficiency": trained / generated if generated else None,
        "staleness": _staleness(engine),
        "alerts": alerts,
        "alert_details": engine.alert_details(),
        "reward_hacking": _hacking_verdict(run_dir),
        "plugin_failures": engine.manager.failure_summary(),
        # a plugin's run.request_stop(reason): who asked, why, and the checkpoint written (else None)
        "stop_reason": engine.manager.context.stop_reason,
        "stopped_by": engine.manager.context.stopped_by,
        "checkpoint": str(run_dir / CHECKPOINT_DIR) if (run_dir / CHECKPOINT_DIR / CHECKPOINT_FILE).exists() else None,
        "files": sorted(p.name + ("/" if p.is_dir() else "") for p in run_dir.iterdir()
                        if p.name not in BOOKKEEPING and not p.name.startswith(".")),
    }


def _staleness(engine: SimEngine) -> dict[str, Any] | None:
    """The run's simulated asynchrony (simulate.async_lag > 0): lag over trained trajectories, stale evictions."""
    o = engine.options
    if not o.async_lag:
        return None
    st = engine.staleness
    trained = engine.trained_trajectories
    return {"async_lag": o.async_lag, "max_off_policy_threshold": o.max_off_policy_threshold,
            "mean_lag": st["lag_sum"] / trained if trained else None, "max_lag": st["lag_max"],
            "evicted_groups": st["evicted_groups"]}


def _hacking_verdict(run_dir: Path) -> str | None:
    """The reward monitor's run-end hacking verdict (one sentence), when it wrote one."""
    try:
        data = json.loads((run_dir / "reward_monitor.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    verdict = (data.get("reward_hacking") or {}).get("verdict") if isinstance(data, dict) else None
    return verdict if isinstance(verdict, str) else None


def format_summary(s: dict[str, Any]) -> str:
    lines = [f"rlhooks simulate: {s['name']}: {s['steps']} steps in {s['seconds']:.1f} s (seed {s['seed']})"]
    target = s["target_accuracy"]
    width = max([14, *(len(n) for n in s["sources"])])  # whole names (verl's are like openai/gsm8k)
    lines.append(f"  {'source':<{width}} {'accuracy':>8} {'skill':>6} {f'steps to {target:.2f}':>15}")
    for name, v in s["sources"].items():
        acc = "-" if v["accuracy"] is None else f"{v['accuracy']:.3f}"
        reached = "not reached" if v["steps_to_target"] is None else str(v["steps_to_target"])
        lines.append(f"  {name:<{width}} {acc:>8} {v['skill']:>6.3f} {reached:>15}")
    cur = s["curriculum"]
    if cur:
        parts = [f"level {cur['level']:g}" if "level" in cur else None,
                 f"percentile {cur['percentile']:g}%" if "percentile" in cur else None,
                 f"{cur['num_items']:,.0f} items unlocked" if "num_items" in cur else None]
        lines.append("  curriculum: " + ", ".join(p for p in parts if p))
    if s["sampler_weights"]:
        lines.append("  sampler weights: " + ", ".join(f"{k} {v:.2f}" for k, v in s["sampler_weights"].items()))
    eff = s["filter_efficiency"]
    line = f"  trajectories: {s['generated_trajectories']:,} generated, {s['trained_trajectories']:,} trained"
    if eff is not None:
        line += f" (filter efficiency {eff:.0%})"
    if s.get("generated_to_target") is not None:
        line += f"; {s['generated_to_target']:,} generated until the mean accuracy reached {target:.2f} (step {s['steps_to_target']})"
    lines.append(line)
    st = s.get("staleness")
    if st:
        mean = "-" if st["mean_lag"] is None else f"{st['mean_lag']:.2f}"
        evict = ("no eviction" if st["max_off_policy_threshold"] is None else
                 f"{st['evicted_groups']:,} groups evicted as too stale (max_off_policy_threshold {st['max_off_policy_threshold']})")
        lines.append(f"  staleness (async_lag {st['async_lag']}): trained trajectories lag {mean} updates on average "
                     f"(max {st['max_lag']}); {evict}")
    if "kept_ratio" in {k.split("/", 1)[1] for k in s["filter"]}:
        lines.append(f"  last step: filter kept {s['filter']['filter/kept_ratio']:.0%} of generated groups")
    alerts = s["alert_details"]
    if alerts is not None:
        total = alerts.get("total", 0)
        by = alerts.get("by_metric", {})
        detail = "; ".join(f"{k} x{v['count']} (steps {v['first_step']}-{v['last_step']})" for k, v in list(by.items())[:4])
        lines.append(f"  alerts: {total}" + (f" - {detail}" if detail else ""))
    elif "total" in s["alerts"]:
        lines.append(f"  alerts: {s['alerts']['total']:g}")
    hacking = s.get("reward_hacking")
    if hacking:
        lines.append(f"  reward hacking check: {hacking}")
    for label, info in s.get("plugin_failures", {}).items():
        hooks = ", ".join(f"{h} x{n}" for h, n in info["by_hook"].items())
        lines.append(f"  plugin failures: {label}: {info['failures']}" + (f" ({hooks})" if hooks else "")
                     + (f", {info['dropped']} call(s) not delivered" if info["dropped"] else "")
                     + (", disabled" if info["disabled"] else ""))
    if s.get("status", "success") != "success":
        reason = (f" by {s.get('stopped_by') or 'a plugin'}: {s['stop_reason']}"
                  if s["status"] == "stopped" and s.get("stop_reason") else "")
        lines.append(f"  status: {s['status']}{reason}")
    lines.append(f"  output: {s['run_dir']}/  " + "  ".join(s["files"]))
    if s.get("report"):
        lines.append(f"  report: {s['report']}")
    return "\n".join(lines)


def safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "run"
