"""Every YAML and Python example of the site and the README runs or is validated, so none can drift.

* a YAML block is an rlhooks config: ``rlhooks config check`` (in-process, the same code) must accept it;
* a Python block is run (in a temporary working directory holding a small config and a finished run);
* a block that cannot be either says so with a mark right above it, ``<!-- docs-test: ACTION why -->``:
  ``with-example-plugin`` (a config naming examples/rlhooks-example-plugin's components, installed),
  ``unknown-plugin NAME`` (a config naming a plugin the page defines: every other part must be valid),
  ``run-with NAME`` (Python run with the inputs ``PRELUDES[NAME]`` gives it), ``verl-reward-kwargs``
  (verl's ``reward_kwargs`` for rlhooks' adapter: scored through ``compute_score``), ``signature``
  (a hook signature: compiled), or ``skip`` with the reason and the test that covers it instead.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
import yaml

from rlhooks.cli import main

from .pages import DOCS, README, ROOT, Block, all_blocks

YAML_BLOCKS = all_blocks("yaml", "yml")
PYTHON_BLOCKS = all_blocks("python", "py")
ACTIONS = {"", "unknown-plugin", "with-example-plugin", "run-with", "verl-reward-kwargs", "signature", "skip"}

#: inputs of Python examples that show a call inside the reader's own loop
PRELUDES = {
    "monitoring-loop": """
num_steps = 12
metrics_dict = {"signal_to_noise": 0.3, "mean_reward": 1.0}
steps = list(range(num_steps))
function_names = ["check_answer", "format_exact"]
reward_history = [{"check_answer": [0.5 + 0.1 * s, 1.0, 0.0, 3.0], "format_exact": [0.0, 3.0, 3.0, 0.0]}
                  for s in steps]
