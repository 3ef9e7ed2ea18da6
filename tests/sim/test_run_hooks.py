"""The hooks users expect from TRL and Lightning, on the simulator: validation results, a plugin
stopping the run, and any plugin's state and checkpoint hooks across a resume (issue 32, items 8-10)."""

from __future__ import annotations

import json
import pickle

import pytest

from rlhooks import hookimpl
from rlhooks.cli import main
from rlhooks.core.manager import RunManager
from rlhooks.core.records import read_records
from rlhooks.engines.sim.engine import CHECKPOINT_FILE, SimEngine, load_sim_config
from .conftest import REWARD_FNS, small_config


def engine_with(cfg, data, run_dir, *plugins):
    config = load_sim_config(cfg)
    return SimEngine(config, data, manager=RunManager(config, run_dir=run_dir, extra_plugins=list(plugins)))


class HeldOut:
    """Reads held-out accuracy as a curriculum would, and returns a metric from it."""

    def __init__(self):
        self.calls = []
        self.run = None

    @hookimpl
    def on_run_start(self, run):
        self.run = run

    @hookimpl
    def on_validation_end(self, step, metrics, per_source):
        self.calls.append((step, dict(metrics), {s: dict(m) for s, m in per_source.items()}))
        return {"held_out/worst_source": min(m["score"] for m in per_source.values())}


# -- item 8: validation results reach plugins ---------------------------------------------------
def test_validation_results_reach_plugins_per_source_every_test_freq_steps(small_data, tmp_path):
    probe = HeldOut()
    cfg = small_config(tmp_path, run={"steps": 5}, simulate={"test_freq": 2})
    eng = engine_with(cfg, small_data, tmp_path / "r", ("held_out", probe))
    logged = {}
    eng.run(on_step=lambda step, merged: logged.__setitem__(step, merged))
    assert [c[0] for c in probe.calls] == [2, 4, 5]  # every test_freq steps and the last, as verl
    step, metrics, per_source = probe.calls[-1]
    assert set(per_source) == set(small_data.source_names)
    for source, m in per_source.items():
        # the headline is the held-out accuracy the simulator measures (sim/accuracy/<source>)
        assert m["score"] == m["acc/mean@1"] == logged[5][f"sim/accuracy/{source}"]
        assert metrics[f"val-core/{source}/acc/mean@1"] == m["score"]
    # what the hook returned is in the validated step's metrics only
    assert logged[4]["held_out/worst_source"] == min(m["score"] for m in probe.calls[1][2].values())
    assert "held_out/worst_source" not in logged[3]
    assert probe.run.validation["step"] == 5 and dict(probe.run.validation["per_source"]) == per_source


def test_validation_views_are_read_only(small_data, tmp_path):
    class Writer:
        @hookimpl
        def on_validation_end(self, per_source):
            per_source["x"] = {}

    cfg = small_config(tmp_path, run={"steps": 1})
    eng = engine_with(cfg, small_data, tmp_path / "r", ("writer", Writer()))
    eng.run()
    assert eng.manager.failure_summary()["writer (writer)"]["by_hook"] == {"on_validation_end": 1}


# -- item 9: a plugin stops the run cleanly -----------------------------------------------------
class StopAt:
    def __init__(self, step):
        self.step, self.saved, self.ended = step, [], None

    @hookimpl
    def on_run_start(self, run):
        self.run = run

    @hookimpl
    def on_step_end(self, step):
        if step == self.step:
            self.run.request_stop(f"enough at step {step}")

    @hookimpl
    def on_save_checkpoint(self, step, checkpoint_dir):
        self.saved.append((step, checkpoint_dir))

    @hookimpl
    def on_run_end(self, status):
        self.ended = status


def test_a_plugin_stops_the_run_with_a_checkpoint_and_the_reason_recorded(small_data, tmp_path, capsys):
    stopper = StopAt(3)
    cfg = small_config(tmp_path, run={"steps": 8}, backends=["jsonl", "console"])
    eng = engine_with(cfg, small_data, tmp_path / "r", ("stopper", stopper))
    eng.run()
    assert eng.step == 3 and stopper.ended == "stopped" and eng.manager.final_status == "stopped"
    ckpt = tmp_path / "r" / "checkpoint"
    assert stopper.saved == [(3, ckpt)]
    assert pickle.loads((ckpt / CHECKPOINT_FILE).read_bytes())["step"] == 3
    end = [r for _, r in read_records(tmp_path / "r" / "metrics.jsonl") if r["kind"] == "run_end"][-1]
    assert end["status"] == "stopped" and end["stop_reason"] == "enough at step 3"
    assert end["stopped_by"] == "stopper (stopper)"
    assert "run ended: stopped (stop requested by stopper (stopper): enough at step 3)" in capsys.readouterr().out


def test_request_stop_needs_a_reason(small_data, tmp_path):
    eng = engine_with(small_config(tmp_path), small_data, tmp_path / "r")
    with pytest.raises(ValueError, match="non-empty sentence"):
        eng.manager.context.request_stop("  ")


def _planted(tmp_path, **monitor):
    cfg = small_config(tmp_path, run={"steps": 40, "name": "planted"}, backends=["jsonl"],
                       rewards=["claims_verified", *REWARD_FNS, {"name": "reward_monitor", **monitor}],
                       simulate={"learner": {"exploit_rate": 0.05, "exploit_learning_rate": 2.0},
                                 "rows_per_source": 300})
    path = tmp_path / "planted.yaml"
    path.write_text(json.dumps(cfg))
    return path


