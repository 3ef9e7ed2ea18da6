"""A disk that fills up during a checkpoint save of a real ``rlhooks train`` run on verl's V1 trainer (issue 37,
item 7): the checkpoints go to a size-limited tmpfs that holds one of the CPU learner's checkpoints (~1 MB each)
and not a second. The run ends with exit 1 and one line naming the step's folder and what resumes, its
metrics record the run ``failed``, the tracker stays on the last complete checkpoint and the torn folder is
never offered as one.

The tmpfs is mounted for the test (``tests/filesystems.small_tmpfs``, shared with the simulator's full-disk test),
which needs root (CI runs as root: ``.ci/run`` installs Chromium with apt-get);
without it the test fails in CI and skips elsewhere, saying why.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("verl.trainer.ppo.v1", reason="needs verl[verl-core]")
pytest.importorskip("transformers")

from rlhooks.engines.verl import checkpoints  # noqa: E402
from tests.filesystems import small_tmpfs  # noqa: E402

pytestmark = pytest.mark.verl

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "configs" / "verl_cpu_tiny.yaml"
#: one checkpoint of the tiny policy (~1,000 KiB: weights 310 KiB, optimizer 615 KiB) fits, a second does not (two
#: fitted in 2600k until CI time needed the step, issue 36)
DISK_SIZE = "1500k"


@pytest.fixture
def small_disk(tmp_path):
    with small_tmpfs(tmp_path / "disk", DISK_SIZE) as disk:
        yield disk


# slow: one `rlhooks train` process of the CPU example config, two steps: ~90 s on 2 cores
@pytest.mark.slow
def test_a_full_disk_during_a_v1_save_is_one_line_and_the_tracker_stays_on_the_last_complete_step(tmp_path, small_disk,
                                                                                                    capfd, monkeypatch):
    assert subprocess.run([sys.executable, "-m", "rlhooks.engines.verl.cpu", "prepare", "runs/tiny"], cwd=tmp_path,
                          capture_output=True).returncode == 0
    ckpt = small_disk / "checkpoints"
    done = subprocess.run(
        [sys.executable, "-m", "rlhooks.cli", "train", "--config", str(EXAMPLE), "trainer.test_freq=-1",
         "trainer.save_freq=1", "trainer.total_training_steps=6", "trainer.max_actor_ckpt_to_keep=6",
         f"trainer.default_local_dir={ckpt}"], cwd=tmp_path, capture_output=True, text=True, timeout=900)
    err = done.stderr
    said = [line for line in err.splitlines() if line.startswith(("rlhooks:", "error:"))]
    assert done.returncode == 1 and len(said) == 1, err[-3000:]
    tracked = checkpoints.read_tracker(ckpt)[0]
    assert tracked is not None and tracked >= 1, sorted(p.name for p in ckpt.iterdir())
    roles = {"actor": checkpoints.DEFAULT_CONTENTS}
    assert checkpoints.inspect_checkpoint(ckpt / f"global_step_{tracked}", roles).complete
    torn = ckpt / f"global_step_{tracked + 1}"
    assert torn.is_dir() and not checkpoints.inspect_checkpoint(torn, roles).complete
    step_folder = re.escape(str(ckpt / f"global_step_{tracked}"))
    assert re.fullmatch(
        rf"error: no space left on device while saving the checkpoint of step {tracked + 1} to {re.escape(str(torn))} "
        rf"\((\w+Error: .+)\); the last complete checkpoint is step {tracked} \({step_folder}\), which the tracker "
        rf"names: rerun the same command to resume from it\. Free space there \(or set trainer\.default_local_dir "
        rf"elsewhere\) before you rerun", said[0]), said
    assert "Traceback" not in err, err[-3000:]
    records = [json.loads(x) for x in (tmp_path / "runs" / "verl-cpu-tiny" / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["kind"] == "run_end" and records[-1]["status"] == "failed", records[-1]
    # verl saves before it logs a step: the torn step's metrics are not written, and a rerun trains it again
    assert [r["step"] for r in records if r["kind"] == "metrics"] == list(range(1, tracked + 1)), records
    # the next start refuses nothing the user must fix by hand (the torn folder past the tracked step included): its
    # dry run, the start's own validation, passes. In this process: the CLI's code from its arguments on, without a
    # fresh interpreter importing verl (CI time, issue 36)
    from rlhooks.cli import main as rlhooks_main
    from rlhooks.engines.verl.cpu import platform

    monkeypatch.chdir(tmp_path)
    capfd.readouterr()
    with platform.installed():  # `trainer.device=cpu` installs the CPU platform: this process's verl gets it back
        code = rlhooks_main(["train", "--config", str(EXAMPLE), "--dry-run", "trainer.test_freq=-1",
                             "trainer.save_freq=1", "trainer.total_training_steps=6",
                             f"trainer.default_local_dir={ckpt}"])
    shown = capfd.readouterr()
    check_out, check_err = shown.out, shown.err
    assert code == 0 and "error:" not in check_err and "# rlhooks (resolved)" in check_out, check_err[-3000:]
