"""The example third-party plugin package, pip-installed for real.

The session fixture pip-installs examples/rlhooks-example-plugin (non-editable, no deps, no build
isolation: setuptools comes from the venv) into a temporary site directory (once per test run: tests/installed_sites.py) that this process puts
on ``sys.path`` and the subprocesses get on ``PYTHONPATH``: entry points are found exactly as from
site-packages, and the venv itself is never changed (so tests running in parallel never see a
half-installed package). Then: its entry points are visible, a YAML config enabling it by name
runs it (its CSV file is read back), the CLI lists it, and its own contract tests pass in a pytest
subprocess (which needs rlhooks' pytest11 plugin to load).
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any
from pathlib import Path

import numpy as np
import pytest

import rlhooks
import rlhooks.host
from rlhooks import Batch
from rlhooks.host import RunManager, StepDriver, load_config

from .installed_sites import pip_install, shared_site

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "examples" / "rlhooks-example-plugin"
DIST = "rlhooks-example-plugin"
BIN = Path(sys.executable).parent


#: the site directory the example plugin is installed into (set by the ``installed`` fixture)
_SITE: list[Path] = []


def _env() -> dict[str, str]:
    """The environment of a subprocess that must see the installed example plugin."""
    path = [str(p) for p in _SITE] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path)}


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[md.Distribution]:
    pytest.importorskip("setuptools", reason="the example package builds with the venv's setuptools")
    # Build from a copy so no build/ or egg-info lands in the checkout.
    def install(root: Path) -> Path:
        import shutil

        src = root / PACKAGE.name
        shutil.copytree(PACKAGE, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", ".pytest_cache"))
        pip_install(root / "site", src)
        return root / "site"

    site = shared_site(tmp_path_factory, "example-plugin", install)
    path = pytest.MonkeyPatch()
    path.syspath_prepend(str(site))  # also invalidates the import caches
    _SITE.append(site)
    try:
        yield md.distribution(DIST)
    finally:
        path.undo()
        _SITE.remove(site)
        for name in [m for m in sys.modules if m == "rlhooks_example" or m.startswith("rlhooks_example.")]:
            del sys.modules[name]
        importlib.invalidate_caches()


def test_entry_points_are_visible(installed: md.Distribution) -> None:
    eps = {(ep.group, ep.name): ep.value for ep in installed.entry_points}
    assert eps[("rlhooks.backends", "csv")] == "rlhooks_example.csv_backend:CsvBackend"
    assert eps[("rlhooks.rewards", "length_penalty")] == "rlhooks_example.rewards:LengthPenalty"
    # installed for real: the module comes from the install's site directory, not from the checkout
    mod = importlib.import_module("rlhooks_example")
    assert Path(mod.__file__).is_relative_to(_SITE[0]) and str(PACKAGE) not in str(mod.__file__)
    reg = rlhooks.host.Registry()
    info = reg.info("backend", "csv")
    assert (info.dist, info.version) == (DIST, "0.1.0")


class _TextRollout:
    """A tiny engine: prompts with targets, responses of growing length (core's driver scores them)."""

    def __init__(self, manager: RunManager, n: int) -> None:
        self.m, self.n, self.drawn = manager, n, 0

    def sample(self, step: int) -> tuple[None, Batch]:
        k = self.m.config.run.effective_gen_batch_size
        idx = np.arange(self.drawn, self.drawn + k)
        self.drawn += k
        return None, Batch({"index": idx, "data_source": np.asarray(["toy"] * k, dtype=object)})

    def generate(self, step: int, payload: None) -> tuple[None, Batch]:
        k = self.m.config.run.effective_gen_batch_size
        rows = k * self.n
        responses = np.asarray(["x" * (5 * i) for i in range(rows)], dtype=object)
        targets = np.asarray(["42"] * rows, dtype=object)
        uid = np.repeat(np.arange(k), self.n).astype(str).astype(object)
        cols = {"uid": uid, "index": np.repeat(np.arange(k), self.n), "data_source": np.asarray(["toy"] * rows, object),
                "reward": np.zeros(rows), "response": responses, "target": targets}
        return None, Batch(cols)

    def select_prompts(self, payload: None, rows: np.ndarray) -> None:
        return None

    def place_rewards(self, payload: None, reward: np.ndarray) -> None:
        return None

    def select(self, payload: None, rows: np.ndarray) -> None:
        return None

    def concat(self, payloads: list[None]) -> None:
        return None


def test_enabled_by_name_from_yaml_runs(installed: md.Distribution, tmp_path: Path) -> None:
    cfg_file = tmp_path / "run.yaml"
    cfg_file.write_text(
        "run: {name: example, steps: 2, train_batch_size: 2, n: 3, seed: 0, out_dir: " + str(tmp_path / "runs") + "}\n"
        "rewards:\n"
        "  - {name: length_penalty, max_chars: 10, weight: 2.0}\n"
        "backends:\n"
        "  - {name: csv, path: out/metrics.csv, flush_every: 1}\n"
    )
    config = load_config(cfg_file)
    (csv_cfg,) = config.backends
    assert csv_cfg.distribution == f"{DIST} 0.1.0" and csv_cfg.options.path == "out/metrics.csv"
    manager = RunManager(config)
    driver = StepDriver(manager)
    rollout = _TextRollout(manager, config.run.n)
    logged = {}
    with manager.running():
        for step in (1, 2):
            collected = driver.collect(step, rollout)
            rewards = collected.batch["reward_fn/length_penalty"]
            logged[step] = driver.finish_step(step, collected.batch, {"reward/mean": float(rewards.mean())})
    from rlhooks_example.csv_backend import read_metrics

    written = read_metrics(manager.run_dir / "out" / "metrics.csv")
    assert set(written) == {1, 2}
    for step in (1, 2):
        assert written[step]["reward/mean"] == pytest.approx(logged[step]["reward/mean"])
    # responses of 0, 5, 10 chars score 1.0; 15 -> 0.5; 20+ -> 0.0 (max_chars=10)
    assert written[1]["reward/mean"] == pytest.approx(np.mean([1, 1, 1, 0.5, 0, 0]))


def test_config_check_cli_accepts_it(installed: md.Distribution, tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("backends: [{name: csv, flush_every: 3}]\nrewards: [length_penalty]\n")
    res = subprocess.run([str(BIN / "rlhooks"), "config", "check", str(cfg)], capture_output=True, text=True, timeout=60, env=_env())
    assert res.returncode == 0, res.stderr
    assert "csv" in res.stdout and "flush_every: 3" in res.stdout and "max_chars: 2000" in res.stdout
    cfg.write_text("backends: [{name: csv, flush_evry: 3}]\n")
    res = subprocess.run([str(BIN / "rlhooks"), "config", "check", str(cfg)], capture_output=True, text=True, timeout=60, env=_env())
    assert res.returncode != 0 and "backends[0] (csv): option 'flush_evry' is not known; did you mean 'flush_every'?" in res.stderr


def test_plugins_list_shows_it(installed: md.Distribution) -> None:
    res = subprocess.run([str(BIN / "rlhooks"), "plugins", "list", "--json"], capture_output=True, text=True, timeout=60, env=_env())
    assert res.returncode == 0, res.stderr
    rows = {(r["kind"], r["name"]): r for r in json.loads(res.stdout)}
    csv_row = rows[("backend", "csv")]
    assert (csv_row["distribution"], csv_row["version"], csv_row["status"]) == (DIST, "0.1.0", "ok")
    assert {"on_run_start", "log_metrics", "on_run_end"} <= set(csv_row["hooks"])
    assert rows[("reward", "length_penalty")]["distribution"] == DIST


def test_its_own_contract_tests_pass(installed: md.Distribution, tmp_path: Path) -> None:
    """Its tests subclass the kit's contracts and use the rlhooks_run_factory fixture: pytest11 must load."""
    env = {**_env(), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp", str(tmp_path / "bt"),
         str(PACKAGE / "tests")],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env,
    )
    # a failure here that says "fixture 'rlhooks_run_factory' not found" means pytest11 did not load
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert " passed" in res.stdout and "failed" not in res.stdout and "error" not in res.stdout.lower()


def test_reward_options_reach_it_through_verls_compute_score(installed: md.Distribution) -> None:
    """verl's own loader (get_custom_reward_fn) with reward_kwargs.options: validated as the YAML config is."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.reward import get_custom_reward_fn

    from rlhooks import ConfigError
    from rlhooks.engines.verl import reward_function as verl_adapter

    def loaded(options: dict) -> Any:
        kwargs = {"functions": ["length_penalty", "format_exact"], "options": options}
        config = OmegaConf.create({"reward": {"custom_reward_function": {
            "path": verl_adapter.__file__, "name": "compute_score", "reward_kwargs": kwargs}}})
        return get_custom_reward_fn(config)

    response = "x" * 15  # 15 chars: 0.5 with max_chars 10, 1.0 with the default 2000
    assert loaded({"length_penalty": {"max_chars": 10}})("math", response, "1")["length_penalty"] == 0.5
    assert loaded({})("math", response, "1")["length_penalty"] == 1.0
    with pytest.raises(ConfigError, match=r"reward_kwargs\.options\.length_penalty \(length_penalty\): option "
                                          r"'max_char' is not known; did you mean 'max_chars'\?"):
        loaded({"length_penalty": {"max_char": 10}})("math", response, "1")
    with pytest.raises(ValueError, match=r"reward_kwargs\.options\.format_exact: reward function 'format_exact' "
                                         r"takes no options"):
        loaded({"format_exact": {"strict": True}})("math", response, "1")
    with pytest.raises(ValueError, match=r"names \['check_answer'\] but functions are"):
        loaded({"check_answer": {}})("math", response, "1")
