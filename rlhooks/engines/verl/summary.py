"""The end of ``rlhooks train``: the run's summary, read from its ``metrics.jsonl`` (what the jsonl backend
wrote in the TaskRunner, wherever Ray ran it), written as ``summary.json`` and ``config.yaml`` next to it and
printed as the lines ``rlhooks simulate`` ends with.

The summary covers the whole file: a resumed run appends to it, so "first" validation is the run's starting
accuracy (step 0 with ``trainer.val_before_train``) and the trajectories are the run's since its first step.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import structlog

from rlhooks.core.records import read_records, records_past
from rlhooks.core.rundir import BOOKKEEPING, write_atomic

log = structlog.get_logger("rlhooks.verl")

SUMMARY_FILE = "summary.json"
CONFIG_FILE = "config.yaml"
#: verl's output (its config dump, workers' warnings, Ray's forwarded lines) during ``rlhooks train``
VERL_LOG = "verl.log"
MONITOR_FILE = "reward_monitor.json"

#: verl's validation accuracy per source (its core validation metric); reward when the run has no acc
_VALIDATION = re.compile(r"val-core/(?P<source>.+)/(?P<var>acc|reward)/mean@\d+")


def read_steps(metrics_file: Path, start: int = 0) -> tuple[dict[int, dict[str, Any]], str | None, int]:
    """The metrics per step of the whole file (a later record of a step wins key by key), the status of the
    last ``run_end`` past byte ``start`` (the run this command ran), and how many steps it logged past ``start``."""
    steps: dict[int, dict[str, Any]] = {}
    for _, rec in read_records(metrics_file):
        if rec is not None and rec.get("kind") == "metrics" and isinstance(rec.get("metrics"), Mapping):
            steps.setdefault(int(rec.get("step", 0)), {}).update(rec["metrics"])
    status, since = None, set()
    for rec in records_past(metrics_file, start):
        if rec.get("kind") == "run_end":
            status = rec.get("status")
        elif rec.get("kind") == "metrics" and int(rec.get("step", 0)) >= 1:
            since.add(int(rec["step"]))
    return steps, status, len(since)


def _numbers(steps: Mapping[int, Mapping[str, Any]], key: str) -> list[tuple[int, float]]:
    return [(s, float(m[key])) for s, m in sorted(steps.items())
            if isinstance(m.get(key), (int, float)) and not isinstance(m.get(key), bool)]


def validation(steps: Mapping[int, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per source: verl's validation accuracy (or reward) at its first and last validation."""
    keys: dict[str, str] = {}
    for m in steps.values():
        for key in m:
            match = _VALIDATION.fullmatch(key)
            if match and (match["var"] == "acc" or match["source"] not in keys):
                keys[match["source"]] = key
    out = {}
    for source, key in sorted(keys.items()):
        points = _numbers(steps, key)
        if points:
            out[source] = {"metric": key, "first_step": points[0][0], "first": points[0][1],
                           "last_step": points[-1][0], "last": points[-1][1]}
    return out


