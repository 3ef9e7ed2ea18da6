"""Backends for the dispatch tests, installed as a real distribution by ``install_test_backends``.

This file is copied into a temporary site directory as module ``rlhooks_dispatch_test_backends``
next to a ``.dist-info`` whose entry points register the classes in ``rlhooks.backends``, so the
tests resolve them by name through the real registry and config, like any third-party backend.
"""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path
from typing import Any

import attrs

from rlhooks import hookimpl

MODULE = "rlhooks_dispatch_test_backends"
ENTRY_POINTS = {
    "test_slow": "SlowBackend",
    "test_raising": "RaisingBackend",
    "test_counting": "CountingBackend",
    "test_hanging": "HangingBackend",
    "test_flaky": "FlakyBackend",
    "test_failing_start": "FailingStartBackend",
    "test_wrapper": "WrapperBackend",
    "test_old_wrapper": "OldWrapperBackend",
    "test_full_at_end": "FullDiskAtEndBackend",
    "test_hang_at_end": "HangAtEndBackend",
    "test_settings_attr": "SettingsAttrBackend",
    "test_stateful": "StatefulBackend",
}


@attrs.frozen(kw_only=True)
class _Opts:
    delay_s: float = 0.0
    queue_size: int = 1024
    flush_timeout_s: float = 30.0
    put_timeout_s: float = 30.0
    max_wait_s: float = 60.0


class CountingBackend:
    """Records every call it receives, in order, with the thread it ran on."""

    Options = _Opts

    def __init__(self, options: _Opts) -> None:
        self.options = options
        self.delay_s = options.delay_s  # tests may change it while the run goes on
        self.events: list[tuple[str, Any]] = []
        self.metric_values = 0
        self.threads: set[str] = set()

    def _record(self, kind: str, payload: Any) -> None:
        if self.delay_s:
            time.sleep(self.delay_s)
        self.threads.add(threading.current_thread().name)
        self.events.append((kind, payload))

    @hookimpl
    def on_run_start(self, run: Any) -> None:
        self._record("start", run.name)

    @hookimpl
    def log_metrics(self, step: int, metrics: Any) -> None:
        self.metric_values += len(metrics)
        self._record("metrics", step)

    @hookimpl
    def log_table(self, step: int, name: str, rows: list[dict[str, Any]]) -> None:
        self._record("table", (step, name, len(rows)))

    @hookimpl
    def on_run_end(self, status: str) -> None:
        self._record("end", status)


@attrs.frozen(kw_only=True)
class _StatefulOpts(_Opts):
    #: request the run's stop from log_metrics of this step (0: never)
    stop_at_step: int = 0


class StatefulBackend(CountingBackend):
    """Keeps how many steps it logged across a resume (state_dict) and may ask the run to stop, both
    from its dispatch thread."""

    Options = _StatefulOpts

    @hookimpl
    def on_run_start(self, run: Any) -> None:
        self.run = run
        super().on_run_start(run)

    @hookimpl
    def log_metrics(self, step: int, metrics: Any) -> None:
        super().log_metrics(step, metrics)
        if step == self.options.stop_at_step:
            self.run.request_stop(f"the backend saw step {step}")

    def state_dict(self) -> dict[str, int]:
        return {"logged": sum(1 for kind, _ in self.events if kind == "metrics")}

    def load_state_dict(self, state: dict[str, int]) -> None:
        pass


class SlowBackend(CountingBackend):
    """A CountingBackend with a default delay (network-like)."""


class RaisingBackend:
    """Raises in every logging call."""

    Options = _Opts

    def __init__(self, options: _Opts) -> None:
        self.options = options
        self.calls = 0

    @hookimpl
    def log_metrics(self, step: int, metrics: Any) -> None:
        self.calls += 1
        raise RuntimeError(f"backend down at step {step}")

    @hookimpl
    def log_table(self, step: int, name: str) -> None:
        self.calls += 1
        raise RuntimeError("table backend down")


class HangingBackend(CountingBackend):
    """Blocks in log_metrics until ``release`` is set (a hung network call)."""

    def __init__(self, options: _Opts) -> None:
        super().__init__(options)
        self.release = threading.Event()

    @hookimpl
    def log_metrics(self, step: int, metrics: Any) -> None:
        self.release.wait(60)
        super().log_metrics(step, metrics)


class FlakyBackend(CountingBackend):
    """Fails every third log_metrics call (an intermittent network error)."""

    @hookimpl
    def log_metrics(self, step: int, metrics: Any) -> None:
        if step % 3 == 0:
            raise ConnectionError(f"flaky upload at step {step}")
        super().log_metrics(step, metrics)


class FailingStartBackend(CountingBackend):
    """Cannot start (e.g. a login that fails)."""

    @hookimpl
    def on_run_start(self, run: Any) -> None:
        raise PermissionError("login refused")


class FullDiskAtEndBackend(CountingBackend):
    """Its final flush hits a full disk (what it buffered is lost)."""

    @hookimpl
    def on_run_end(self, status: str) -> None:
        import errno

        raise OSError(errno.ENOSPC, "No space left on device", "buffered-events.bin")


class HangAtEndBackend(CountingBackend):
    """Its final flush blocks until ``release`` is set (a network upload that never returns)."""

    def __init__(self, options: _Opts) -> None:
        super().__init__(options)
        self.release = threading.Event()

    @hookimpl
    def on_run_end(self, status: str) -> None:
        self.release.wait(60)


class SettingsAttrBackend:
    """Keeps its Options as ``self.settings`` (not ``options``) and hangs in its final flush."""

    Options = _Opts

    def __init__(self, options: _Opts) -> None:
        self.settings = options
        self.release = threading.Event()

    @hookimpl
    def log_metrics(self, step: int, metrics: Any) -> None:
        pass

    @hookimpl
    def on_run_end(self, status: str) -> None:
        self.release.wait(60)


class WrapperBackend(CountingBackend):
    """Wraps log_metrics with a new-style pluggy wrapper (not supported by rlhooks)."""

    @hookimpl(wrapper=True)
    def log_metrics(self, step: int, metrics: Any) -> Any:
        result = yield
        return result


class OldWrapperBackend(CountingBackend):
    """An old-style pluggy hookwrapper around log_metrics."""

    @hookimpl(hookwrapper=True)
    def log_metrics(self, step: int, metrics: Any) -> Any:
        yield


def install(site: Path) -> None:
    """Copy this module into ``site`` and write a dist-info registering its backends."""
    site.mkdir(parents=True, exist_ok=True)
    shutil.copy(Path(__file__), site / f"{MODULE}.py")
    info = site / "rlhooks_dispatch_test_backends-0.1.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rlhooks-dispatch-test-backends\nVersion: 0.1\n")
    eps = "\n".join(f"{name} = {MODULE}:{cls}" for name, cls in ENTRY_POINTS.items())
    (info / "entry_points.txt").write_text(f"[rlhooks.backends]\n{eps}\n")
