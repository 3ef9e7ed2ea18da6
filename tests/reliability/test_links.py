"""Issue 29 (items 1, 2, 8): no write through a link, nothing left in a refused directory, the
comparison root owned like a run directory, a report drawn at any time is the run's own, and a
``--report-timeout`` that cannot bound anything is refused."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import rlhooks.host
from rlhooks import hookimpl
from rlhooks.cli import main
from rlhooks.core import interrupt, rundir
from rlhooks.core.errors import RLHooksError
from rlhooks.core.rundir import LOCK_FILE, MARKER_FILE, RunDirError
from rlhooks.engines.sim.cli import simulate_run
from rlhooks.engines.sim.compare import compare

FAST = ["simulate.rows_per_source=40", "run.train_batch_size=4", "run.gen_batch_size=8", "run.n=4", "run.steps=2",
        "backends=[jsonl]"]
VICTIM = b"a user's file, not rlhooks'\n"


def _sim(out: Path, name: str, *extra: str) -> dict:
    return simulate_run(None, [*FAST, f"run.out_dir={out}", f"run.name={name}", *extra], report=False)


def _tree(d: Path) -> dict[str, bytes | str]:
    """Every entry under ``d``: a file's bytes, a link's target (never followed)."""
    out: dict[str, bytes | str] = {}
    for root, dirs, files in os.walk(d):
        for n in (*dirs, *files):
            p = Path(root) / n
            rel = str(p.relative_to(d))
            out[rel] = f"-> {os.readlink(p)}" if p.is_symlink() else ("<dir>" if p.is_dir() else p.read_bytes())
    return out


def _plant(lock: Path, how: str, victim: Path) -> None:
    """A ``.rlhooks.lock`` that is not rlhooks': a link to a user's file, a dangling link, a hard link, a FIFO,
    a user's file."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    if how == "symlink":
        lock.symlink_to(victim)
    elif how == "dangling":
        lock.symlink_to(victim.parent / "created-through-the-link")
    elif how == "hardlink":
        os.link(victim, lock)
    elif how == "fifo":
        os.mkfifo(lock)
    else:
        lock.write_bytes(VICTIM)


def _configs(tmp_path: Path, *stems: str) -> list[Path]:
    out = []
    for stem in stems:
        (tmp_path / f"{stem}.yaml").write_text("backends: [jsonl]\n")
        out.append(tmp_path / f"{stem}.yaml")
    return out


# -- item 1: the run lock -------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["symlink", "dangling", "hardlink", "fifo", "file"])
def test_simulate_never_empties_or_creates_a_file_through_a_planted_lock(tmp_path: Path, how: str, capsys) -> None:
    """`ln -s ~/victim out/fresh/.rlhooks.lock; rlhooks simulate --out out --set run.name=fresh` left the
    victim at 0 bytes (exit 0); now it is refused naming the lock file, the victim as it was."""
    victim = tmp_path / "victim.txt"
    victim.write_bytes(VICTIM)
    lock = tmp_path / "out" / "fresh" / LOCK_FILE
    _plant(lock, how, victim)
    code = main(["simulate", "--no-report", "--no-progress", "--out", str(tmp_path / "out"),
                 *[a for kv in [*FAST, "run.name=fresh"] for a in ("--set", kv)]])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert str(lock) in err and "rlhooks" in err and ("not a regular file" in err or "not a lock file" in err), err
    assert victim.read_bytes() == VICTIM
    if how == "file":
        assert lock.read_bytes() == VICTIM
    assert not (tmp_path / "created-through-the-link").exists()
    assert sorted(os.listdir(lock.parent)) == [LOCK_FILE]  # the run wrote nothing


def test_a_json_file_that_is_not_an_rlhooks_lock_record_is_refused_not_emptied(tmp_path: Path) -> None:
    """Any JSON object was taken for a lock record, so someone's `.rlhooks.lock` holding one was emptied."""
    lock = tmp_path / "run" / LOCK_FILE
    lock.parent.mkdir()
    lock.write_text('{"theme": "dark"}')
    with pytest.raises(RunDirError, match=r"run/\.rlhooks\.lock is not a lock file rlhooks made \(it holds other data"):
        rundir.RunDirLock(lock.parent).acquire()
    assert lock.read_text() == '{"theme": "dark"}'
    lock.write_text('{"pid": 1, "host": "h", "started": "2026-01-01T00:00:00+00:00", "command": "rlhooks run"}')
    with rundir.locked(lock.parent):  # a dead run's record is taken over
        assert json.loads(lock.read_text())["pid"] == os.getpid()


