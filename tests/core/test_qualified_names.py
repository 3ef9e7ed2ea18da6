"""Qualified names ``<distribution>:<name>`` and how a bare name several distributions register resolves.

Against distributions really pip-installed into a temporary site directory (see conftest.py): a
third-party ``shadow-plugins`` registering a sampler ``learnability`` (a built-in name too), and
``alpha-plugins`` / ``beta-plugins`` sharing a backend name.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import structlog

from rlhooks.cli_core import plugin_rows
from rlhooks.core import registry as registry_module
from rlhooks.core.errors import ConfigError, DuplicateComponentError, UnknownComponentError
from rlhooks.core.registry import Registry
from rlhooks.host import load_config
from rlhooks.plugins.filters.dapo import DapoGroupFilter
from rlhooks.testing import FilterContract

from ..installed_sites import pip_install, shared_site, write_dist

SHADOW_CODE = '''
    class ShadowLearnability:
        """A sampler written before rlhooks had a built-in of the same name."""
'''


@pytest.fixture(scope="module")
def shadow_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    def install(root: Path) -> Path:
        src = write_dist(root, "shadow-plugins", "0.3", "shadow_plugins", SHADOW_CODE,
                         {"rlhooks.samplers": {"learnability": "shadow_plugins:ShadowLearnability"}})
        pip_install(root / "site", src)
        return root / "site"

    return shared_site(tmp_path_factory, "shadow", install)


@pytest.fixture
def shadowed(shadow_site: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.syspath_prepend(str(shadow_site))
    importlib.invalidate_caches()
    monkeypatch.setattr(registry_module, "_warned_shadows", set())  # each test sees its warning once
    return shadow_site


def _shadow_warnings(logs: list[dict]) -> list[dict]:
    return [e for e in logs if e["log_level"] == "warning" and "registered by rlhooks and by" in e["event"]]


def test_third_party_shadows_a_builtin_name_with_one_warning(shadowed):
    with structlog.testing.capture_logs() as logs:
        cfg = load_config({"sampler": "learnability"})
        again = load_config({"sampler": {"name": "learnability"}})
    assert cfg.sampler.obj.__module__ == "shadow_plugins" and again.sampler.obj is cfg.sampler.obj
    assert cfg.sampler.name == "learnability" and cfg.sampler.qualified_name == "shadow-plugins:learnability"
    (warning,) = _shadow_warnings(logs)  # once per process, not once per lookup
    assert "name the built-in rlhooks:learnability" in warning["event"]
    assert "shadow-plugins 0.3" in warning["event"] and warning["distribution"] == "shadow-plugins"


def test_qualified_names_pick_one_component_without_a_warning(shadowed):
    with structlog.testing.capture_logs() as logs:
        builtin = load_config({"sampler": "rlhooks:learnability"}).sampler
        third = load_config({"sampler": "shadow_plugins:learnability"}).sampler  # distribution names normalize
    assert not _shadow_warnings(logs)
    assert builtin.obj.__module__.startswith("rlhooks.plugins.") and third.obj.__module__ == "shadow_plugins"
    assert (builtin.name, builtin.qualified_name) == ("learnability", "rlhooks:learnability")
    # what `config check` prints loads back to the same component: the name as written
    assert load_config({"sampler": "rlhooks:learnability"}).resolved()["sampler"]["name"] == "rlhooks:learnability"


def test_qualified_name_through_set_overrides(shadowed):
    cfg = load_config({"sampler": "learnability"}, overrides=["sampler=rlhooks:learnability"])
    assert cfg.sampler.qualified_name == "rlhooks:learnability"
    cfg = load_config({"sampler": "learnability"}, overrides=["sampler.name=rlhooks:learnability"])
    assert cfg.sampler.qualified_name == "rlhooks:learnability"
    cfg = load_config({"filters": ["dapo"]}, overrides=["filters[0].name=rlhooks:filter_groups"])
    assert cfg.filters[0].qualified_name == "rlhooks:filter_groups" and cfg.filters[0].name == "filter_groups"


def test_disabling_the_third_party_by_qualified_name_brings_the_builtin_back(shadowed, monkeypatch):
    monkeypatch.setenv("RLHOOKS_DISABLE_PLUGINS", "shadow-plugins:learnability")
    with structlog.testing.capture_logs() as logs:
        assert Registry().info("sampler", "learnability").dist == "rlhooks"
    assert not _shadow_warnings(logs)


def test_two_third_parties_sharing_a_name_is_an_error_listing_qualified_names(third_party):
    with pytest.raises(DuplicateComponentError) as err:
        Registry().info("backend", "shared_name")
    assert "'alpha-plugins:shared_name' or 'beta-plugins:shared_name'" in str(err.value)
    with pytest.raises(ConfigError, match=r"(?s)backends\[0\] \(shared_name\).*'alpha-plugins:shared_name' or"):
        load_config({"backends": ["shared_name"]})
    cfg = load_config({"backends": ["beta-plugins:shared_name", "alpha-plugins:shared_name"]})
    assert [c.obj.__module__ for c in cfg.backends] == ["beta_plugins", "alpha_plugins"]


def test_unknown_qualified_names_say_what_exists(third_party):
    with pytest.raises(UnknownComponentError, match=r"unknown backend 'gamma:shared_name'.*registered by: "
                                                   r"alpha-plugins:shared_name, beta-plugins:shared_name"):
        Registry().info("backend", "gamma:shared_name")
    with pytest.raises(UnknownComponentError, match=r"did you mean 'alpha-plugins:alpha_only'\?.*alpha-plugins's "
                                                   r"backends: alpha-plugins:alpha_only, alpha-plugins:shared_name"):
        Registry().info("backend", "alpha-plugins:alpha_onyl")
    with pytest.raises(UnknownComponentError, match="no installed distribution named 'nobody' registers backends"):
        Registry().info("backend", "nobody:thing")


def test_plugins_list_shows_qualified_names_and_who_shadows_whom(shadowed, third_party):
    rows = {r["qualified_name"]: r for r in plugin_rows(Registry())}
    assert rows["rlhooks:learnability"]["status"] == (
        "shadowed by shadow-plugins:learnability: name it rlhooks:learnability")
    assert rows["shadow-plugins:learnability"]["status"] == "shadows rlhooks:learnability"
    shared = rows["alpha-plugins:alpha_only"]["status"]  # shared_name is an alias of alpha_only
    assert shared.startswith("duplicate: ") and shared.endswith(
        "name one: alpha-plugins:shared_name or beta-plugins:shared_name")
    assert rows["rlhooks:jsonl"]["status"] == "ok"


def test_contract_kit_accepts_a_qualified_entry_point_name(shadowed):
    kit = FilterContract()
    kit.test_entry_point_resolves("rlhooks:dapo", DapoGroupFilter, {}, "filter")
    kit.test_entry_point_resolves("dapo", DapoGroupFilter, {}, "filter")
    with pytest.raises(UnknownComponentError, match="unknown filter 'shadow-plugins:dapo'"):
        kit.test_entry_point_resolves("shadow-plugins:dapo", DapoGroupFilter, {}, "filter")