def test_reward_monitor_stops_on_high_confidence_hacking_exit_code_3(tmp_path, capsys):
    code = main(["simulate", str(_planted(tmp_path, stop_on_hacking=True, hacking_check_every=10)),
                 "--no-progress", "--no-report"])
    out, err = capsys.readouterr()
    assert code == 3, err
    summary = json.loads((tmp_path / "planted" / "summary.json").read_text())
    assert summary["status"] == "stopped" and summary["steps"] < 40 and summary["steps"] % 10 == 0
    assert summary["stop_reason"].startswith("reward hacking likely (high confidence)")
    assert summary["stopped_by"].startswith("reward_monitor")
    assert summary["checkpoint"] == str(tmp_path / "planted" / "checkpoint")
    monitor = json.loads((tmp_path / "planted" / "reward_monitor.json").read_text())
    assert monitor["status"] == "stopped" and monitor["stop_reason"] == summary["stop_reason"]
    end = [r for _, r in read_records(tmp_path / "planted" / "metrics.jsonl") if r["kind"] == "run_end"][-1]
    assert end["stop_reason"] == summary["stop_reason"]
    assert "status: stopped by reward_monitor" in out and "the run was stopped by reward_monitor" in err


def test_reward_monitor_stops_on_a_critical_alert(small_data, tmp_path):
    alert = {"metric": "rewards/mean", "condition": "greater", "threshold": -1e9, "level": "critical"}
    cfg = small_config(tmp_path, run={"steps": 6},
                       rewards=[*REWARD_FNS, {"name": "reward_monitor", "stop_on_critical": True, "alerts": [alert]}])
    eng = engine_with(cfg, small_data, tmp_path / "r")
    eng.run()
    assert eng.step == 1 and eng.manager.final_status == "stopped"
    assert eng.manager.context.stop_reason.startswith("critical alert at step 1:")


# -- item 10: any plugin keeps state across a resume; checkpoint hooks ---------------------------
class Counter:
    """A hook plugin whose metric depends on everything it saw: it resumes exactly only with its state."""

    def __init__(self, stateful=True):
        self.total, self.events = 0.0, []
        if not stateful:
            self.state_dict = None

    @hookimpl
    def on_rewards_computed(self, batch):
        self.total += float(batch["reward"].sum())

    @hookimpl
    def on_step_end(self):
        return {"counter/total_reward": self.total}

    def state_dict(self):
        return {"total": self.total}

    def load_state_dict(self, state):
        self.total = state["total"]

    @hookimpl
    def on_save_checkpoint(self, step, checkpoint_dir):
        (checkpoint_dir / "counter.txt").write_text(f"{step} {self.total!r}")  # a plugin's own file
        self.events.append(("save", step))

    @hookimpl
    def on_load_checkpoint(self, step, checkpoint_dir):
        self.events.append(("load", step, (checkpoint_dir / "counter.txt").read_text()))


class Backend:
    """A backend with state: how many steps it logged, across the resume."""

    def __init__(self):
        self.logged = 0

    @hookimpl
    def log_metrics(self, step, metrics):
        self.logged += 1

    def state_dict(self):
        return {"logged": self.logged}

    def load_state_dict(self, state):
        self.logged = state["logged"]


@pytest.mark.parametrize("stateful", [True, False])
def test_hook_plugins_and_backends_resume_exactly_with_their_state(small_data, tmp_path, stateful):
    cfg = small_config(tmp_path, run={"steps": 6})
    full = Counter()
    engine_with(cfg, small_data, tmp_path / "full", ("counter", full)).run()
    want = full.total

    first, log1 = Counter(stateful), Backend()
    eng = engine_with(cfg, small_data, tmp_path / "a", ("counter", first), ("backend", log1))
    eng.run(3)
    ckpt = eng.save_checkpoint(tmp_path / "ckpt")
    again, log2 = Counter(stateful), Backend()
    resumed = engine_with(cfg, small_data, tmp_path / "b", ("counter", again), ("backend", log2))
    resumed.load_checkpoint(ckpt)
    metrics = {}
    resumed.run(on_step=lambda step, merged: metrics.__setitem__(step, merged))
    if stateful:
        assert again.total == want and metrics[6]["counter/total_reward"] == want
        assert first.events == [("save", 3)] and again.events == [("load", 3, f"3 {first.total!r}")]
        assert log2.logged == 6  # 3 before the checkpoint, 3 after
    else:  # the failure this test exists for: without state_dict the resumed plugin starts over
        assert again.total < want


def test_check_resume_drives_the_checkpoint_hooks(tmp_path, monkeypatch):
    from rlhooks.engines.sim import resume_check

    seen = []

    class Probe(resume_check._SampledPrompts):
        @hookimpl
        def on_save_checkpoint(self, step, checkpoint_dir):
            seen.append(("save", step, (checkpoint_dir / CHECKPOINT_FILE).exists()))

        @hookimpl
        def on_load_checkpoint(self, step):
            seen.append(("load", step))

    monkeypatch.setattr(resume_check, "_SampledPrompts", Probe)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(json.dumps(small_config(tmp_path, run={"steps": 4}, simulate={"rows_per_source": 100})))
    assert resume_check.check_resume(str(cfg), 2).ok
    assert seen == [("save", 2, True), ("load", 2)]
