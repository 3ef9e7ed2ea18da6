"""The arguments of ``rlhooks train`` and ``python -m rlhooks.engines.verl.main`` (one definition,
imported by both cli.py and main.py, so neither imports the other back)."""

from __future__ import annotations

import argparse
from typing import Any

DEFAULT_CONFIG_NAME = "ppo_trainer"


class _Overrides(argparse.Action):
    """The ``key=value`` overrides (argparse's REMAINDER: everything after the first one). This command's own
    flags written among or after them (``rlhooks train --config c.yaml key=v --dry-run``) are parsed as flags:
    an override never starts with ``-`` (a key path starts with a letter, ``+`` or ``~``)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        overrides, flags = [], []
        values = list(values or [])
        while values:
            arg = values.pop(0)
            if not arg.startswith("-"):
                overrides.append(arg)
                continue
            flags.append(arg)
            action = parser._option_string_actions.get(arg)  # "--config PATH": the value is the next argument
            if action is not None and action.nargs is None and values:
                flags.append(values.pop(0))
        if flags:
            parser.parse_args(flags, namespace)  # an unknown flag is argparse's usage error (exit 2)
        setattr(namespace, self.dest, overrides)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="RLHOOKS_YAML", help="rlhooks config (sampler, filters, rewards, ...)")
    parser.add_argument("--verl-config-dir", help="directory of a custom verl Hydra config (default: verl's own)")
    parser.add_argument("--verl-config-name", default=DEFAULT_CONFIG_NAME, help="verl config name (ppo_trainer)")
    parser.add_argument("--dry-run", action="store_true", help="print the resolved verl and rlhooks configs and exit")
    parser.add_argument("overrides", nargs=argparse.REMAINDER, action=_Overrides,
                        help="Hydra-style key=value overrides (this command's flags may come before or after them)")

