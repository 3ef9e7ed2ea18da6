"""Non-blocking dispatch through the real config -> RunManager -> proxy -> worker thread path."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from . import dispatch_test_backends as helpers
import numpy as np
import pytest
import structlog

import rlhooks
import rlhooks.host
from rlhooks.core import dispatch
from rlhooks.core.manager import MAX_CONSECUTIVE_FAILURES


@pytest.fixture
def installed_test_backends(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path_factory.mktemp("site")
    helpers.install(site)
    monkeypatch.syspath_prepend(str(site))
    yield
    sys.modules.pop(helpers.MODULE, None)


def _manager(tmp_path: Path, backends: list, samples: list | None = None) -> rlhooks.host.RunManager:
    cfg = rlhooks.host.load_config({"run": {"name": "dispatch"}, "backends": backends, "samples": samples or []})
    return rlhooks.host.RunManager(cfg, run_dir=tmp_path / "run")


def _obj(manager: rlhooks.host.RunManager, name: str):
    return next(r.obj for r in manager.components if r.name == name)


def _rec(manager: rlhooks.host.RunManager, name: str):
    return next(r for r in manager.components if r.name == name)


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_slow_backend_does_not_stall_training_and_loses_nothing(installed_test_backends, tmp_path: Path) -> None:
    m = _manager(tmp_path, [{"name": "test_slow", "delay_s": 0.1}, "jsonl"])
    slow = _obj(m, "test_slow")
    per_step = []
    with m.running():
        for step in range(1, 201):
            metrics = {f"m/{i}": step + i for i in range(20)}
            t0 = time.perf_counter()
            m.log_metrics(step, metrics)
            per_step.append(time.perf_counter() - t0)
        # behaviour measured above; let the remaining queue drain quickly for the test's sake
        behind = 200 - sum(1 for kind, _ in slow.events if kind == "metrics")
        slow.delay_s = 0.0
    # a 100 ms backend would cost 100 ms per step in the training thread if it ran inline
    assert np.median(per_step) < 0.005, f"median {np.median(per_step) * 1e3:.2f} ms per step"
    assert sum(per_step) < 2.0, f"total {sum(per_step):.2f} s in the training thread for 200 steps"
    assert behind > 150, "the slow backend kept up, so the test did not exercise the queue"
    steps = [p for kind, p in slow.events if kind == "metrics"]
    assert steps == list(range(1, 201))  # all of them, in order, after on_run_end
    assert slow.metric_values == 200 * 20
    assert [k for k, _ in slow.events][0] == "start" and slow.events[-1] == ("end", "success")
    assert slow.threads == {"rlhooks-backend-test_slow"}
    assert sum(1 for r in _jsonl(tmp_path / "run" / "metrics.jsonl") if r["kind"] == "metrics") == 200


def test_raising_backend_is_isolated_and_disabled(installed_test_backends, tmp_path: Path) -> None:
    m = _manager(tmp_path, ["test_raising", "test_counting", "jsonl"])
    with structlog.testing.capture_logs() as logs, m.running():
        for step in range(1, 51):
            m.log_metrics(step, {"a": step, "b": 2.0 * step})
            m.log_table(step, "t", [{"x": step}])
    rec = _rec(m, "test_raising")
    assert rec.disabled
    assert rec.total_failures >= MAX_CONSECUTIVE_FAILURES
    failed = [e for e in logs if "failed in" in e["event"] and e.get("plugin") == "test_raising"]
    assert len(failed) == len({e["event"] for e in failed}) <= 2  # once per hook (log_metrics, log_table)
    assert any("disabled after" in e["event"] and e.get("plugin") == "test_raising" for e in logs)
    counting = _obj(m, "test_counting")
    assert counting.metric_values == 50 * 2  # zero metrics missing from the healthy backends
    assert sum(1 for k, _ in counting.events if k == "table") == 50
    records = _jsonl(tmp_path / "run" / "metrics.jsonl")
    assert sum(len(r["metrics"]) for r in records if r["kind"] == "metrics") == 100
    # a backend lost data, so the run does not end "success" (docs/explanation/guarantees.md)
    assert records[-1] == {**records[-1], "kind": "run_end", "status": "failed"}


def test_on_error_raise_surfaces_in_training_thread(installed_test_backends, tmp_path: Path) -> None:
    m = _manager(tmp_path, [{"name": "test_raising", "on_error": "raise"}])
    with pytest.raises(rlhooks.PluginError, match="test_raising.*backend down at step 1"):
        with m.running():
            m.log_metrics(1, {"a": 1})
            dispatch.flush_all(5)
            m.log_metrics(2, {"a": 2})  # the worker's error is raised at the next call


def test_a_backends_state_holds_every_step_queued_before_the_checkpoint(installed_test_backends,
                                                                        tmp_path: Path) -> None:
    """state_dict() of a backend (saved with each checkpoint) is read once its dispatch thread has
    handled every call queued before it: a resumed run must not lose the steps still in its queue."""
    m = _manager(tmp_path, [{"name": "test_stateful", "delay_s": 0.005}])
    with m.running():
        for step in range(1, 21):
            m.log_metrics(step, {"a": step})
        assert m.state_dict()["backends[0]"] == {"logged": 20}


def test_a_stop_asked_on_a_backends_dispatch_thread_names_that_backend(installed_test_backends,
                                                                        tmp_path: Path) -> None:
    """The hook that returns next in the training thread did not ask: the backend whose thread did is named."""

    class StepEnd:
        @rlhooks.hookimpl
        def on_step_end(self, step):
            return {"x": 1.0}

    cfg = rlhooks.host.load_config({"run": {"name": "dispatch"},
                                    "backends": [{"name": "test_stateful", "stop_at_step": 2}]})
    m = rlhooks.host.RunManager(cfg, run_dir=tmp_path / "run", extra_plugins=[("step_end_plugin", StepEnd())])
    with m.running():
        for step in range(1, 4):
            m.step_end(step, rlhooks.Batch({}), {})
            m.log_metrics(step, {"a": step})
            dispatch.flush_all(5)  # the backend's log_metrics ran before the next step's hooks
    assert m.context.stop_reason == "the backend saw step 2"
    assert m.context.stopped_by == "test_stateful (backends[0])" and m.final_status == "stopped"


def test_full_queue_makes_producer_wait_and_drops_nothing(installed_test_backends, tmp_path: Path) -> None:
    m = _manager(tmp_path, [{"name": "test_slow", "delay_s": 0.01, "queue_size": 2}])
    with structlog.testing.capture_logs() as logs, m.running():
        for step in range(1, 31):
            m.log_metrics(step, {"a": step})
    slow = _obj(m, "test_slow")
    assert [p for k, p in slow.events if k == "metrics"] == list(range(1, 31))
    full = [e for e in logs if "queue is full" in e["event"]]
    assert len(full) == 1 and full[0]["plugin"] == "test_slow"


def test_hung_backend_is_reported_at_flush_and_others_complete(installed_test_backends, tmp_path: Path) -> None:
    m = _manager(tmp_path, [{"name": "test_hanging", "flush_timeout_s": 0.5}, "test_counting", "jsonl"])
    hanging = _obj(m, "test_hanging")
    try:
        with structlog.testing.capture_logs() as logs:
            t0 = time.perf_counter()
            with m.running():
                for step in range(1, 6):
                    m.log_metrics(step, {"a": step})
            elapsed = time.perf_counter() - t0
        assert elapsed < 10
        hung = [e for e in logs if "looks hung" in e["event"]]
        assert len(hung) == 1 and hung[0]["plugin"] == "test_hanging"
        assert _rec(m, "test_hanging").disabled
        counting = _obj(m, "test_counting")
        assert [p for k, p in counting.events if k == "metrics"] == [1, 2, 3, 4, 5]
        assert counting.events[-1] == ("end", "failed")  # the hung backend lost its queued calls
        assert _jsonl(tmp_path / "run" / "metrics.jsonl")[-1]["kind"] == "run_end"
    finally:
        hanging.release.set()


def test_sample_components_run_in_training_thread(tmp_path: Path) -> None:
    m = _manager(tmp_path, ["jsonl"], samples=["top_bottom_k"])
    assert _rec(m, "jsonl").deferred
    assert not _rec(m, "top_bottom_k").deferred  # no logging hooks: not proxied


def test_interpreter_exit_flushes_unfinished_run(tmp_path: Path) -> None:
    """A run that never reaches on_run_end still gets every queued line, then run_end 'interrupted'."""
    code = textwrap.dedent(f"""
        import rlhooks
        import rlhooks.host
        cfg = rlhooks.host.load_config({{"run": {{"name": "exit"}}, "backends": ["jsonl"]}})
        m = rlhooks.host.RunManager(cfg, run_dir={str(tmp_path / "run")!r})
        m.start()
        for step in range(1, 101):
            m.log_metrics(step, {{"a": step, "b": 0.5}})
        # no m.end(): the interpreter exits with the queue possibly still full
    """)
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=120)
    records = _jsonl(tmp_path / "run" / "metrics.jsonl")
    assert [r["step"] for r in records if r["kind"] == "metrics"] == list(range(1, 101))
    assert records[-1]["kind"] == "run_end" and records[-1]["status"] == "interrupted"
