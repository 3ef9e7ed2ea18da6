"""Non-blocking dispatch: each logging backend runs behind a bounded queue on its own thread.

``RunManager._wrap`` registers a *proxy* on the plugin manager instead of a backend object
whenever the backend implements a logging hook (``log_metrics``, ``log_table``,
``log_histogram``). The proxy's hook implementations only put the call on the backend's queue
(a few microseconds in the training thread); one background thread per backend makes the real
calls in order. Components of the ``backend`` kind that implement no logging hook (the sample
tables in ``samples:``) are registered as they are: they run in the training thread.

Guarantees:

* Order: a backend sees its calls in the order the training thread made them
  (``on_run_start`` first, ``on_run_end`` last).
* No silent drops: when a queue is full the training thread waits for room (and says so once
  per backend). Only a backend that makes the producer wait longer than ``put_timeout_s``, or
  that does not drain within ``flush_timeout_s`` at the end, is declared hung: it is reported by
  name with the number of calls it still had queued, disabled, and left behind (its thread is a
  daemon), while every other backend keeps receiving everything.
* Flush: ``on_run_end`` queues the backend's own ``on_run_end`` and waits for the queue to drain;
  at interpreter exit every backend whose run did not end is drained and closed with
  ``on_run_end("interrupted")`` (before other atexit handlers, so e.g. wandb is still alive).
* Failures follow the component's ``on_error`` with the manager's policy (``RunManager._failed``):
  ``warn`` logs once per hook and disables after ``MAX_CONSECUTIVE_FAILURES`` failures in a row,
  ``disable`` at the first; ``raise`` stops the backend and re-raises the error in the training
  thread at its next call (as a ``PluginError``).

Tuning: a backend whose ``options`` have ``queue_size``, ``flush_timeout_s`` or
``put_timeout_s`` uses them (the built-in backends expose all three); otherwise the defaults
below apply.
"""

from __future__ import annotations

import inspect
import queue
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pluggy
import structlog

from rlhooks.core.hookspecs import METRIC_HOOKS, PROJECT, RLHookSpecs, hookimpl

if TYPE_CHECKING:  # pragma: no cover - typing only
    from rlhooks.core.manager import Registered, RunManager

log = structlog.get_logger("rlhooks.dispatch")

#: hooks whose implementations make a backend a logging sink (and so get a queue)
LOGGING_HOOKS = ("log_metrics", "log_table", "log_histogram")
DEFAULT_QUEUE_SIZE = 1024
DEFAULT_FLUSH_TIMEOUT_S = 60.0
DEFAULT_PUT_TIMEOUT_S = 300.0

_STOP = object()
_MARKER = PROJECT + "_impl"

_live: set[BackendDispatcher] = set()
_live_lock = threading.Lock()
_exit_hook_registered = False
#: one failure handled at a time: the manager's bookkeeping is not thread-safe
_policy_lock = threading.Lock()


def hook_impls(obj: Any) -> dict[str, tuple[Callable, dict[str, Any]]]:
    """``{hook name: (bound implementation, hookimpl options)}`` of a plugin object."""
    found = {}
    for name in dir(obj):
        if name.startswith("__"):
            continue
        try:
            attr = getattr(obj, name)
        except Exception:  # noqa: BLE001 - a property may raise; pluggy skips those too
            continue
        opts = getattr(attr, _MARKER, None) if inspect.isroutine(attr) else None
        if isinstance(opts, dict):
            found[opts.get("specname") or name] = (attr, opts)
    return found


def wrap(manager: RunManager, rec: Registered) -> Any:
    """The object to register for ``rec``: a dispatch proxy for logging backends, else the object."""
    if rec.kind != "backend":
        return rec.obj
    impls = hook_impls(rec.obj)
    if not any(h in impls for h in LOGGING_HOOKS):
        return rec.obj  # sample components and other hook-only objects run in the training thread
    _validate(rec.obj, rec.label)
    rec.deferred = True
    return BackendDispatcher(manager, rec, impls).proxy


def _validate(obj: Any, label: str) -> None:
    """The backend itself against the specs (pluggy only sees the proxy, whose signatures are right):
    unknown hooks and argument names a hook does not have raise ``PluginValidationError`` at start."""
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(RLHookSpecs)
    pm.register(obj, name=label)
    pm.check_pending()


def _argnames(fn: Callable) -> tuple[str, ...]:
    """Arguments pluggy passes to ``fn``: the positional ones without a default (as pluggy does)."""
    params = inspect.signature(fn).parameters.values()
    return tuple(
        p.name for p in params
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    )


class _Proxy:
    """What pluggy sees for a dispatched backend: one hookimpl per hook, set per instance."""

    def __init__(self, label: str) -> None:
        self._label = label

    def __repr__(self) -> str:
        return f"<dispatch proxy of {self._label}>"


