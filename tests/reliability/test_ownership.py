"""Issue 18: a rerun deletes exactly the files its run recorded as it created them; anything
else in the directory makes it refuse, naming the first foreign file, having deleted nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rlhooks.core.rundir import MARKER_FILE, RunDirError
from rlhooks.engines.sim.cli import simulate_run

FAST = ["simulate.rows_per_source=40", "run.train_batch_size=4", "run.gen_batch_size=8", "run.n=4"]
WITH_TB = ["backends=[jsonl, tensorboard]"]


def _sim(out: Path, steps: int = 2, *extra: str) -> dict:
    return simulate_run(None, [*FAST, f"run.steps={steps}", f"run.out_dir={out}", "run.name=d", *WITH_TB, *extra],
                        report=False)


def _tree(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def test_a_file_added_while_the_run_runs_is_not_the_runs(tmp_path: Path) -> None:
    """Case 1a: NOTES.md written into the run directory mid-run by another process (a user's shell) is
    foreign: the rerun refuses. (What the run's own process writes there is the run's: issue 37 item 10.)"""
    run_dir = tmp_path / "d"

    def add_notes() -> None:
        deadline = time.monotonic() + 60
        while not (run_dir / "metrics.jsonl").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        subprocess.run(["sh", "-c", 'printf "my notes" > "$0"', str(run_dir / "NOTES.md")], check=True)

    t = threading.Thread(target=add_notes)
    t.start()
    _sim(tmp_path, 40)
    t.join()
    marker = json.loads((run_dir / MARKER_FILE).read_text())
    assert "NOTES.md" not in marker["files"] and "metrics.jsonl" in marker["files"]
    before = _tree(run_dir)
    with pytest.raises(RunDirError, match="holds 'NOTES.md', which the earlier run did not write"):
        _sim(tmp_path)
    assert _tree(run_dir) == before  # nothing deleted


def test_a_file_added_inside_the_runs_own_directory_after_it_ended_is_kept(tmp_path: Path) -> None:
    """Case 1b: tensorboard/other.events added after the end: refused by name, never rmtree'd."""
    run_dir = tmp_path / "d"
    _sim(tmp_path)
    other = run_dir / "tensorboard" / "other.events"
    other.write_bytes(b"someone else's events")
    before = _tree(run_dir)
    with pytest.raises(RunDirError, match=r"holds 'tensorboard/other.events', which the earlier run did not write"):
        _sim(tmp_path)
    assert _tree(run_dir) == before
    other.unlink()
    again = _sim(tmp_path)  # only the run's own files: replaced, file by file
    assert again["status"] == "success"
    marker = json.loads((run_dir / MARKER_FILE).read_text())
    present = sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*")
                     if p.name not in (MARKER_FILE, ".rlhooks.lock"))
    assert present == marker["files"]  # what is there is exactly what the run recorded


@pytest.mark.parametrize("where", [pytest.param("name", marks=pytest.mark.slow), "out"])  # a CLI process each (~5 s)
def test_non_utf8_run_name_or_out_is_a_clean_error_naming_it(tmp_path: Path, where: str) -> None:
    """Case 6: bytes that are not UTF-8 in run.name or --out: an error naming the key, no traceback."""
    bad = b"r\xff\xfe"
    out = os.fsencode(tmp_path) + (b"/" + bad if where == "out" else b"")
    args = [b"simulate", b"--no-report", b"--no-progress", b"--steps", b"2", b"--out", out,
            b"--set", b"run.name=" + (bad if where == "name" else b"ok")]
    for kv in FAST:
        args += [b"--set", kv.encode()]
    proc = subprocess.run([sys.executable.encode(), b"-m", b"rlhooks.cli", *args], capture_output=True, timeout=120)
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == 1, err
    assert "Traceback" not in err
    key = "run.name" if where == "name" else "run.out_dir"
    assert key in err and "not valid UTF-8" in err and r"\xff\xfe" in err, err
    assert sorted(os.listdir(tmp_path)) == []  # nothing created


def test_compare_reruns_refuse_on_a_foreign_file_in_one_of_its_runs(tmp_path: Path) -> None:
    """The same holds under --compare: each run of the comparison is replaced only file by file."""
    from rlhooks.engines.sim.compare import compare

    for stem in ("a", "b"):
        (tmp_path / f"{stem}.yaml").write_text("backends: [jsonl, tensorboard]\n")
    configs = [tmp_path / "a.yaml", tmp_path / "b.yaml"]
    overrides = [*FAST, "run.steps=2"]
    compare(configs, overrides, out=tmp_path / "out", report=False)
    foreign = tmp_path / "out" / "compare" / "b" / "tensorboard" / "mine.events"
    foreign.write_bytes(b"not the run's")
    before = _tree(tmp_path / "out")
    with pytest.raises(RunDirError, match=r"holds 'tensorboard/mine.events', which the earlier run did not write"):
        compare(configs, overrides, out=tmp_path / "out", report=False)
    assert _tree(tmp_path / "out") == before  # run 'a' was not replaced either: checked before any run
