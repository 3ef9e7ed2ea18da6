"""``rlhooks new-plugin``: the generated package installs for real and passes its own contract tests unchanged.

One package with every kind, pip-installed into a temporary site directory (the venv is never
changed), then: its tests in one pytest subprocess (the kit's pytest11 plugin must load), its
entry points through the registry by qualified name, and (slow) a simulated run using them all.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from rlhooks.cli import main
from rlhooks.core.registry import Registry
from rlhooks.scaffold import KINDS, ScaffoldError, write_plugin

from ..installed_sites import pip_install, shared_site

DIST = "rlhooks-demo-kit"
ALL_KINDS = ",".join(KINDS)


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the generated source directory, the site directory it is installed into)."""
    def generate_and_install(root: Path) -> Path:
        assert main(["new-plugin", DIST, "--kind", ALL_KINDS, "--dir", str(root)]) == 0
        build_copy = root / "build-copy"  # pip leaves build/ and *.egg-info next to the sources it builds
        shutil.copytree(root / DIST, build_copy)
        pip_install(root / "site", build_copy)
        return root / "site"

    # shared by the xdist workers, so read only from here on: the generated tests run in it with
    # PYTHONDONTWRITEBYTECODE and no cache provider (test_generated_package_layout lists its files)
    site = shared_site(tmp_path_factory, "scaffold", generate_and_install)
    return site.parent / DIST, site


def _env(site: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])]),
           "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)
    return env


def test_generated_package_layout(generated):
    src, _ = generated
    files = sorted(str(p.relative_to(src)) for p in src.rglob("*") if p.is_file())
    assert files == ["README.md", "pyproject.toml", "src/rlhooks_demo_kit/__init__.py",
                     "src/rlhooks_demo_kit/backend.py", "src/rlhooks_demo_kit/group_filter.py",
                     "src/rlhooks_demo_kit/hooks.py", "src/rlhooks_demo_kit/reward.py",
                     "src/rlhooks_demo_kit/sampler.py", "tests/test_contracts.py"]
    readme = (src / "README.md").read_text()
    assert "| sampler | `demo_kit_sampler` (qualified: `rlhooks-demo-kit:demo_kit_sampler`)" in readme


def test_generated_tests_pass_unchanged(generated, tmp_path):
    src, site = generated
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-p", "no:xdist",
         "--basetemp", str(tmp_path / "bt")],
        capture_output=True, text=True, timeout=300, cwd=src, env=_env(site),
    )
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    summary = res.stdout.strip().splitlines()[-1]
    # every kind's contract ran (no checks skipped: plugin_class limits them to the implemented hooks)
    assert " passed" in summary and "skipped" not in summary and "failed" not in summary, summary
    # no pytest-asyncio loop-scope warning; the kit's deselections are explained, not a bare count
    assert "asyncio_default_fixture_loop_scope" not in res.stdout + res.stderr
    assert "deselected" in summary
    assert re.search(r"rlhooks contract kit: \d+ deselected = checks that do not apply to the plugins under test",
                     res.stdout), res.stdout[-2000:]
    for cls in ("DemoKitSampler", "DemoKitFilter", "DemoKitBackend", "DemoKitReward", "DemoKitPlugin"):
        assert f"Test{cls}" in (src / "tests" / "test_contracts.py").read_text()
    # the hook plugin shows the issue-32 hooks, and its tests exercise them: held-out results, state
    # across a resume (the kit's round trip) and a clean stop (its own test, option-driven)
    for test in ("TestDemoKitPlugin::test_on_validation_end_returns_metrics_or_none",
                 "TestDemoKitPlugin::test_on_validation_end_sources_it_never_trained_on",
                 "TestDemoKitPlugin::test_state_dict_round_trip", "test_demo_kit_stops_the_run_when_responses_stay_long"):
        assert re.search(rf"PASSED tests/test_contracts.py::{re.escape(test)}\b", res.stdout), test
    hooks = (src / "src" / "rlhooks_demo_kit" / "hooks.py").read_text()
    for shown in ("def on_validation_end(", "def state_dict(", "def load_state_dict(", "self.run.request_stop("):
        assert shown in hooks, shown


def test_readme_plugin_examples_are_the_generated_code(generated):
    """The plugin guide's reward / filter / backend examples are the code the generated tests exercise."""
    src, _ = generated
    guide = (Path(__file__).resolve().parents[2] / "docs" / "how-to" / "write-plugins.md").read_text(encoding="utf-8")
    section = guide.split("## Reward functions, filters and backends: what they declare, get and run on", 1)[1]
    section = section.split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    code = "\n".join(p.read_text() for p in (src / "src" / "rlhooks_demo_kit").glob("*.py"))
    assert len(blocks) == 3
    for block in blocks:
        assert block in code, f"docs/how-to/write-plugins.md example not in the generated package:\n{block}"


def test_entry_points_resolve_by_qualified_name(generated, monkeypatch):
    _, site = generated
    monkeypatch.syspath_prepend(str(site))
    reg = Registry()
    for kind, entry in (("sampler", "demo_kit_sampler"), ("filter", "demo_kit_filter"),
                        ("backend", "demo_kit_backend"), ("reward", "demo_kit_reward"), ("plugin", "demo_kit")):
        info = reg.info(kind, f"{DIST}:{entry}")
        assert (info.dist, info.name) == (DIST, entry)