accuracy_over_time = [0.2 + 0.05 * s for s in steps]
""",
}


EXAMPLE_PLUGIN = ROOT / "examples" / "rlhooks-example-plugin"


def install_as_distribution(site: Path, name: str, version: str, pyproject_text: str) -> None:
    """A .dist-info in ``site`` holding the ``[project.entry-points."group"]`` tables of a pyproject
    text as entry points: what importlib.metadata (so the registry) sees of an installed package."""
    dist = site / f"{name.replace('-', '_')}-{version}.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", encoding="utf-8")
    lines, keep = [], False
    for line in pyproject_text.splitlines():
        if line.startswith("["):
            keep = line.startswith("[project.entry-points.")
            if keep:
                lines.append("[" + line.removeprefix("[project.entry-points.").strip('"]') + "]")
            continue
        if keep and "=" in line:
            lines.append(line.replace('"', ""))
    (dist / "entry_points.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _isolated_modules(monkeypatch, package: str):
    """Modules of ``package`` imported while the caller runs are dropped afterwards, and any imported
    before (from another test's install) are set aside meanwhile: no test sees another's copy."""
    import sys

    for name in [n for n in sys.modules if n == package or n.startswith(package + ".")]:
        monkeypatch.delitem(sys.modules, name)
    yield
    for name in [n for n in sys.modules if n == package or n.startswith(package + ".")]:
        del sys.modules[name]


@pytest.fixture
def example_plugin(tmp_path: Path, monkeypatch):
    """examples/rlhooks-example-plugin importable and registered, as if pip-installed."""
    site = tmp_path / "example-site"
    install_as_distribution(site, "rlhooks-example-plugin", "0.1.0",
                            (EXAMPLE_PLUGIN / "pyproject.toml").read_text(encoding="utf-8"))
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.syspath_prepend(str(EXAMPLE_PLUGIN / "src"))
    yield from _isolated_modules(monkeypatch, "rlhooks_example")


@pytest.fixture
def my_plugin_module(monkeypatch):
    yield from _isolated_modules(monkeypatch, "my_plugin")


def _id(block: Block) -> str:
    return block.where


def _config_check(tmp_path: Path, code: str, capsys) -> tuple[int, str]:
    path = tmp_path / "example.yaml"
    path.write_text(code, encoding="utf-8")
    rc = main(["config", "check", str(path)])
    out = capsys.readouterr()
    return rc, out.out + out.err


def test_every_block_mark_is_known_and_skips_say_why() -> None:
    blocks = YAML_BLOCKS + PYTHON_BLOCKS
    assert len(blocks) >= 30  # the scan sees the pages' examples
    unknown = [(b.where, b.action) for b in blocks if b.action not in ACTIONS]
    assert not unknown, unknown
    skips = [b for b in blocks if b.action == "skip"]
    assert all(len(b.why) > 20 for b in skips), [b.where for b in skips]
    assert len(skips) <= len(blocks) // 5, "most examples must run: " + ", ".join(b.where for b in skips)


@pytest.fixture(scope="module")
def registry():
    """One registry for the module's config checks: finding the installed entry points costs ~0.5 s."""
    from rlhooks.core.registry import Registry

    return Registry()


def _load_as_config_check(path: Path, registry) -> None:
    """What `rlhooks config check FILE` does (cli_core.cmd_config_check), with a shared registry."""
    from rlhooks.cli_core import engine_sections
    from rlhooks.core.config import load_config

    load_config(str(path), registry=registry, **engine_sections()).to_yaml(redact=True)


@pytest.mark.parametrize("block", [b for b in YAML_BLOCKS if b.action in ("", "unknown-plugin")], ids=_id)
def test_yaml_example_passes_config_check(block: Block, registry, tmp_path: Path) -> None:
    from rlhooks.core.errors import ConfigError

    path = tmp_path / "example.yaml"
    path.write_text(block.code, encoding="utf-8")
    if block.action == "unknown-plugin":
        name = block.why.split()[0]
        with pytest.raises(ConfigError) as err:
            _load_as_config_check(path, registry)
        problems = err.value.issues
        assert problems and all("unknown" in i.message and f"'{name}'" in i.message for i in problems), \
            f"{block.where}: only the page's own plugin {name!r} may be unknown:\n{err.value}"
        return
    try:
        _load_as_config_check(path, registry)
    except ConfigError as exc:
        pytest.fail(f"{block.where}: `rlhooks config check` refuses the example:\n{exc}")


@pytest.mark.parametrize("block", [b for b in YAML_BLOCKS if b.action == "with-example-plugin"], ids=_id)
def test_yaml_example_with_the_example_plugin_passes_config_check(block: Block, example_plugin, tmp_path: Path,
                                                                  capsys) -> None:
    rc, out = _config_check(tmp_path, block.code, capsys)
    assert rc == 0, f"{block.where}: `rlhooks config check` refuses the example:\n{out}"


@pytest.mark.parametrize("block", [b for b in YAML_BLOCKS if b.action == "verl-reward-kwargs"], ids=_id)
def test_verl_reward_kwargs_example_scores(block: Block, example_plugin) -> None:
    from rlhooks.engines.verl.reward_function import compute_score

    data = yaml.safe_load(block.code)
    kwargs = data.get("reward_kwargs") or data["reward"]["custom_reward_function"]["reward_kwargs"]
    result = compute_score("gsm8k", "<reasoning>2+2</reasoning>\n<answer>4</answer>", "4", **kwargs)
    weights = kwargs.get("weights") or {}
    assert result["reward_errors"] == 0 and result["acc"] == 1
    assert result["score"] == pytest.approx(sum(weights.get(f, 1.0) * result[f] for f in kwargs["functions"]))
    assert result["check_answer"] > 0


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A working directory as after the tutorial: my.yaml (the default config) and runs/demo, finished."""
    from rlhooks.engines.sim.cli import default_config_path

    ws = tmp_path_factory.mktemp("docs-examples")
    config = yaml.safe_load(Path(default_config_path()).read_text(encoding="utf-8"))
    config["run"].update(gen_batch_size=16, train_batch_size=8)  # the reader's config, small: the examples stay cheap
    (ws / "my.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    rc = main(["simulate", str(ws / "my.yaml"), "--out", str(ws / "runs"), "--steps", "8",
               "--set", "run.name=demo", "--no-report", "--no-progress"])
    assert rc == 0
    return ws


@pytest.mark.parametrize("block", [b for b in PYTHON_BLOCKS if b.action in ("", "run-with")], ids=_id)
def test_python_example_runs(block: Block, workspace: Path, tmp_path: Path, monkeypatch) -> None:
    shutil.copytree(workspace, tmp_path, dirs_exist_ok=True)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "docs_example"}
    if block.action == "run-with":
        exec(compile(PRELUDES[block.why.split()[0]], "prelude", "exec"), namespace)
    exec(compile(block.code, block.where, "exec"), namespace)


@pytest.mark.parametrize("block", [b for b in PYTHON_BLOCKS if b.action == "signature"], ids=_id)
def test_signature_example_compiles(block: Block) -> None:
    compile(f"def {block.code.strip()}: ...\n", block.where, "exec")


def test_the_readme_plugin_installs_validates_and_runs(tmp_path: Path, monkeypatch, capsys, my_plugin_module) -> None:
    """The README's ten-line plugin, its pyproject entry point and its YAML line, put together as an
    installed distribution: the config validates and a short run logs the plugin's metric."""
    blocks = [b for b in all_blocks("python", "toml", "yaml") if b.path == README]
    module = next(b.code for b in blocks if b.code.startswith("# my_plugin/__init__.py"))
    entry = next(b.code for b in blocks if b.lang == "toml" and "long_responses" in b.code)
    plugins_line = next(b.code for b in blocks if b.code.startswith("plugins:"))
    site = tmp_path / "site"
    (site / "my_plugin").mkdir(parents=True)
    (site / "my_plugin" / "__init__.py").write_text(module, encoding="utf-8")
    install_as_distribution(site, "my-plugin", "0.1", entry)
    monkeypatch.syspath_prepend(str(site))
    config = yaml.safe_load((DOCS.parent / "rlhooks" / "engines" / "sim" / "default.yaml").read_text())
    config.update(yaml.safe_load(plugins_line))
    config["run"].update(name="tutorial", steps=2, gen_batch_size=16, train_batch_size=8, out_dir=str(tmp_path))
    _run_and_read_metric(tmp_path, config, capsys)


def _run_and_read_metric(tmp_path: Path, config: dict, capsys) -> set:
    from rlhooks.core.records import read_records

    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    assert main(["config", "check", str(tmp_path / "c.yaml")]) == 0, capsys.readouterr()
    assert main(["simulate", str(tmp_path / "c.yaml"), "--no-report", "--no-progress"]) == 0
    name = config["run"]["name"]
    logged = {k for _, r in read_records(tmp_path / name / "metrics.jsonl") if r and r["kind"] == "metrics"
              for k in r["metrics"]}
    assert "my/long_fraction" in logged
    return logged


def test_the_tutorial_plugin_installs_validates_and_runs(tmp_path: Path, monkeypatch, capsys, my_plugin_module) -> None:
    """The tutorial's plugin step as written: its module and its whole pyproject.toml make a package that
    pip really installs (setuptools needs [project] name and version), `plugins list` shows it, and the
    page's long.yaml runs with it, the console printing its metric."""
    import subprocess
    import sys

    try:
        import tomllib
    except ImportError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")

    blocks = [b for b in all_blocks("python", "toml", "yaml", "bash") if b.path == DOCS / "tutorial.md"]
    module = next(b.code for b in blocks if b.code.startswith("# my_plugin/__init__.py"))
    pyproject = next(b.code for b in blocks if b.lang == "toml" and b.code.startswith("# my-plugin/pyproject.toml"))
    config = yaml.safe_load(next(b.code for b in blocks if b.code.startswith("# long.yaml")))
    commands = next(b.code for b in blocks if "pip install -e ./my-plugin" in b.code)
    assert "rlhooks simulate long.yaml" in commands
    project = tomllib.loads(pyproject)["project"]
    assert project["name"] == "my-plugin" and project["version"] and project["dependencies"] == ["rlhooks>=0.1"]
    src = tmp_path / "my-plugin"
    (src / "my_plugin").mkdir(parents=True)
    (src / "my_plugin" / "__init__.py").write_text(module, encoding="utf-8")
    (src / "pyproject.toml").write_text(pyproject, encoding="utf-8")
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--disable-pip-version-check", "--target", str(site), str(src)],
                   check=True, capture_output=True, text=True)
    monkeypatch.syspath_prepend(str(site))
    assert main(["plugins", "list", "--kind", "plugin"]) == 0
    listed = capsys.readouterr().out
    assert re.search(r"long_responses\s+my-plugin:long_responses\s+my-plugin 0\.1\.0\s+hooks: on_rewards_computed",
                     listed), listed
    config["run"].update(steps=1, gen_batch_size=16, train_batch_size=8, out_dir=str(tmp_path))  # step 1 prints too
    capsys.readouterr()
    _run_and_read_metric(tmp_path, config, capsys)
    printed = capsys.readouterr().out
    assert re.search(r"step 1 \| sim/accuracy/mean [\d.]+ \| my/long_fraction [\d.]+", printed), printed