def build_summary(cfg: Any, metrics_file: Path, *, start: int = 0, seconds: float | None = None,
                  trainer: str = "v1") -> dict[str, Any]:
    """The run's summary from its metrics.jsonl, reward_monitor.json and the verl config it ran with."""
    from omegaconf import OmegaConf

    run_dir = metrics_file.parent
    steps, status, this_command = read_steps(metrics_file, start) if metrics_file.is_file() else ({}, None, 0)
    trained_steps = sorted(s for s in steps if s >= 1)
    n = int(OmegaConf.select(cfg, "actor_rollout_ref.rollout.n", default=1) or 1)
    batch = int(OmegaConf.select(cfg, "data.train_batch_size", default=0) or 0)

    def total(key: str) -> float | None:
        values = [v for _, v in _numbers(steps, key)]
        return float(sum(values)) if values else None

    def mean(key: str) -> float | None:
        values = [v for s, v in _numbers(steps, key) if s >= 1]
        return float(sum(values) / len(values)) if values else None

    generated_groups, trained_groups = total("filter/generated_groups"), total("filter/trained_groups")
    trained = int(trained_groups * n) if trained_groups is not None else len(trained_steps) * batch * n
    generated = int(generated_groups * n) if generated_groups is not None else trained
    last = steps[trained_steps[-1]] if trained_steps else {}
    lag = _numbers(steps, "staleness/lag_mean")
    staleness = None
    if lag:
        lag_max = [v for _, v in _numbers(steps, "staleness/lag_max")]
        staleness = {"mean_lag": mean("staleness/lag_mean"), "max_lag": max(lag_max) if lag_max else None,
                     "evicted_groups": total("staleness/evicted_groups") or 0.0,
                     "max_off_policy_threshold": OmegaConf.select(
                         cfg, "trainer.v1.sampler.max_off_policy_threshold", default=None)}
    monitor = _read_json(run_dir / MONITOR_FILE)
    hacking = (monitor or {}).get("reward_hacking") or {}
    mode = OmegaConf.select(cfg, "trainer.v1.trainer_mode", default=None) if trainer == "v1" else "sync"
    return {
        "name": run_dir.name,
        "status": status,
        "run_dir": str(run_dir),
        "trainer": f"verl {'V1' if trainer == 'v1' else 'legacy'}",
        "mode": mode,
        "steps": trained_steps[-1] if trained_steps else 0,
        "steps_this_command": this_command,
        "seconds": None if seconds is None else round(seconds, 1),
        "validation": validation(steps),
        "generated_trajectories": generated,
        "trained_trajectories": trained,
        "filter_efficiency": trained / generated if generated else None,
        "last_kept_ratio": last.get("filter/kept_ratio"),
        "staleness": staleness,
        "rlhooks_share": mean("timing/rlhooks_share"),
        "alerts": (monitor or {}).get("alerts") if isinstance((monitor or {}).get("alerts"), dict) else (
            {"total": last["alerts/total"]} if "alerts/total" in last else None),
        "reward_hacking": hacking.get("verdict") if isinstance(hacking.get("verdict"), str) else None,
        "checkpoints": str(OmegaConf.select(cfg, "trainer.default_local_dir", default="") or "") or None,
        "metrics_file": str(metrics_file) if metrics_file.is_file() else None,
        "verl_log": str(run_dir / VERL_LOG) if (run_dir / VERL_LOG).is_file() else None,
        "files": [],
    }


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def config_yaml(cfg: Any) -> str:
    """The config the run ran with: verl's keys, then the resolved ``rlhooks:`` block (as ``--dry-run`` prints them)."""
    from omegaconf import OmegaConf

    from rlhooks.engines.verl.config import BLOCK, rlhooks_config

    verl = OmegaConf.to_yaml({k: v for k, v in cfg.items() if k != BLOCK})
    return verl + f"# {BLOCK} (resolved)\n{BLOCK}:\n" + "".join(
        f"  {line}\n" for line in rlhooks_config(cfg).to_yaml().splitlines())


def write_config(cfg: Any, run_dir: Path) -> None:
    """config.yaml, before the run starts (as ``rlhooks simulate`` writes it), so a failed run has it too."""
    run_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(run_dir / CONFIG_FILE, config_yaml(cfg), claim_it=False)


def write_summary(summary: dict[str, Any], run_dir: Path) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    entries = {p.name + ("/" if p.is_dir() else "") for p in run_dir.iterdir()
               if p.name not in BOOKKEEPING and not p.name.startswith(".")}
    summary["files"] = sorted(entries | {SUMMARY_FILE})
    write_atomic(run_dir / SUMMARY_FILE, json.dumps(summary, indent=2, default=str) + "\n", claim_it=False)


