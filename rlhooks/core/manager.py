"""RunManager: builds a run from a Config and calls hooks with the error policy.

Components are instantiated and registered on one pluggy PluginManager in config order.
Hooks are then called one implementation at a time (still pluggy's hookimpls, argument
subsets and all), so that each plugin's failure can be handled by its own ``on_error``:

* ``raise``   -- abort with a PluginError naming the plugin and its distribution
  (default for samplers and filters, which steer training);
* ``warn``    -- log the failure once with plugin and distribution, carry on, and disable the
  plugin after ``MAX_CONSECUTIVE_FAILURES`` failures in a row (default for observers);
* ``disable`` -- log once and disable the plugin at its first failure.

A failure under ``raise`` lists the frames of the plugin's own code, and suggests ``on_error:
warn`` only where going on would make sense (``_raise_hint``). At registration, public methods
named like a hook but not decorated with ``@hookimpl`` are warned about, and so is a sampler
that cannot save its state (an error with strict plugins).

``RLHOOKS_TRACE=1`` (or ``run.trace_hooks``) logs every hook call with plugin and duration.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping
from numbers import Number
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np
import pluggy
import structlog

from rlhooks.core import dispatch, hookspecs, interrupt, rundir
from rlhooks.core.batch import READ_ONLY_HINT, REWARD, Batch, is_read_only_write
from rlhooks.core.components import FilterDecision, instantiate, union_batch_columns
from rlhooks.core.config import ComponentConfig, Config
from rlhooks.core.data import DataError, DatasetColumns, declared_columns, read_parquet_columns
from rlhooks.core.errors import WARN_HINT, PluginError, RegistryError, RLHooksError
from rlhooks.core.hookspecs import undecorated_hook_methods
from rlhooks.core.learning import LearningState
from rlhooks.core.pregen import PromptStage
from rlhooks.core.registry import Registry
from rlhooks.core.rewards import RewardPipeline
from rlhooks.core.run import RunContext

if TYPE_CHECKING:  # the Sampler base imports torch; only annotations need it here
    from rlhooks.core.sampler import Sampler

log = structlog.get_logger("rlhooks.manager")

MAX_CONSECUTIVE_FAILURES = 3
#: characters kept of one table cell's text before any backend sees it (docs/explanation/guarantees.md):
#: a 1M-character field costs every backend, and metrics.jsonl, no more than this
TABLE_CELL_MAX_CHARS = 10_000


def cap_cells(rows: list[Mapping[str, Any]], limit: int = TABLE_CELL_MAX_CHARS) -> list[Mapping[str, Any]]:
    """``rows`` with text cells longer than ``limit`` cut, ending in a visible ``… [+N chars]``."""
    out: list[Mapping[str, Any]] = []
    for row in rows:  # a table is a few sampled rows, not a batch
        long = [k for k, v in row.items() if isinstance(v, str) and len(v) > limit]
        if long:
            row = dict(row)
            for k in long:
                row[k] = f"{row[k][:limit]}… [+{len(row[k]) - limit} chars]"
        out.append(row)
    return out
#: key of the learning state in RunManager.state_dict() (not a config path)
LEARNING_KEY = "__learning__"
#: key of the saved components' names by config path in RunManager.state_dict(): a resumed run whose
#: lists gained, lost or reordered entries restores each state into the component that saved it
NAMES_KEY = "__names__"
TRACE_ENV = "RLHOOKS_TRACE"


@attrs.define(eq=False)
class Registered:
    """A component registered on the plugin manager, with its error bookkeeping."""

    name: str  # component name as configured, e.g. "console"
    kind: str
    path: str  # config key path, e.g. "backends[0]"
    distribution: str
    obj: Any
    on_error: str
    failures: int = 0  # consecutive
    total_failures: int = 0
    disabled: bool = False
    reported: set[str] = attrs.field(factory=set)  # hooks whose failure was already logged
    #: hooks run on a background thread (core/dispatch.py), which counts successes itself
    deferred: bool = False
    #: failures per hook (every one counted, reported at run end)
    failures_by_hook: dict[str, int] = attrs.field(factory=dict)
    #: logging calls this component never received (disabled, hung, or dropped as too slow)
    dropped: int = 0
    #: the Options instance the config built for it (None for objects an engine registered): the
    #: dispatcher reads a backend's tuning here, whatever attribute the plugin keeps it under
    options: Any = None
    #: from the config (its on_error can be set there); False for objects an engine registered
    configured: bool = True

    @property
    def label(self) -> str:
        return f"{self.name} ({self.path})"


class _Discard:
    """A file that drops what is written: pickling into it checks a state without keeping a copy."""

    def write(self, data: bytes) -> int:
        return len(data)


def _unpicklable(value: Any) -> str | None:
    """Why ``value`` cannot be pickled (a checkpoint holds it as a pickle), or None."""
    import pickle

    try:
        pickle.dump(value, _Discard(), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # noqa: BLE001 - pickling runs the objects' own code: any error means the same
        return f"{type(exc).__name__}: {exc}"
    return None


class HookValidationError(RegistryError):
    """A plugin implements a hook that does not exist or asks for arguments a hook lacks."""


class ContractViolation(RLHooksError):
    """A component returned something its contract does not allow (a bug in the component)."""


class SamplerStateError(RegistryError):
    """Strict plugin mode: a sampler cannot save its state, so a resumed run would not restore it."""


class RunManager:
    """One run's plugin manager, components and typed hook helpers."""

    def __init__(
        self,
        config: Config,
        *,
        registry: Registry | None = None,
        run_dir: str | Path | None = None,
        extra_plugins: Iterable[tuple[str, Any]] = (),
    ) -> None:
        self.config = config
        self.registry = registry if registry is not None else Registry(strict=config.run.strict_plugins or None)
        self.trace = config.run.trace_hooks or os.environ.get(TRACE_ENV, "") not in ("", "0")
        # created by start() (running(): by its lock), so a run that fails to start leaves no empty directory
        self.run_dir = Path(run_dir) if run_dir is not None else Path(config.run.out_dir) / config.run.name
        self.pm = dispatch.PluginManager(hookspecs.PROJECT)  # refuses hook wrappers
        self.pm.add_hookspecs(hookspecs.RLHookSpecs)
        self.components: list[Registered] = []
        self._by_plugin_name: dict[str, Registered] = {}
        self._impl_cache: dict[str, list[tuple[Registered, Callable, tuple[str, ...]]]] = {}
        self._emitted: list[tuple[str, int, str, Any]] = []
        self.context = RunContext(config, self.run_dir, self._emit)
        self.sampler: Sampler | None = None
        #: the status on_run_end got, once the run ended (None before)
        self.final_status: str | None = None
        self.filters: list[tuple[Registered, Any]] = []
        self.prompt_filters: list[tuple[Registered, Any]] = []
        #: the prompt-level learning state (core/learning.py), once the engine attached its data
        self.learning: LearningState | None = None
        self.prompt_stage = PromptStage(self)

        requested = {(c.kind, c.name) for c in config.components()}
        # run.strict_plugins holds also when the engine passed its own registry
        self.registry.check_unrequested(requested, strict=config.run.strict_plugins)

        reward_fns = []
        for comp in config.components():
            if comp.kind == "sampler":
                continue  # built by the engine, which has the data: build_sampler()
            if comp.is_reward_function:
                reward_fns.append(comp)
                continue
            obj = self._instantiate(comp)
            rec = self._register(comp, obj)
            if comp.kind in ("filter", "prompt_filter"):
                if not callable(getattr(obj, "select", None)):
                    kind = comp.kind.replace("_", " ")
                    raise HookValidationError(
                        f"{kind} {comp.name!r} ({comp.distribution}) at {comp.path} has no select(batch) method"
                    )
                (self.filters if comp.kind == "filter" else self.prompt_filters).append((rec, obj))
        for name, obj in extra_plugins:
            self._register_object(name, "plugin", name, "engine", obj, "warn", configured=False)
        self.rewards = RewardPipeline.from_components(reward_fns, timeout_s=config.run.reward_timeout_s)
        self._check_pending()

    # -- building -----------------------------------------------------------------------
    def _instantiate(self, comp: ComponentConfig) -> Any:
        try:
            return instantiate(comp.obj, comp.options)
        except Exception as exc:
            raise _init_error(comp, exc) from exc

    def _register(self, comp: ComponentConfig, obj: Any) -> Registered:
        return self._register_object(comp.name, comp.kind, comp.path, comp.distribution, obj, comp.on_error,
                                     options=comp.options)

    def _register_object(
        self, name: str, kind: str, path: str, dist: str, obj: Any, on_error: str, *, configured: bool = True,
        options: Any = None,
    ) -> Registered:
        rec = Registered(name=name, kind=kind, path=path, distribution=dist, obj=obj, on_error=on_error,
                         configured=configured, options=options)
        plugin_name = f"{path}:{name}"
        try:
            self.pm.register(self._wrap(rec), name=plugin_name)
        except pluggy.PluginValidationError as exc:
            hooks = "" if isinstance(exc, dispatch.HookWrapperError) else (
                f"\n  Hooks are: {', '.join(hookspecs.HOOK_NAMES)}; see docs/hooks.md (`rlhooks hooks`).")
            raise HookValidationError(
                f"{kind} {name!r} ({dist}) at {path} does not match the hook contract: {exc}{hooks}"
            ) from None
        self.components.append(rec)
        self._by_plugin_name[plugin_name] = rec
        self._impl_cache.clear()
        for method, hook in undecorated_hook_methods(obj):
            what = "is named like the hook" if method == hook else "looks like a misspelling of the hook"
            log.warning(
                f"{kind} {name!r} ({dist}) at {path}: method {method!r} {what} {hook!r} but is not decorated "
                f"with @hookimpl, so it is never called; decorate it (from rlhooks import hookimpl) or rename it",
                plugin=name, path=path, method=method, hook=hook,
            )
        return rec

    def _wrap(self, rec: Registered) -> Any:
        """The object registered for a component (backends get a dispatch proxy, see dispatch.py)."""
        return dispatch.wrap(rec, self._failed)

    def _check_pending(self) -> None:
        try:
            self.pm.check_pending()
        except pluggy.PluginValidationError as exc:
            rec = self._by_plugin_name.get(self.pm.get_name(exc.plugin) or "")
            who = f"{rec.kind} {rec.name!r} ({rec.distribution}) at {rec.path}" if rec else "a plugin"
            raise HookValidationError(
                f"{who} implements a hook that does not exist: {exc}\n"
                f"  Known hooks: {', '.join(hookspecs.HOOK_NAMES)}. Check the spelling "
                f"(e.g. on_rewards_computed, not on_reward_computed)."
            ) from None

    def attach_data(self, data: DatasetColumns) -> LearningState:
        """Create the run's learning state over the engine's dataset (once); shared via RunContext.learning."""
        if self.learning is None or len(self.learning) != len(data):
            run = self.config.run
            self.learning = LearningState(
                len(data), metric=run.learning_metric, pass_threshold=run.learning_pass_threshold,
                ema_alpha=run.learning_ema_alpha, lag_discount=run.learning_lag_discount, source_codes=data.source_codes, source_names=data.source_names,
            )
            self.context.learning = self.learning
        return self.learning

    def update_learning(self, step: int, batch: Batch) -> dict[str, float]:
        """Record a generation batch's groups in the learning state (before any filter)."""
        if self.learning is None:
            return {}
        return self.learning.update(batch, step)

    def batch_columns(self) -> frozenset[str] | None:
        """The scored-batch columns the run's components read (``components.batch_columns``; None: every
        column). An engine reading batches from a store reads these, plus what it needs itself."""
        cols = union_batch_columns(rec.obj for rec in self.components)
        if cols is None or self.learning is None:
            return cols
        metric = self.config.run.learning_metric
        return cols | ({"acc", REWARD} if metric == "auto" else {metric})

    def build_sampler(self, data: DatasetColumns, *, batch_size: int, seed: int | None = None) -> Sampler | None:
        """Instantiate the configured sampler over the engine's data and register its hooks."""
        self.attach_data(data)
        comp = self.config.sampler
        if comp is None:
            return None
        data = self._with_declared_columns(comp, data)
        try:
            sampler = comp.obj(comp.options, data, batch_size=batch_size, seed=self.config.run.seed if seed is None else seed)
        except Exception as exc:
            raise _init_error(comp, exc) from exc
        missing = [m for m in ("state_dict", "load_state_dict") if not callable(getattr(sampler, m, None))]
        if missing:
            msg = (
                f"sampler {comp.name!r} ({comp.distribution}) at {comp.path} has no {' or '.join(missing)}(): "
                f"a resumed run will not restore its position or what it learned, and starts it over"
            )
            if self.config.run.strict_plugins or self.registry.strict:
                raise SamplerStateError(
                    f"{msg}.\n  Strict plugin mode makes this an error: implement state_dict() and "
                    f"load_state_dict() (rlhooks.Sampler requires them), or turn run.strict_plugins off."
                )
            log.warning(msg, plugin=comp.name, path=comp.path, missing=missing)
        self._register(comp, sampler)
        self._check_pending()
        self.sampler = sampler
        return sampler

    def _with_declared_columns(self, comp: ComponentConfig, data: DatasetColumns) -> DatasetColumns:
        """``data`` with the columns the sampler class declares (``Sampler.columns``), read once: from
        the parquet file ``data`` came from when the engine did not load them already."""
        who = f"sampler {comp.name!r} ({comp.distribution}) at {comp.path}"
        try:
            names = declared_columns(comp.obj)
        except DataError as exc:
            raise DataError(f"{who}: {exc}") from None
        missing = [n for n in names if n not in data.extra]
        if not missing:
            return data
        origin = Path(data.origin)
        if origin.suffix != ".parquet" or not origin.is_file():
            raise DataError(
                f"{who} declares the dataset columns {missing}, but the engine's dataset ({data.origin}) was built "
                f"without them and is no parquet file to read them from; an engine passes them to DatasetColumns "
                f"(extra=) or reads them with rlhooks.core.data.read_parquet_columns")
        try:
            return attrs.evolve(data, extra={**data.extra, **read_parquet_columns(origin, missing)})
        except DataError as exc:
            raise DataError(f"{who} declares the dataset columns {missing}: {exc}") from None

    # -- calling hooks --------------------------------------------------------------------
    def _impls(self, hook: str) -> list[tuple[Registered, Callable, tuple[str, ...]]]:
        cached = self._impl_cache.get(hook)
        if cached is None:
            impls = getattr(self.pm.hook, hook).get_hookimpls()
            order = {name: i for i, name in enumerate(self._by_plugin_name)}
            # config order; tryfirst/trylast still respected
            impls = sorted(
                impls,
                key=lambda im: (0 if im.tryfirst else 2 if im.trylast else 1, order.get(im.plugin_name, len(order))),
            )
            cached = [
                (self._by_plugin_name.get(im.plugin_name) or self._external(im), im.function, tuple(im.argnames))
                for im in impls
            ]
            self._impl_cache[hook] = cached
        return cached

    def _external(self, impl: Any) -> Registered:
        """A plugin registered on ``pm`` directly (no config entry, the warn policy)."""
        rec = Registered(impl.plugin_name, "plugin", impl.plugin_name, "?", impl.plugin, "warn", configured=False)
        self._by_plugin_name[impl.plugin_name] = rec
        return rec

    def call(self, hook: str, **kwargs: Any) -> list[tuple[Registered, Any]]:
        """Call every enabled implementation of ``hook``; returns (component, result) pairs."""
        return list(self._each(hook, kwargs))

    def _each(self, hook: str, kwargs: Mapping[str, Any], *, skip: set[int] | None = None,
              only: set[int] | None = None) -> Iterator[tuple[Registered, Any]]:
        """Implementations called one at a time, lazily: the caller sees a result before the next call."""
        for rec, fn, argnames in self._impls(hook):
            if (skip is not None and id(rec) in skip) or (only is not None and id(rec) not in only):
                continue
            if rec.disabled and hook != "on_run_end":  # still ends: it closes files, stops its backend thread
                if hook in dispatch.LOGGING_HOOKS:
                    rec.dropped += 1
                continue
            t0 = time.perf_counter() if self.trace else 0.0
            try:
                result = fn(*[kwargs[a] for a in argnames])
            except Exception as exc:  # noqa: BLE001 - routed through the component's policy
                self._failed(rec, hook, exc)
                continue
            if not rec.deferred:  # a queued call has not run yet: its worker resets the count
                rec.failures = 0
            ctx = self.context
            if ctx.stopped_by is None and ctx.stop_requested and ctx._stop_asked_here():
                ctx.stopped_by = rec.label  # the hook that just returned asked to stop
                log.warning(f"{rec.label} requested the run to stop after this step: {self.context.stop_reason}",
                            plugin=rec.name, path=rec.path, reason=self.context.stop_reason)
            if self.trace:
                log.debug("hook", hook=hook, plugin=rec.name, path=rec.path, ms=round((time.perf_counter() - t0) * 1e3, 3))
            yield rec, result

    def _failed(self, rec: Registered, hook: str, exc: BaseException) -> None:
        if isinstance(exc, PluginError) and exc.plugin == rec.name:  # from a dispatch thread: its own hook
            hook, exc = exc.hook, exc.error
        rec.failures += 1
        rec.total_failures += 1
        rec.failures_by_hook[hook] = rec.failures_by_hook.get(hook, 0) + 1
        if rec.on_error == "raise":
            raise PluginError(
                rec.name, hook, exc, rec.distribution, frames=plugin_frames(exc, rec.obj, hook), hint=_raise_hint(rec, exc)
            ) from exc
        if hook not in rec.reported:
            rec.reported.add(hook)
            log.error(
                f"plugin {rec.name!r} failed in {hook}; the run goes on without it",
                plugin=rec.name, path=rec.path, distribution=rec.distribution,
                # an OSError (disk full, a lost mount) is the environment, not a bug: no traceback
                error=f"{type(exc).__name__}: {exc}", exc_info=None if isinstance(exc, OSError) else exc,
                **({"hint": READ_ONLY_HINT} if is_read_only_write(exc) else {}),
            )
        if rec.on_error == "disable" or rec.failures >= MAX_CONSECUTIVE_FAILURES:
            rec.disabled = True
            log.error(
                f"plugin {rec.name!r} disabled after {rec.failures} consecutive failure(s)",
                plugin=rec.name, path=rec.path, distribution=rec.distribution,
            )

    def _metrics_hook(self, hook: str, live: dict[str, Any] | None = None, **kwargs: Any) -> dict[str, float]:
        """Merged metrics of every implementation; ``live`` (if given) is updated after each one."""
        merged: dict[str, float] = {}
        for rec, result in self._each(hook, kwargs):
            if result is None:
                continue
            try:
                new = merge_metrics({}, result)
            except TypeError as exc:
                self._failed(rec, hook, exc)
                continue
            merged.update(new)
            if live is not None:
                live.update(new)
        return merged

    # Typed helpers, one per hook, in firing order.
    def start(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.call("on_run_start", run=self.context)
        self.dispatch_emitted()

    def batch_sampled(self, step: int, batch: Batch) -> dict[str, float]:
        self.context.step = step
        return self._metrics_hook("on_batch_sampled", step=step, batch=batch)

    def rewards_computed(self, step: int, batch: Batch) -> dict[str, float]:
        self.context.step = step
        return self._metrics_hook("on_rewards_computed", step=step, batch=batch)

    def step_end(self, step: int, batch: Batch, metrics: Mapping[str, float]) -> dict[str, float]:
        self.context.step = step
        # a read-only view that grows as implementations return: a later (e.g. trylast) one sees
        # what earlier ones returned, so alerts can watch any plugin's metrics
        live = dict(metrics)
        return self._metrics_hook("on_step_end", live=live, step=step, batch=batch, metrics=MappingProxyType(live))

    def validation_end(self, step: int, metrics: Mapping[str, float],
                       per_source: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
        """``on_validation_end``; the results also stay on ``RunContext.validation``. Returns the
        metrics the implementations returned (the engine merges them into the step's)."""
        self.context.step = step
        frozen = MappingProxyType({src: MappingProxyType(dict(m)) for src, m in per_source.items()})
        view = MappingProxyType(dict(metrics))
        self.context.validation = {"step": step, "metrics": view, "per_source": frozen}
        return self._metrics_hook("on_validation_end", step=step, metrics=view, per_source=frozen)

    def checkpoint_saved(self, step: int, checkpoint_dir: str | Path) -> None:
        """``on_save_checkpoint``, after the engine wrote its checkpoint (``state_dict()`` included)."""
        self.call("on_save_checkpoint", step=step, checkpoint_dir=Path(checkpoint_dir))

    def checkpoint_loaded(self, step: int, checkpoint_dir: str | Path) -> None:
        """``on_load_checkpoint``, after ``load_state_dict`` restored every component (before ``on_run_start``)."""
        self.call("on_load_checkpoint", step=step, checkpoint_dir=Path(checkpoint_dir))

    @property
    def stop_requested(self) -> bool:
        """A plugin called ``run.request_stop(reason)``: the engine saves a checkpoint and ends the run."""
        return self.context.stop_requested

    def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        self.call("log_metrics", step=step, metrics=MappingProxyType(dict(metrics)))

    def log_table(self, step: int, name: str, rows: list[dict[str, Any]]) -> None:
        self.call("log_table", step=step, name=name, rows=cap_cells(rows))

    def log_histogram(self, step: int, name: str, values: np.ndarray) -> None:
        self.call("log_histogram", step=step, name=name, values=values)

    def end(self, status: str) -> str:
        """End every component; returns the run's final status.

        Components that state the outcome (``records_outcome = True`` on the plugin: the JSONL
        backend's ``run_end``, the console's "run ended" line, reward_monitor.json) end last, with
        the status as it stands once every other backend finished its final flush: a backend that
        failed or hung there lost data, so the run is "failed" in every place that states it.
        """
        self.dispatch_emitted()
        recorders = {id(rec) for rec, _, _ in self._impls("on_run_end") if getattr(rec.obj, "records_outcome", False)}
        list(self._each("on_run_end", {"status": status}, skip=recorders))
        if status in ("success", "stopped") and self.lost_data():
            status = "failed"
        self.final_status = status
        list(self._each("on_run_end", {"status": status}, only=recorders))
        if status in ("success", "stopped") and self.lost_data():  # a recorder itself failed: its record is missing
            status = self.final_status = "failed"
        return status

    @contextlib.contextmanager
    def running(self) -> Iterator[RunManager]:
        """on_run_start on entry; on_run_end with success/stopped/failed/interrupted on exit, always.

        A run whose body returns after a plugin's ``run.request_stop(reason)`` ends ``"stopped"``.

        The run directory is locked for the duration (core/rundir.py). A run whose training
        succeeded but whose logging backends lost data (failed calls, disabled, hung, or dropped
        as too slow) ends "failed", never "success": the backends are drained first, so their
        last failures count. Every failure is reported per component at the end.
        """
        status = "failed"
        with rundir.locked(self.run_dir, "rlhooks run"):
            try:
                self.start()
                yield self
                status = "stopped" if self.context.stop_requested else "success"
            except KeyboardInterrupt:  # Ctrl-C, and SIGTERM through core/interrupt.py
                status = "interrupted"
                raise
            finally:
                with interrupt.deferred():  # a SIGTERM now waits until the run has ended
                    if status in ("success", "stopped"):
                        dispatch.flush_components(self.components)
                        if self.lost_data():
                            status = "failed"
                    self.final_status = status
                    try:
                        interrupt.note_outcome(self.end(status))
                    finally:
                        self.report_failures()

    def lost_data(self) -> list[str]:
        """One line per logging backend that lost data this run (empty when none did)."""
        out = []
        for rec in self.components:
            if rec.kind != "backend":
                continue
            failed = rec.total_failures  # on_run_end too: a final flush that failed lost what it held
            if failed or rec.dropped:
                out.append(f"{rec.label}: {failed} failed call(s), {rec.dropped} call(s) not delivered"
                           + (", disabled" if rec.disabled else ""))
        return out

    def failure_summary(self) -> dict[str, dict[str, Any]]:
        """``{component label: {failures, by_hook, dropped, disabled}}`` for every component with a
        failure or a call it did not receive (written to summary.json by the simulator)."""
        return {
            rec.label: {"failures": rec.total_failures, "by_hook": dict(rec.failures_by_hook),
                        "dropped": rec.dropped, "disabled": rec.disabled}
            for rec in self.components if rec.total_failures or rec.dropped
        }

    def report_failures(self) -> None:
        """Log one line per component that failed or missed calls during the run."""
        for label, info in self.failure_summary().items():
            hooks = ", ".join(f"{h} x{n}" for h, n in info["by_hook"].items()) or "none"
            log.warning(
                f"plugin {label} failed {info['failures']} time(s) this run ({hooks}); "
                f"{info['dropped']} call(s) not delivered" + ("; it was disabled" if info["disabled"] else ""),
                plugin=label, failures=info["failures"], dropped=info["dropped"],
            )

    def _emit(self, hook: str, step: int, name: str, payload: Any) -> None:
        self._emitted.append((hook, step, name, payload))

    def dispatch_emitted(self) -> None:
        """Send tables and histograms queued through RunContext to the backends."""
        emitted, self._emitted = self._emitted, []
        for hook, step, name, payload in emitted:
            if hook == "log_table":
                self.call("log_table", step=step, name=name, rows=cap_cells(payload))
            else:
                self.call("log_histogram", step=step, name=name, values=payload)

    # -- filters --------------------------------------------------------------------------
    def apply_filters(self, batch: Batch, filters: list[tuple[Registered, Any]] | None = None) -> tuple[np.ndarray, dict[str, float]]:
        """AND of every filter's keep mask; additive filter metrics summed (``filters``: default the trajectory filters)."""
        keep = np.ones(len(batch), dtype=bool)
        metrics: dict[str, float] = {}
        for rec, flt in self.filters if filters is None else filters:
            if rec.disabled:
                continue
            try:
                decision = flt.select(batch)
                if isinstance(decision, FilterDecision):
                    mask, extra = decision.keep, decision.metrics
                else:
                    mask, extra = decision, {}
                mask = np.asarray(mask)
                if mask.dtype != bool or mask.shape != (len(batch),):
                    raise ContractViolation(
                        f"select() must return a bool mask of shape ({len(batch)},), got {mask.dtype} {mask.shape}"
                    )
                if len(batch) and "uid" in batch:
                    g = batch.groups
                    kept_rows = g.sum(mask)
                    if np.any((kept_rows > 0) & (kept_rows < g.sizes)):
                        raise ContractViolation("select() kept only part of a group; a filter must keep or drop whole groups")
            except Exception as exc:  # noqa: BLE001
                self._failed(rec, "select", exc)
                continue
            keep &= mask
            for k, v in extra.items():
                metrics[k] = metrics.get(k, 0.0) + float(v)
        return keep, metrics

    # -- state ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """State of every component that has one, keyed by config path (their names under
        ``NAMES_KEY``); the run's learning state and pre-generation counters under ``LEARNING_KEY``."""
        stateful = [rec for rec in self.components if callable(getattr(rec.obj, "state_dict", None))]
        # a backend's state is read once its dispatch thread handled what was queued before the checkpoint
        dispatch.flush_components([rec for rec in stateful if rec.deferred])
        out: dict[str, Any] = {}
        for rec in stateful:
            out[rec.path] = state = rec.obj.state_dict()
            problem = _unpicklable(state)
            if problem:  # here, naming the plugin, not as a bare TypeError halfway through writing a checkpoint
                raise RLHooksError(
                    f"{rec.kind} {rec.name!r} ({rec.distribution}) at {rec.path}: its state_dict() returned a value "
                    f"that cannot be pickled ({problem}), so no checkpoint can hold it and none is written. Return "
                    f"plain data from state_dict() (numbers, strings, lists, dicts, numpy arrays, tensors), not a "
                    f"lock, a file, a thread or a client; the contract kit's test_state_dict_round_trip checks it")
        out[NAMES_KEY] = {rec.path: rec.name for rec in stateful}
        if self.learning is not None:
            out[LEARNING_KEY] = {"learning": self.learning.state_dict(), "prompt_stage": self.prompt_stage.state_dict()}
        return out

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        by_path = {rec.path: rec for rec in self.components}
        names = state.get(NAMES_KEY)  # absent from states saved before it: matched by config path alone
        for path, sub in state.items():
            if path == NAMES_KEY:
                continue
            if path == LEARNING_KEY:
                if self.learning is None:
                    log.warning("saved learning state ignored: this run has no dataset attached yet")
                    continue
                try:
                    self.learning.load_state_dict(sub["learning"])
                except ValueError as exc:  # another dataset: an rlhooks error the CLIs report without a traceback
                    raise RLHooksError(f"cannot resume the prompt-level learning state ({LEARNING_KEY}): {exc}") from None
                self.prompt_stage.load_state_dict(sub.get("prompt_stage", {}))
                continue
            rec = by_path.get(path) if names is None else self._saved_by(path, names.get(path), by_path)
            if rec is None:
                log.warning("saved state for a component that is not in this run; ignored", path=path,
                            plugin=None if names is None else names.get(path))
                continue
            load = getattr(rec.obj, "load_state_dict", None)
            if not callable(load):
                raise RLHooksError(
                    f"{rec.kind} {rec.name!r} ({rec.distribution}) at {rec.path} saved its state_dict() but has no "
                    f"load_state_dict(state): add it (the inverse of state_dict) so a resumed run restores it")
            load(sub)

    def _saved_by(self, path: str, name: str | None, by_path: Mapping[str, Registered]) -> Registered | None:
        """The component that saved the state found at config ``path`` under ``name``: the one at that
        path when it has that name, else the only one of that name in the same list (it moved there)."""
        rec = by_path.get(path)
        if name is None or (rec is not None and rec.name == name):
            return rec
        section = path.split("[", 1)[0]
        moved = [r for r in self.components if r.name == name and r.path.split("[", 1)[0] == section]
        if len(moved) != 1:
            return None
        log.info(f"the state {name!r} saved at {path} is restored at {moved[0].path} (the list changed)",
                 plugin=name, saved_at=path, path=moved[0].path)
        return moved[0]


# -- plugin mistakes: what the error or warning says ---------------------------------------------
#: steering components: going on without them (on_error: warn) would train on unsteered data
_STEERING = ("sampler", "filter", "prompt_filter")
_MAX_FRAMES = 6


def _raise_hint(rec: Registered, exc: BaseException) -> str | None:
    """What to do about a failure under on_error: raise, or None where no setting would help."""
    if isinstance(exc, ContractViolation):
        return f"a bug in {rec.distribution}: report it there; no on_error setting makes this result usable"
    if is_read_only_write(exc):  # a write into the batch it was handed: a bug, whatever on_error says
        return f"{READ_ONLY_HINT}; a bug in {rec.distribution}"
    if rec.kind in _STEERING:
        return None  # on_error: warn would train on batches this component did not steer
    if not rec.configured:
        return None  # registered by the engine: no config entry to set on_error on
    return WARN_HINT.replace("for this component", f"at {rec.path}")


def _init_error(comp: ComponentConfig, exc: BaseException) -> PluginError:
    """A component could not be built: on_error is about hooks at run time, so no hint about it."""
    return PluginError(
        comp.name, "__init__", exc, comp.distribution, frames=plugin_frames(exc, comp.obj, "__init__"),
        hint=f"check the options at {comp.path}; a component that cannot be built stops the run whatever its on_error",
    )


def _code_root(obj: Any) -> str | None:
    """The directory (or file) holding a plugin's own code: its top-level package, or for
    rlhooks' built-ins the rlhooks/plugins directory (rlhooks' core is not the plugin's code)."""
    if inspect.ismodule(obj):  # a module plugin (an entry point naming a module)
        module = obj
    else:
        target = obj if inspect.isclass(obj) or inspect.isroutine(obj) else type(obj)
        module = sys.modules.get(getattr(target, "__module__", "") or "")
    path = getattr(module, "__file__", None)
    if module is None or not path:
        return None
    top = module.__name__.split(".")[0]
    if top == "rlhooks":
        parts = module.__name__.split(".")
        return os.path.dirname(path) if parts[:2] != ["rlhooks", "plugins"] else os.path.join(
            os.path.dirname(sys.modules["rlhooks"].__file__ or ""), "plugins")
    top_module = sys.modules.get(top)
    top_file = getattr(top_module, "__file__", None)
    if top_file and os.path.basename(top_file) == "__init__.py":
        return os.path.dirname(top_file)
    return path


def plugin_frames(exc: BaseException, obj: Any, hook: str) -> list[str]:
    """``file:line in function: source`` of the traceback frames in the plugin's own code,
    innermost last. Without such frames (it returned something invalid), where the hook is defined."""
    root = _code_root(obj)
    if root is None:
        return []
    frames = [
        f for f in traceback.extract_tb(exc.__traceback__)
        if f.filename == root or f.filename.startswith(root.rstrip(os.sep) + os.sep)
    ]
    if frames:
        return [f"{f.filename}:{f.lineno} in {f.name}" + (f": {f.line.strip()}" if f.line else "")
                for f in frames[-_MAX_FRAMES:]]
    fn = getattr(obj, hook, None) if hook != "__init__" else None
    try:
        fn = inspect.unwrap(fn) if fn is not None else None
        file, line = inspect.getsourcefile(fn), inspect.getsourcelines(fn)[1]  # type: ignore[arg-type]
    except (TypeError, OSError):
        return []
    return [f"{file}:{line} in {hook} (the implementation that returned it)"]


_PLAIN_NUMBERS = (float, int)


def merge_metrics(into: dict[str, float], new: Any) -> dict[str, float]:
    """Merge a hook's metrics dict, checking it is a flat mapping of names to numbers."""
    if type(new) is not dict and not isinstance(new, Mapping):
        raise TypeError(f"a metrics hook must return a dict or None, got {type(new).__name__}")
    for k, v in new.items():
        if type(v) in _PLAIN_NUMBERS and type(k) is str:  # the common case, without ABC checks
            into[k] = v
            continue
        if not isinstance(k, str):
            raise TypeError(f"metric names must be strings, got {k!r}")
        if isinstance(v, np.generic):
            v = v.item()
        if not isinstance(v, Number) or isinstance(v, complex):
            raise TypeError(f"metric {k!r} must be a number, got {type(v).__name__}")
        into[k] = v
    return into
