"""``rlhooks train``: verl training with rlhooks plugins (registered by rlhooks/cli.py).

Importing this module is cheap; verl, Ray and Hydra load only when the command runs.
"""

from __future__ import annotations

import argparse
import os

from rlhooks.engines.verl.arguments import add_arguments


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "train",
        help="train with verl (GRPO/PPO) and the configured rlhooks plugins",
        description="Run verl's PPO/GRPO trainer with rlhooks hooks. Overrides: rlhooks.<key>=v edit the "
        "rlhooks config, data.sampler.<key>=v map to the rlhooks sampler, the rest go to verl's Hydra config.",
    )
    add_arguments(parser)
    parser.set_defaults(func=_train)
    return parser


def _train(args: argparse.Namespace) -> int:
    # plugin.py reads these in Ray's processes to log the same way; main.run passes RLHOOKS_* on through
    # runtime_env (a cluster's processes inherit the environment of `ray start`, not this one's)
    if getattr(args, "log_json", False):
        os.environ["RLHOOKS_LOG_JSON"] = "1"
    if getattr(args, "verbose", False):
        os.environ["RLHOOKS_VERBOSE"] = "1"
    from rlhooks.engines.verl.compat import require_verl

    require_verl()  # before verl's config is read; run_from_args checks the fingerprints of the trainer in use
    from rlhooks.engines.verl.main import run_from_args

    return run_from_args(args)
