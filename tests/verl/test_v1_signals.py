"""SIGTERM and SIGINT to a real ``rlhooks train`` process on verl's V1 trainer, in each V1 mode (issue 37, items 4,
5 and 9), and a reward function past its bound.

The run's outcome is recorded in the Ray TaskRunner, which Ray kills once the driver exits: the driver forwards
the signal to it (engines/verl/driver.py). The promise is the simulator's (tests/reliability/test_signals.py):
exit 143 (130 for SIGINT), one line, the run recorded ``interrupted``, the tracker on a complete checkpoint.
Each mode runs two processes of the CPU example config with a plugin reward function (``slow_then_hang``,
installed as a real distribution): the first with ``run.reward_timeout_s=1``, which its first call in each reward
worker outlives (counted as its error, the warning naming it), ended by SIGTERM after a checkpoint; the second
resumes (the default bound, 300 s), every reward call then hangs, and Ctrl-C comes while it hangs.
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

#: a reward plugin: its first call in a process sleeps 3 s; once the test's ``hang`` file exists, every call hangs
SLOW_THEN_HANG = """\
import os, threading, time

HANG, HANGING = {hang!r}, {hanging!r}
_first = threading.Lock()


def slow_then_hang(response, target, **info):
    if os.path.exists(HANG):
        open(HANGING, "a").close()
        time.sleep(3600)
    if _first.acquire(blocking=False):
        time.sleep(3)
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


def _signal_run(tmp_path: Path, train: list[str], env: dict, sig: signal.Signals, after_step: int,
                hang: Path | None) -> tuple[int, str, int]:
    """Start ``rlhooks train``, send ``sig`` once the tracker names a step past ``after_step`` (with ``hang``: once a
    reward call hangs after that); returns the exit code, stderr and the tracked step at the signal. Output goes
    to files: verl's logs would fill a pipe."""
    ckpt = tmp_path / "runs" / "verl-cpu-tiny" / "checkpoints"
    out, err = tmp_path / f"{sig.name}.out", tmp_path / f"{sig.name}.err"
    with out.open("w") as fo, err.open("w") as fe:
        proc = subprocess.Popen([sys.executable, "-m", *train], cwd=tmp_path, stdout=fo, stderr=fe, env=env)
        try:
            _wait_for("checkpoint", lambda: (_tracked(ckpt) or 0) > after_step, proc, err)
            if hang is not None:
                hang.touch()
                _wait_for("hung reward call", (hang.parent / "hanging").exists, proc, err, timeout=300)
                time.sleep(2)
            at = _tracked(ckpt)
            proc.send_signal(sig)
            code = proc.wait(timeout=120)  # the driver's bound is 25 s (driver.STOP_GRACE_S)
        finally:
            if proc.poll() is None:
                proc.kill()
    return code, err.read_text(), at


MODE_OVERRIDES = {"sync": [], "colocate_async": ["trainer.v1.trainer_mode=rlhooks_colocate_async"],
                  "separate_async": ["trainer.v1.trainer_mode=rlhooks_separate_async"]}
REWARDS = "[format_exact,format_approx,check_answer,check_numbers,source_metrics,reward_monitor,slow_then_hang]"


# slow: two `rlhooks train` processes of the CPU example config per mode, 1-3 min each on 2 cores (a mode
# ~4-6 min; measured in docs/DEVELOPMENT.md, "Issue 37, async coverage (second session)")
@pytest.mark.slow
@pytest.mark.parametrize("mode", list(MODE_OVERRIDES))
def test_sigterm_then_sigint_in_a_hung_reward_end_a_v1_run_interrupted_on_a_complete_checkpoint(tmp_path, mode):
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
             *MODE_OVERRIDES[mode]]
    run_dir = tmp_path / "runs" / "verl-cpu-tiny"
    ckpt = run_dir / "checkpoints"
    roles = {"actor": checkpoints.DEFAULT_CONTENTS}
    at_signal = 0
    # SIGTERM after a checkpoint with a 1 s reward bound; then the same command resumes and gets SIGINT while every
    # reward call hangs (the default bound)
    for sig, code, args, hung in ((signal.SIGTERM, 143, ["rlhooks.run.reward_timeout_s=1"], None),
                                  (signal.SIGINT, 130, [], hang)):
        rc, err, at_signal = _signal_run(tmp_path, train + args, env, sig, at_signal, hung)
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
        if sig == signal.SIGTERM:  # the first call past the 1 s bound: its row is the function's error, named
            errors = [r["metrics"].get("rewards/errors/slow_then_hang") for r in records if r["kind"] == "metrics"]
            assert sum(e or 0 for e in errors) >= 1, errors
            assert "reward function 'slow_then_hang' did not return within run.reward_timeout_s=1 s" in \
                (run_dir / "verl.log").read_text()
    starts = [r for r in records if r["kind"] == "run_start"]
    assert len(starts) == len(ends) == 2  # the second run resumed into the same file
