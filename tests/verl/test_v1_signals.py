"""SIGINT (sync) or SIGTERM (the async modes) to a real ``rlhooks train`` process on verl's V1 trainer while a reward
call hangs, in each V1 mode (issue 37, items 4, 5 and 9).

The run's outcome is recorded in the Ray TaskRunner, which Ray kills once the driver exits: the driver forwards
the signal to it (engines/verl/driver.py). The promise is the simulator's (tests/reliability/test_signals.py):
exit 143 (130 for SIGINT), one line, the run recorded ``interrupted``, the tracker on a complete checkpoint.
Each process runs the CPU example config with a plugin reward function (``slow_then_hang``, installed as a real
distribution) under ``run.reward_timeout_s=10``: its first call in each reward worker outlives the bound (counted
as its error, the warning naming it); after a checkpoint every call hangs, and the signal comes while one does.
Each mode then resumes once more and loses its rollout servers (kill -9) in its first step: one ``error:`` line
naming one and the last complete checkpoint, the run ``failed`` (issue 37 item 8).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("verl.trainer.ppo.v1", reason="needs verl[verl-core]")
pytest.importorskip("transformers")

from rlhooks.engines.verl import checkpoints  # noqa: E402
from tests.installed_sites import pip_install, write_dist  # noqa: E402

pytestmark = pytest.mark.verl

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "configs" / "verl_cpu_tiny.yaml"

#: a reward plugin: its first call in a process sleeps 12 s; once the test's ``hang`` file exists, every call hangs
SLOW_THEN_HANG = """\
import os, threading, time

HANG, HANGING = {hang!r}, {hanging!r}
_first = threading.Lock()


def slow_then_hang(response, target, **info):
    if os.path.exists(HANG):
        open(HANGING, "a").close()
        time.sleep(3600)
    if _first.acquire(blocking=False):
        time.sleep(12)
    return 0.0
"""


def _tracked(ckpt: Path) -> int | None:
    return checkpoints.read_tracker(ckpt)[0]


def _wait_for(what: str, ready, proc: subprocess.Popen, err: Path, timeout: float = 900) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert proc.poll() is None, err.read_text()[-3000:]
        assert time.monotonic() < deadline, f"no {what} within {timeout:g} s"
        time.sleep(0.5)


def _records(metrics: Path, start: int = 0) -> list[dict]:
    """The records the running run's metrics.jsonl holds past byte ``start``, whole lines only."""
    if not metrics.is_file():
        return []
    with metrics.open("rb") as fh:
        fh.seek(start)
        data = fh.read()
    return [json.loads(x) for x in data[:data.rfind(b"\n") + 1].decode().splitlines()]


def _errors_logged(metrics: Path, start: int) -> float:
    """``rewards/errors/slow_then_hang`` summed over the steps logged past byte ``start``."""
    return sum(r["metrics"].get("rewards/errors/slow_then_hang") or 0 for r in _records(metrics, start)
               if r["kind"] == "metrics")


def _signal_run(tmp_path: Path, train: list[str], env: dict, sig: signal.Signals, after_step: int,
                hang: Path) -> tuple[int, str, int]:
    """Start ``rlhooks train``; once the tracker names a step past ``after_step`` and a step logged the first reward
    call's error (async modes: the step in progress when its group was scored), make every reward call hang
    (``hang``) and send ``sig`` while one does; returns the exit code, stderr and the tracked step at the signal.
    Output goes to files: verl's logs would fill a pipe."""
    run_dir = tmp_path / "runs" / "verl-cpu-tiny"
    ckpt, metrics = run_dir / "checkpoints", run_dir / "metrics.jsonl"
    start = metrics.stat().st_size if metrics.is_file() else 0
    out, err = tmp_path / f"{sig.name}.out", tmp_path / f"{sig.name}.err"
    with out.open("w") as fo, err.open("w") as fe:
        proc = subprocess.Popen([sys.executable, "-m", *train], cwd=tmp_path, stdout=fo, stderr=fe, env=env)
        try:
            _wait_for("checkpoint", lambda: (_tracked(ckpt) or 0) > after_step, proc, err)
            _wait_for("reward error logged", lambda: _errors_logged(metrics, start) >= 1, proc, err, timeout=300)
            hang.touch()
            _wait_for("hung reward call", (hang.parent / "hanging").exists, proc, err, timeout=300)
            time.sleep(2)  # within the call's 10 s bound: the run waits on it
            at = _tracked(ckpt)
            proc.send_signal(sig)
            code = proc.wait(timeout=120)  # the driver's bound is 25 s (driver.STOP_GRACE_S)
        finally:
            if proc.poll() is None:
                proc.kill()
    return code, err.read_text(), at


