"""Run directories: safe names, one run per directory, replacing only finished runs rlhooks made.

Real processes hold the locks (a second Python process), real ``rlhooks simulate`` runs write
the directories.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import structlog

import rlhooks
import rlhooks.host
from rlhooks.core.errors import ConfigError
from rlhooks.core.rundir import LOCK_FILE, MARKER_FILE, RunDirError, RunDirLock, check_run_name, write_atomic
from rlhooks.engines.sim.cli import simulate_run

FAST = ["run.steps=2", "simulate.rows_per_source=40", "run.train_batch_size=4", "run.gen_batch_size=8", "run.n=4"]


def _sim(out: Path, name: str = "r", *extra: str) -> dict:
    return simulate_run(None, [*FAST, f"run.out_dir={out}", f"run.name={name}", *extra], report=False)


@pytest.mark.parametrize("name", ["", " ", ".", "..", "/abs/path", "a/b", "../up", "a\\b", "x\x00y"])
def test_unsafe_run_names_are_config_errors_with_their_key(name: str) -> None:
    with pytest.raises(ConfigError) as err:
        rlhooks.host.load_config({"run": {"name": name}})
    assert [i.path for i in err.value.issues] == ["run.name"]
    assert check_run_name(name)


def test_empty_name_on_the_command_line_is_refused_and_deletes_nothing(tmp_path: Path) -> None:
    sibling = tmp_path / "out" / "other-run"
    sibling.mkdir(parents=True)
    (sibling / "metrics.jsonl").write_text("{}\n")
    # the issue's repro ran this twice: the second run deleted the whole --out; now the first refuses
    proc = subprocess.run([sys.executable, "-m", "rlhooks.cli", "simulate", "--set", "run.name=", "--out",
                           str(tmp_path / "out"), "--no-report", "--no-progress", "--steps", "2"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "run.name: must not be empty" in proc.stderr and "Traceback" not in proc.stderr
    assert (sibling / "metrics.jsonl").read_text() == "{}\n"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["other-run"]


def test_rerun_replaces_a_finished_run_and_only_what_it_wrote(tmp_path: Path) -> None:
    first = _sim(tmp_path)
    run_dir = Path(first["run_dir"])
    marker = json.loads((run_dir / MARKER_FILE).read_text())
    assert marker["status"] == "success" and "metrics.jsonl" in marker["entries"]
    assert LOCK_FILE not in first["files"] and MARKER_FILE not in first["files"]
    (tmp_path / "sibling.txt").write_text("keep")
    second = _sim(tmp_path)
    assert second["status"] == "success" and (tmp_path / "sibling.txt").read_text() == "keep"
    # a file the earlier run did not write: nothing is deleted, the rerun refuses
    (run_dir / "my-notes.txt").write_text("mine")
    before = sorted(p.name for p in run_dir.iterdir())
    with pytest.raises(RunDirError, match="my-notes.txt.*did not write"):
        _sim(tmp_path)
    assert sorted(p.name for p in run_dir.iterdir()) == before
    assert (run_dir / "my-notes.txt").read_text() == "mine"


def test_directory_not_made_by_rlhooks_is_never_replaced(tmp_path: Path) -> None:
    mine = tmp_path / "r"
    mine.mkdir()
    (mine / "thesis.tex").write_text("x")
    with pytest.raises(RunDirError, match="was not made by 'rlhooks simulate'"):
        _sim(tmp_path)
    assert (mine / "thesis.tex").read_text() == "x"


HOLD = textwrap.dedent("""
    import sys, time
    from rlhooks.core.rundir import RunDirLock
    lock = RunDirLock(sys.argv[1], "holder").acquire()
    print("locked", flush=True)
    time.sleep(120)
