"""``rlhooks report RUN_DIR ...``: PNG charts and one HTML page from runs' ``metrics.jsonl``.

Its own command module (listed in rlhooks/cli.py): it reads any engine's records, not only the
simulator's. matplotlib (the ``report`` extra) is imported when the command runs.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from rlhooks.core import rundir
from rlhooks.core.errors import RLHooksError


def add_parser(subparsers: Any) -> None:
    r = subparsers.add_parser(
        "report",
        help="charts and an HTML page from runs' metrics.jsonl",
        description="Read <RUN_DIR>/metrics.jsonl of one or several runs and write PNG charts and one "
        "self-contained HTML page (several runs are overlaid).",
    )
    r.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    r.add_argument("--out", help="output directory (default: RUN_DIR/report for one run, else ./report)")
    r.set_defaults(func=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    try:
        from rlhooks.report import write_report
    except ImportError as exc:
        raise RLHooksError(f"rlhooks report needs matplotlib ({exc}); install the 'report' extra: pip install -e '.[report]' in the rlhooks clone") from None
    dirs = [Path(d) for d in args.run_dirs]
    out = Path(args.out) if args.out else (dirs[0] / "report" if len(dirs) == 1 else Path("report"))
    # the run's own report/, however --out spells it (out/r/../r/report, a link to the run directory)
    own = len(dirs) == 1 and out.name == "report" and os.path.realpath(out.parent) == os.path.realpath(dirs[0])
    if own and out.is_symlink():
        raise RLHooksError(f"{out} is a symbolic link; the run's own report is written only into a real directory, "
                           f"never through a link: remove the link, or give --out DIR")
    foreign = rundir.unrecorded(out) if own else set()  # put there after the run ended: never recorded as its own
    try:
        page = write_report(dirs, out)
    finally:  # a run's own report directory (also while the run runs: it owns report/ from its start)
        if own and out.exists():
            rundir.adopt_derived(out, exclude=foreign)
    print(f"report: {page}")
    print(f"charts: {out}/*.png")
    return 0
