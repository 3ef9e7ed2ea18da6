"""The arguments of ``rlhooks train`` and ``python -m rlhooks.engines.verl.main`` (one definition,
imported by both cli.py and main.py, so neither imports the other back)."""

from __future__ import annotations

import argparse

DEFAULT_CONFIG_NAME = "ppo_trainer"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="RLHOOKS_YAML", help="rlhooks config (sampler, filters, rewards, ...)")
    parser.add_argument("--verl-config-dir", help="directory of a custom verl Hydra config (default: verl's own)")
    parser.add_argument("--verl-config-name", default=DEFAULT_CONFIG_NAME, help="verl config name (ppo_trainer)")
    parser.add_argument("--dry-run", action="store_true", help="print the resolved verl and rlhooks configs and exit")
    parser.add_argument("overrides", nargs=argparse.REMAINDER, help="Hydra-style key=value overrides")
