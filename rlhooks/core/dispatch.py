"""Non-blocking dispatch: each logging backend runs behind a bounded queue on its own thread.

``wrap`` returns, for a component of the ``backend`` kind that implements a logging hook
(``log_metrics``, ``log_table``, ``log_histogram``), a *proxy* to register on the plugin manager
instead of the backend object. The proxy's hook implementations only put the call on the
backend's queue (a few microseconds in the training thread); one background thread per backend
makes the real calls in order. Components that implement no logging hook (the sample tables in
``samples:``) are registered as they are: they run in the training thread.

Guarantees:

* Order: a backend sees its calls in the order the training thread made them
  (``on_run_start`` first, ``on_run_end`` last).
* A bounded cost: when a queue is full the training thread waits for room (and says so once per
  backend), but in total at most ``max_wait_s`` seconds per backend and run. Past that budget
  the backend's later logging calls are *dropped*, counted, and reported by name at once and at
  run end (it still gets ``on_run_end``, so it closes its files). A single wait longer than
  ``put_timeout_s``, or a queue that does not drain within ``flush_timeout_s`` at the end,
  declares the backend hung: reported with the number of calls it still had queued, disabled,
  and left behind (its thread is a daemon). Every other backend keeps receiving everything.
* Flush: ``on_run_end`` queues the backend's own ``on_run_end`` and waits for the queue to drain.
  A host that exits without ending its run still gets every backend drained and closed with
  ``on_run_end("interrupted")`` by an ``atexit`` handler, which is re-registered after each
  backend's ``on_run_start`` so it runs before the handlers a backend registered while starting
  (atexit runs handlers last-registered first; wandb registers its own in ``wandb.init``).
* Failures go through the failure policy the host passes to ``wrap`` (RunManager's ``_failed``:
  the component's ``on_error``); every failure is counted there. ``on_error: raise`` stops the
  backend and re-raises the error, as a ``PluginError`` naming the hook that failed, in the
  training thread at its next call.
* Hook wrappers (``wrapper=True`` / ``hookwrapper=True``) are refused at registration: rlhooks
  calls each implementation on its own, with its own error policy, so a wrapper could not wrap.

Tuning: a backend whose ``options`` have ``queue_size``, ``flush_timeout_s``, ``put_timeout_s``
or ``max_wait_s`` uses them (the built-in backends expose all four); otherwise the defaults
below apply.

The plugin objects are inspected with pluggy's public API only (a scratch ``PluginManager``:
``register``, ``check_pending``, ``get_hookcallers``, ``HookImpl.argnames``/``opts``, and the
``parse_hookimpl_opts`` override that refuses wrappers).
"""

from __future__ import annotations

import atexit
import difflib
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import pluggy
import structlog

from rlhooks.core.errors import PluginError
from rlhooks.core.hookspecs import HOOK_NAMES, METRIC_HOOKS, PROJECT, RLHookSpecs, hookimpl
from rlhooks.core.run import BACKEND_THREAD

log = structlog.get_logger("rlhooks.dispatch")

#: hooks whose implementations make a backend a logging sink (and so get a queue)
LOGGING_HOOKS = ("log_metrics", "log_table", "log_histogram")
DEFAULT_QUEUE_SIZE = 1024
DEFAULT_FLUSH_TIMEOUT_S = 60.0
DEFAULT_PUT_TIMEOUT_S = 300.0
#: total seconds per run the training thread may wait for one backend's full queue
DEFAULT_MAX_WAIT_S = 60.0

_STOP = object()

_live: set[BackendDispatcher] = set()
_live_lock = threading.Lock()
#: one failure handled at a time: the host's bookkeeping is not thread-safe
_policy_lock = threading.Lock()


class Component(Protocol):
    """What dispatch needs to know about a registered component (RunManager's ``Registered``)."""

    name: str
    kind: str
    path: str
    distribution: str
    obj: Any
    on_error: str
    failures: int
    disabled: bool
    deferred: bool
    dropped: int

    @property
    def label(self) -> str: ...


#: ``policy(component, hook, error)``: count the failure, log it, maybe disable or raise
FailurePolicy = Callable[[Component, str, BaseException], None]


class HookWrapperError(pluggy.PluginValidationError):
    """A plugin declares a hook wrapper, which rlhooks refuses (see the module docstring)."""


