"""Plugin mistakes caught at run time, not only by the contract kit (real installed plugins)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from rlhooks import Batch, PluginError, hookimpl
from rlhooks.host import RunManager, load_config
from rlhooks.core.data import DatasetColumns
from rlhooks.core.manager import Registered, SamplerStateError
from rlhooks.core.registry import Registry

from .manager_helpers import batch, manager

DATA = DatasetColumns.from_arrays(["a", "b", "a", "b"])


# -- methods named like hooks but not decorated -----------------------------------------------


def test_undecorated_and_misspelled_hook_methods_are_named_at_run_start(tmp_path, reg, capsys):
    manager({"plugins": ["sloppy"]}, tmp_path, reg)
    err = capsys.readouterr().err
    assert re.search(r"plugin 'sloppy' \(options-plugins 0\.2\) at plugins\[0\]: method 'log_metrics' is named like "
                     r"the hook 'log_metrics' but is not decorated with @hookimpl", err)
    assert "method 'on_step_ends' looks like a misspelling of the hook 'on_step_end'" in err
    assert "on_run_start" not in err  # decorated: fine


def test_engine_registered_objects_are_checked_too_and_builtins_are_clean(tmp_path, reg, capsys):
    class Forgot:
        def on_rewards_computed(self, step, batch):
            return {}

    manager({"filters": ["dapo"], "rewards": ["source_metrics", "reward_monitor", "check_answer"],
             "samples": ["top_bottom_k", "random_samples", "per_source_samples"],
             "backends": ["console", "jsonl"], "sampler": "multi_source"}, tmp_path, reg,
            extra_plugins=[("forgot", Forgot())]).build_sampler(DATA, batch_size=2)
    err = capsys.readouterr().err
    assert "plugin 'forgot' (engine) at forgot: method 'on_rewards_computed' is named like the hook" in err
    assert err.count("is not decorated") == 1  # none of the built-ins


def test_a_helper_spelled_near_a_hook_the_plugin_implements_is_not_called_a_misspelling(tmp_path, reg, capsys):
    class MlflowLike:
        @hookimpl
        def log_metrics(self, step, metrics):
            for k, v in metrics.items():
                self.log_metric(k, v, step)

        def log_metric(self, key, value, step):  # a helper, as in mlflow's client API
            pass

    class OnlyTheNearMiss:
        def log_metric(self, step, metrics):
            pass

    manager({}, tmp_path, reg, extra_plugins=[("mlflow_like", MlflowLike()), ("near_miss", OnlyTheNearMiss())])
    err = capsys.readouterr().err
    assert "'mlflow_like'" not in err
    assert "plugin 'near_miss' (engine) at near_miss: method 'log_metric' looks like a misspelling of the hook 'log_metrics'" in err


# -- samplers that cannot be resumed ----------------------------------------------------------


def test_sampler_without_state_gets_a_resume_warning(tmp_path, reg, capsys):
    m = manager({"sampler": "stateless"}, tmp_path, reg)
    assert m.build_sampler(DATA, batch_size=2) is not None
    err = capsys.readouterr().err
    assert ("sampler 'stateless' (options-plugins 0.2) at sampler has no state_dict or load_state_dict(): "
            "a resumed run will not restore its position") in err


def test_sampler_without_state_is_an_error_with_strict_plugins(tmp_path, third_party):
    reg = Registry(disabled=["broken-plugins"])  # strict mode would refuse that one first
    m = manager({"sampler": "stateless", "run": {"strict_plugins": True}}, tmp_path, reg)
    with pytest.raises(SamplerStateError, match=r"has no state_dict or load_state_dict\(\).*\n.*Strict plugin mode"):
        m.build_sampler(DATA, batch_size=2)


def test_a_sampler_with_state_gets_no_warning(tmp_path, reg, capsys):
    manager({"sampler": "FancySampler"}, tmp_path, reg).build_sampler(DATA, batch_size=2)
    assert "resumed run" not in capsys.readouterr().err


# -- on_error: raise shows the plugin's own frames; the hint only where it helps ---------------


def test_raise_shows_the_plugins_own_frames_and_the_warn_hint(tmp_path, reg):
    m = manager({"plugins": [{"name": "faulty", "on_error": "raise"}]}, tmp_path, reg)
    with pytest.raises(PluginError) as e:
        m.step_end(1, batch(), {})
    msg = str(e.value)
    assert msg.startswith("plugin 'faulty' from options-plugins 0.2 failed in on_step_end: BatchError:")
    frames = re.findall(r"options_plugins/__init__\.py:(\d+) in (\w+): (.*)", msg)
    # the hook, then its helper (innermost last), each with file:line and source; no rlhooks frames
    assert [f[1] for f in frames] == ["on_step_end", "_ratio"]
    assert frames[1][2] == 'return batch["reward"].sum() / batch["missing_column_total"]'
    assert "rlhooks/core" not in msg
    assert msg.rstrip().endswith("(set on_error: warn at plugins[0] to log and continue instead)")


def test_no_warn_hint_for_a_steering_sampler(tmp_path, reg):
    m = manager({"sampler": "FancySampler"}, tmp_path, reg)
    m.build_sampler(DATA, batch_size=2)
    with pytest.raises(PluginError, match="sampler cannot use these rewards") as e:
        m.rewards_computed(1, batch().with_columns(explode=np.zeros(4)))
    assert "on_error" not in str(e.value)
    assert re.search(r"options_plugins/__init__\.py:\d+ in on_rewards_computed: raise ValueError", str(e.value))


def test_no_warn_hint_when_a_component_cannot_be_built(tmp_path, reg):
    with pytest.raises(PluginError) as e:
        manager({"plugins": ["exploding"]}, tmp_path, reg)
    msg = str(e.value)
    assert "failed in __init__: OSError: no disk" in msg and "on_error: warn" not in msg
    assert re.search(r"options_plugins/__init__\.py:\d+ in __init__: raise OSError", msg)
    assert "check the options at plugins[0]" in msg


def test_a_filter_breaking_its_contract_is_called_a_bug_not_told_to_warn(tmp_path, reg):
    class HalfGroup:
        def select(self, b):
            return np.array([True, False, True, True])

    m = manager({}, tmp_path, reg)
    m.filters.append((Registered("half", "filter", "filters[0]", "half-filter 1.0", HalfGroup(), "raise"), HalfGroup()))
    with pytest.raises(PluginError, match="kept only part of a group") as e:
        m.apply_filters(batch())
    msg = str(e.value)
    assert "a bug in half-filter 1.0" in msg and "on_error: warn" not in msg
    # raised by core's check, so the message points at the filter's select() instead
    assert re.search(r"test_plugin_mistakes\.py:\d+ in select \(the implementation that returned it\)", msg)


def test_no_warn_hint_for_objects_the_engine_registered(tmp_path, reg):
    class Boom:
        @hookimpl
        def log_metrics(self, step, metrics):
            raise ValueError("disk full")

    m = manager({}, tmp_path, reg, extra_plugins=[("boom", Boom())])
    m.components[-1].on_error = "raise"
    with pytest.raises(PluginError, match="failed in log_metrics: ValueError: disk full") as e:
        m.log_metrics(1, {"x": 1})
    assert "on_error" not in str(e.value)
    assert re.search(r"test_plugin_mistakes\.py:\d+ in log_metrics: raise ValueError", str(e.value))


# -- hook wrappers: refused however the object is registered ------------------------------------


class _Wrapper:
    @hookimpl(wrapper=True)
    def on_step_end(self, step):
        return (yield)


class _OldWrapper:
    @hookimpl(hookwrapper=True)
    def log_metrics(self, step, metrics):
        yield


def test_a_wrapper_registered_by_the_engine_is_refused_naming_it(tmp_path, reg):
    from rlhooks.core.manager import HookValidationError

    with pytest.raises(HookValidationError, match=r"plugin 'wrapping' \(engine\) at wrapping does not match the hook "
                                                  r"contract: .*on_step_end is a hook wrapper \(wrapper=True\)"):
        manager({}, tmp_path, reg, extra_plugins=[("wrapping", _Wrapper())])
    try:
        manager({}, tmp_path, reg, extra_plugins=[("wrapping", _Wrapper())])
    except HookValidationError as exc:
        assert "Hooks are:" not in str(exc)  # the hook list answers a misspelling, not a wrapper


def test_a_wrapper_registered_on_the_plugin_manager_directly_is_refused_not_called_wrongly(tmp_path, reg):
    import pluggy

    m = manager({}, tmp_path, reg)
    with pytest.raises(pluggy.PluginValidationError, match=r"old: log_metrics is a hook wrapper \(hookwrapper=True\)"):
        m.pm.register(_OldWrapper(), name="old")
    assert m.pm.get_plugin("old") is None  # nothing half-registered
    assert m.call("log_metrics", step=1, metrics={}) == []  # no generator handed back as a result


def test_a_module_plugin_shows_its_own_frames(tmp_path, reg, monkeypatch):
    pkg = tmp_path / "site" / "mod_plugin_under_test"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "from rlhooks import hookimpl\n\n\n"
        "def _ratio(batch):\n    return batch['reward'].sum() / batch['nope']\n\n\n"
        "@hookimpl\ndef on_rewards_computed(step, batch):\n    return {'m': _ratio(batch)}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    import importlib

    module = importlib.import_module("mod_plugin_under_test")
    m = manager({}, tmp_path, reg, extra_plugins=[("mod", module)])
    m.components[-1].on_error = "raise"
    with pytest.raises(PluginError) as e:
        m.rewards_computed(1, batch())
    frames = re.findall(r"mod_plugin_under_test/__init__\.py:(\d+) in (\w+)", str(e.value))
    assert [f[1] for f in frames] == ["on_rewards_computed", "_ratio"]


# -- anything in the rewards group scores, or the config is refused ------------------------------


def test_a_callable_reward_class_without_the_base_class_scores(tmp_path, reg):
    m = manager({"rewards": [{"name": "length_reward", "scale": 2.0, "weight": 0.5}]}, tmp_path, reg)
    assert m.rewards.names == ["length_reward"]
    assert not [r for r in m.components if r.name == "length_reward"]  # not a hook plugin with no hooks
    res = m.rewards.score(["ab", "abcd"], ["x", "y"])
    assert res.components["length_reward"].tolist() == [4.0, 8.0] and res.total.tolist() == [2.0, 4.0]


@pytest.mark.parametrize("name, fix", [
    ("ambiguous_reward", "defines __call__ (a reward function) and hook methods (a reward observer), so rlhooks "
                         "cannot tell whether it scores; to score, subclass rlhooks.RewardFunction"),
    ("inert_reward", "neither scores (no __call__(self, response, target, **info)) nor implements a hook; "
                     "to score, subclass rlhooks.RewardFunction and define __call__"),
])
def test_a_reward_entry_that_would_never_score_is_refused_naming_the_fix(name, fix, reg):
    from rlhooks import ConfigError

    with pytest.raises(ConfigError) as err:
        load_config({"rewards": [name]}, registry=reg)
    assert "rewards[0]" in str(err.value) and "(options-plugins 0.2) is in rlhooks.rewards but " + fix in str(err.value)


def test_plugins_list_shows_a_callable_reward_class_as_a_reward(third_party, capsys):
    import json

    from rlhooks.cli import main

    assert main(["plugins", "list", "--kind", "reward", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["length_reward"]["role"] == "reward function" and rows["length_reward"]["status"] == "ok"
    assert rows["check_answer"]["role"] == "reward function" and rows["reward_monitor"]["role"] == "observer"
    assert rows["inert_reward"]["status"] == "unusable" and "neither scores" in rows["inert_reward"]["error"]
    assert main(["plugins", "list", "--kind", "reward"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.strip().startswith("length_reward"))
    assert "hooks: - (scores as a reward function)" in line


def test_the_verl_adapter_builds_a_callable_reward_class_with_its_options(third_party):
    from rlhooks.engines.verl.reward_function import compute_score

    out = compute_score("src", "abcd", "x", functions=["length_reward"], options={"length_reward": {"scale": 0.5}})
    assert out["length_reward"] == 2.0 and out["score"] == 2.0 and out["reward_errors"] == 0.0
