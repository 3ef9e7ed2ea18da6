"""Shared pieces of the reliability suite: a small simulated dataset, the every-built-in config,
JSONL read-back, and third-party plugin distributions installed into a temp site directory.
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlhooks.core.manager import RunManager
from rlhooks.engines.sim.data import SimDataset, write_dataset
from rlhooks.engines.sim.engine import SimEngine, load_sim_config

from ..installed_sites import pip_install, shared_site, write_dist

TESTS = Path(__file__).resolve().parents[1]

#: wall-clock metrics of the simulated engine; never compared between runs
TIMING_METRICS = frozenset({"timing/gen_s", "timing/step_s"})

REWARD_FNS = ["format_exact", "format_approx", "check_answer", "check_numbers"]

#: the curriculum sampler of the every-built-in config (level-ups happen within a few steps)
REWARD_CURRICULUM = {
    "name": "reward_curriculum", "complexity_source": "chain", "initial_complexity_percentile": 20,
    "num_intervals": 6, "reward_threshold": 4.0, "reward_alpha": 0.5, "min_batches_per_level": 2,
    "check_frequency": 1, "adaptive_weights": True, "alpha": 0.3, "update_frequency": 1,
    "temperature": 1.0, "max_source_ratio": 3.0,
}


def all_builtins_config(out_dir: Path, *, steps: int = 12, wandb_mode: str | None = "disabled",
                        console_interval: int = 1000, **run: Any) -> dict[str, Any]:
    """A config enabling every built-in component by name (one sampler: the reward curriculum).

    ``wandb_mode=None`` leaves the wandb backend out.
    """
    run_section = {"name": "all", "seed": 0, "steps": steps, "train_batch_size": 6, "gen_batch_size": 8, "n": 4,
                   "max_num_gen_batches": 4, "on_gen_limit": "continue", "out_dir": str(out_dir)}
    run_section.update(run)
    backends: list[Any] = [{"name": "console", "interval": console_interval, "tables": False}, "jsonl",
                           {"name": "tensorboard"}]
    if wandb_mode is not None:
        backends.append({"name": "wandb", "mode": wandb_mode, "project": "rlhooks-reliability",
                         "settings": {"console": "off"}})
    return {
        "run": run_section,
        "sampler": dict(REWARD_CURRICULUM),
        "prompt_filters": [{"name": "selective_rollout", "p_easy": 0.3, "p_hard": 0.3}],
        "filters": [{"name": "dapo", "metric": "acc"}],
        "rewards": ["claims_verified", *REWARD_FNS, "source_metrics", {
            "name": "reward_monitor", "log_distributions": True, "history": 50,
            "alerts": [
                {"metric": "rewards/mean", "min_slope": 0.5, "window": 3, "level": "info"},  # trend: fires
                {"metric": "filter/kept_ratio", "condition": "less", "threshold": 0.9, "level": "warning"},
                {"metric": "rewards/mean", "condition": "greater", "threshold": -100, "level": "critical"},
            ],
        }],
        "samples": [{"name": "top_bottom_k", "k": 2}, {"name": "random_samples", "k": 2},
                    {"name": "per_source_samples", "k": 1}],
        "backends": backends,
    }


@pytest.fixture(scope="session")
def sim_data(tmp_path_factory: pytest.TempPathFactory) -> SimDataset:
    """A small simulated dataset (4 sources x 40 rows): epochs wrap within a short run."""
    path = write_dataset(tmp_path_factory.mktemp("reliability-data") / "data.parquet", rows_per_source=40, seed=0)
    return SimDataset.from_parquet(path)


def make_engine(cfg: dict[str, Any], data: SimDataset, run_dir: Path, extra_plugins: tuple = ()) -> SimEngine:
    config = load_sim_config(copy.deepcopy(cfg))
    manager = RunManager(config, run_dir=run_dir, extra_plugins=extra_plugins)
    return SimEngine(config, data, manager=manager)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    # str.splitlines() on purpose: it also splits at U+2028/U+0085, which the backend must escape
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def jsonl_metrics(records: list[dict[str, Any]], exclude: frozenset[str] = TIMING_METRICS) -> dict[int, dict[str, Any]]:
    """Step -> logged metrics (non-finite values restored from ``nonfinite``), minus ``exclude``."""
    out: dict[int, dict[str, Any]] = {}
    for r in records:
        if r["kind"] != "metrics":
            continue
        assert r["step"] not in out, f"step {r['step']} logged twice"
        values = {k: v for k, v in r["metrics"].items() if k not in exclude}
        for k, name in r.get("nonfinite", {}).items():
            if k not in exclude:
                values[k] = name
        out[r["step"]] = values
    return out


def jsonl_tables(records: list[dict[str, Any]]) -> dict[tuple[int, str], list[dict[str, Any]]]:
    out: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for r in records:
        if r["kind"] == "table":
            out.setdefault((r["step"], r["name"]), []).extend(r["rows"])
    return out


# -- third-party plugins installed for real ------------------------------------------------------


def _load_by_path(name: str, path: Path) -> Any:
    """Import a helper module of another test directory under its own name (conftests share one)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


#: tests/backends/dispatch_test_backends.py: raising / hanging / counting backends + install()
dispatch_backends = _load_by_path("_reliability_dispatch_backends", TESTS / "backends" / "dispatch_test_backends.py")
#: tests/contracts/builtin_readers.py: read back what jsonl / tensorboard / wandb persisted
readers = _load_by_path("_reliability_readers", TESTS / "contracts" / "builtin_readers.py")


@pytest.fixture
def dispatch_site(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A site directory on sys.path holding the dispatch-test backends as a real distribution."""
    site = tmp_path_factory.mktemp("fault-site")
    dispatch_backends.install(site)
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    yield site
    sys.modules.pop(dispatch_backends.MODULE, None)


FAULTS_CODE = '''
    import attrs
    import numpy as np


    @attrs.frozen(kw_only=True)
    class CrashOptions:
        crash_at_step: int = 1


    class CrashingFilter:
        """Keeps every group, until the step it was told to crash at (a bug in a steering plugin)."""

        Options = CrashOptions

        def __init__(self, options):
            self.options = options

        def select(self, batch):
            if batch.meta.get("step") == self.options.crash_at_step:
                raise RuntimeError(f"crashing_filter: simulated bug at step {self.options.crash_at_step}")
            return np.ones(len(batch), dtype=bool)
'''


@pytest.fixture(scope="session")
def faults_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two real distributions pip-installed into one target dir (put it on sys.path to use them):

    * ``reliability-broken 0.1``: backend ``rel_broken`` whose module raises on import;
    * ``reliability-faults 0.1``: filter ``crashing_filter`` that raises at ``crash_at_step``.
    """
    return shared_site(tmp_path_factory, "fault-dists", _install_fault_dists)


def _install_fault_dists(root: Path) -> Path:
    target = root / "site"
    broken = write_dist(
        root, "reliability-broken", "0.1", "reliability_broken",
        "raise RuntimeError('reliability_broken cannot start: missing CUDA toolkit')\n",
        {"rlhooks.backends": {"rel_broken": "reliability_broken:Backend"}},
    )
    faults = write_dist(root, "reliability-faults", "0.1", "reliability_faults", FAULTS_CODE,
                       {"rlhooks.filters": {"crashing_filter": "reliability_faults:CrashingFilter"}})
    pip_install(target, broken, faults)
    return target


@pytest.fixture
def on_path(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``on_path(site)`` puts a site directory first on sys.path for this test."""

    def add(site: Path) -> Path:
        monkeypatch.syspath_prepend(str(site))
        importlib.invalidate_caches()
        return site

    return add
