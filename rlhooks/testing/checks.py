"""Plumbing of the contract kit: a one-plugin harness on a real pluggy manager, and value checks.

Each check fails with a message that says which plugin, which hook and what to change.
"""

from __future__ import annotations

import copy
import inspect
import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from numbers import Number, Real
from typing import Any

import numpy as np
import pluggy

from rlhooks.core import hookspecs
from rlhooks.core.batch import READ_ONLY_HINT, is_read_only_write
from rlhooks.core.dispatch import PluginManager
from rlhooks.core.hookspecs import HOOK_NAMES

PLUGIN_NAME = "plugin-under-test"
STATUSES = ("success", "stopped", "failed", "interrupted")


def spec_argnames() -> dict[str, tuple[str, ...]]:
    """Each hook's argument names, read from the spec functions."""
    out = {}
    for name in HOOK_NAMES:
        sig = inspect.signature(getattr(hookspecs.RLHookSpecs, name))
        out[name] = tuple(p for p in sig.parameters if p != "self")
    return out


def new_plugin_manager() -> pluggy.PluginManager:
    """The plugin manager runs use: hook wrappers are refused at registration, as in a run."""
    pm = PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs.RLHookSpecs)
    return pm


def describe(plugin: Any) -> str:
    cls = plugin if inspect.isclass(plugin) or inspect.ismodule(plugin) else type(plugin)
    return f"{getattr(cls, '__module__', '?')}.{getattr(cls, '__qualname__', getattr(cls, '__name__', repr(cls)))}"


class PluginHarness:
    """One plugin registered on its own PluginManager with rlhooks' specs; hooks called through pluggy.

    Registration errors (unknown hook, bad argument names) surface as assertion failures that
    name the plugin. ``call`` returns the plugin's result (None when it returned None or does not
    implement the hook).
    """

    def __init__(self, plugin: Any, run: Any = None) -> None:
        self.plugin = plugin
        self.run = run
        self.pm = new_plugin_manager()
        try:
            self.pm.register(plugin, name=PLUGIN_NAME)
            self.pm.check_pending()
        except pluggy.PluginValidationError as exc:
            raise AssertionError(
                f"{describe(plugin)} does not register against rlhooks' hook specs: {exc}\n"
                f"  Hooks are: {', '.join(HOOK_NAMES)} (rlhooks/core/hookspecs.py); an implementation "
                f"may take any subset of its hook's arguments, by the spec's names."
            ) from None
        self.hooks: frozenset[str] = frozenset(
            caller.name for caller in (self.pm.get_hookcallers(plugin) or [])
        )
        self.started = False
        self.ended = False
        self.calls: list[str] = []

    def implements(self, hook: str) -> bool:
        return hook in self.hooks

    def call(self, hook: str, **kwargs: Any) -> Any:
        self.calls.append(hook)
        results = getattr(self.pm.hook, hook)(**kwargs)
        return results[0] if results else None

    def start(self) -> Any:
        self.started = True
        return self.call("on_run_start", run=self.run)

    def end(self, status: str = "success") -> Any:
        self.ended = True
        return self.call("on_run_end", status=status)

    def close(self) -> None:
        """Teardown: end a started run so files and threads are released."""
        if self.started and not self.ended:
            try:
                self.end("success")
            except Exception:  # noqa: BLE001 - the test itself already reported the failure
                pass
        self.pm.unregister(name=PLUGIN_NAME)


def hook_like_undecorated(plugin: Any, registered: frozenset[str]) -> list[str]:
    """Public methods named like a hook (or a near-miss spelling) that pluggy did not register
    (the rule RunManager warns with at run time: ``hookspecs.undecorated_hook_methods``)."""
    problems = []
    for attr, hook in hookspecs.undecorated_hook_methods(plugin):
        if attr in registered:
            continue
        if attr == hook:
            problems.append(
                f"method {attr!r} is named like a hook but is not registered: decorate it with "
                f"@rlhooks.hookimpl (import hookimpl from rlhooks, not from pluggy)"
            )
        else:
            problems.append(f"method {attr!r} looks like a misspelling of the hook {hook!r}")
    return problems


