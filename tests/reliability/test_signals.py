"""SIGTERM and SIGINT end a real ``rlhooks simulate`` process cleanly: backends flushed,
``on_run_end("interrupted")``, every run-end file written, exit 143 / 130, no traceback."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

FAST = ["run.steps=100000", "simulate.rows_per_source=40", "run.train_batch_size=4", "run.gen_batch_size=8", "run.n=4",
        "backends[0].interval=1"]


def _start(out: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "rlhooks.cli", "simulate", "--out", str(out), "--no-report", "--no-progress",
           "--set", "run.name=sig", *[a for kv in FAST for a in ("--set", kv)]]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_steps(jsonl: Path, steps: int = 3) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if jsonl.exists() and jsonl.read_text().count('"kind": "metrics"') >= steps:
            return
        time.sleep(0.05)
    raise AssertionError("the run did not start logging")


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143),
                                           pytest.param(signal.SIGINT, 130, marks=pytest.mark.slow)])
def test_signal_ends_the_run_interrupted_with_every_file(tmp_path: Path, sig: signal.Signals, code: int) -> None:
    proc = _start(tmp_path)
    run_dir = tmp_path / "sig"
    try:
        _wait_for_steps(run_dir / "metrics.jsonl")
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, err
    assert "Traceback" not in err and "Traceback" not in out
    assert f"interrupted by {sig.name}" in err
    assert "run ended: interrupted" in out  # the console backend got on_run_end("interrupted")
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert records[-1]["kind"] == "run_end" and records[-1]["status"] == "interrupted"
    steps = [r["step"] for r in records if r["kind"] == "metrics"]
    assert steps == list(range(1, len(steps) + 1)) and len(steps) >= 3  # nothing queued was lost
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["steps"] == steps[-1]
    monitor = json.loads((run_dir / "reward_monitor.json").read_text())
    assert monitor  # the reward monitor wrote its run-end file
    marker = json.loads((run_dir / ".rlhooks-simulate").read_text())
    assert marker["status"] == "interrupted"  # a finished (interrupted) run: a rerun may replace it


def test_signal_while_a_run_is_ending_waits_for_the_end(tmp_path: Path) -> None:
    """A SIGTERM that lands while the run's end is written is raised only after it (a real signal)."""
    import os

    import rlhooks.host
    from rlhooks.core import interrupt

    cfg = rlhooks.host.load_config({"run": {"name": "ending", "out_dir": str(tmp_path)}, "backends": ["jsonl"]})
    manager = rlhooks.host.RunManager(cfg)
    ended = []

    class SignalAtEnd:  # sends the signal from inside on_run_end, i.e. while the run is being closed
        @rlhooks.hookimpl(tryfirst=True)
        def on_run_end(self, status: str) -> None:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
            ended.append(status)

    manager.pm.register(SignalAtEnd(), name="signal-at-end")
    with interrupt.signals_interrupt(), pytest.raises(interrupt.Interrupted) as err:
        with manager.running():
            manager.log_metrics(1, {"a": 1.0})
    assert err.value.exit_code == 143
    assert ended == ["success"]  # the run ended completely before the interrupt was raised
    records = [json.loads(line) for line in (tmp_path / "ending" / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["kind"] == "run_end" and records[-1]["status"] == "success"
