"""pytest plugin (the ``rlhooks`` pytest11 entry point) shipping the contract-test kit.

* assertion rewriting for the kit's modules (registered when rlhooks.testing is imported, which
  importing this module does first);
* ``xfail_checks = {"check_name": "reason"}`` on a contract subclass -> strict xfail markers
  (a key may name one parametrized case: ``"test_x[param-id]"``); unknown names are an error;
* the ``rlhooks_run_factory`` fixture.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import rlhooks
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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
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


@pytest.fixture
def rlhooks_run_factory(tmp_path: Path) -> Callable[..., RecordingRun]:
    """``factory(name="run", **run_options) -> RecordingRun`` over a fresh directory under tmp_path."""

    def make(name: str = "run", **run: Any) -> RecordingRun:
        return make_run_context(tmp_path / name, name=name, **run)

    return make