class BackendDispatcher:
    """One backend's queue, worker thread and failure bookkeeping."""

    def __init__(self, manager: RunManager, rec: Registered, impls: dict[str, tuple[Callable, dict]]) -> None:
        self.manager = manager
        self.rec = rec
        opts = getattr(rec.obj, "options", None)
        self.queue_size = int(getattr(opts, "queue_size", DEFAULT_QUEUE_SIZE))
        self.flush_timeout_s = float(getattr(opts, "flush_timeout_s", DEFAULT_FLUSH_TIMEOUT_S))
        self.put_timeout_s = float(getattr(opts, "put_timeout_s", DEFAULT_PUT_TIMEOUT_S))
        self.queue: queue.Queue = queue.Queue(maxsize=self.queue_size)
        self.thread: threading.Thread | None = None
        self.closed = False
        self.hung = False
        self.waited_full = False  # the "queue full" warning was given
        self.waits = 0  # times the producer had to wait for room
        self.calls = 0  # calls the backend completed (successfully or not)
        self._pending_raise: BaseException | None = None  # on_error: raise, for the training thread
        self._stopped_by_raise = False
        self._start_lock = threading.Lock()
        self._impls = impls
        self._args = {hook: _argnames(fn) for hook, (fn, _) in impls.items()}
        # a backend that also steers/contributes metrics keeps its lifecycle in the training thread
        self._queued_lifecycle = not any(h in METRIC_HOOKS for h in impls)
        self.proxy = self._build_proxy()

    # -- the proxy ------------------------------------------------------------------------
    def _build_proxy(self) -> _Proxy:
        proxy = _Proxy(self.rec.label)
        for hook, (fn, opts) in self._impls.items():
            if hook in LOGGING_HOOKS or (self._queued_lifecycle and hook in ("on_run_start", "on_run_end")):
                continue
            setattr(proxy, hook, fn)  # passed through: runs in the training thread
        marks = {h: {k: o.get(k, False) for k in ("tryfirst", "trylast")} for h, (_, o) in self._impls.items()}

        def mark(hook: str, fn: Callable) -> None:
            setattr(proxy, hook, hookimpl(**marks.get(hook, {}))(fn))

        if "log_metrics" in self._impls:
            def log_metrics(step: int, metrics: Any) -> None:
                self.submit("log_metrics", {"step": step, "metrics": metrics})
            mark("log_metrics", log_metrics)
        if "log_table" in self._impls:
            def log_table(step: int, name: str, rows: list[dict[str, Any]]) -> None:
                # copies: the caller may reuse its dicts while the worker still reads them
                self.submit("log_table", {"step": step, "name": name, "rows": [dict(r) for r in rows]})
            mark("log_table", log_table)
        if "log_histogram" in self._impls:
            def log_histogram(step: int, name: str, values: Any) -> None:
                self.submit("log_histogram", {"step": step, "name": name, "values": values})
            mark("log_histogram", log_histogram)
        if self._queued_lifecycle:
            if "on_run_start" in self._impls:
                def on_run_start(run: Any) -> None:
                    self.submit("on_run_start", {"run": run})
                mark("on_run_start", on_run_start)

            def on_run_end(status: str) -> None:  # always present: it flushes the queue
                self.close(status)
            mark("on_run_end", on_run_end)
        else:
            sync_end = self._impls.get("on_run_end")

            def on_run_end_sync(status: str) -> None:
                self.close(None)  # drain the queued logging calls first
                if sync_end is not None:
                    fn, _ = sync_end
                    fn(*[{"status": status}[a] for a in self._args["on_run_end"]])
            mark("on_run_end", on_run_end_sync)
        return proxy

    # -- training-thread side -------------------------------------------------------------
    def submit(self, hook: str, kwargs: dict[str, Any]) -> None:
        """Queue one hook call; waits when the queue is full (never drops)."""
        fn, _ = self._impls[hook]
        args = tuple(kwargs[a] for a in self._args[hook])
        if self.closed:  # after on_run_end: nothing drains the queue any more, so call inline
            if not self.hung:
                fn(*args)
            return
        self._ensure_started()
        item = (hook, fn, args, kwargs.get("step"))
        try:
            self.queue.put_nowait(item)
        except queue.Full:
            self.waits += 1
            if not self.waited_full:
                self.waited_full = True
                log.warning(
                    f"backend {self.rec.name!r} is slower than training: its queue is full "
                    f"({self.queue_size} calls), so the training thread waits for it (nothing is dropped). "
                    f"Raise its queue_size, log less often, or make the backend faster.",
                    plugin=self.rec.name, path=self.rec.path, hook=hook,
                )
            try:
                self.queue.put(item, timeout=self.put_timeout_s)
            except queue.Full:
                self._declare_hung(f"its queue stayed full for put_timeout_s={self.put_timeout_s:g} s")
                return
        self._raise_pending()

    def _raise_pending(self) -> None:
        exc, self._pending_raise = self._pending_raise, None
        if exc is not None:
            raise exc  # RunManager.call routes it through _failed -> PluginError (on_error: raise)

    def _ensure_started(self) -> None:
        if self.thread is not None:
            return
        with self._start_lock:
            if self.thread is None:
                _register_exit_hook()
                self.thread = threading.Thread(
                    target=self._work, name=f"rlhooks-backend-{self.rec.name}", daemon=True
                )
                self.thread.start()
                with _live_lock:
                    _live.add(self)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything queued so far was handled; False on timeout."""
        if self.thread is None or self.closed:
            return True
        done = threading.Event()
        try:
            self.queue.put(done, timeout=self.flush_timeout_s if timeout is None else timeout)
        except queue.Full:
            return False
        return done.wait(self.flush_timeout_s if timeout is None else timeout)

    def close(self, status: str | None) -> None:
        """Queue the backend's ``on_run_end(status)`` (None: skip it), drain, stop the thread."""
        if self.closed:
            return
        if status is not None and "on_run_end" in self._impls:
            self._ensure_started()
        if self.thread is not None:
            deadline = time.monotonic() + self.flush_timeout_s
            try:
                if status is not None and "on_run_end" in self._impls:
                    fn, _ = self._impls["on_run_end"]
                    args = tuple({"status": status}[a] for a in self._args["on_run_end"])
                    self.queue.put(("on_run_end", fn, args, None), timeout=self.flush_timeout_s)
                self.queue.put(_STOP, timeout=max(0.0, deadline - time.monotonic()))
            except queue.Full:
                pass
            self.thread.join(max(0.0, deadline - time.monotonic()))
            if self.thread.is_alive():
                self._declare_hung(f"it did not finish within flush_timeout_s={self.flush_timeout_s:g} s")
        self.closed = True
        with _live_lock:
            _live.discard(self)
        self._raise_pending()

    def _declare_hung(self, why: str) -> None:
        self.hung = True
        self.closed = True
        self.rec.disabled = True
        log.error(
            f"backend {self.rec.name!r} looks hung: {why}; {self.queue.qsize()} queued call(s) are "
            f"abandoned and it is disabled. Other backends are not affected.",
            plugin=self.rec.name, path=self.rec.path, distribution=self.rec.distribution,
        )
        with _live_lock:
            _live.discard(self)

    # -- worker side ----------------------------------------------------------------------
    def _work(self) -> None:
        rec = self.rec
        while True:
            item = self.queue.get()
            if item is _STOP:
                return
            if isinstance(item, threading.Event):
                item.set()
                continue
            hook, fn, args, step = item
            if (rec.disabled and hook != "on_run_end") or self._stopped_by_raise or self.hung:
                continue  # a disabled backend's queue still drains, so producers never block on it
            try:
                fn(*args)
            except Exception as exc:  # noqa: BLE001 - routed through the component's policy
                self._failed(hook, step, exc)
            else:
                rec.failures = 0
            finally:
                self.calls += 1

    def _failed(self, hook: str, step: int | None, exc: Exception) -> None:
        if self.rec.on_error == "raise":
            note = f"raised by {self.rec.name}.{hook} on its dispatch thread" + (f" at step {step}" if step else "")
            if hasattr(exc, "add_note"):  # Python >= 3.11; on 3.10 the PluginError still names plugin and hook
                exc.add_note(note)
            self._stopped_by_raise = True
            self._pending_raise = exc
            return
        with _policy_lock:
            self.manager._failed(self.rec, hook, exc)


def _register_exit_hook() -> None:
    """Drain the queues at interpreter exit, before atexit handlers (wandb's own among them) run."""
    global _exit_hook_registered
    if _exit_hook_registered:
        return
    _exit_hook_registered = True
    register = getattr(threading, "_register_atexit", None)  # runs before atexit callbacks
    try:
        if register is not None:
            register(close_all)
            return
    except RuntimeError:  # interpreter already shutting down
        pass
    import atexit

    atexit.register(close_all)


def close_all(status: str = "interrupted") -> None:
    """Drain and close every live dispatcher (their runs never reached on_run_end)."""
    with _live_lock:
        live = list(_live)
    for d in live:
        try:
            d.close(status)
        except Exception as exc:  # noqa: BLE001 - at exit: report, never raise
            log.error("backend failed while flushing at exit", plugin=d.rec.name, error=f"{type(exc).__name__}: {exc}")


def live_dispatchers() -> list[BackendDispatcher]:
    """Dispatchers with a running thread (for tests and diagnostics)."""
    with _live_lock:
        return list(_live)


def flush_all(timeout: float | None = None) -> bool:
    """Wait until every live backend handled what was queued so far; False if one timed out."""
    return all([d.flush(timeout) for d in live_dispatchers()])
