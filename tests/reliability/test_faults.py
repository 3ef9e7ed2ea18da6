"""Faults during a simulated run with the built-in plugins on.

* a backend that raises: the run completes, the other backends receive everything;
* a backend that hangs: the run ends anyway, the flush timeout is reported naming it, the others
  are unaffected (a hung backend that fills its queue is declared hung too, mid-run);
* a third-party plugin that fails to import: a warning for runs that do not ask for it, a config
  error naming it, its distribution and the import error for a run that does (an error in strict mode);
* an exception inside the training loop (a steering plugin's bug, an engine crash, Ctrl-C):
  on_run_end still fires with the right status and every backend is flushed, so every metric
  logged before the failure can be read back from JSONL, TensorBoard and W&B.

Fault plugins come through real entry points of installed distributions (see conftest.py).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
import structlog

import rlhooks
import rlhooks.host
from rlhooks import hookimpl
from rlhooks.core import dispatch
from rlhooks.plugins.backends.wandb_backend import STEP_METRIC as WANDB_STEP_METRIC
from rlhooks.core.errors import ConfigError, PluginError
from rlhooks.core.manager import MAX_CONSECUTIVE_FAILURES
from rlhooks.core.registry import Registry

from .conftest import all_builtins_config, jsonl_metrics, jsonl_tables, make_engine, read_jsonl, readers

STEPS = 8


class Logged:
    """Extra plugin: what the training thread handed to log_metrics / log_table, per step."""

    def __init__(self) -> None:
        self.metrics: dict[int, dict[str, Any]] = {}
        self.tables: list[tuple[int, str]] = []
        self.status: list[str] = []

    @hookimpl
    def log_metrics(self, step: int, metrics: Any) -> None:
        self.metrics[step] = dict(metrics)

    @hookimpl
    def log_table(self, step: int, name: str) -> None:
        self.tables.append((step, name))

    @hookimpl
    def on_run_end(self, status: str) -> None:
        self.status.append(status)


def _obj(engine, name: str) -> Any:
    return next(r.obj for r in engine.manager.components if r.name == name)


def _rec(engine, name: str) -> Any:
    return next(r for r in engine.manager.components if r.name == name)


def _config(tmp_path: Path, extra_backends: list, wandb_mode: str | None = None, **sections: Any) -> dict:
    cfg = all_builtins_config(tmp_path, steps=STEPS, wandb_mode=wandb_mode)
    cfg["backends"] = [*cfg["backends"], *extra_backends]
    cfg.update(sections)
    return cfg


def _engine(cfg: dict, data, run_dir: Path):
    logged = Logged()
    return make_engine(cfg, data, run_dir, extra_plugins=[("logged", logged)]), logged


def _assert_backends_have_everything(engine, logged: Logged, run_dir: Path, status: str, backends=("jsonl", "tensorboard")) -> None:
    """Every metric value and table the training thread logged is in each backend's own output."""
    assert logged.metrics, "nothing was logged before the end: the test proves nothing"
    records = read_jsonl(run_dir / "metrics.jsonl")
    assert records[-1]["kind"] == "run_end" and records[-1]["status"] == status
    want_keys = {s: set(m) for s, m in logged.metrics.items()}
    if "jsonl" in backends:
        got = jsonl_metrics(records, exclude=frozenset())
        assert {s: set(m) for s, m in got.items()} == want_keys
        for step, m in logged.metrics.items():
            assert got[step] == pytest.approx(m, nan_ok=True), f"jsonl differs at step {step}"
        assert sorted(jsonl_tables(records)) == sorted(set(logged.tables))
    if "tensorboard" in backends:
        tb = readers.read_tensorboard(_obj(engine, "tensorboard"), run_dir, None).metrics
        assert {s: set(m) for s, m in tb.items()} == want_keys
        for step, m in logged.metrics.items():
            assert tb[step] == pytest.approx({k: float(v) for k, v in m.items()}, rel=1e-6, nan_ok=True)
    if "wandb" in backends:
        wb = readers.read_wandb(_obj(engine, "wandb"), run_dir, None).metrics
        assert sorted(wb) == sorted(want_keys)
        for step, m in logged.metrics.items():
            # W&B adds <table>/nrows, /ncols, /increment_num, ... for a table (the backend's own custom
            # charts under charts/ are tables too), and the backend logs its step metric (every chart is
            # defined against it); everything else is ours
            tables = (*(f"{name}/" for s, name in logged.tables if s == step), "charts/")
            extra = {k for k in set(wb[step]) - set(m) if not k.startswith(tables)}
            assert extra <= {WANDB_STEP_METRIC} and wb[step].get(WANDB_STEP_METRIC, step) == step
            assert {k: wb[step][k] for k in m} == pytest.approx(m, nan_ok=True)
    if "test_counting" in backends:
        counting = _obj(engine, "test_counting")
        assert [p for k, p in counting.events if k == "metrics"] == sorted(logged.metrics)
        assert counting.metric_values == sum(len(m) for m in logged.metrics.values())
        assert counting.events[-1] == ("end", status)