class PluginManager(pluggy.PluginManager):
    """pluggy's PluginManager refusing hook wrappers as a plugin registers, whatever registers it
    (the RunManager, an engine, or code calling ``manager.pm.register`` directly).

    ``parse_hookimpl_opts`` is pluggy's documented extension point for subclasses.
    """

    _registering: str | None = None  # the name being registered, for the message

    def check_pending(self) -> None:
        """pluggy's check, with a did-you-mean instead of the plugin object's repr (the caller's
        message names the plugin): a decorated method whose name is not a hook is never called."""
        for plugin in self.get_plugins():
            for caller in self.get_hookcallers(plugin) or []:
                if caller.has_spec() or all(impl.optionalhook for impl in caller.get_hookimpls()):
                    continue
                close = difflib.get_close_matches(caller.name, HOOK_NAMES, n=1, cutoff=0.6)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise pluggy.PluginValidationError(
                    plugin, f"method {caller.name!r} is decorated with @hookimpl but is not an rlhooks hook{hint}"
                )

    def register(self, plugin: Any, name: str | None = None) -> str | None:
        self._registering = name
        try:
            return super().register(plugin, name)
        finally:
            self._registering = None

    def parse_hookimpl_opts(self, plugin: Any, name: str) -> Any:
        opts = super().parse_hookimpl_opts(plugin, name)
        if opts and (opts.get("hookwrapper") or opts.get("wrapper")):
            kind = "hookwrapper=True" if opts.get("hookwrapper") else "wrapper=True"
            label = self._registering or self.get_canonical_name(plugin)
            raise HookWrapperError(
                plugin,
                f"{label}: {name} is a hook wrapper ({kind}). rlhooks calls each hook "
                f"implementation on its own, with the component's on_error policy, so a wrapper "
                f"cannot wrap the others; implement {name} as a plain hook (order it with "
                f"tryfirst=True / trylast=True)",
            )
        return opts


def hook_impls(obj: Any, label: str = "plugin") -> dict[str, pluggy.HookImpl]:
    """``{hook name: HookImpl}`` of a plugin object, validated against the specs.

    Registers ``obj`` on a scratch PluginManager (pluggy's own marker parsing and argument
    matching): unknown hooks and argument names a hook does not have raise
    ``PluginValidationError``, and so does a hook wrapper (see the module docstring).
    """
    pm = PluginManager(PROJECT)
    pm.add_hookspecs(RLHookSpecs)
    pm.register(obj, name=label)
    pm.check_pending()
    found: dict[str, pluggy.HookImpl] = {}
    for caller in pm.get_hookcallers(obj) or []:
        for impl in caller.get_hookimpls():
            if impl.plugin is obj:
                found[caller.name] = impl
    return found


def wrap(rec: Component, on_failure: FailurePolicy) -> Any:
    """The object to register for ``rec``: a dispatch proxy for logging backends, else the object."""
    impls = hook_impls(rec.obj, rec.label)
    if rec.kind != "backend" or not any(h in impls for h in LOGGING_HOOKS):
        return rec.obj  # sample components and other hook-only objects run in the training thread
    rec.deferred = True
    return BackendDispatcher(rec, impls, on_failure).proxy


class _Proxy:
    """What pluggy sees for a dispatched backend: one hookimpl per hook, set per instance."""

    def __init__(self, label: str) -> None:
        self._label = label

    def __repr__(self) -> str:
        return f"<dispatch proxy of {self._label}>"


def _call(impl: pluggy.HookImpl, kwargs: dict[str, Any]) -> Any:
    """Call a hook implementation with the arguments it asks for, as pluggy does."""
    return impl.function(*[kwargs[a] for a in impl.argnames])


TUNING_FIELDS = ("queue_size", "flush_timeout_s", "put_timeout_s", "max_wait_s")


def tuning_options(rec: Any) -> Any:
    """The Options instance holding a backend's tuning: the one its config built (whatever attribute
    the plugin keeps it under), else its ``options`` attribute, else any attribute holding an
    instance of its declared ``Options`` class. None, with a warning saying how to expose it, when
    the backend declares tuning fields but no instance can be found (the defaults then apply)."""
    found = getattr(rec, "options", None)
    if found is not None:
        return found
    obj = rec.obj
    found = getattr(obj, "options", None)
    if found is not None:
        return found
    declared = getattr(type(obj), "Options", None)
    if isinstance(declared, type):
        for value in vars(obj).values() if hasattr(obj, "__dict__") else ():
            if isinstance(value, declared):
                return value
        import attrs
        import dataclasses

        names = ({a.name for a in attrs.fields(declared)} if attrs.has(declared) else
                 {f.name for f in dataclasses.fields(declared)} if dataclasses.is_dataclass(declared) else
                 set(getattr(declared, "__annotations__", {})))
        fields = [f for f in TUNING_FIELDS if f in names]
        if fields:
            log.warning(
                f"backend {rec.name!r} declares {', '.join(fields)} in its Options, but rlhooks cannot find its "
                f"Options instance, so the defaults apply; keep the instance as an attribute (e.g. self.options)",
                plugin=rec.name,
            )
    return None


