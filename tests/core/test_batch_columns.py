"""Which scored-batch columns a component reads (``batch_columns``): declared by the built-ins, every column
for an undeclared filter or batch hook (what third-party plugins got before the declaration), none for a
logging backend; the run's union is what an engine reading from a store (verl V1) reads."""

from __future__ import annotations

import pytest

import rlhooks
from rlhooks.core.components import batch_columns, union_batch_columns
from rlhooks.host import RunManager, load_config


class Undeclared:
    @rlhooks.hookimpl
    def on_rewards_computed(self, step, batch):
        return None


class StepOnly:
    @rlhooks.hookimpl
    def on_step_end(self, step):  # takes no batch: reads no column
        return None


class Declared(Undeclared):
    batch_columns = ("reward", "acc")


class Backend:
    @rlhooks.hookimpl
    def log_metrics(self, step, metrics):
        return None


class Select:
    def select(self, batch):
        return None


def test_undeclared_components_read_every_column_and_backends_none():
    assert batch_columns(Undeclared()) is None and batch_columns(Select()) is None
    assert batch_columns(Backend()) == frozenset() and batch_columns(StepOnly()) == frozenset()
    assert batch_columns(Declared()) == {"reward", "acc"}
    assert union_batch_columns([Declared(), Backend()]) == {"reward", "acc"}
    assert union_batch_columns([Declared(), Undeclared()]) is None
    with pytest.raises(TypeError, match="batch_columns must be a tuple"):
        batch_columns(type("Bad", (), {"batch_columns": "reward"})())


def test_the_example_configs_plugins_read_scores_sources_and_rows(tmp_path):
    cfg = load_config({"run": {"name": "cols", "out_dir": str(tmp_path)},
                       "filters": [{"name": "dapo", "metric": "acc"}],
                       "rewards": ["check_answer", "source_metrics", "reward_monitor"],
                       "samples": [{"name": "top_bottom_k", "k": 2, "every": 10}], "backends": ["console", "jsonl"]})
    cols = RunManager(cfg).batch_columns()
    assert cols == {"uid", "acc", "reward", "data_source", "advantage", "reward_fn/*", "sample_id"}
    # the table ranks by reward; the columns it shows are read for the rows it shows: undeclared
    only = RunManager(load_config({"run": {"name": "c2", "out_dir": str(tmp_path)},
                                   "filters": [{"name": "dapo", "metric": "acc"}], "rewards": ["source_metrics"]}))
    assert only.batch_columns() == {"uid", "acc", "reward", "data_source"}
    with_plugin = RunManager(cfg, extra_plugins=[("third_party", Undeclared())])
    assert with_plugin.batch_columns() is None  # declares nothing: gets everything, as before