def test_compare_train_and_report_refuse_a_linked_lock_too(tmp_path: Path) -> None:
    """Every lock user: --compare's root, RunManager.running() (what `rlhooks train` holds), and the lock
    `rlhooks report` takes to record a report in a finished run's marker."""
    victim = tmp_path / "victim.txt"
    victim.write_bytes(VICTIM)
    out = tmp_path / "out"
    (out / "compare").mkdir(parents=True)
    (out / "compare" / LOCK_FILE).symlink_to(victim)
    with pytest.raises(RunDirError, match=r"compare/\.rlhooks\.lock is not a regular file \(a symbolic link"):
        compare(_configs(tmp_path, "a", "b"), FAST, out=out, report=False)

    cfg = rlhooks.host.load_config({"run": {"name": "train", "out_dir": str(out)}, "backends": []})
    manager = rlhooks.host.RunManager(cfg)
    (out / "train").mkdir()
    (out / "train" / LOCK_FILE).symlink_to(victim)
    with pytest.raises(RunDirError, match=r"train/\.rlhooks\.lock is not a regular file"), manager.running():
        pass

    run_dir = Path(_sim(out, "done")["run_dir"])
    (run_dir / LOCK_FILE).unlink()
    (run_dir / LOCK_FILE).symlink_to(victim)
    (run_dir / "report").mkdir()
    with pytest.raises(RunDirError, match=r"done/\.rlhooks\.lock is not a regular file"):
        rundir.adopt_derived(run_dir / "report")
    assert victim.read_bytes() == VICTIM


def test_a_refused_directory_keeps_no_lock_file_and_a_failed_start_no_directory(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "mine").mkdir(parents=True)
    (out / "mine" / "notes.txt").write_text("mine")
    with pytest.raises(RunDirError, match="exists and was not made by 'rlhooks simulate'"):
        _sim(out, "mine")
    assert os.listdir(out / "mine") == ["notes.txt"]  # no .rlhooks.lock left behind

    (out / "compare").mkdir()
    (out / "compare" / "notes.txt").write_text("my own 'compare' folder")
    with pytest.raises(RunDirError, match="exists and was not made by 'rlhooks simulate --compare'"):
        compare(_configs(tmp_path, "a", "b"), FAST, out=out, report=False)
    assert os.listdir(out / "compare") == ["notes.txt"]

    class UnknownHook:  # fails RunManager's construction, as a broken plugin fails `rlhooks train`'s start
        @hookimpl
        def on_no_such_hook(self) -> None: ...

    cfg = rlhooks.host.load_config({"run": {"name": "train", "out_dir": str(tmp_path / "fresh")}, "backends": []})
    with pytest.raises(RLHooksError, match="is decorated with @hookimpl but is not an rlhooks hook"):
        rlhooks.host.RunManager(cfg, extra_plugins=[("bad", UnknownHook())])
    manager = rlhooks.host.RunManager(cfg)  # a start that fails before the run wrote anything
    with pytest.raises(RuntimeError, match="worker start failed"), manager.running():
        raise RuntimeError("worker start failed")
    assert not (tmp_path / "fresh").exists()  # neither the run directory nor out_dir is left behind


def test_a_resumed_run_directory_never_appends_metrics_through_a_planted_link(tmp_path: Path, monkeypatch) -> None:
    """`rlhooks train` resumes into its run directory without clearing it, so a `metrics.jsonl` link planted
    there was appended to (the link's target got the run's records); now the JSONL backend refuses it (the
    RunManager reports the backend's failure by name and ends the run "failed"), and its later records do
    not go to the working directory either."""
    from types import SimpleNamespace

    from rlhooks.plugins.backends.jsonl import JsonlBackend

    victim = tmp_path / "victim.txt"
    victim.write_bytes(VICTIM)
    run_dir = tmp_path / "out" / "train"
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.jsonl").symlink_to(victim)
    monkeypatch.chdir(tmp_path)
    backend = JsonlBackend()
    run = SimpleNamespace(run_dir=run_dir, name="train", redacted_config=dict, stop_reason=None)
    with rundir.locked(run_dir, "rlhooks train"):  # as the RunManager holds it while the run runs
        for hook in (lambda: backend.on_run_start(run=run), lambda: backend.on_run_end(status="failed")):
            with pytest.raises(RunDirError, match=r"train/metrics\.jsonl is a symbolic link to .*: rlhooks never writes"):
                hook()
    assert victim.read_bytes() == VICTIM and (run_dir / "metrics.jsonl").is_symlink()
    assert not (tmp_path / "metrics.jsonl").exists()


