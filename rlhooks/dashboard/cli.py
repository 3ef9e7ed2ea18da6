"""``rlhooks dashboard RUN_DIR [RUN_DIR ...]``: serve the live dashboard (Streamlit) on 127.0.0.1."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys

from rlhooks.core.errors import RLHooksError

DEFAULT_PORT = 8501


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "dashboard", help="live web dashboard over runs' metrics.jsonl",
        description="Serve an interactive page over the runs' metrics.jsonl (live while they write; several runs "
                    "overlay). Needs the dashboard extra: pip install -e '.[dashboard]' in the rlhooks clone. "
                    "From another machine: "
                    f"ssh -L {DEFAULT_PORT}:127.0.0.1:{DEFAULT_PORT} HOST, then open http://127.0.0.1:{DEFAULT_PORT}.",
    )
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories (or metrics.jsonl files)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    p.add_argument("--refresh", type=float, default=2.0, help="seconds between re-reads of the files (default 2)")
    p.add_argument("--open", action="store_true", help="open a browser (only when there is a terminal; default: just print the URL)")
    p.set_defaults(func=run)


def streamlit_command(runs: list[str], host: str, port: int, refresh: float, open_browser: bool) -> list[str]:
    from rlhooks.dashboard import app

    headless = not (open_browser and sys.stdout.isatty())  # never a browser without a terminal
    return [
        sys.executable, "-m", "streamlit", "run", app.__file__,
        "--server.address", host, "--server.port", str(port),
        "--server.headless", "true" if headless else "false",
        "--browser.gatherUsageStats", "false",  # no telemetry from a training machine
        "--server.fileWatcherType", "none",  # the app's code does not change while serving
        "--browser.serverAddress", host, "--browser.serverPort", str(port),
        "--theme.base", "light", "--client.toolbarMode", "viewer",
        "--", *runs, "--refresh", str(refresh),
    ]


def run(args: argparse.Namespace) -> int:
    try:
        import plotly  # noqa: F401
        import streamlit  # noqa: F401
    except ImportError as exc:
        raise RLHooksError(
            f"rlhooks dashboard needs the dashboard extra ({exc.name} is not installed): "
            f"pip install -e '.[dashboard]' in the rlhooks clone"
        ) from None
    from rlhooks.dashboard.data import DashboardError, find_metrics_file

    paths = []
    for r in args.runs:
        try:
            paths.append(str(find_metrics_file(r)))  # as given: the page shows paths the user recognises
        except DashboardError as exc:
            raise RLHooksError(str(exc)) from None
    if args.refresh <= 0:
        raise RLHooksError(f"--refresh must be > 0 seconds, got {args.refresh:g}")
    cmd = streamlit_command(paths, args.host, args.port, args.refresh, args.open)
    print(f"rlhooks dashboard: http://{args.host}:{args.port}  ({len(paths)} run{'s' if len(paths) != 1 else ''}; Ctrl-C stops)",
          flush=True)
    if args.host == "127.0.0.1":
        print(f"  from another machine: ssh -L {args.port}:127.0.0.1:{args.port} {os.uname().nodename}", flush=True)
    env = {**os.environ, "STREAMLIT_BROWSER_GATHER_USAGE_STATS": "false"}
    proc = subprocess.Popen(cmd, env=env)

    def stop(signum: int, _frame: object) -> None:  # a SIGTERM to this command stops the server too
        proc.terminate()

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        try:
            return proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
        if proc.poll() is None:
            proc.terminate()


__all__ = ["add_parser", "run", "streamlit_command"]
