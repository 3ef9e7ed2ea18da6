"""SIGTERM and SIGINT to a real ``rlhooks train`` process on verl's V1 trainer (issue 37, items 4 and 5).

The run's outcome is recorded in the Ray TaskRunner, which Ray kills once the driver exits: the driver forwards
the signal to it (engines/verl/driver.py). The promise is the simulator's (tests/reliability/test_signals.py):
exit 143 (130 for SIGINT), one line, the run recorded ``interrupted``, the tracker on a complete checkpoint.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("verl.trainer.ppo.v1", reason="needs verl[verl-core]")
pytest.importorskip("transformers")

from rlhooks.engines.verl import checkpoints  # noqa: E402

pytestmark = pytest.mark.verl

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "configs" / "verl_cpu_tiny.yaml"


def _tracked(ckpt: Path) -> int | None:
    return checkpoints.read_tracker(ckpt)[0]


def _signal_after_a_checkpoint(tmp_path: Path, train: tuple[str, ...], sig: signal.Signals, after_step: int,
                               log: str) -> tuple[int, str, int]:
    """Start ``rlhooks train``, send ``sig`` once the tracker names a step past ``after_step``; returns the exit
    code, stderr and the tracked step at the signal. Output goes to files: verl's logs would fill a pipe."""
    ckpt = tmp_path / "runs" / "verl-cpu-tiny" / "checkpoints"
    out, err = tmp_path / f"{log}.out", tmp_path / f"{log}.err"
    with out.open("w") as fo, err.open("w") as fe:
        proc = subprocess.Popen([sys.executable, "-m", *train], cwd=tmp_path, stdout=fo, stderr=fe)
        try:
            deadline = time.monotonic() + 900
            while (_tracked(ckpt) or 0) <= after_step:
                assert proc.poll() is None, err.read_text()[-3000:]
                assert time.monotonic() < deadline, "no checkpoint within 900 s"
                time.sleep(0.5)
            at = _tracked(ckpt)
            proc.send_signal(sig)
            code = proc.wait(timeout=120)  # the driver's bound is 25 s (driver.STOP_GRACE_S)
        finally:
            if proc.poll() is None:
                proc.kill()
    return code, err.read_text(), at


#: sync: SIGTERM after the first checkpoint, then the same command (it resumes) with SIGINT after its next;
#: colocate_async: SIGTERM only (the forwarding is the same; what differs is verl's async loop under it)
MODES = {"sync": ((signal.SIGTERM, 143), (signal.SIGINT, 130)),
         "colocate_async": ((signal.SIGTERM, 143),)}


# slow: one `rlhooks train` process of the CPU example config per signal (sync: 2, colocate_async: 1), each
# ~3-10 min on 2 cores (measured in docs/DEVELOPMENT.md, issue 37)
@pytest.mark.slow
@pytest.mark.parametrize("mode", list(MODES))
def test_sigterm_then_sigint_end_a_v1_run_interrupted_on_a_complete_checkpoint(tmp_path, mode):
    assert subprocess.run([sys.executable, "-m", "rlhooks.engines.verl.cpu", "prepare", "runs/tiny"], cwd=tmp_path,
                          capture_output=True).returncode == 0
    train = ("rlhooks.cli", "train", "--config", str(EXAMPLE), "trainer.test_freq=-1", "trainer.save_freq=1",
             "trainer.total_training_steps=40", "trainer.max_actor_ckpt_to_keep=2",
             *(["trainer.v1.trainer_mode=rlhooks_colocate_async"] if mode == "colocate_async" else []))
    run_dir = tmp_path / "runs" / "verl-cpu-tiny"
    ckpt = run_dir / "checkpoints"
    roles = {"actor": checkpoints.DEFAULT_CONTENTS}
    at_signal = 0
    for sig, code in MODES[mode]:  # a later signal's run resumes from the earlier one's checkpoint
        log = sig.name
        rc, err, at_signal = _signal_after_a_checkpoint(tmp_path, train, sig, at_signal, log)
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
    starts = [r for r in records if r["kind"] == "run_start"]
    assert len(starts) == len(ends) == len(MODES[mode])  # each later run resumed into the same file
