"""Shared helpers of the simulator tests: small, fast configs on a small generated dataset."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rlhooks.engines.sim.data import SimDataset, write_dataset
from rlhooks.engines.sim.engine import SimEngine, load_sim_config

REWARD_FNS = ["format_exact", "format_approx", "check_answer", "check_numbers"]


def small_config(out_dir: Path, **sections: Any) -> dict[str, Any]:
    run = {"name": "t", "seed": 0, "steps": 6, "train_batch_size": 16, "gen_batch_size": 24, "n": 4,
           "max_num_gen_batches": 6, "on_gen_limit": "continue", "out_dir": str(out_dir)}
    run.update(sections.pop("run", {}))
    cfg: dict[str, Any] = {"run": run, "rewards": list(REWARD_FNS)}
    cfg.update(sections)
    return cfg


@pytest.fixture(scope="session")
def small_data(tmp_path_factory: pytest.TempPathFactory) -> SimDataset:
    path = write_dataset(tmp_path_factory.mktemp("simdata") / "data.parquet", rows_per_source=300, seed=0)
    return SimDataset.from_parquet(path)


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory: pytest.TempPathFactory) -> SimDataset:
    """240 rows: uniform sampling (a new order each epoch) comes back to a prompt within a few steps."""
    path = write_dataset(tmp_path_factory.mktemp("tinydata") / "data.parquet", rows_per_source=60, seed=0)
    return SimDataset.from_parquet(path)


def make_engine(cfg: dict[str, Any], data: SimDataset, run_dir: Path) -> SimEngine:
    return SimEngine(load_sim_config(cfg), data, run_dir=run_dir)
