"""BackendContract calls a backend the way a run's dispatch does: on the backend's own thread.

A planted bug: an sqlite3 connection opened in ``__init__`` (the training thread) works when every
call comes from one thread, and fails in a real run, where the logging hooks run on the backend's
dispatch thread. The same backend opening it in ``on_run_start`` (which runs on that thread) passes.
"""

from __future__ import annotations

import pytest

import torch  # noqa: F401  - imported before pytester (see tests/contracts/test_kit.py)

pytest_plugins = ["pytester"]

SQLITE_BACKENDS = '''
import json
import sqlite3
import pytest
from rlhooks import hookimpl
from rlhooks.testing import BackendContract, ReadBack


class _Base:
    def _open(self, run_dir):
        self.path = run_dir / "m.sqlite"
        self.db = sqlite3.connect(self.path)
        self.db.execute("CREATE TABLE m (step INTEGER, name TEXT, value TEXT)")  # JSON text: NaN survives

    @hookimpl
    def log_metrics(self, step, metrics):
        self.db.executemany("INSERT INTO m VALUES (?, ?, ?)", [(step, k, json.dumps(float(v))) for k, v in metrics.items()])

    @hookimpl
    def on_run_end(self):
        self.db.commit()
        self.db.close()


class OpensInInit(_Base):
    def __init__(self):
        import rlhooks.testing
        self.run_dir = rlhooks.testing.RUN_DIR_FOR_TEST
        self._open(self.run_dir)


class OpensInRunStart(_Base):
    @hookimpl
    def on_run_start(self, run):
        self._open(run.run_dir)


def _read(path):
    out = {}
    with sqlite3.connect(path) as db:
        for step, name, value in db.execute("SELECT step, name, value FROM m"):
            out.setdefault(step, {})[name] = json.loads(value)
    return out


class _Contract(BackendContract):
    def read_back(self, plugin, run_dir):
        return ReadBack(metrics=_read(plugin.path))


class TestOpensInInit(_Contract):
    @pytest.fixture
    def component(self, run_dir):
        import rlhooks.testing
        rlhooks.testing.RUN_DIR_FOR_TEST = run_dir
        return OpensInInit


class TestOpensInRunStart(_Contract):
    plugin_class = OpensInRunStart
'''


def test_backend_contract_runs_it_on_its_dispatch_thread(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_sqlite=SQLITE_BACKENDS)
    rec = pytester.inline_run("-p", "no:cacheprovider", "-p", "no:asyncio", "-q", "--tb=short",
                              "-k", "dispatch_thread or flushes_everything")
    outcomes = {r.nodeid.split("::", 1)[1]: r.outcome for r in rec.getreports("pytest_runtest_logreport")
                if r.when == "call"}
    assert outcomes == {
        "TestOpensInInit::test_backend_flushes_everything_on_run_end": "passed",  # one thread: no sign of it
        "TestOpensInInit::test_backend_through_dispatch_thread": "failed",
        "TestOpensInRunStart::test_backend_flushes_everything_on_run_end": "passed",
        "TestOpensInRunStart::test_backend_through_dispatch_thread": "passed",
    }
    (failed,) = [r for r in rec.getreports("pytest_runtest_logreport") if r.failed]
    text = failed.longreprtext
    assert "failed on its dispatch thread (where a run calls it)" in text
    assert "log_metrics: ProgrammingError: SQLite objects created in a thread can only be used in that same thread" in text
    assert "must be created in on_run_start, which runs on that thread, not in __init__" in text