""")


def _hold_lock(run_dir: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(run_dir)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


def test_second_run_on_a_locked_directory_refuses_naming_the_other_process(tmp_path: Path) -> None:
    _sim(tmp_path)
    run_dir = tmp_path / "r"
    before = {p.name: p.stat().st_mtime_ns for p in run_dir.iterdir() if p.name != LOCK_FILE}
    holder = _hold_lock(run_dir)
    try:
        with pytest.raises(RunDirError, match=rf"in use by another run \(pid {holder.pid} on .* \(holder\)\)"):
            _sim(tmp_path)
        assert {p.name: p.stat().st_mtime_ns for p in run_dir.iterdir() if p.name != LOCK_FILE} == before
        # the same lock guards any engine's run directory (the verl shim's RunManager.running())
        manager = rlhooks.host.RunManager(rlhooks.host.load_config({"run": {"name": "r", "out_dir": str(tmp_path)}}))
        with pytest.raises(RunDirError, match=f"pid {holder.pid}"):
            with manager.running():
                pass
    finally:
        holder.kill()
        holder.wait()
    # the holder died without releasing: its stale lock is detected and taken over
    with structlog.testing.capture_logs() as logs:
        assert _sim(tmp_path)["status"] == "success"
    assert any(f"stale lock of pid {holder.pid}" in e["event"] for e in logs)


def test_killed_run_is_not_replaced_but_its_lock_is_taken_over(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "rlhooks.cli", "simulate", "--out", str(tmp_path), "--no-report", "--no-progress",
           *[a for kv in FAST for a in ("--set", kv)], "--set", "run.name=r", "--steps", "100000"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    jsonl = tmp_path / "r" / "metrics.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (jsonl.exists() and jsonl.read_text().count("\n") > 2):
        time.sleep(0.1)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = sorted(p.name for p in (tmp_path / "r").iterdir())
    with pytest.raises(RunDirError, match=rf"did not finish \(pid {proc.pid}"):
        _sim(tmp_path)
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == before


def test_lock_is_reentrant_in_one_process_and_exclusive_across_processes(tmp_path: Path) -> None:
    with RunDirLock(tmp_path / "d", "a"), RunDirLock(tmp_path / "d", "b"):
        code = "import sys\nfrom rlhooks.core.rundir import RunDirLock\nRunDirLock(sys.argv[1]).acquire()"
        other = subprocess.run([sys.executable, "-c", code, str(tmp_path / "d")], capture_output=True, text=True, timeout=60)
        assert other.returncode != 0 and f"pid {os.getpid()}" in other.stderr
    assert (tmp_path / "d" / LOCK_FILE).read_text() == ""  # released cleanly: no stale holder left
    with structlog.testing.capture_logs() as logs, RunDirLock(tmp_path / "d", "c"):  # a real flock again
        assert json.loads((tmp_path / "d" / LOCK_FILE).read_text())["command"] == "c"
    assert not [e for e in logs if "stale" in e["event"]]


def test_write_atomic_keeps_the_old_file_when_the_write_fails(tmp_path: Path) -> None:
    target = tmp_path / "summary.json"
    write_atomic(target, "old\n")

    with pytest.raises(TypeError):
        write_atomic(target, 12345)  # type: ignore[arg-type] - fails inside the write
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]  # no temp file left


def test_verl_experiment_name_becomes_a_safe_run_name() -> None:
    pytest.importorskip("omegaconf")
    from omegaconf import OmegaConf

    from rlhooks.engines.verl.config import rlhooks_config

    cfg = OmegaConf.create({"trainer": {"experiment_name": "team/qwen-7b"}, "data": {"train_batch_size": 4},
                            "actor_rollout_ref": {"rollout": {"n": 2}}})
    assert rlhooks_config(cfg).run.name == "team-qwen-7b"


def test_comparison_in_progress_is_locked_so_another_cannot_replace_its_runs(tmp_path: Path) -> None:
    # A second `--compare` into the same --out would replace the first's finished runs and data mid-way.
    from rlhooks.engines.sim.compare import compare

    configs = []
    for stem in ("a", "b"):
        (tmp_path / f"{stem}.yaml").write_text("backends: [jsonl]\n")
        configs.append(tmp_path / f"{stem}.yaml")
    root = tmp_path / "out" / "compare"
    holder = _hold_lock(root)
    try:
        with pytest.raises(RunDirError, match=f"in use by another run \\(pid {holder.pid}"):
            compare(configs, FAST, out=tmp_path / "out", report=False)
        assert sorted(p.name for p in root.iterdir()) == [LOCK_FILE]  # nothing written, nothing replaced
    finally:
        holder.kill()
        holder.wait()
    result = compare(configs, FAST, out=tmp_path / "out", report=False)
    assert [r["status"] for r in result["runs"]] == ["success", "success"]
    assert json.loads((root / "comparison.json").read_text())["seed"] == result["seed"]


def test_older_versions_run_is_replaced_only_if_it_holds_just_what_such_a_run_writes(tmp_path: Path) -> None:
    # An older version's marker is plain text and lists nothing: a file a user added there, or a run
    # that never wrote summary.json (killed), must not be deleted by a rerun.
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    (run_dir / MARKER_FILE).write_text("made by rlhooks simulate; rerunning the same name replaces this directory\n")
    (run_dir / "metrics.jsonl").write_text("{}\n")
    (run_dir / "notes.txt").write_text("mine\n")
    with pytest.raises(RunDirError, match="holds 'notes.txt'"):
        _sim(tmp_path)
    (run_dir / "notes.txt").unlink()
    with pytest.raises(RunDirError, match="without summary.json"):
        _sim(tmp_path)
    assert (run_dir / "metrics.jsonl").read_text() == "{}\n"  # nothing deleted
    (run_dir / "summary.json").write_text("{}\n")
    assert _sim(tmp_path)["status"] == "success"  # a finished older run: replaced
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "success"


# -- files a plugin writes: claimed through claim_output / open_output ---------------------------


def _ended_run(tmp_path: Path, write) -> Path:
    from rlhooks.core.rundir import RunDirectory

    rd = RunDirectory.create(tmp_path, "r", command="rlhooks simulate")
    write(rd.path)
    rd.finish("success")
    return rd.path


def _written_by_another_process(path: Path, text: str) -> None:
    """A user's shell writing into the run directory (not the run's process: rlhooks does not see it)."""
    subprocess.run(["sh", "-c", 'printf %s "$1" > "$2"', "sh", text, str(path)], check=True)


def test_rerun_refusal_names_claim_output_for_a_file_written_during_the_run_by_another_process(tmp_path: Path) -> None:
    from rlhooks.core.rundir import RunDirectory

    run_dir = _ended_run(tmp_path, lambda d: _written_by_another_process(d / "metrics.csv", "step,value\n"))
    with pytest.raises(RunDirError) as err:
        RunDirectory.create(tmp_path, "r", command="rlhooks simulate")
    text = str(err.value)
    assert "holds 'metrics.csv', which the earlier run did not write" in text
    assert "'metrics.csv' was written while the earlier run ran, but not by the run's own process" in text
    assert "must call rlhooks.claim_output(path) before creating the file (or create it with rlhooks.open_output" in text
    assert (run_dir / "metrics.csv").read_text() == "step,value\n"  # nothing deleted


def test_files_a_plugin_of_the_run_wrote_without_claiming_them_are_the_runs(tmp_path: Path) -> None:
    """Issue 37 item 10: a backend written before claim_output existed (plain open(), os.makedirs) made
    the next run of that name refuse; what the run's process creates in its directory while the run holds
    it is the run's, recorded at its end, so the rerun replaces it (and nothing else)."""
    from rlhooks.core.rundir import RunDirectory

    def write(d: Path) -> None:
        with open(d / "metrics.csv", "w") as f:  # as a CSV backend written from the earlier docs does
            f.write("step,value\n1,0.5\n")
        os.makedirs(d / "plots" / "step_1")
        (d / "plots" / "step_1" / "a.svg").write_text("<svg/>")

    run_dir = _ended_run(tmp_path, write)
    marker = json.loads((run_dir / MARKER_FILE).read_text())
    assert {"metrics.csv", "plots", "plots/step_1/a.svg"} <= set(marker["files"])
    rd = RunDirectory.create(tmp_path, "r", command="rlhooks simulate")  # replaces: no refusal
    try:
        assert sorted(os.listdir(run_dir)) == sorted([LOCK_FILE, MARKER_FILE])
    finally:
        rd.finish("success")