def test_raising_backend_run_completes_and_others_get_everything(dispatch_site, sim_data, tmp_path: Path) -> None:
    cfg = _config(tmp_path, ["test_raising", "test_counting"])
    engine, logged = _engine(cfg, sim_data, tmp_path / "run")
    with structlog.testing.capture_logs() as logs:
        engine.run()
    # the training finished, but a backend lost data: never "success" (docs/explanation/guarantees.md)
    assert engine.step == STEPS and logged.status == ["failed"]
    raising = _rec(engine, "test_raising")
    assert raising.disabled and raising.total_failures >= MAX_CONSECUTIVE_FAILURES
    assert raising.obj.calls < STEPS  # disabled early: it did not get a call per step
    named = [e for e in logs if e.get("plugin") == "test_raising" and e["log_level"] == "error"]
    assert any("failed in log_metrics" in e["event"] for e in named)
    assert any("disabled after" in e["event"] for e in named)
    assert all(e.get("distribution") == "rlhooks-dispatch-test-backends 0.1" for e in named)
    # disabled, yet its run still ended: its dispatch thread stopped (no thread left per failed backend)
    assert not [d for d in dispatch.live_dispatchers() if d.rec in engine.manager.components]
    assert "rlhooks-backend-test_raising" not in {t.name for t in threading.enumerate()}
    _assert_backends_have_everything(engine, logged, tmp_path / "run", "failed",
                                     backends=("jsonl", "tensorboard", "test_counting"))


def test_hanging_backend_flush_timeout_is_reported_and_others_unaffected(dispatch_site, sim_data, tmp_path: Path) -> None:
    cfg = _config(tmp_path, [{"name": "test_hanging", "flush_timeout_s": 0.5}, "test_counting"])
    engine, logged = _engine(cfg, sim_data, tmp_path / "run")
    hanging = _obj(engine, "test_hanging")
    try:
        with structlog.testing.capture_logs() as logs:
            t0 = time.monotonic()
            engine.run()
            elapsed = time.monotonic() - t0
        hung = [e for e in logs if "looks hung" in e["event"]]
        assert len(hung) == 1 and hung[0]["plugin"] == "test_hanging"
        assert "flush_timeout_s=0.5" in hung[0]["event"] and "queued call(s) are abandoned" in hung[0]["event"]
        assert _rec(engine, "test_hanging").disabled
        assert elapsed < 60  # the hanging call blocks 60 s: the run end did not wait for it
        assert engine.step == STEPS and logged.status == ["failed"]  # it lost its queued calls
        _assert_backends_have_everything(engine, logged, tmp_path / "run", "failed",
                                         backends=("jsonl", "tensorboard", "test_counting"))
    finally:
        hanging.release.set()


def test_hanging_backend_with_a_full_queue_does_not_stall_training(dispatch_site, sim_data, tmp_path: Path) -> None:
    cfg = _config(tmp_path, [{"name": "test_hanging", "queue_size": 2, "put_timeout_s": 0.3, "flush_timeout_s": 0.3}])
    engine, logged = _engine(cfg, sim_data, tmp_path / "run")
    hanging = _obj(engine, "test_hanging")
    try:
        with structlog.testing.capture_logs() as logs:
            engine.run()
        hung = [e for e in logs if "looks hung" in e["event"]]
        assert len(hung) == 1 and hung[0]["plugin"] == "test_hanging" and "put_timeout_s=0.3" in hung[0]["event"]
        assert any("queue is full" in e["event"] and e.get("plugin") == "test_hanging" for e in logs)
        assert engine.step == STEPS
        _assert_backends_have_everything(engine, logged, tmp_path / "run", "failed")
    finally:
        hanging.release.set()