def tree(root: Any, skip: Any = None) -> dict[str, tuple[int, int]]:
    """``{relative path: (size, mtime_ns)}`` of every file under ``root`` (``skip``: a subtree left out)."""
    from pathlib import Path

    root = Path(root)
    out: dict[str, tuple[int, int]] = {}
    if not root.exists():
        return out
    for p in root.rglob("*"):
        if skip is not None and (p == Path(skip) or Path(skip) in p.parents):
            continue
        if p.is_file():
            st = p.stat()
            out[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return out


def check_metrics_result(result: Any, where: str) -> None:
    """A metrics hook returns None or a flat dict of str -> real number."""
    if result is None:
        return
    assert isinstance(result, Mapping), (
        f"{where} must return None or a dict of metric name -> number, got {type(result).__name__}: {result!r:.200}"
    )
    bad = []
    for k, v in result.items():
        if not isinstance(k, str) or not k:
            bad.append(f"key {k!r} is not a non-empty str")
        elif isinstance(v, np.generic) and np.issubdtype(type(v), np.number) and not np.iscomplexobj(v):
            continue
        elif not isinstance(v, Real):
            bad.append(f"{k!r}: {type(v).__name__} {v!r:.80} is not a real number (nested dicts and arrays are not allowed)")
    assert not bad, f"{where} returned a malformed metrics dict:\n  " + "\n  ".join(bad)


def check_none_result(result: Any, where: str) -> None:
    assert result is None, f"{where} must return None, got {type(result).__name__}: {result!r:.200}"


ALLOWED_CELL_TYPES = (str, int, float, bool, type(None), np.integer, np.floating, np.bool_, np.str_)


def check_table_rows(rows: Any, where: str) -> None:
    """Rows of a table: a list of dicts with str keys and scalar values (str, int, float, bool, None)."""
    assert isinstance(rows, list), f"{where}: rows must be a list of dicts, got {type(rows).__name__}"
    for i, row in enumerate(rows):
        assert isinstance(row, Mapping), f"{where}: row {i} must be a dict, got {type(row).__name__}"
        for k, v in row.items():
            assert isinstance(k, str), f"{where}: row {i} has a non-str key {k!r}"
            assert isinstance(v, ALLOWED_CELL_TYPES), (
                f"{where}: row {i} column {k!r} is {type(v).__name__}; table cells are str, int, float, bool or None"
            )


def check_histogram(values: Any, where: str) -> None:
    arr = np.asarray(values)
    assert arr.ndim == 1, f"{where}: histogram values must be 1-D, got shape {arr.shape}"
    assert arr.dtype.kind in "fiu", f"{where}: histogram values must be numeric, got dtype {arr.dtype}"
    assert np.all(np.isfinite(arr)), f"{where}: histogram values must be finite"


def check_emitted(run: Any, where: str) -> None:
    """Tables and histograms a plugin emitted through a RecordingRun are well formed."""
    for step, name, rows in getattr(run, "tables", ()):
        assert isinstance(name, str) and name, f"{where}: run.log_table got a table name {name!r}"
        assert isinstance(step, (int, np.integer)), f"{where}: table {name!r} has a non-int step {step!r}"
        check_table_rows(rows, f"{where}: table {name!r}")
    for step, name, values in getattr(run, "histograms", ()):
        assert isinstance(name, str) and name, f"{where}: run.log_histogram got a name {name!r}"
        check_histogram(values, f"{where}: histogram {name!r}")


def frozen_copy(value: Any) -> Any:
    return copy.deepcopy(value)


def values_equal(sent: Any, got: Any, rel: float = 1e-5) -> bool:
    """A sent value against what a backend read back (numbers approximately, NaN equal to NaN)."""
    if sent is None:
        return got is None or got == "" or (isinstance(got, float) and math.isnan(got))
    if isinstance(sent, (bool, np.bool_)):
        if isinstance(got, str):
            return got.strip().lower() in (("true", "1") if sent else ("false", "0"))
        return isinstance(got, (Number, np.number)) and float(got) == float(sent)
    if isinstance(sent, (Number, np.number)):
        try:
            g = float(got)
        except (TypeError, ValueError):
            return False
        s = float(sent)
        if math.isnan(s) or math.isnan(g):
            return math.isnan(s) and math.isnan(g)
        return math.isclose(s, g, rel_tol=rel, abs_tol=1e-9)
    return str(sent) == str(got)


def dict_differences(sent: Mapping[str, Any], got: Mapping[str, Any]) -> Iterator[str]:
    for k, v in sent.items():
        if k not in got:
            yield f"{k!r} missing"
        elif not values_equal(v, got[k]):
            yield f"{k!r}: sent {v!r}, read back {got[k]!r}"


@contextmanager
def refusing_batch_writes(where: str) -> Iterator[None]:
    """Batch columns are read-only views, so an in-place write raises numpy's ValueError inside the
    plugin: report it as the mutation it is (as a run does), not as a crash."""
    try:
        yield
    except ValueError as exc:
        if not is_read_only_write(exc):
            raise
        raise AssertionError(
            f"{where} mutated its batch (it must treat it as read-only): it wrote into a column "
            f"(numpy: {exc}); {READ_ONLY_HINT}"
        ) from exc