def test_a_run_directory_that_is_a_link_is_refused_by_every_engines_lock(tmp_path: Path) -> None:
    """`rlhooks train` resumes into its run directory without the simulator's rerun checks, so the lock the
    RunManager takes (every engine's) refuses a run directory that is itself a link; nothing is created."""
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "train").symlink_to(target)
    with pytest.raises(RunDirError, match=r"out/train is a symbolic link to .*elsewhere; rlhooks never writes a run through a link"):
        with rundir.locked(tmp_path / "out" / "train", "rlhooks train"):
            pass
    assert list(target.iterdir()) == [] and (tmp_path / "out" / "train").is_symlink()


@pytest.mark.parametrize("backend", ["tensorboard", "wandb"])
def test_a_resumed_run_directory_never_writes_a_backends_files_through_a_planted_directory_link(
        tmp_path: Path, backend: str) -> None:
    """A `tensorboard` or `wandb` link planted in a train run's directory (not cleared on a resume) made the
    backend create its files in the link's target; now it refuses, naming the link, before its library loads
    (through the public rlhooks.claim_output, which refuses links for every plugin: issue 37 item 10)."""
    from types import SimpleNamespace

    from rlhooks.plugins.backends.tensorboard_backend import TensorBoardBackend
    from rlhooks.plugins.backends.wandb_backend import WandbBackend

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run_dir = tmp_path / "out" / "train"
    run_dir.mkdir(parents=True)
    (run_dir / backend).symlink_to(elsewhere)
    plugin = TensorBoardBackend() if backend == "tensorboard" else WandbBackend(WandbBackend.Options(mode="disabled"))
    run = SimpleNamespace(run_dir=run_dir, name="train", redacted_config=dict)
    with rundir.locked(run_dir, "rlhooks train"), \
            pytest.raises(RunDirError, match=rf"train/{backend} is a symbolic link to .*elsewhere: rlhooks never writes"):
        plugin.on_run_start(run=run)
    assert os.listdir(elsewhere) == []


# -- item 2: the comparison root ------------------------------------------------------------------


@pytest.mark.parametrize("stem", ["report", "data.parquet", "comparison.json", "Comparison.MD", ".rlhooks.lock", ".."])
def test_a_config_stem_naming_a_comparison_file_is_refused_before_any_run(tmp_path: Path, stem: str) -> None:
    configs = [*_configs(tmp_path, "a"), tmp_path / f"{stem}.yaml"]
    configs[1].write_text("backends: [jsonl]\n")
    with pytest.raises(RLHooksError, match=r"--compare config .* rename or copy the config file \(nothing was run\)"):
        compare(configs, FAST, out=tmp_path / "out", report=False)
    assert not (tmp_path / "out").exists()


def test_planted_links_in_a_new_comparison_root_are_never_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim.parquet"
    victim.write_bytes(VICTIM)
    root = tmp_path / "out" / "compare"
    root.mkdir(parents=True)
    for name in ("data.parquet", "generated_vs_accuracy.png"):
        (root / name).symlink_to(victim)
    before = _tree(root)
    with pytest.raises(RunDirError, match="exists and was not made by 'rlhooks simulate --compare'"):
        compare(_configs(tmp_path, "a", "b"), FAST, out=tmp_path / "out", report=False)
    assert victim.read_bytes() == VICTIM and _tree(root) == before


def test_a_comparison_rerun_rewrites_only_what_it_wrote_and_never_through_a_link(tmp_path: Path) -> None:
    out = tmp_path / "out"
    root = out / "compare"
    configs = _configs(tmp_path, "a", "b")
    compare(configs, FAST, out=out, report=False)
    marker = json.loads((root / MARKER_FILE).read_text())
    assert marker["made_by"] == "rlhooks simulate --compare" and marker["status"] == "success"
    assert {"a", "b", "data.parquet", "comparison.json", "comparison.md"} <= set(marker["owned"])
    victim = tmp_path / "victim.png"
    victim.write_bytes(VICTIM)

    def refused(match: str) -> None:
        before = _tree(root)
        with pytest.raises(RunDirError, match=match):
            compare(configs, FAST, out=out)
        assert _tree(root) == before and victim.read_bytes() == VICTIM

    # a report/ the earlier comparison (run without a report) did not write: not taken over
    (root / "report").mkdir()
    (root / "report" / "report.html").write_text("my page")
    refused(r"holds 'report', which the earlier run did not write")
    (root / "report" / "report.html").unlink()
    (root / "report").rmdir()
    # its own data and chart, swapped for links to a user's file: never written through
    for name in ("data.parquet", "generated_vs_accuracy.png"):
        saved = (root / name).read_bytes()
        (root / name).unlink()
        (root / name).symlink_to(victim)
        refused(f"holds '{name}', a symbolic link to {victim}, which rlhooks never writes through")
        (root / name).unlink()
        (root / name).write_bytes(saved)

    # the earlier comparison's other run stays, and stays the comparison's
    result = compare([configs[0], *_configs(tmp_path, "c")], FAST, out=out, report=False)
    assert [r["status"] for r in result["runs"]] == ["success", "success"]
    assert (root / "b" / "summary.json").is_file()
    assert {"a", "b", "c"} <= set(json.loads((root / MARKER_FILE).read_text())["owned"])