def test_claim_output_and_open_output_refuse_a_link_in_any_locked_run_directory(tmp_path: Path) -> None:
    """Issue 37 item 10: a third-party backend's directory (claim_output) or file (open_output, write_atomic)
    in a run directory that is not cleared (`rlhooks train` resumes into it, holding only its lock) is never
    written through a planted link, as the built-in backends' are; a path outside the run directory is the
    user's choice and not checked."""
    from rlhooks.core import rundir

    outside = tmp_path / "outside"
    outside.mkdir()
    run_dir = tmp_path / "runs" / "train"
    with rundir.locked(run_dir, "rlhooks train"):
        (run_dir / "csv").symlink_to(outside)
        (run_dir / "log.txt").symlink_to(outside / "log.txt")
        with pytest.raises(RunDirError, match=r"train/csv is a symbolic link to .*outside: rlhooks never writes"):
            rlhooks.claim_output(run_dir / "csv")
        with pytest.raises(RunDirError, match=r"train/csv is a symbolic link to .*outside: rlhooks never writes"):
            rlhooks.claim_output(run_dir / "csv" / "metrics.csv")
        with pytest.raises(RunDirError, match=r"train/log.txt is a symbolic link to .*outside"):
            rlhooks.open_output(run_dir / "log.txt", "a")
        with pytest.raises(RunDirError, match=r"train/csv is a symbolic link"):
            rlhooks.open_output(run_dir / "csv" / "metrics.csv")
        with pytest.raises(RunDirError, match=r"train/csv is a symbolic link"):
            rlhooks.write_atomic(run_dir / "csv" / "summary.json", "{}")
        rlhooks.write_atomic(run_dir / "log.txt", "mine")  # a link at the name itself is replaced, not followed
        assert not (run_dir / "log.txt").is_symlink()
        (tmp_path / "elsewhere").symlink_to(outside)  # the user's own configured directory, outside the run
        rlhooks.claim_output(tmp_path / "elsewhere" / "x")
    assert os.listdir(outside) == []


