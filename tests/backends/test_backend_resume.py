"""Resumed runs continue their W&B run and draw one TensorBoard curve (issue 32, item 13): real
offline W&B files and real TensorBoard event files read back after a run, a resume and more steps."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import rlhooks.host
from rlhooks.core import dispatch
from ..wandb_records import read_wandb_records

CHECKPOINT, CRASHED_AT, STEPS = 4, 6, 8


def _metrics(step: int, run: int) -> dict[str, float]:
    return {"rewards/mean": step / 7 + 10 * run, "curriculum/level": float(step // 3)}


def _two_runs(tmp_path: Path, backends: list) -> tuple[dict, Path]:
    """Run 1 logs steps 1..6 with a checkpoint after step 4; run 2 resumes from it and logs 5..8."""
    cfg = rlhooks.host.load_config({"run": {"name": "resumed"}, "backends": backends})
    run_dir, ckpt = tmp_path / "run", tmp_path / "ckpt"
    ckpt.mkdir()
    first = rlhooks.host.RunManager(cfg, run_dir=run_dir)
    with first.running():
        for step in range(1, CRASHED_AT + 1):
            first.log_metrics(step, _metrics(step, 1))
            if step == CHECKPOINT:
                assert dispatch.flush_all(60)
                state = first.state_dict()
                first.checkpoint_saved(step, ckpt)
    second = rlhooks.host.RunManager(cfg, run_dir=run_dir)
    second.load_state_dict(state)
    second.checkpoint_loaded(CHECKPOINT, ckpt)
    with second.running():
        for step in range(CHECKPOINT + 1, STEPS + 1):
            second.log_metrics(step, _metrics(step, 2))
    return state, run_dir


def test_tensorboard_resumed_steps_replace_the_earlier_runs(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    _, run_dir = _two_runs(tmp_path, ["tensorboard"])
    files = sorted((run_dir / "tensorboard").glob("events.out.tfevents.*"), key=lambda p: p.stat().st_mtime_ns)
    assert len(files) == 2
    # the resumed run's file starts with TensorBoard's purge marker at the first resumed step
    starts = [e.step for e in EventFileLoader(str(files[1])).Load()
              if e.HasField("session_log") and e.session_log.status == e.session_log.START]
    assert starts == [CHECKPOINT + 1]
    acc = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    for tag in _metrics(1, 1):
        events = acc.Scalars(tag)
        assert [e.step for e in events] == list(range(1, STEPS + 1))  # one curve, each step once
        want = [_metrics(s, 1 if s <= CHECKPOINT else 2)[tag] for s in range(1, STEPS + 1)]
        np.testing.assert_allclose([e.value for e in events], want, rtol=1e-6)


@pytest.mark.slow  # two W&B runs with their service (~11 s on the 2-core machine)
def test_wandb_resumed_run_continues_its_run_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb-env"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    backend = {"name": "wandb", "mode": "offline", "project": "rlhooks-test", "settings": {"console": "off"},
               "charts": False}
    state, run_dir = _two_runs(tmp_path, [backend])
    run_id = state["backends[0]"]["run_id"]
    import wandb

    wandb.teardown()
    logs = sorted((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))
    assert [p.name for p in logs] == [f"run-{run_id}.wandb"] * 2  # both runs are one W&B run
    steps = []
    for path in logs:
        records = read_wandb_records(path)
        (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
        assert run.run_id == run_id
        hist = [{i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
                for r in records if r.WhichOneof("record_type") == "history"]
        steps.append([int(h["_step"]) for h in hist])
    assert steps == [list(range(1, CRASHED_AT + 1)), list(range(CHECKPOINT + 1, STEPS + 1))]


def test_wandb_id_option_and_bad_id() -> None:
    from rlhooks.plugins.backends.wandb_backend import WandbBackend

    assert WandbBackend(WandbBackend.Options(id="abc123")).state_dict()["run_id"] == "abc123"
    assert len(WandbBackend().run_id) == 8 and WandbBackend().run_id != WandbBackend().run_id
    with pytest.raises(rlhooks.ConfigError, match=r"backends\[0\]\.id"):
        rlhooks.host.load_config({"backends": [{"name": "wandb", "id": "Not An Id"}]})
