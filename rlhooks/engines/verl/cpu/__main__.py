"""python -m rlhooks.engines.verl.cpu prepare DIR: the tiny policy and its prompts, for `rlhooks train`."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlhooks.engines.verl.cpu", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    prep = sub.add_parser("prepare", help="build the warm-started tiny policy and write the task prompts")
    prep.add_argument("directory", help="where to put policy/ and train.parquet (reused when up to date)")
    args = parser.parse_args(argv)
    from rlhooks.core.errors import RLHooksError
    from rlhooks.engines.verl.cpu.runner import prepare

    try:
        policy_dir, data = prepare(args.directory)
    except RLHooksError as exc:  # it would replace files it did not write: say which and what to do
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # a full disk, a permission, a lost mount: what and where, no traceback
        where = f" ({exc.filename})" if exc.filename else ""
        print(f"error: prepare {args.directory}: {exc.strerror or exc}{where}", file=sys.stderr)
        return 1
    print(f"policy: {policy_dir}\nprompts: {data}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