class BackendDispatcher:
    """One backend's queue, worker thread, wait budget and failure bookkeeping."""

    def __init__(self, rec: Component, impls: dict[str, pluggy.HookImpl], on_failure: FailurePolicy) -> None:
        self.rec = rec
        self.on_failure = on_failure
        opts = tuning_options(rec)
        self.queue_size = int(getattr(opts, "queue_size", DEFAULT_QUEUE_SIZE))
        self.flush_timeout_s = float(getattr(opts, "flush_timeout_s", DEFAULT_FLUSH_TIMEOUT_S))
        self.put_timeout_s = float(getattr(opts, "put_timeout_s", DEFAULT_PUT_TIMEOUT_S))
        self.max_wait_s = float(getattr(opts, "max_wait_s", DEFAULT_MAX_WAIT_S))
        self.queue: queue.Queue = queue.Queue(maxsize=self.queue_size)
        self.thread: threading.Thread | None = None
        self.closed = False
        self.hung = False
        self.waited_full = False  # the "queue full" warning was given
        self.waits = 0  # times the producer had to wait for room
        self.waited_s = 0.0  # total time the producer waited for room
        self.dropping = False  # past max_wait_s: logging calls are dropped (and counted)
        self.calls = 0  # calls the backend completed (successfully or not)
        self._pending_raise: BaseException | None = None  # on_error: raise, for the training thread
        self._stopped_by_raise = False
        self._start_lock = threading.Lock()
        self._impls = impls
        # a backend that also steers/contributes metrics keeps its lifecycle in the training thread
        self._queued_lifecycle = not any(h in METRIC_HOOKS for h in impls)
        self.proxy = self._build_proxy()

    # -- the proxy ------------------------------------------------------------------------
    def _build_proxy(self) -> _Proxy:
        proxy = _Proxy(self.rec.label)
        for hook, impl in self._impls.items():
            if hook in LOGGING_HOOKS or (self._queued_lifecycle and hook in ("on_run_start", "on_run_end")):
                continue
            setattr(proxy, hook, impl.function)  # passed through: runs in the training thread
        marks = {h: {k: bool(i.opts.get(k, False)) for k in ("tryfirst", "trylast")} for h, i in self._impls.items()}

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
                    _call(sync_end, {"status": status})
            mark("on_run_end", on_run_end_sync)
        return proxy

    # -- training-thread side -------------------------------------------------------------
    def submit(self, hook: str, kwargs: dict[str, Any]) -> None:
        """Queue one hook call; waits when the queue is full, within the backend's wait budget."""
        impl = self._impls[hook]
        if self.closed:  # after on_run_end: nothing drains the queue any more, so call inline
            if not self.hung:
                _call(impl, kwargs)
            return
        if self.dropping and hook in LOGGING_HOOKS:
            self.rec.dropped += 1
            return
        self._ensure_started()
        item = (hook, impl, kwargs, kwargs.get("step"))
        try:
            self.queue.put_nowait(item)
        except queue.Full:
            self._put_waiting(item, hook)
        self._raise_pending()

    def _put_waiting(self, item: tuple, hook: str) -> None:
        self.waits += 1
        if not self.waited_full:
            self.waited_full = True
            log.warning(
                f"backend {self.rec.name!r} is slower than training: its queue is full "
                f"({self.queue_size} calls), so the training thread waits for it, at most "
                f"max_wait_s={self.max_wait_s:g} s in total for this run before its calls are dropped. "
                f"Raise its queue_size, log less often, or make the backend faster.",
                plugin=self.rec.name, path=self.rec.path, hook=hook,
            )
        budget = self.max_wait_s - self.waited_s
        timeout = min(self.put_timeout_s, max(budget, 0.0))
        t0 = time.monotonic()
        try:
            self.queue.put(item, timeout=timeout)
        except queue.Full:
            self.waited_s += time.monotonic() - t0
            if timeout >= self.put_timeout_s:
                self._declare_hung(f"its queue stayed full for put_timeout_s={self.put_timeout_s:g} s")
            else:
                self._start_dropping(item[3])
            return
        self.waited_s += time.monotonic() - t0

    def _start_dropping(self, step: int | None) -> None:
        self.dropping = True
        self.rec.dropped += 1  # the call that did not fit
        log.error(
            f"backend {self.rec.name!r} is too slow: the training thread waited {self.waited_s:.1f} s in total "
            f"for it (max_wait_s={self.max_wait_s:g}), so its logging calls are dropped from step {step} on "
            f"({self.queue.qsize()} queued calls are still delivered); it still gets on_run_end. "
            f"The dropped calls are counted and reported at run end. Other backends are not affected.",
            plugin=self.rec.name, path=self.rec.path, distribution=self.rec.distribution, step=step,
        )

    def _raise_pending(self) -> None:
        exc, self._pending_raise = self._pending_raise, None
        if exc is not None:
            raise exc  # a PluginError naming the hook that failed; the host's policy re-raises it

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
                    item = ("on_run_end", self._impls["on_run_end"], {"status": status}, None)
                    self.queue.put(item, timeout=self.flush_timeout_s)
                self.queue.put(_STOP, timeout=max(0.0, deadline - time.monotonic()))
            except queue.Full:
                pass
            self.thread.join(max(0.0, deadline - time.monotonic()))
            if self.thread.is_alive():
                if status is not None and "on_run_end" in self._impls:
                    self.rec.dropped += 1  # its final flush never completed: what it held is lost
                self._declare_hung(f"it did not finish its final flush (on_run_end) within "
                                   f"flush_timeout_s={self.flush_timeout_s:g} s")
        self.closed = True
        with _live_lock:
            _live.discard(self)
        self._raise_pending()

    def _declare_hung(self, why: str) -> None:
        self.hung = True
        self.closed = True
        self.rec.disabled = True
        queued = self.queue.qsize()
        self.rec.dropped += queued
        log.error(
            f"backend {self.rec.name!r} looks hung: {why}; {queued} queued call(s) are "
            f"abandoned and it is disabled. Other backends are not affected.",
            plugin=self.rec.name, path=self.rec.path, distribution=self.rec.distribution,
        )
        with _live_lock:
            _live.discard(self)

    # -- worker side ----------------------------------------------------------------------
    def _work(self) -> None:
        rec = self.rec
        BACKEND_THREAD.backend = rec.label  # a run.request_stop(reason) made here names this backend
        while True:
            item = self.queue.get()
            if item is _STOP:
                return
            if isinstance(item, threading.Event):
                item.set()
                continue
            hook, impl, kwargs, step = item
            if (rec.disabled and hook != "on_run_end") or self._stopped_by_raise or self.hung:
                if hook in LOGGING_HOOKS:
                    rec.dropped += 1
                continue  # a disabled backend's queue still drains, so producers never block on it
            try:
                _call(impl, kwargs)
            except Exception as exc:  # noqa: BLE001 - routed through the component's policy
                self._failed(hook, step, exc)
            else:
                rec.failures = 0
            finally:
                self.calls += 1
            if hook == "on_run_start":
                _register_exit_hook()  # after the backend's own start-up registered its handlers

    def _failed(self, hook: str, step: int | None, exc: Exception) -> None:
        if self.rec.on_error == "raise":
            note = f"raised by {self.rec.name}.{hook} on its dispatch thread" + (f" at step {step}" if step else "")
            if hasattr(exc, "add_note"):  # Python >= 3.11; on 3.10 the PluginError still names plugin and hook
                exc.add_note(note)
            self._stopped_by_raise = True
            self._pending_raise = PluginError(self.rec.name, hook, exc, self.rec.distribution)
            return
        with _policy_lock:
            try:
                self.on_failure(self.rec, hook, exc)
            except Exception as policy_exc:  # noqa: BLE001 - the worker thread must keep draining
                log.error("failure policy raised on a dispatch thread", plugin=self.rec.name, hook=hook,
                          error=f"{type(policy_exc).__name__}: {policy_exc}")


def _register_exit_hook() -> None:
    """(Re-)register ``close_all`` with atexit so it runs before every handler registered so far."""
    try:
        atexit.unregister(close_all)
        atexit.register(close_all)
    except RuntimeError:  # interpreter already shutting down
        pass


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


def flush_components(components: Any) -> None:
    """Drain the live backends among ``components`` (at a run's end, before its status is decided):
    one that does not drain within its ``flush_timeout_s`` is declared hung."""
    wanted = {id(c) for c in components}
    for d in live_dispatchers():
        if id(d.rec) in wanted and not d.flush():
            d._declare_hung(f"it did not finish within flush_timeout_s={d.flush_timeout_s:g} s")


def flush_all(timeout: float | None = None) -> bool:
    """Wait until every live backend handled what was queued so far; False if one timed out."""
    return all([d.flush(timeout) for d in live_dispatchers()])