def format_summary(s: dict[str, Any]) -> str:
    """The lines a person reads at the end of ``rlhooks train`` (``rlhooks simulate``'s layout)."""
    took = f" in {s['seconds']:.0f} s" if s.get("seconds") is not None else ""
    mode = f", trainer mode {s['mode']}" if s.get("mode") else ""
    status = s.get("status") or "no outcome recorded (stopped before its end?)"
    lines = [f"rlhooks train: {s['name']}: {status}, {s['steps']} steps{took} ({s['trainer']}{mode})"]
    val = s.get("validation") or {}
    if val:
        var = "accuracy" if all("/acc/" in v["metric"] for v in val.values()) else "score"
        width = max([len(f"validation {var}"), *(len(src) for src in val)])
        firsts, lasts = {v["first_step"] for v in val.values()}, {v["last_step"] for v in val.values()}
        one = all(v["first_step"] == v["last_step"] for v in val.values())
        heads = ([] if one else [f"step {min(firsts)}" if len(firsts) == 1 else "first"]) + [
            f"step {max(lasts)}" if len(lasts) == 1 else "last"]
        lines.append(f"  {'validation ' + var:<{width}} " + " ".join(f"{h:>8}" for h in heads))
        for src, v in val.items():
            cells = ([] if one else [f"{v['first']:.3f}"]) + [f"{v['last']:.3f}"]
            lines.append(f"  {src:<{width}} " + " ".join(f"{c:>8}" for c in cells))
        if one:
            lines.append("  (one validation: trainer.val_before_train=true adds the starting accuracy as step 0)")
    else:
        lines.append("  validation: none logged (trainer.test_freq, trainer.val_before_train)")
    eff = s.get("filter_efficiency")
    line = f"  trajectories: {s['generated_trajectories']:,} generated, {s['trained_trajectories']:,} trained"
    if eff is not None and s["generated_trajectories"] != s["trained_trajectories"]:
        line += f" (filter efficiency {eff:.0%})"
    lines.append(line)
    if s.get("last_kept_ratio") is not None:
        lines.append(f"  last step: filter kept {s['last_kept_ratio']:.0%} of generated groups")
    st = s.get("staleness")
    if st:
        mean = "-" if st["mean_lag"] is None else f"{st['mean_lag']:.2f}"
        peak = "" if st["max_lag"] is None else f" (max {st['max_lag']:g})"
        threshold = st.get("max_off_policy_threshold")
        lines.append(f"  staleness: trained trajectories lag {mean} policy updates on average{peak}; "
                     f"{st['evicted_groups']:,.0f} groups evicted as too stale"
                     + (f" (max_off_policy_threshold {threshold})" if threshold is not None else ""))
    if s.get("rlhooks_share") is not None:
        lines.append(f"  rlhooks's share of the step time: {s['rlhooks_share']:.1%} on average")
    alerts = s.get("alerts")
    if alerts is not None:
        by = alerts.get("by_metric") or {}
        detail = "; ".join(f"{k} x{v['count']} (steps {v['first_step']}-{v['last_step']})" for k, v in list(by.items())[:4])
        lines.append(f"  alerts: {alerts.get('total', 0):g}" + (f" - {detail}" if detail else ""))
    if s.get("reward_hacking"):
        lines.append(f"  reward hacking check: {s['reward_hacking']}")
    lines.append(f"  output: {s['run_dir']}/  " + "  ".join(s.get("files") or []))
    if s.get("checkpoints"):
        lines.append(f"  checkpoints: {s['checkpoints']}")
    if s.get("verl_log"):
        lines.append(f"  verl's output: {s['verl_log']}")
    if s.get("metrics_file"):
        lines.append(f"  report: rlhooks report {s['run_dir']}")
    return "\n".join(lines)


def finish(cfg: Any, metrics_file: Path, *, start: int, seconds: float, trainer: str,
           failed: bool = False) -> dict[str, Any] | None:
    """summary.json written and the summary printed; a failure to write is a warning (the run's outcome is
    metrics.jsonl's). After a failure (``failed``: the command raised) of a run that logged nothing, only
    where verl's output is: the error says the rest. Returns the summary, None when there is none."""
    verl_log = metrics_file.parent / VERL_LOG
    if failed and verl_log.is_file() and verl_log.stat().st_size:
        print(f"rlhooks train: verl's output of this run is in {verl_log}", file=sys.stderr, flush=True)
    try:
        summary = build_summary(cfg, metrics_file, start=start, seconds=seconds, trainer=trainer)
    except Exception as exc:  # noqa: BLE001 - derived work: never hides the run's own outcome or error
        log.warning(f"no run summary: {type(exc).__name__}: {exc}")
        return None
    if failed and summary["status"] is None and not summary["steps_this_command"]:
        return None  # it never trained (a config or resume error before the first step): no summary of it
    if summary["metrics_file"] is None:
        log.warning(f"no run summary: {metrics_file} does not exist (the summary is read from the jsonl backend's "
                    f"file: add jsonl to rlhooks.backends)")
        return None
    try:
        write_summary(summary, metrics_file.parent)
    except OSError as exc:
        log.warning(f"cannot write {metrics_file.parent / SUMMARY_FILE}: {exc.strerror or exc}")
    print(format_summary(summary), flush=True)
    return summary


__all__ = ["build_summary", "format_summary", "write_config", "write_summary", "finish", "VERL_LOG"]
