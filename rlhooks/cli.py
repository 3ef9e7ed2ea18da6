"""The ``rlhooks`` command.

Core commands live here (``plugins list``, ``config check``); the others (``simulate``,
``report``, ``train``) come from the modules listed in COMMAND_MODULES, each exposing
``add_parser(subparsers)`` that registers a subcommand with ``set_defaults(func=...)``.
A module that is not there (an engine left out) disables just its command.
"""

from __future__ import annotations

import argparse
import importlib
import sys

import rlhooks

COMMAND_MODULES = (
    "rlhooks.engines.sim.cli",  # simulate
    "rlhooks.cli_report",  # report
    "rlhooks.engines.verl.cli",  # train
    "rlhooks.dashboard.cli",  # dashboard
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlhooks", description="rlhooks: plugins (hooks, samplers, filters, rewards, backends) for RL post-training on verl."
    )
    parser.add_argument("--version", action="version", version=f"rlhooks {rlhooks.__version__}")
    parser.add_argument("--log-json", action="store_true", help="structured logs as JSON lines")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    from rlhooks import cli_core

    cli_core.add_parsers(sub)
    for module in COMMAND_MODULES:
        try:
            mod = importlib.import_module(module)
        except ImportError as exc:
            if exc.name and module.startswith(exc.name):  # the module itself is not there yet
                continue
            raise
        mod.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from rlhooks.logging import configure_logging

    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(json=args.log_json, verbose=args.verbose)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from rlhooks.core import interrupt

    _quiet_thread_oserrors()
    interrupt.outcome_recorded["status"] = None
    with interrupt.signals_interrupt():
        code = _run(args)
    if argv is None:  # the command itself: a signal while the interpreter exits keeps this exit status
        interrupt.exit_on_signal(code)
    return code


def _run(args: argparse.Namespace) -> int:
    from rlhooks.core import interrupt

    try:
        return int(args.func(args) or 0)
    except rlhooks.RLHooksError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: the run was ended "interrupted" and flushed
        name = exc.signal_name if isinstance(exc, interrupt.Interrupted) else "SIGINT"
        recorded = interrupt.outcome_recorded["status"]
        if recorded is None:  # start-up: config, imports, data; no run directory says anything
            print(f"rlhooks: interrupted by {name} during start-up, before a run was recorded; "
                  f"nothing to resume", file=sys.stderr)
        elif recorded != "interrupted":  # it came after the outcome was recorded: that outcome stands
            print(f"rlhooks: {name} arrived after the run's outcome was recorded; the run ended with status "
                  f"{recorded!r}", file=sys.stderr)
            from rlhooks.core.run import exit_code_of

            return exit_code_of(recorded)
        else:
            print(f"rlhooks: interrupted by {name}; the run ended with status 'interrupted'", file=sys.stderr)
        return interrupt.exit_code(exc)
    except OSError as exc:  # a full disk, a lost mount, a permission: say what and where, no traceback
        if args.verbose:
            raise
        where = f" ({exc.filename})" if exc.filename else ""
        print(f"error: {exc.strerror or exc}{where}; nothing was reported as successful "
              f"(rerun with -v for the traceback)", file=sys.stderr)
        return 1


def _quiet_thread_oserrors() -> None:
    """A library's own thread dying of a full disk (e.g. TensorBoard's writer) prints one line, not a
    traceback: the backend using it reports the loss itself, and the run does not end 'success'."""
    import threading

    default = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        if isinstance(args.exc_value, OSError):
            name = args.thread.name if args.thread is not None else "?"
            print(f"error: thread {name}: {args.exc_type.__name__}: {args.exc_value}", file=sys.stderr)
            return
        default(args)

    threading.excepthook = hook


if __name__ == "__main__":
    sys.exit(main())