def test_broken_third_party_plugin_warns_unless_requested(faults_site, on_path, sim_data, tmp_path: Path) -> None:
    on_path(faults_site)
    # a run that does not ask for it: one warning naming it, and the run works
    with structlog.testing.capture_logs() as logs:
        engine, logged = _engine(_config(tmp_path, []), sim_data, tmp_path / "run")
        engine.run()
    warned = [e for e in logs if e["log_level"] == "warning" and e.get("plugin") == "rel_broken"]
    assert len(warned) == 1
    assert warned[0]["distribution"] == "reliability-broken"
    assert "missing CUDA toolkit" in warned[0]["event"] and "reliability_broken:Backend" in warned[0]["event"]
    assert logged.status == ["success"] and engine.step == STEPS

    # a run that asks for it: a config error with its path, distribution, the import error and what to do
    cfg = _config(tmp_path, ["rel_broken"])
    with pytest.raises(ConfigError) as err:
        rlhooks.host.load_config(cfg)
    msg = str(err.value)
    path = f"backends[{len(cfg['backends']) - 1}] (rel_broken)"
    assert path in msg and "reliability-broken 0.1" in msg
    assert "RuntimeError: reliability_broken cannot start: missing CUDA toolkit" in msg
    assert "RLHOOKS_DISABLE_PLUGINS=rel_broken" in msg

    # strict mode: any broken installed plugin stops the run before it starts
    strict = _config(tmp_path, [])
    strict["run"]["strict_plugins"] = True
    with pytest.raises(rlhooks.RLHooksError, match="reliability-broken.*missing CUDA toolkit"):
        rlhooks.host.RunManager(rlhooks.host.load_config(strict), run_dir=tmp_path / "strict")
    # disabling it by name silences it
    with structlog.testing.capture_logs() as logs:
        rlhooks.host.RunManager(rlhooks.host.load_config(_config(tmp_path, [])), registry=Registry(disabled=["rel_broken"]),
                           run_dir=tmp_path / "quiet")
    assert not [e for e in logs if e.get("plugin") == "rel_broken"]


def _crash_engine(on_step):
    def crash(step: int, metrics: dict) -> None:
        if step == 5:
            on_step()
    return crash


def _raise(exc: BaseException):
    def go() -> None:
        raise exc
    return go


@pytest.mark.parametrize("fault", ["plugin", "engine", "interrupt"])
def test_exception_in_training_loop_ends_run_and_flushes_every_backend(
    fault: str, faults_site, dispatch_site, on_path, sim_data, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_path(faults_site)
    wandb_mode = "offline" if fault == "plugin" else None  # one W&B run, read back from its files (slow-ish)
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb-env"))
    cfg = _config(tmp_path, ["test_counting"], wandb_mode=wandb_mode)
    if fault == "plugin":  # a steering plugin's bug in the middle of step 5 (after rewards, before training)
        cfg["filters"] = [*cfg["filters"], {"name": "crashing_filter", "crash_at_step": 5}]
    run_dir = tmp_path / "run"
    engine, logged = _engine(cfg, sim_data, run_dir)
    expected: tuple[type[BaseException], str | None, str] = {
        "plugin": (PluginError, "crashing_filter.*failed in select.*simulated bug at step 5", "failed"),
        "engine": (RuntimeError, "engine crashed after step 5", "failed"),
        "interrupt": (KeyboardInterrupt, None, "interrupted"),
    }[fault]
    on_step = {
        "plugin": None,
        "engine": _crash_engine(_raise(RuntimeError("engine crashed after step 5"))),
        "interrupt": _crash_engine(_raise(KeyboardInterrupt())),
    }[fault]
    with pytest.raises(expected[0], match=expected[1]):
        engine.run(on_step=on_step)
    status = expected[2]
    assert logged.status == [status]
    last = 4 if fault == "plugin" else 5  # the plugin crash happens inside step 5, before its metrics
    assert sorted(logged.metrics) == list(range(1, last + 1))
    backends = ("jsonl", "tensorboard", "test_counting") + (("wandb",) if wandb_mode else ())
    _assert_backends_have_everything(engine, logged, run_dir, status, backends=backends)
    summary = (run_dir / "reward_monitor.json").read_text()
    assert f'"status": "{status}"' in summary