def test_the_scan_sees_a_drifted_example(tmp_path: Path, capsys) -> None:
    """The config check the YAML examples go through refuses a misspelt option (the test can fail)."""
    rc, out = _config_check(tmp_path, "filters: [{name: dapo, metrik: acc}]\n", capsys)
    assert rc == 1 and "did you mean 'metric'" in out


def test_examples_cover_the_readme_and_every_page_kind() -> None:
    where = {b.path.relative_to(ROOT).parts[0] if b.path.parent == ROOT else b.path.relative_to(DOCS).parts[0]
             for b in YAML_BLOCKS + PYTHON_BLOCKS}
    assert {"README.md", "how-to", "reference", "tutorial.md"} <= where, where
    assert os.path.exists(ROOT / "mkdocs.yml")


def test_the_config_check_transcript_is_what_the_command_prints(tmp_path: Path, monkeypatch, capsys) -> None:
    """The config page's `rlhooks config check bad.yaml` output, reproduced from a bad.yaml with the
    three mistakes it reports."""
    text = (DOCS / "reference" / "config.md").read_text(encoding="utf-8")
    transcript = text[text.index("$ rlhooks config check bad.yaml\n"):]
    shown = transcript[:transcript.index("```")].splitlines()[1:]
    monkeypatch.chdir(tmp_path)
    Path("bad.yaml").write_text("backend: console\nfilters: [dapoo]\n"
                                "backends: [console, {name: tensorboard, log_dri: runs/tb}]\n", encoding="utf-8")
    assert main(["config", "check", "bad.yaml"]) == 1
    out = capsys.readouterr()
    assert (out.out + out.err).splitlines() == shown


@pytest.mark.slow  # two 12-step runs and a resumed one, ~3 s
def test_the_check_resume_command_of_the_simulate_guide_passes(workspace: Path, monkeypatch, capsys) -> None:
    text = (DOCS / "how-to" / "simulate.md").read_text(encoding="utf-8")
    line = next(l for l in text.splitlines() if l.startswith("rlhooks simulate my.yaml") and "--check-resume" in l)
    monkeypatch.chdir(workspace)
    assert main(line.split("#")[0].split()[1:]) == 0
    assert "resume check passed" in capsys.readouterr().out
