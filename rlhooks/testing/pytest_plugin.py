"""pytest plugin (the ``rlhooks`` pytest11 entry point) shipping the contract-test kit.

* assertion rewriting for the kit's modules (registered when rlhooks.testing is imported, which
  importing this module does first);
* ``xfail_checks = {"check_name": "reason"}`` on a contract subclass -> strict xfail markers
  (a key may name one parametrized case: ``"test_x[param-id]"``); unknown names are an error;
* checks that do not apply to the plugin under test (its hooks, its ``@requires`` capabilities)
  are deselected when the contract class knows the plugin at collection time
  (``plugin_class`` / ``component_under_test``), and the summary says so;
* the ``rlhooks_run_factory`` fixture.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import rlhooks
from rlhooks.core.hookspecs import HOOK_NAMES
from rlhooks.testing.contracts import ENTRY_POINT, KNOWN_AT_COLLECTION, capabilities, gives_entry_point, required_by
from rlhooks.testing.factories import RecordingRun, make_run_context


def pytest_report_header(config: pytest.Config) -> str:
    return f"rlhooks contract kit: rlhooks {rlhooks.__version__}"


def _xfail_reason(item: pytest.Item, checks: Any) -> str | None:
    return checks.get(item.name) or checks.get(getattr(item, "originalname", item.name))


def _validate_xfail_checks(cls: type, checks: Any) -> None:
    known = sorted(n for n in dir(cls) if n.startswith("test_"))
    for key in checks:
        base = str(key).split("[", 1)[0]
        if base not in known:
            close = difflib.get_close_matches(base, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise pytest.UsageError(
                f"{cls.__module__}.{cls.__qualname__}.xfail_checks names {key!r}, which is not a check of this "
                f"contract{hint}"
            )


def _applies(item: pytest.Item) -> bool:
    """False for a check that does not apply to the plugin the suite names at collection time
    (``component_under_test`` / ``hooks_under_test`` of the test's parameters): a check of a hook it
    does not implement, or one marked ``@requires`` a capability it lacks; and for the entry-point
    checks of a suite without an ``entry_point_name`` fixture. When the suite names no plugin, every
    check is kept (it skips at run time)."""
    cls = getattr(item, "cls", None)
    if cls is None or not hasattr(cls, "component_under_test"):
        return True
    needs = required_by(getattr(item, "function", None), item.name)
    if not needs:
        return True
    callspec = getattr(item, "callspec", None)
    params = dict(callspec.params) if callspec is not None else {}
    known = cls.component_under_test(params)
    hooks = cls.hooks_under_test(params)
    for need in needs:
        if need == KNOWN_AT_COLLECTION:
            if known is None:
                return False
        elif need == ENTRY_POINT:
            if not gives_entry_point(cls):
                return False
        elif need in HOOK_NAMES:
            if hooks is not None and need not in hooks:
                return False
        elif known is not None and need not in capabilities(known):
            return False
    return True


_DESELECTED = pytest.StashKey[int]()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    keep = [_applies(item) for item in items]
    if not all(keep):
        config.stash[_DESELECTED] = config.stash.get(_DESELECTED, 0) + keep.count(False)
        config.hook.pytest_deselected(items=[item for item, k in zip(items, keep) if not k])
        items[:] = [item for item, k in zip(items, keep) if k]
    validated: set[type] = set()
    for item in items:
        cls = getattr(item, "cls", None)
        checks = getattr(cls, "xfail_checks", None) if cls is not None else None
        if not checks:
            continue
        if cls not in validated:
            _validate_xfail_checks(cls, checks)
            validated.add(cls)
        reason = _xfail_reason(item, checks)
        if reason:
            item.add_marker(pytest.mark.xfail(reason=f"declared in xfail_checks: {reason}", strict=True))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """Say why the kit deselected checks: pytest's "N deselected" alone reads like a filter the user set."""
    n = config.stash.get(_DESELECTED, 0)
    if n:
        terminalreporter.write_line(
            f"rlhooks contract kit: {n} deselected = checks that do not apply to the plugins under test (hooks they "
            f"do not implement; state_dict, score_batch or Options they lack), known from plugin_class / "
            f"component_under_test, and entry-point checks of suites without an entry_point_name fixture; nothing "
            f"was left out of what they do have"
        )


@pytest.fixture
def rlhooks_run_factory(tmp_path: Path) -> Callable[..., RecordingRun]:
    """``factory(name="run", **run_options) -> RecordingRun`` over a fresh directory under tmp_path."""

    def make(name: str = "run", **run: Any) -> RecordingRun:
        return make_run_context(tmp_path / name, name=name, **run)

    return make
