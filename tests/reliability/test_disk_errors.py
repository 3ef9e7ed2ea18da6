"""Write failures (a full disk): the run goes on without the failing backend and ends "failed"
naming what was lost; run-end files are whole or absent, never 0-byte; no traceback.

A backend writing to /dev/full (every write is ENOSPC) needs no privileges; a really full
filesystem is a 200 KiB tmpfs, which needs root (mount) and is skipped without it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlhooks.core.rundir import LOCK_FILE
from rlhooks.engines.sim.data import write_dataset
from tests.filesystems import small_tmpfs

FAST = ["simulate.rows_per_source=40", "run.train_batch_size=8", "run.gen_batch_size=16", "run.n=4"]


def _simulate(out: Path, *args: str, steps: int = 3, cwd: Path | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "rlhooks.cli", "simulate", "--out", str(out), "--no-report", "--no-progress",
           "--steps", str(steps), *[a for kv in FAST for a in ("--set", kv)], *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=cwd)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
def test_backend_on_a_full_device_is_disabled_and_the_run_fails_naming_it(tmp_path: Path) -> None:
    proc = _simulate(tmp_path, "--set", "backends[1].path=/dev/full")
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr and "run ended: success" not in proc.stdout
    assert "run ended: failed" in proc.stdout  # what every other backend recorded
    assert "error: the run ended with status 'failed'" in proc.stderr
    assert "jsonl (backends[1]):" in proc.stderr and "No space left on device" in proc.stderr
    summary = json.loads((tmp_path / "demo" / "summary.json").read_text())
    assert summary["status"] == "failed"
    lost = summary["plugin_failures"]["jsonl (backends[1])"]
    assert lost["failures"] >= 1 and lost["by_hook"]["on_run_start"] == 1 and lost["disabled"]
    # the other backends lost nothing
    assert set(summary["plugin_failures"]) == {"jsonl (backends[1])"}


@pytest.fixture
def tiny_tmpfs(tmp_path: Path):
    with small_tmpfs(tmp_path / "tiny", "200k") as mnt:  # without root: the /dev/full tests cover write failures
        yield mnt


@pytest.mark.slow  # a 60-step run filling a tmpfs (~8 s); the /dev/full tests in this file cover write failures in make test
def test_full_disk_never_ends_in_success_or_empty_files(tiny_tmpfs: Path, tmp_path: Path) -> None:
    data = write_dataset(tmp_path / "data.parquet", rows_per_source=40, seed=0)  # outside the full disk
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    proc = _simulate(tiny_tmpfs, "--data", str(data), steps=60, cwd=elsewhere)
    assert proc.returncode == 1
    # a backend whose writer failed to start retries in the run directory, never in the working directory
    assert list(elsewhere.iterdir()) == []
    assert "Traceback" not in proc.stderr and "run ended: success" not in proc.stdout
    assert "No space left on device" in proc.stderr
    run_dir = tiny_tmpfs / "demo"
    empty = [p.name for p in run_dir.rglob("*") if p.is_file() and p.stat().st_size == 0 and p.name != LOCK_FILE]
    assert empty == []
    for name in ("summary.json", "reward_monitor.json"):  # whole or absent
        if (run_dir / name).exists():
            json.loads((run_dir / name).read_text())
    assert not [p for p in run_dir.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
def test_lost_jsonl_with_the_report_on_still_writes_the_summary_and_names_the_loss(tmp_path: Path) -> None:
    # The report reads metrics.jsonl; when that backend lost its file the report is skipped with a
    # warning, and the run's own end (summary.json, the lost-data error) is what the user sees.
    cmd = [sys.executable, "-m", "rlhooks.cli", "simulate", "--out", str(tmp_path), "--no-progress", "--steps", "2",
           *[a for kv in FAST for a in ("--set", kv)], "--set", "backends[1].path=/dev/full"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "no report:" in proc.stderr and "no metrics.jsonl" in proc.stderr
    assert "error: the run ended with status 'failed'" in proc.stderr and "jsonl (backends[1]):" in proc.stderr
    assert json.loads((tmp_path / "demo" / "summary.json").read_text())["status"] == "failed"


@pytest.mark.slow  # a CLI process (~7 s); make test keeps the two /dev/full CLI runs of this file
def test_run_without_a_jsonl_backend_is_a_success_without_a_report(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text("run: {name: nj}\nbackends: [console]\n")
    cmd = [sys.executable, "-m", "rlhooks.cli", "simulate", str(tmp_path / "c.yaml"), "--out", str(tmp_path),
           "--no-progress", "--steps", "2", *[a for kv in FAST for a in ("--set", kv)]]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert "no report:" in proc.stderr and "add 'jsonl'" in proc.stderr
    summary = json.loads((tmp_path / "nj" / "summary.json").read_text())
    assert summary["status"] == "success" and summary["report"] is None


@pytest.mark.slow  # make test's 5-minute budget (CI runs slow tests)
def test_compare_over_a_run_that_lost_data_exits_1_naming_it(tmp_path: Path) -> None:
    for stem, path in (("ok", "metrics.jsonl"), ("full", "/dev/full")):
        (tmp_path / f"{stem}.yaml").write_text(f"backends: [{{name: jsonl, path: {path}}}]\n")
    cmd = [sys.executable, "-m", "rlhooks.cli", "simulate", "--compare", str(tmp_path / "ok.yaml"),
           str(tmp_path / "full.yaml"), "--out", str(tmp_path), "--no-progress", "--no-report", "--steps", "2",
           *[a for kv in FAST for a in ("--set", kv)]]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "error: the run 'full' ended with status 'failed'" in proc.stderr
    assert "run 'ok'" not in proc.stderr
