"""Backends under the dispatch policy: wrappers refused, failures counted and named by hook,
a bounded cost for a slow backend, and pluggy used through its public API only."""

from __future__ import annotations

import ast
import json
import time
from pathlib import Path

import pytest
import structlog

import rlhooks
import rlhooks.host
from rlhooks.core.manager import HookValidationError

CORE = Path(rlhooks.__file__).parent / "core"


def _manager(tmp_path: Path, backends: list) -> rlhooks.host.RunManager:
    cfg = rlhooks.host.load_config({"run": {"name": "policy", "out_dir": str(tmp_path)}, "backends": backends})
    return rlhooks.host.RunManager(cfg)


def _rec(manager: rlhooks.host.RunManager, name: str):
    return next(r for r in manager.components if r.name == name)


@pytest.mark.parametrize(("backend", "kind"), [("test_wrapper", "wrapper=True"), ("test_old_wrapper", "hookwrapper=True")])
def test_hook_wrappers_are_refused_at_registration(dispatch_site, tmp_path: Path, backend: str, kind: str) -> None:
    with pytest.raises(HookValidationError) as err:
        _manager(tmp_path, [backend])
    msg = str(err.value)
    assert f"backend {backend!r}" in msg and "backends[0]" in msg and "rlhooks-dispatch-test-backends" in msg
    assert f"log_metrics is a hook wrapper ({kind})" in msg and "plain hook" in msg


def test_failure_in_on_run_start_is_reported_as_on_run_start(dispatch_site, tmp_path: Path) -> None:
    m = _manager(tmp_path, [{"name": "test_failing_start", "on_error": "raise"}])
    with pytest.raises(rlhooks.PluginError) as err:
        with m.running():
            rlhooks.core.dispatch.flush_all(10)
            m.log_metrics(1, {"a": 1.0})
    assert err.value.hook == "on_run_start" and "failed in on_run_start" in str(err.value)
    assert "PermissionError: login refused" in str(err.value)


def test_intermittent_failures_are_all_counted_and_reported_at_run_end(dispatch_site, tmp_path: Path) -> None:
    m = _manager(tmp_path, ["test_flaky", "jsonl"])
    with structlog.testing.capture_logs() as logs, m.running():
        for step in range(1, 31):
            m.log_metrics(step, {"a": float(step)})
    flaky = _rec(m, "test_flaky")
    assert not flaky.disabled  # never 3 failures in a row
    assert flaky.total_failures == 10 and flaky.failures_by_hook == {"log_metrics": 10}
    end = [e for e in logs if "failed 10 time(s) this run (log_metrics x10)" in e["event"]]
    assert len(end) == 1 and "test_flaky (backends[0])" in end[0]["event"]
    # lost data is never a success: on_run_end got "failed", and the healthy backend has everything
    assert m.final_status == "failed"
    records = [json.loads(line) for line in (tmp_path / "policy" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["kind"] == "metrics"] == list(range(1, 31))
    assert records[-1]["status"] == "failed"
    assert m.failure_summary() == {"test_flaky (backends[0])": {"failures": 10, "by_hook": {"log_metrics": 10},
                                                                 "dropped": 0, "disabled": False}}


def test_slow_backend_costs_training_at_most_its_wait_budget(dispatch_site, tmp_path: Path) -> None:
    budget = 0.5
    m = _manager(tmp_path, [{"name": "test_slow", "delay_s": 0.05, "queue_size": 2, "max_wait_s": budget}, "jsonl"])
    waited = 0.0
    with structlog.testing.capture_logs() as logs, m.running():
        for step in range(1, 101):
            t0 = time.perf_counter()
            m.log_metrics(step, {"a": float(step)})
            waited += time.perf_counter() - t0
    # without the budget: ~100 x 50 ms = 5 s in the training thread
    assert waited < budget + 0.5, f"the training thread waited {waited:.2f} s"
    slow = _rec(m, "test_slow")
    delivered = [p for k, p in slow.obj.events if k == "metrics"]
    assert slow.dropped == 100 - len(delivered) > 0
    assert delivered == list(range(1, len(delivered) + 1))  # what it got is in order, from the start
    assert slow.obj.events[-1] == ("end", "failed")  # still ended (files closed), status not success
    assert any("is too slow" in e["event"] and e.get("plugin") == "test_slow" for e in logs)
    assert any(f"{slow.dropped} call(s) not delivered" in e["event"] for e in logs)
    records = [json.loads(line) for line in (tmp_path / "policy" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["kind"] == "metrics"] == list(range(1, 101))  # healthy: all


def test_healthy_run_is_a_success_with_no_failures(dispatch_site, tmp_path: Path) -> None:
    m = _manager(tmp_path, ["test_counting", "jsonl"])
    with m.running():
        for step in range(1, 11):
            m.log_metrics(step, {"a": 1.0})
    assert m.final_status == "success" and m.failure_summary() == {}


def _imports(path: Path) -> set[str]:
    mods = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            mods.add(node.module)
            mods.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            mods.update(a.name for a in node.names)
    return mods


def test_core_modules_import_no_cycle() -> None:
    graph = {f"rlhooks.core.{p.stem}": {m for m in _imports(p) if m.startswith("rlhooks.core.")}
             for p in CORE.glob("*.py")}
    graph = {k: {m for m in v if m in graph} for k, v in graph.items()}

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for nxt in graph[start]:
            if nxt == goal or (nxt not in seen and (seen.add(nxt) or reaches(nxt, goal, seen))):
                return True
        return False

    cycles = sorted(m for m in graph if reaches(m, m, set()))
    assert cycles == [], f"import cycles through {cycles}"


def test_dispatch_uses_no_private_pluggy_or_threading_api() -> None:
    tree = ast.parse((CORE / "dispatch.py").read_text())
    private = sorted({f"{n.value.id}.{n.attr}" for n in ast.walk(tree) if isinstance(n, ast.Attribute)
                      and isinstance(n.value, ast.Name) and n.value.id in ("pluggy", "threading", "inspect")
                      and n.attr.startswith("_")})
    assert private == []
