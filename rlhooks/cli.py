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
    try:
        return int(args.func(args) or 0)
    except rlhooks.RLHooksError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