def test_rerun_refusal_does_not_blame_a_plugin_for_a_file_added_after_the_run(tmp_path: Path) -> None:
    from rlhooks.core.rundir import RunDirectory

    run_dir = _ended_run(tmp_path, lambda d: None)
    notes = run_dir / "my-notes.txt"
    notes.write_text("mine")
    later = time.time() + 3600
    os.utime(notes, (later, later))
    with pytest.raises(RunDirError, match="my-notes.txt.*did not write") as err:
        RunDirectory.create(tmp_path, "r", command="rlhooks simulate")
    assert "claim_output" not in str(err.value)


def test_open_output_claims_so_a_rerun_replaces_the_file(tmp_path: Path) -> None:
    from rlhooks.core.rundir import RunDirectory

    def write(d: Path) -> None:
        with rlhooks.open_output(d / "csv" / "metrics.csv") as f:  # parent made and claimed
            f.write("step,value\n1,0.5\n")
        with rlhooks.open_output(d / "blob.bin", "wb") as f:
            f.write(b"\x00\x01")

    run_dir = _ended_run(tmp_path, write)
    assert (run_dir / "csv" / "metrics.csv").read_text(encoding="utf-8") == "step,value\n1,0.5\n"
    rd = RunDirectory.create(tmp_path, "r", command="rlhooks simulate")  # replaces: no refusal
    try:
        assert not (run_dir / "csv").exists() and not (run_dir / "blob.bin").exists()
    finally:
        rd.finish("success")


def test_open_output_never_writes_through_a_symlink(tmp_path: Path) -> None:
    from rlhooks.core.rundir import RunDirectory

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("keep")
    rd = RunDirectory.create(tmp_path, "r", command="rlhooks simulate")
    try:
        (rd.path / "link.txt").symlink_to(outside / "precious.txt")
        (rd.path / "linkdir").symlink_to(outside, target_is_directory=True)
        with pytest.raises(RunDirError, match="link.txt is a symbolic link to .*rlhooks never writes a run's output"):
            rlhooks.open_output(rd.path / "link.txt", "a")
        with pytest.raises(RunDirError, match="linkdir is .*rlhooks never writes a run.s output"):
            rlhooks.open_output(rd.path / "linkdir" / "precious.txt")
        with pytest.raises(ValueError, match="mode must be 'w', 'a' or 'x'"):
            rlhooks.open_output(rd.path / "x.txt", "r")
    finally:
        rd.finish("success")
    assert (outside / "precious.txt").read_text() == "keep"
