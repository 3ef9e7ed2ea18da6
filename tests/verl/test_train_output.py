"""What ``rlhooks train`` shows (issue 38 items 3 and 4): verl's output in the run's verl.log with rlhooks's own
lines on the terminal, and the end-of-run summary (summary.json, config.yaml, the printed lines) read from a
real V1 run's metrics.jsonl (tests/monitoring/recorded/v1-train; see tests/monitoring/test_report_of_a_verl_run.py).

In-process and cheap: the lines below are verbatim from that run's terminal (Ray's colour codes and
``(Actor pid=...)`` prefixes included); the end-to-end check is the slow ``rlhooks train`` V1 run
(tests/verl/test_cpu_v1_learner.py::test_rlhooks_train_trains_on_verls_default_v1_trainer)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from rlhooks.engines.verl import summary as run_summary
from rlhooks.engines.verl.output import LineFilter, VerlOutput, terminal_stderr

RECORDED = Path(__file__).resolve().parents[1] / "monitoring" / "recorded" / "v1-train"
RAY = "\x1b[36m(_TaskRunnerV1 pid=9002)\x1b[0m "
NOISE = [
    "\x1b[36m(AgentLoopWorkerTQ pid=10840)\x1b[0m WARNING:2026-11-27 16:03:49,275:No model-specific Continuous Token "
    "builder is registered for config.json model_type='mistral'; falling back to default.",
    "\x1b[36m(SimpleStorageUnit pid=9431)\x1b[0m 2026-11-27 16:04:07,054 - WARNING - transfer_queue.utils.common - "
    "target_num_threads 8 should not exceed total physical CPU cores 2. Setting to 2.",
    RAY + "{'actor_rollout_ref': {'actor': {'_target_': 'verl.workers.config.FSDPActorConfig',",
    RAY + "step:1 - training/filter_groups/evicted_samples:3.0 - training/filter_groups/discarded_surplus_samples:1.0",
    "[validate_config] All configuration checks passed successfully!",
]
OURS = [  # (as written, as shown)
    (RAY + "2026-11-27 16:02:36 [warning  ] data.gen_batch_size=None is overridden to 1: the rlhooks filters refill",
     "2026-11-27 16:02:36 [warning  ] data.gen_batch_size=None is overridden to 1: the rlhooks filters refill"),
    (RAY + "\rTraining Progress:  50%|█████     | 1/2 [00:29<00:29, 29.02s/it]",
     "Training Progress:  50%|█████     | 1/2 [00:29<00:29, 29.02s/it]"),
    (RAY + "run train-v1 started; output in runs/train-v1", "run train-v1 started; output in runs/train-v1"),
    (RAY + "step 1 | source/add_carry/acc 0.5 | filter/kept_ratio 0.625 | … +140 more",
     "step 1 | source/add_carry/acc 0.5 | filter/kept_ratio 0.625 | … +140 more"),
    (RAY + "── samples/top_bottom_k · step 10 · 1 row ──", "── samples/top_bottom_k · step 10 · 1 row ──"),
    (RAY + "{", "{"), (RAY + '  "selection": "top"', '  "selection": "top"'), (RAY + "}", "}"),
    ('{"event": "reward alert", "level": "warning", "timestamp": "2026-11-27T16:04:07"}',
     '{"event": "reward alert", "level": "warning", "timestamp": "2026-11-27T16:04:07"}'),
    # the console's line written from its thread after verl's pprint had written its "(" or a continuation's indent
    # (CI and a rerun, 2026-11-29), or after print had written its text and not yet its newline
    (RAY + " step 0 | val-core/add_carry/acc/mean@1 0 | val-core/add_small/acc/mean@1 0.5",
     "step 0 | val-core/add_carry/acc/mean@1 0 | val-core/add_small/acc/mean@1 0.5"),
    (RAY + "(step 0 | val-core/add_carry/acc/mean@1 0", "step 0 | val-core/add_carry/acc/mean@1 0"),
    (RAY + "\"np.float64(4.0), 'val-aux/add_carry/score/mean@1': \" step 2 | task/acc 0.5",
     "step 2 | task/acc 0.5"),
]


def test_the_filter_keeps_rlhooks_lines_and_drops_verls():
    keep = LineFilter()
    assert [keep(line) for line, _ in OURS] == [shown for _, shown in OURS]
    assert [keep(line) for line in NOISE] == [None] * len(NOISE)  # after the table: verl's dict is not a row


def test_verls_output_goes_to_the_log_and_rlhooks_lines_to_the_terminal(tmp_path):
    """Item 4: every line written to descriptors 1 and 2 (verl, Ray's forwarding, child processes) is in the
    log; the terminal gets the header line and rlhooks's lines only."""
    log, terminal = tmp_path / "run" / "verl.log", tmp_path / "terminal.txt"
    fd = os.open(terminal, os.O_WRONLY | os.O_CREAT)
    try:
        with VerlOutput(log, terminal=fd):
            for line in NOISE[:2]:
                os.write(1, (line + "\n").encode())
            os.write(1, (OURS[0][0] + "\n").encode())  # Ray's forwarding, verl and child processes: the descriptors
            os.write(2, (OURS[3][0] + "\n").encode())
            os.write(2, (NOISE[3] + "\n").encode())
    finally:
        os.close(fd)
    shown = terminal.read_text().splitlines()
    assert shown == [f"rlhooks train: verl's output goes to {log}; rlhooks's lines follow", OURS[0][1], OURS[3][1]]
    written = log.read_text()
    assert all(line in written for line in [*NOISE[:2], NOISE[3], OURS[0][0], OURS[3][0]])


def test_the_commands_own_lines_go_to_the_terminals_stderr_not_to_the_log(tmp_path):
    """What the driver says on a signal (driver.py) reaches the stderr the command had, not verl.log, while the
    block sends descriptor 2 to the log."""
    log, err = tmp_path / "run" / "verl.log", tmp_path / "stderr.txt"
    line = b"rlhooks: SIGTERM: the trainer is ending the run as interrupted\n"
    saved, fd = os.dup(2), os.open(err, os.O_WRONLY | os.O_CREAT)
    os.dup2(fd, 2)
    os.close(fd)
    quiet = os.open(os.devnull, os.O_WRONLY)
    try:
        with VerlOutput(log, terminal=quiet):
            assert terminal_stderr() != 2
            os.write(terminal_stderr(), line)
        assert terminal_stderr() == 2
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(quiet)
    assert err.read_bytes() == line and line not in log.read_bytes()


def _cfg(tmp_path: Path, mode: str = "rlhooks_sync"):
    return OmegaConf.create({"actor_rollout_ref": {"rollout": {"n": 4}}, "data": {"train_batch_size": 4},
                             "trainer": {"v1": {"trainer_mode": mode, "sampler": {"max_off_policy_threshold": 2}},
                                         "default_local_dir": str(tmp_path / "ckpt")}})


def _steps(run_dir: Path) -> dict[int, dict]:
    return {r["step"]: r["metrics"] for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
            if r["kind"] == "metrics"}


def test_the_summary_of_a_real_v1_run(tmp_path):
    """Item 3: validation per source, trajectories generated vs trained, filter efficiency, rlhooks's share,
    alerts, the hacking verdict and where the files are; summary.json beside metrics.jsonl."""
    run_dir = tmp_path / "train-v1"
    shutil.copytree(RECORDED, run_dir)
    steps = _steps(run_dir)
    s = run_summary.build_summary(_cfg(tmp_path), run_dir / "metrics.jsonl", seconds=125.6)
    assert s["status"] == "success" and s["steps"] == 2 and (s["trainer"], s["mode"]) == ("verl V1", "rlhooks_sync")
    assert s["validation"] == {
        "add_carry": {"metric": "val-core/add_carry/acc/mean@1", "first_step": 2, "first": 0.0, "last_step": 2, "last": 0.0},
        "add_small": {"metric": "val-core/add_small/acc/mean@1", "first_step": 2, "first": 0.5, "last_step": 2, "last": 0.5}}
    generated = int(sum(m["filter/generated_groups"] for m in steps.values())) * 4
    assert (s["generated_trajectories"], s["trained_trajectories"]) == (generated, 2 * 4 * 4)
    assert s["filter_efficiency"] == pytest.approx(32 / generated) and s["staleness"] is None
    assert s["rlhooks_share"] == pytest.approx((steps[1]["timing/rlhooks_share"] + steps[2]["timing/rlhooks_share"]) / 2)
    assert s["alerts"]["total"] == 2 and s["reward_hacking"].startswith("too short to judge")
    run_summary.write_summary(s, run_dir)
    assert json.loads((run_dir / "summary.json").read_text())["files"] == [
        "metrics.jsonl", "reward_monitor.json", "summary.json"]
    text = run_summary.format_summary(s)
    assert text.splitlines()[0] == "rlhooks train: train-v1: success, 2 steps in 126 s (verl V1, trainer mode rlhooks_sync)"
    for line in ("  validation accuracy   step 2", "  add_small              0.500",
                 f"  trajectories: {generated:,} generated, 32 trained (filter efficiency {32 / generated:.0%})",
                 "  alerts: 2 - rewards/count x2 (steps 1-2)", f"  checkpoints: {tmp_path / 'ckpt'}",
                 f"  report: rlhooks report {run_dir}"):
        assert line in text.splitlines(), (line, text)
    assert "reward hacking check: too short to judge" in text and "possible reward hacking" not in text


def test_the_summary_starts_at_the_step_0_validation_and_reads_the_lag(tmp_path):
    """With trainer.val_before_train the starting accuracy is step 0; an async run's lag and stale evictions."""
    run_dir = tmp_path / "train-v1"
    shutil.copytree(RECORDED, run_dir)
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    step0 = {"kind": "metrics", "step": 0, "metrics": {"val-core/add_carry/acc/mean@1": 0.25, "val-core/add_small/acc/mean@1": 0.25}}
    records = [json.loads(x) for x in lines]
    for r in records:
        if r["kind"] == "metrics":
            r["metrics"] |= {"staleness/lag_mean": 0.5 * r["step"], "staleness/lag_max": r["step"], "staleness/evicted_groups": 1.0}
    records.insert(1, step0)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    s = run_summary.build_summary(_cfg(tmp_path, "rlhooks_colocate_async"), run_dir / "metrics.jsonl")
    assert s["steps"] == 2 and s["validation"]["add_small"]["first_step"] == 0 and s["validation"]["add_small"]["first"] == 0.25
    assert s["staleness"] == {"mean_lag": 0.75, "max_lag": 2.0, "evicted_groups": 2.0, "max_off_policy_threshold": 2}
    text = run_summary.format_summary(s).splitlines()
    assert "  validation accuracy   step 0   step 2" in text and "  add_small              0.250    0.500" in text
    assert ("  staleness: trained trajectories lag 0.75 policy updates on average (max 2); 2 groups evicted as too "
            "stale (max_off_policy_threshold 2)") in text


def test_a_relative_run_directory_on_a_joined_ray_cluster_is_left_to_the_taskrunner(tmp_path, monkeypatch, capsys):
    """Joining a Ray cluster, a relative out_dir names a directory where the TaskRunner's node ran `ray start`:
    rlhooks train writes nothing of the run where it runs (tests/verl/legacy/test_verl_ray_cluster.py checks it on a
    real cluster) and says so."""
    from rlhooks.engines.verl.main import run_output

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")
    with run_output(_cfg(tmp_path), Path("runs") / "x" / "metrics.jsonl", 0):
        pass
    assert not (tmp_path / "runs").exists()
    monkeypatch.delenv("RAY_ADDRESS")
    with run_output(_cfg(tmp_path), Path("runs") / "x" / "metrics.jsonl", 0):  # Ray started here: the run's files
        pass
    assert sorted(p.name for p in (tmp_path / "runs" / "x").iterdir()) == ["config.yaml", "verl.log"]
    out = capsys.readouterr()
    assert "rlhooks train: x:" not in out.out  # no metrics.jsonl (no jsonl backend): no summary of nothing
    assert "add jsonl to rlhooks.backends" in out.err + out.out