def test_refuses_an_existing_directory_bad_names_and_kinds(tmp_path, capsys):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "mine.txt").write_text("keep me")
    with pytest.raises(ScaffoldError, match="already exists; choose another name or directory"):
        write_plugin("taken", ["hook"], tmp_path)
    assert [p.name for p in (tmp_path / "taken").iterdir()] == ["mine.txt"]
    assert main(["new-plugin", "bad name!", "--dir", str(tmp_path)]) == 1
    assert "'bad name!' is not a valid distribution name" in capsys.readouterr().err
    assert main(["new-plugin", "fine", "--kind", "sampler,filtr", "--dir", str(tmp_path)]) == 1
    assert "--kind: 'filtr'; choose from sampler,filter,backend,reward,hook" in capsys.readouterr().err
    assert not (tmp_path / "fine").exists()


@pytest.mark.slow
def test_generated_components_drive_a_simulated_run(generated, tmp_path):
    """All five in one real run: the SQLite backend opens its connection on its dispatch thread."""
    _, site = generated
    config = tmp_path / "run.yaml"
    config.write_text(
        "run: {name: scaffolded, steps: 3, train_batch_size: 8, n: 4}\n"
        f"sampler: {DIST}:demo_kit_sampler\n"
        "filters: [{name: demo_kit_filter, min_spread: 0.0}]\n"
        f"rewards: [check_answer, {{name: '{DIST}:demo_kit_reward', case_sensitive: false, weight: 2}}, reward_monitor]\n"
        "backends: [demo_kit_backend]\n"
        "plugins: [{name: demo_kit, threshold: 100}]\n"
    )
    res = subprocess.run([str(Path(sys.executable).parent / "rlhooks"), "simulate", str(config), "--out",
                          str(tmp_path / "runs"), "--no-progress", "--no-report"],
                         capture_output=True, text=True, timeout=300, env=_env(site))
    assert res.returncode == 0, res.stderr[-3000:]
    with sqlite3.connect(tmp_path / "runs" / "scaffolded" / "metrics.sqlite") as db:
        rows = db.execute("SELECT step, name FROM metrics WHERE name LIKE 'demo_kit/%'").fetchall()
    assert {(s, n) for s, n in rows} == {(s, n) for s in (1, 2, 3)
                                          for n in ("demo_kit/long_fraction", "demo_kit/dropped_groups",
                                                    # on_validation_end: simulate.test_freq defaults to 1
                                                    "demo_kit/worst_validation_score")}
    # the declared ranges reach the monitor: check_answer (-1, 3) + 2 x demo_kit_reward (0, 1)
    monitor = json.loads((tmp_path / "runs" / "scaffolded" / "reward_monitor.json").read_text())
    assert monitor["reward_range"] == [-1.0, 5.0]


@pytest.mark.parametrize("kind", list(KINDS))
def test_each_kind_alone_writes_a_consistent_package(kind, tmp_path):
    """One kind at a time (the installed all-kinds package is tested above): entry point, module and test agree."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")

    root = write_plugin(f"rlhooks-only-{kind}", [kind], tmp_path)
    for path in root.rglob("*.py"):
        compile(path.read_text(), str(path), "exec")  # valid Python
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    ((group, eps),) = project["entry-points"].items()
    ((name, value),) = eps.items()
    module, cls = value.split(":")
    assert group == KINDS[kind][0] and module == f"rlhooks_only_{kind}.{KINDS[kind][1]}"
    assert f"class {cls}" in (root / "src" / f"rlhooks_only_{kind}" / f"{KINDS[kind][1]}.py").read_text()
    tests = (root / "tests" / "test_contracts.py").read_text()
    assert f'"rlhooks-only-{kind}:{name}"' in tests and f"plugin_class = {cls}" in tests


def test_scaffold_and_docs_require_the_same_rlhooks(tmp_path):
    """The generated pyproject's requirement is the one the packaging guide and the tutorial show."""
    root = write_plugin("rlhooks-req-check", ["hook"], tmp_path)
    pyproject = (root / "pyproject.toml").read_text()
    assert 'dependencies = ["rlhooks>=0.1"]' in pyproject
    assert 'asyncio_default_fixture_loop_scope = "function"' in pyproject
    docs = Path(__file__).resolve().parents[2] / "docs"
    for page in ("how-to/package-plugins.md", "tutorial.md"):
        text = (docs / page).read_text(encoding="utf-8")
        assert "rlhooks>=0.1" in text and '"rlhooks"]' not in text, page


def test_names_whose_stem_starts_with_a_digit_make_valid_classes(tmp_path):
    root = write_plugin("rlhooks-1x", list(KINDS), tmp_path)
    for path in root.rglob("*.py"):
        compile(path.read_text(), str(path), "exec")
    assert "class Rlhooks1xPlugin:" in (root / "src" / "rlhooks_1x" / "hooks.py").read_text()


@pytest.mark.parametrize("name, says", [
    ("rlhooks", "is rlhooks' own distribution name"),
    ("RLHooks", "is rlhooks' own distribution name"),
    ("numpy", "is the name of an installed distribution (numpy "),
    ("PyYAML", "is the name of an installed distribution (PyYAML "),
    ("yaml", "would make a module 'yaml', the name of a module already importable here"),
])
def test_refuses_names_of_rlhooks_installed_distributions_and_modules(name, says, tmp_path, capsys):
    assert main(["new-plugin", name, "--dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert says in err and "nothing was written" in err, err
    assert not (tmp_path / name).exists()