def test_a_finished_single_run_named_compare_is_not_taken_over(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _sim(out, "compare")
    before = _tree(out)
    with pytest.raises(RunDirError, match=r"holds a run of 'rlhooks simulate', not of 'rlhooks simulate --compare', "
                                          r"so it is neither replaced nor taken over; choose another --out"):
        compare(_configs(tmp_path, "a", "b"), FAST, out=out, report=False)
    assert _tree(out) == before


def test_write_atomic_replaces_a_link_and_refuses_a_linked_directory_inside_a_run(tmp_path: Path) -> None:
    victim_dir = tmp_path / "elsewhere"
    victim_dir.mkdir()
    with rundir.RunDirectory.create(tmp_path, "r", command="rlhooks simulate") as rd:
        (rd.path / "summary.json").symlink_to(tmp_path / "victim.json")
        rundir.write_atomic(rd.path / "summary.json", "{}")  # the link is replaced, not followed
        assert not (rd.path / "summary.json").is_symlink() and not (tmp_path / "victim.json").exists()
        (rd.path / "report").symlink_to(victim_dir)
        with pytest.raises(RunDirError, match=r"r/report is a symbolic link to .*elsewhere: rlhooks never writes"):
            rundir.write_atomic(rd.path / "report" / "report.html", "<html>")
    assert os.listdir(victim_dir) == []


@pytest.mark.parametrize("spelling", ["run", "--out run/../run/report", "--out link/report"])
def test_a_runs_own_report_link_is_refused_however_out_spells_it(tmp_path: Path, spelling: str, capsys) -> None:
    """`rlhooks report out/r --out out/r/../r/report` wrote the report through the `report` link."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (tmp_path / "link").symlink_to(run_dir)
    (tmp_path / "elsewhere").mkdir()
    (run_dir / "report").symlink_to(tmp_path / "elsewhere")
    out = ["--out", str(tmp_path / spelling.split()[1])] if spelling.startswith("--out") else []
    assert main(["report", str(run_dir), *out]) == 1
    assert "is a symbolic link; the run's own report is written only into a real directory" in capsys.readouterr().err
    assert os.listdir(tmp_path / "elsewhere") == []


# -- item 8: the report's ownership and time bound ------------------------------------------------


@pytest.mark.parametrize("value", ["inf", "1e10", "nan", "-1", "-inf", "soon"])
def test_report_timeout_that_cannot_bound_the_report_is_an_argparse_error(tmp_path: Path, value: str, capsys) -> None:
    """inf / 1e10 / nan silently meant "no report" (setitimer overflow), a negative value "no bound"."""
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--no-progress", "--out", str(tmp_path), f"--report-timeout={value}"])
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert "argument --report-timeout: must be a" in err and repr(value) in err, err
    assert os.listdir(tmp_path) == []


def test_report_timeout_in_the_python_api_is_checked_before_the_run(tmp_path: Path) -> None:
    for bad in (math.inf, math.nan, 1e10, -1.0):
        with pytest.raises(RLHooksError, match=r"report_timeout_s \(--report-timeout\) must be a finite number"):
            simulate_run(None, [*FAST, f"run.out_dir={tmp_path}"], report_timeout_s=bad)
        with pytest.raises(ValueError, match="time bound must be a finite number"), interrupt.bounded(bad):
            pass
    assert os.listdir(tmp_path) == []
    with interrupt.bounded(interrupt.MAX_BOUND_S):  # the largest bound is a real timer, not an overflow
        assert signal.getitimer(signal.ITIMER_REAL)[0] > interrupt.MAX_BOUND_S - 10


def test_report_files_another_process_writes_while_the_run_runs_are_listed_at_its_end(tmp_path: Path) -> None:
    """The rule behind item 8, in milliseconds: a simulate run owns report/ from its start, so what
    `rlhooks report` (another process: no claim reaches this one) writes there mid-run is the run's."""
    with rundir.RunDirectory.create(tmp_path, "r", command="rlhooks simulate") as rd:
        assert "report" in json.loads((rd.path / MARKER_FILE).read_text())["owned"]
        (rd.path / "report").mkdir()  # as write_report does, unclaimed in this process
        (rd.path / "report" / "report.html").write_text("<html>")
    assert "report/report.html" in json.loads((tmp_path / "r" / MARKER_FILE).read_text())["files"]
    rundir.check_replaceable(tmp_path / "r", "rlhooks simulate")  # a rerun replaces it (it refused)


def _finished_run_with_users_notes_in_report(tmp_path: Path) -> Path:
    with rundir.RunDirectory.create(tmp_path, "r", command="rlhooks simulate") as rd:
        with rundir.open_output(rd.path / "metrics.jsonl") as fh:
            fh.write(json.dumps({"kind": "metrics", "step": 1, "time": 0.0, "metrics": {"rewards/mean": 0.5}}) + "\n")
    (rd.path / "report").mkdir()
    (rd.path / "report" / "notes.txt").write_text("mine")  # after the run ended: not the run's
    return rd.path


def _assert_notes_not_adopted(run_dir: Path) -> None:
    files = json.loads((run_dir / MARKER_FILE).read_text())["files"]
    assert "report/report.html" in files and "report/notes.txt" not in files
    with pytest.raises(RunDirError, match=r"holds 'report(/notes.txt)?', which the earlier run did not write"):
        rundir.check_replaceable(run_dir, "rlhooks simulate")
    assert (run_dir / "report" / "notes.txt").read_text() == "mine"


def test_a_report_recorded_after_the_run_ended_never_adopts_a_users_file(tmp_path: Path) -> None:
    """adopt_derived recorded every file in report/ as the run's, a user's notes too, so the run's rerun
    deleted them; now what was there before the report (``unrecorded``) stays out, and the rerun refuses."""
    run_dir = _finished_run_with_users_notes_in_report(tmp_path)
    foreign = rundir.unrecorded(run_dir / "report")
    assert foreign == {"report", "report/notes.txt"}
    rundir.write_atomic(run_dir / "report" / "report.html", "<html>")  # as write_report does
    assert rundir.adopt_derived(run_dir / "report", exclude=foreign)
    _assert_notes_not_adopted(run_dir)


@pytest.mark.slow  # matplotlib draws the report (~5 s here)
def test_rlhooks_report_after_the_run_ended_never_adopts_a_users_file(tmp_path: Path) -> None:
    run_dir = _finished_run_with_users_notes_in_report(tmp_path)
    assert main(["report", str(run_dir)]) == 0
    _assert_notes_not_adopted(run_dir)


def _has_a_whole_metrics_line(path: Path) -> bool:
    from rlhooks.core.records import read_records  # complete lines only, as the report reads them

    return path.is_file() and any((rec or {}).get("kind") == "metrics" for _, rec in read_records(path))


@pytest.mark.slow
def test_a_report_drawn_while_the_run_runs_is_the_runs_own(tmp_path: Path) -> None:
    """`rlhooks report RUN_DIR` on a running run, then the run ends: its rerun replaces report/ (it refused)."""
    out = tmp_path / "out"
    run_dir = out / "live"
    args = ["simulate", "--no-report", "--no-progress", "--out", str(out), "--steps", "100000"]
    for kv in [*FAST[:-2], "run.name=live", "backends=[jsonl]"]:
        args += ["--set", kv]
    proc = subprocess.Popen([sys.executable, "-m", "rlhooks.cli", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        metrics = run_dir / "metrics.jsonl"
        # the file opens with run_start, before any step: wait for a step's metrics record
        while time.monotonic() < deadline and not _has_a_whole_metrics_line(metrics):
            time.sleep(0.05)
        assert main(["report", str(run_dir)]) == 0
        assert json.loads((run_dir / MARKER_FILE).read_text())["finished"] is None  # drawn while it ran
    finally:
        proc.send_signal(signal.SIGTERM)
        err = proc.communicate(timeout=120)[1]
    assert proc.returncode == 143, err
    marker = json.loads((run_dir / MARKER_FILE).read_text())
    assert "report/report.html" in marker["files"]
    assert _sim(out, "live")["status"] == "success"  # the rerun replaced the run and its report
    assert not (run_dir / "report").exists()
