"""Registry behaviour against distributions really installed with pip (see conftest.py)."""

import importlib.metadata as md
import subprocess
import sys
from pathlib import Path

import pytest

from rlhooks.host import load_config
from rlhooks.core.errors import (
    BrokenPluginError,
    ConfigError,
    DuplicateComponentError,
    UnknownComponentError,
)
from rlhooks.core.registry import Registry


def test_builtins_are_registered_through_entry_points():
    from pathlib import Path

    try:
        import tomllib
    except ImportError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")

    from rlhooks.core.registry import GROUPS

    declared = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"]["entry-points"]
    reg = Registry()
    for kind, group in GROUPS.items():
        for name, value in declared.get(group, {}).items():
            info = reg.info(kind, name)
            assert (info.dist, info.value) == ("rlhooks", value)
            assert info.load() is not None  # every built-in imports
    assert "jsonl" in reg.names("backend") and "dapo" in reg.names("filter")


def test_unknown_name_lists_installed_names_with_did_you_mean():
    reg = Registry()
    with pytest.raises(UnknownComponentError) as err:
        reg.info("backend", "tensorbord")
    msg = str(err.value)
    assert "unknown backend 'tensorbord'" in msg
    assert "Did you mean 'tensorboard'" in msg
    assert "Installed backends:" in msg and "jsonl" in msg and "console" in msg


def test_unknown_name_that_exists_in_another_kind_points_to_the_right_section():
    with pytest.raises(UnknownComponentError, match="'dapo' is a filter: put it in the filters section"):
        Registry().info("backend", "dapo")


def test_same_name_from_two_distributions_names_both(third_party):
    reg = Registry()
    with pytest.raises(DuplicateComponentError) as err:
        reg.info("backend", "shared_name")
    msg = str(err.value)
    assert "alpha-plugins 1.0" in msg and "beta-plugins 2.3" in msg
    # a name only one of them registers still works
    assert reg.resolve("backend", "alpha_only").__module__ == "alpha_plugins"


def test_broken_plugin_error_names_entry_point_distribution_and_import_error(third_party):
    reg = Registry()
    with pytest.raises(BrokenPluginError) as err:
        reg.resolve("backend", "broken_one")
    msg = str(err.value)
    assert "'broken_one'" in msg and "broken_plugins:Backend" in msg
    assert "broken-plugins 0.1" in msg
    assert "ModuleNotFoundError" in msg and "a_module_that_does_not_exist_anywhere" in msg


def test_broken_plugin_breaks_only_runs_that_ask_for_it(third_party):
    import structlog

    reg = Registry()
    with structlog.testing.capture_logs() as logs:
        problems = reg.check_unrequested({("backend", "alpha_only")})
    assert len(problems) == 1 and "broken_one" in problems[0]  # a warning, not an error
    (warning,) = [e for e in logs if e.get("plugin") == "broken_one"]
    assert warning["log_level"] == "warning" and warning["distribution"] == "broken-plugins"
    assert "broken_plugins:Backend" in warning["event"] and "ModuleNotFoundError" in warning["event"]
    # a run that asks for it is not warned about it: it fails with the full error instead
    with structlog.testing.capture_logs() as logs:
        Registry().check_unrequested({("backend", "broken_one")})
    assert not [e for e in logs if e.get("plugin") == "broken_one"]
    with pytest.raises(ConfigError, match=r"(?s)backends\[0\] \(broken_one\).*ModuleNotFoundError"):
        load_config({"backends": ["broken_one"]}, registry=Registry())


def test_strict_mode_turns_unrequested_broken_plugins_into_errors(third_party):
    with pytest.raises(BrokenPluginError, match="(?s)strict plugin mode.*broken_one"):
        Registry(strict=True).check_unrequested(set())


def test_strict_mode_from_env(third_party, monkeypatch):
    monkeypatch.setenv("RLHOOKS_STRICT_PLUGINS", "1")
    with pytest.raises(BrokenPluginError):
        Registry().check_unrequested(set())


def test_disable_env_skips_plugins_by_entry_point_or_distribution_name(third_party, monkeypatch):
    monkeypatch.setenv("RLHOOKS_DISABLE_PLUGINS", "broken_one, beta-plugins")
    reg = Registry()
    assert reg.check_unrequested(set()) == []  # the broken one is not even imported
    assert reg.resolve("backend", "shared_name").__module__ == "alpha_plugins"  # beta disabled: no duplicate
    with pytest.raises(BrokenPluginError, match="disabled by RLHOOKS_DISABLE_PLUGINS"):
        reg.info("backend", "broken_one")


def test_plugins_list_cli_shows_third_party_and_broken(third_party):
    import json
    import os

    env = {**os.environ, "PYTHONPATH": str(third_party)}
    out = subprocess.run(
        [sys.executable, "-m", "rlhooks.cli", "plugins", "list", "--json", "--kind", "backend"],
        capture_output=True, text=True, env=env, check=True,
    ).stdout
    rows = {r["name"]: r for r in json.loads(out)}
    assert rows["alpha_only"]["distribution"] == "alpha-plugins"
    assert rows["alpha_only"]["hooks"] == ["log_metrics"]
    assert rows["broken_one"]["status"] == "broken" and "ModuleNotFoundError" in rows["broken_one"]["error"]
    assert rows["shared_name"]["status"].startswith("duplicate:")
    assert rows["jsonl"]["distribution"] == "rlhooks"


def test_half_installed_distribution_without_metadata_does_not_break_discovery(tmp_path, monkeypatch):
    # what an interrupted (or concurrent) pip install leaves: a .dist-info with entry points, no METADATA
    info = tmp_path / "half_done-0.1.dist-info"
    info.mkdir()
    (info / "entry_points.txt").write_text("[rlhooks.backends]\nhalf_done = half_done_module:Backend\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = Registry()
    entry = reg.info("backend", "half_done")
    assert (entry.dist, entry.version) == ("<unknown>", "?")
    assert "console" in reg.names("backend")  # the rest of discovery went on
    with pytest.raises(BrokenPluginError, match="half_done_module"):
        reg.resolve("backend", "half_done")


def test_a_distribution_whose_metadata_raises_reads_as_half_installed():
    """Python 3.15's importlib.metadata raises MetadataNotFound (a FileNotFoundError) where 3.10-3.13 read a missing
    METADATA as empty and 3.14 as None: all three read as the half-written distribution above."""
    from rlhooks.core.registry import _name_and_version

    class Missing(md.PathDistribution):  # 3.15's behaviour, on this Python's real distribution class
        @property
        def metadata(self):
            raise FileNotFoundError("METADATA")

    class NoMetadata(md.PathDistribution):  # 3.14's
        @property
        def metadata(self):
            return None

    for cls in (Missing, NoMetadata):
        assert _name_and_version(cls(Path("/nonexistent.dist-info"))) == ("<unknown>", "?")
    assert _name_and_version(None) == ("<unknown>", "?")
    rlhooks = next(d for d in md.distributions() if d.metadata["Name"] == "rlhooks")
    assert _name_and_version(rlhooks) == ("rlhooks", rlhooks.version)
