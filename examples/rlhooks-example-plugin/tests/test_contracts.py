"""The rlhooks contract kit run against this package's components.

``rlhooks.testing`` is a pytest plugin installed with rlhooks: the contracts' asserts are
rewritten and the ``rlhooks_run_factory`` fixture is available without any conftest.
"""

from pathlib import Path

import pytest

from rlhooks.testing import BackendContract, ReadBack, RewardFunctionContract
from rlhooks_example import CsvBackend, LengthPenalty
from rlhooks_example.csv_backend import read_metrics, read_tables


class TestCsvBackend(BackendContract):
    @pytest.fixture
    def component(self):
        return CsvBackend

    @pytest.fixture
    def component_options(self):
        return {"flush_every": 1000}  # nothing flushed before on_run_end: the contract checks the end flush

    @pytest.fixture
    def entry_point_name(self):
        return "csv"

    def read_back(self, plugin, run_dir: Path) -> ReadBack:
        return ReadBack(metrics=read_metrics(run_dir / "metrics.csv"), tables=read_tables(run_dir / "tables"))


class TestLengthPenalty(RewardFunctionContract):
    @pytest.fixture
    def component(self):
        return LengthPenalty

    @pytest.fixture
    def component_options(self):
        return {"max_chars": 20}

    @pytest.fixture
    def entry_point_name(self):
        return "length_penalty"


def test_length_penalty_values():
    fn = LengthPenalty(LengthPenalty.Options(max_chars=10))
    assert fn("x" * 10, "") == 1.0
    assert fn("x" * 15, "") == 0.5
    assert fn("x" * 30, "") == 0.0


def test_csv_backend_appends_on_resume(rlhooks_run_factory):
    run = rlhooks_run_factory("resumed")
    for steps in ((1, 2), (3,)):  # two attempts of one run, same directory
        backend = CsvBackend()
        backend.on_run_start(run)
        for step in steps:
            backend.log_metrics(step, {"loss": step / 10})
        backend.on_run_end()
    assert read_metrics(run.run_dir / "metrics.csv") == {1: {"loss": 0.1}, 2: {"loss": 0.2}, 3: {"loss": 0.3}}
