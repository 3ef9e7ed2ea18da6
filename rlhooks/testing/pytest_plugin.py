"""pytest plugin (the ``rlhooks`` pytest11 entry point) shipping the contract-test kit.

* assertion rewriting for the kit's modules (registered when rlhooks.testing is imported, which
  importing this module does first);
* ``xfail_checks = {"check_name": "reason"}`` on a contract subclass -> strict xfail markers
  (a key may name one parametrized case: ``"test_x[param-id]"``); unknown names are an error;
* checks of hooks the plugin under test does not implement are deselected when the contract
  class knows the plugin at collection time (``hooks_under_test``), and the summary says so;
* the ``rlhooks_run_factory`` fixture.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import rlhooks
from rlhooks.testing.contracts import hook_checked_by
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
    """False for a hook check whose plugin (known from the test's parameters) lacks that hook."""
    cls = getattr(item, "cls", None)
    hooks_under_test = getattr(cls, "hooks_under_test", None) if cls is not None else None
    hook = hook_checked_by(item.name) if hooks_under_test is not None else None
    if hook is None:
        return True
    callspec = getattr(item, "callspec", None)
    hooks = hooks_under_test(dict(callspec.params) if callspec is not None else {})
    return hooks is None or hook in hooks


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
            f"rlhooks contract kit: {n} deselected = checks of hooks the plugins under test do not implement "
            f"(known from plugin_class / hooks_under_test); nothing was left out of what they do implement"
        )


@pytest.fixture
def rlhooks_run_factory(tmp_path: Path) -> Callable[..., RecordingRun]:
    """``factory(name="run", **run_options) -> RecordingRun`` over a fresh directory under tmp_path."""

    def make(name: str = "run", **run: Any) -> RecordingRun:
        return make_run_context(tmp_path / name, name=name, **run)

    return make
