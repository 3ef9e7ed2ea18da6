"""``rlhooks simulate``: the main job without GPUs.

    rlhooks simulate                         # the embedded default config (default.yaml here)
    rlhooks simulate my.yaml --steps 100 --set sampler.reward_threshold=8.0
    rlhooks simulate --compare examples/configs/uniform.yaml examples/configs/curriculum.yaml
    rlhooks simulate my.yaml --steps 12 --check-resume 5   # does a resumed run continue exactly?

A run itself is in runs.py, a comparison in compare.py; ``rlhooks report`` is rlhooks.cli_report.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import structlog

from rlhooks.core import interrupt
from rlhooks.core.errors import RLHooksError
from rlhooks.engines.sim.compare import compare, format_comparison
from rlhooks.engines.sim.resume_check import check_resume
from rlhooks.engines.sim.runs import (
    DEFAULT_REPORT_TIMEOUT_S,
    build_summary,
    default_config_path,
    format_summary,
    simulate_run,
)


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "simulate",
        help="run the configured plugins on a simulated learner (no GPU)",
        description="Run a config's sampler, filters, rewards, metrics and backends on a simulated learner. "
        "Without CONFIG the embedded default config runs. Output lands in <out>/<run.name>/.",
    )
    p.add_argument("config", nargs="?", help="YAML config (default: the embedded demo config)")
    p.add_argument("--compare", nargs="+", metavar="CONFIG", help="run each config on the same data and seed and compare")
    p.add_argument("--steps", type=int, help="training steps (run.steps)")
    p.add_argument("--seed", type=int, help="seed (run.seed)")
    p.add_argument("--out", help="parent directory of run directories (run.out_dir, default runs)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value, e.g. --set run.n=4 --set filters[0].metric=score (repeatable)")
    p.add_argument("--data", help="a parquet dataset in verl's layout instead of the generated one")
    p.add_argument("--target-accuracy", type=float, help="accuracy for 'steps to target' (simulate.target_accuracy)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--no-report", action="store_true", help="do not write the HTML/PNG report at the end")
    p.add_argument("--report-timeout", type=_time_bound, default=DEFAULT_REPORT_TIMEOUT_S, metavar="SECONDS",
                   help="time bound of the report drawn after the run's outcome is recorded; past it the run "
                   f"ends without a report, with a warning (default {DEFAULT_REPORT_TIMEOUT_S:g}; 0: no bound; "
                   f"a finite number from 0 to {interrupt.MAX_BOUND_S:g}: inf, nan and negative values are refused)")
    p.add_argument("--check-resume", type=int, metavar="K",
                   help="integration check for sampler, filter and plugin authors: run to step K, save the state, "
                   "load it into a fresh engine and compare the following steps with an uninterrupted run "
                   "(exit 1 on a mismatch; no run directory is written)")
    p.set_defaults(func=cmd_simulate)


def _time_bound(text: str) -> float:
    """``--report-timeout``'s value: refused by argparse (exit 2, naming the flag) unless usable."""
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    if interrupt.check_time_bound(seconds):
        raise argparse.ArgumentTypeError(f"{interrupt.TIME_BOUND_RULE}, got {text!r}")
    return seconds


def _overrides(args: argparse.Namespace) -> list[str]:
    out = list(args.overrides or [])
    if args.steps is not None:
        out.append(f"run.steps={args.steps}")
    if args.seed is not None:
        out.append(f"run.seed={args.seed}")
    if args.out is not None:
        out.append(f"run.out_dir={args.out}")
    if args.target_accuracy is not None:
        out.append(f"simulate.target_accuracy={args.target_accuracy}")
    return out


def _quiet_plugin_logs(args: argparse.Namespace) -> None:
    """Keep the terminal to the progress bar, console lines and summary; -v shows plugins' info logs."""
    if getattr(args, "verbose", False) or getattr(args, "log_json", False):
        return
    import logging

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))


def cmd_simulate(args: argparse.Namespace) -> int:
    _quiet_plugin_logs(args)
    if args.check_resume is not None:
        if args.compare:
            raise RLHooksError("--check-resume checks one config; give CONFIG, not --compare")
        check = check_resume(args.config, args.check_resume, _overrides(args), data=args.data)
        print(check.verdict(), file=sys.stdout if check.ok else sys.stderr)
        return 0 if check.ok else 1
    if args.compare:
        if args.config:
            raise RLHooksError("give either CONFIG or --compare A.yaml B.yaml ..., not both")
        result = compare(args.compare, _overrides(args), data=args.data, progress=not args.no_progress,
                         report=not args.no_report, out=args.out, report_timeout_s=args.report_timeout)
        print(format_comparison(result))
        failed = [r for r in result["runs"] if r["status"] != "success"]
        for r in failed:  # a comparison over a run that lost data is not a success either
            _print_failure(r, f"run {r['name']!r} ")
        return 1 if failed else 0
    summary = simulate_run(args.config, _overrides(args), data=args.data, progress=not args.no_progress,
                           report=not args.no_report, report_timeout_s=args.report_timeout)
    print(format_summary(summary))
    if summary["status"] != "success":
        _print_failure(summary)
        return 1
    return 0


def _print_failure(summary: dict, which: str = "run ") -> None:
    print(f"error: the {which}ended with status {summary['status']!r}", file=sys.stderr)
    for label, info in summary["plugin_failures"].items():
        print(f"  - {label}: {info['failures']} failure(s), {info['dropped']} call(s) not delivered"
              + (", disabled" if info["disabled"] else ""), file=sys.stderr)


__all__ = ["add_parser", "simulate_run", "build_summary", "format_summary", "default_config_path"]