def _is_rollout_server(p) -> bool:
    """Ray titles an actor's process ``ray::CPURolloutServer`` while idle and ``ray::CPURolloutServer.<method>``
    while it runs a call (CI caught the generating one mid-call)."""
    import psutil

    try:
        cmd = p.cmdline()
        return bool(cmd) and cmd[0].split(".")[0] == "ray::CPURolloutServer"
    except psutil.Error:  # it ended between the listing and the read
        return False


def _run_starts(metrics: Path) -> int:
    """``run_start`` records in the run's metrics.jsonl (a resumed run appends its own)."""
    return sum(r["kind"] == "run_start" for r in _records(metrics))


def _kill_server_run(tmp_path: Path, train: list[str], env: dict, servers_expected: int) -> tuple[int, str, int]:
    """Start ``rlhooks train``, which resumes; once its trainer has started (its ``run_start`` record, after verl
    built the servers: the first step is generating), kill -9 the run's ``CPURolloutServer`` processes
    (``servers_expected`` of them: separate_async's standalone one generates, and which is which is not told by their
    titles); returns the exit code, stderr and the tracked step at the kill. Killing in the resumed run's first step,
    not after a later checkpoint, saves a step and a save of CI time; what is checked is the same."""
    import psutil

    run_dir = tmp_path / "runs" / "verl-cpu-tiny"
    ckpt = run_dir / "checkpoints"
    starts = _run_starts(run_dir / "metrics.jsonl")
    out, err = tmp_path / "kill.out", tmp_path / "kill.err"
    with out.open("w") as fo, err.open("w") as fe:
        proc = subprocess.Popen([sys.executable, "-m", *train], cwd=tmp_path, stdout=fo, stderr=fe, env=env)
        try:
            _wait_for("the resumed run's start", lambda: _run_starts(run_dir / "metrics.jsonl") > starts, proc, err)
            servers: list = []

            def all_servers() -> bool:
                servers[:] = [p for p in psutil.Process(proc.pid).children(recursive=True) if _is_rollout_server(p)]
                return len(servers) == servers_expected

            _wait_for(f"{servers_expected} rollout server(s)", all_servers, proc, err, timeout=120)
            at = _tracked(ckpt)
            for server in servers:
                server.kill()
            code = proc.wait(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
    return code, err.read_text(), at


MODE_OVERRIDES = {"sync": [], "colocate_async": ["trainer.v1.trainer_mode=rlhooks_colocate_async"],
                  "separate_async": ["trainer.v1.trainer_mode=rlhooks_separate_async"]}
#: the signal of each process: Ctrl-C in the default mode, SIGTERM (a scheduler's) in the async ones; the driver's
#: forwarding is the same in every mode, what differs is verl's loop under it (one process a mode: CI time)
MODES = {"sync": ((signal.SIGINT, 130),), "colocate_async": ((signal.SIGTERM, 143),),
         "separate_async": ((signal.SIGTERM, 143),)}
#: the CPURolloutServer processes of a run: the hybrid one of the trainer's workers, and separate_async's standalone
ROLLOUT_SERVERS = {"sync": 1, "colocate_async": 1, "separate_async": 2}
REWARDS = "[format_exact,format_approx,check_answer,check_numbers,source_metrics,reward_monitor,slow_then_hang]"


# slow: two `rlhooks train` processes of the CPU example config per mode (a signal, a kill), 100-230 s each on
# 2 cores (docs/DEVELOPMENT.md, "Issue 37, async coverage (second session)" and "Fourth session")
@pytest.mark.slow
@pytest.mark.parametrize("mode", list(MODES))
def test_a_signal_while_a_reward_hangs_ends_a_v1_run_interrupted_on_a_complete_checkpoint(tmp_path, mode):
    assert subprocess.run([sys.executable, "-m", "rlhooks.engines.verl.cpu", "prepare", "runs/tiny"], cwd=tmp_path,
                          capture_output=True).returncode == 0
    hang = tmp_path / "hang"
    site = tmp_path / "site"
    pip_install(site, write_dist(tmp_path, "slow-reward", "0.1", "slow_reward",
                                 SLOW_THEN_HANG.format(hang=str(hang), hanging=str(tmp_path / "hanging")),
                                 {"rlhooks.rewards": {"slow_then_hang": "slow_reward:slow_then_hang"}}))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}
    train = ["rlhooks.cli", "train", "--config", str(EXAMPLE), "trainer.test_freq=-1", "trainer.save_freq=1",
             "trainer.total_training_steps=40", "trainer.max_actor_ckpt_to_keep=2", f"rlhooks.rewards={REWARDS}",
             "rlhooks.run.reward_timeout_s=10", *MODE_OVERRIDES[mode]]
    run_dir = tmp_path / "runs" / "verl-cpu-tiny"
    ckpt = run_dir / "checkpoints"
    roles = {"actor": checkpoints.DEFAULT_CONTENTS}
    at_signal = warned = 0
    for sig, code in MODES[mode]:
        hang.unlink(missing_ok=True)
        (tmp_path / "hanging").unlink(missing_ok=True)
        rc, err, at_signal = _signal_run(tmp_path, train, env, sig, at_signal, hang)
        assert rc == code, err[-3000:]
        assert "Traceback" not in err and "SIGABRT" not in err and "*** " not in err, err[-3000:]
        said = [line for line in err.splitlines() if line.startswith(("rlhooks:", "error:"))]  # Ray's log lines may follow
        assert said == [f"rlhooks: {sig.name}: the trainer is ending the run as interrupted (waiting up to 25 s; a "
                        f"second signal stops at once)",
                        f"rlhooks: interrupted by {sig.name}; the run ended with status 'interrupted'"], said
        records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
        ends = [r for r in records if r["kind"] == "run_end"]
        assert records[-1]["kind"] == "run_end" and ends[-1]["status"] == "interrupted", ends
        assert "note" not in ends[-1]  # the trainer recorded it (not the driver's fallback after its bound)
        tracked = _tracked(ckpt)
        assert tracked is not None and tracked >= at_signal
        assert checkpoints.inspect_checkpoint(ckpt / f"global_step_{tracked}", roles).complete
        assert not (run_dir / ".rlhooks.stop").exists()
        n_warned = (run_dir / "verl.log").read_text().count("reward function 'slow_then_hang' did not return within "
                                                         "run.reward_timeout_s=10 s")
        assert n_warned > warned  # verl.log is appended to
        warned = n_warned
    starts = [r for r in records if r["kind"] == "run_start"]
    assert len(starts) == len(ends) == len(MODES[mode])  # each later run resumed into the same file
    # then the same command resumes (its reward calls no longer hang) and loses its rollout servers (issue 37
    # item 8); in separate_async verl's agent loop fails each group and issues it again, which stalled the run
    # before rlhooks pinged the servers on failed groups
    hang.unlink()
    (tmp_path / "hanging").unlink(missing_ok=True)
    rc, err, at_kill = _kill_server_run(tmp_path, train, env, ROLLOUT_SERVERS[mode])
    said = [line for line in err.splitlines() if line.startswith(("rlhooks:", "error:"))]
    assert rc == 1 and len(said) == 1, err[-3000:]
    assert said[0].startswith("error: a Ray process of the run died: CPURolloutServer (pid "), said
    assert "the last complete checkpoint is step" in said[0] and "Traceback" not in err, said
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["kind"] == "run_end" and records[-1]["status"] == "failed", records[-1]
    assert len([r for r in records if r["kind"] == "run_start"]) == 2  # it resumed
    tracked = _tracked(ckpt)
    assert tracked is not None and tracked >= at_kill
    assert checkpoints.inspect_checkpoint(ckpt / f"global_step_{tracked}", roles).complete
