"""RunManager: registration, hook contract validation, error policy, tracing, state."""

import numpy as np
import pytest

from rlhooks import Batch, PluginError, hookimpl
from rlhooks.host import RunManager, load_config
from rlhooks.core.data import DatasetColumns
from rlhooks.core.manager import MAX_CONSECUTIVE_FAILURES, NAMES_KEY, HookValidationError

from .manager_helpers import batch, manager


class Flaky:
    def __init__(self, fail_times):
        self.fail_times = fail_times
        self.calls = 0

    @hookimpl
    def on_rewards_computed(self, step):
        self.calls += 1
        if self.calls <= self.fail_times:
            raise RuntimeError(f"flaky failure {self.calls}")
        return {"flaky/ok": 1}


def test_components_registered_in_config_order_and_called_in_order(tmp_path, reg):
    order = []

    class Rec:
        def __init__(self, tag):
            self.tag = tag

        @hookimpl
        def log_metrics(self, step, metrics):
            order.append(self.tag)

    m = manager({"backends": ["alpha_only", {"name": "opt_backend", "log_dir": "x"}]}, tmp_path, reg,
                extra_plugins=[("first_extra", Rec("x1")), ("second_extra", Rec("x2"))])
    assert [c.name for c in m.components] == ["alpha_only", "opt_backend", "first_extra", "second_extra"]
    with m.running():  # backends log on their own threads; run end flushes them
        m.log_metrics(1, {"a": 1.0})
    assert order == ["x1", "x2"]
    alpha, opt = m.components[0].obj, m.components[1].obj
    assert alpha.seen == [(1, {"a": 1.0})] and opt.logged == [1]


def test_misspelled_hook_is_a_clear_error(tmp_path, reg):
    with pytest.raises(HookValidationError) as err:
        manager({"plugins": ["typo_plugin"]}, tmp_path, reg)
    msg = str(err.value)
    assert "typo_plugin" in msg and "options-plugins 0.2" in msg and "on_reward_computed" in msg
    assert "on_rewards_computed" in msg  # the hint lists the real hook


def test_hookimpl_asking_for_unknown_argument_is_rejected(tmp_path, reg):
    class BadArgs:
        @hookimpl
        def on_step_end(self, step, batch, not_an_argument):
            return None

    with pytest.raises(HookValidationError, match="not_an_argument"):
        manager({}, tmp_path, reg, extra_plugins=[("bad", BadArgs())])


def test_backend_logging_hook_with_unknown_argument_is_rejected_at_start(tmp_path, reg):
    """Logging backends run behind a dispatch proxy; their own signatures are still checked."""
    with pytest.raises(HookValidationError) as err:
        manager({"backends": ["wrong_arg_backend"]}, tmp_path, reg)
    msg = str(err.value)
    assert "backend 'wrong_arg_backend' (options-plugins 0.2) at backends[0]" in msg and "metrix" in msg


def test_warn_policy_isolates_and_disables_after_repeated_failures(tmp_path, reg, capsys):
    flaky, healthy = Flaky(fail_times=100), Flaky(fail_times=0)
    m = manager({}, tmp_path, reg, extra_plugins=[("flaky", flaky), ("healthy", healthy)])
    for step in range(1, 6):
        out = m.rewards_computed(step, batch())
        assert out == {"flaky/ok": 1}  # the healthy plugin's result always arrives
    assert flaky.calls == MAX_CONSECUTIVE_FAILURES  # not called once disabled
    assert healthy.calls == 5
    logs = capsys.readouterr().err
    assert logs.count("failed in on_rewards_computed") == 1  # logged once
    assert "disabled after 3 consecutive failure(s)" in logs


def test_warn_policy_resets_on_success(tmp_path, reg):
    flaky = Flaky(fail_times=MAX_CONSECUTIVE_FAILURES - 1)
    m = manager({}, tmp_path, reg, extra_plugins=[("flaky", flaky)])
    for step in range(1, 6):
        m.rewards_computed(step, batch())
    rec = m.components[-1]
    assert not rec.disabled and flaky.calls == 5 and rec.total_failures == MAX_CONSECUTIVE_FAILURES - 1


def test_raise_policy_names_plugin_and_distribution(tmp_path, reg):
    class Boom:
        @hookimpl
        def log_metrics(self, step, metrics):
            raise ValueError("disk full")

    m2 = manager({}, tmp_path, reg, extra_plugins=[("boom", Boom())])
    m2.components[-1].on_error = "raise"
    with pytest.raises(PluginError, match="plugin 'boom' from engine failed in log_metrics: ValueError: disk full"):
        m2.log_metrics(1, {"x": 1})


def test_default_on_error_steering_components_raise_observers_warn(tmp_path, reg):
    cfg = load_config({"sampler": "FancySampler", "filters": ["dapo"], "rewards": ["const_reward", "source_metrics"],
                       "samples": ["top_bottom_k"], "backends": ["alpha_only"], "plugins": ["counter"]}, registry=reg)
    assert {c.path: c.on_error for c in cfg.components()} == {
        "sampler": "raise", "filters[0]": "raise", "rewards[0]": "warn", "rewards[1]": "warn",
        "samples[0]": "warn", "backends[0]": "warn", "plugins[0]": "warn",
    }
    # a steering component configured by name, failing in a hook: the run stops, naming it
    m = RunManager(cfg, registry=reg, run_dir=tmp_path)
    m.build_sampler(DatasetColumns.from_arrays(["a", "b", "a", "b"]), batch_size=2)
    assert m.rewards_computed(1, batch())["fancy/feedback"] == 1.0
    with pytest.raises(PluginError, match="plugin 'FancySampler' from options-plugins 0.2 failed in "
                                          "on_rewards_computed: ValueError: sampler cannot use these rewards"):
        m.rewards_computed(2, batch().with_columns(explode=np.zeros(4)))


def test_disable_policy_disables_at_first_failure(tmp_path, reg):
    flaky = Flaky(fail_times=1)
    m = manager({}, tmp_path, reg, extra_plugins=[("flaky", flaky)])
    m.components[-1].on_error = "disable"
    m.rewards_computed(1, batch())
    m.rewards_computed(2, batch())
    assert m.components[-1].disabled and flaky.calls == 1


def test_steering_filter_raises_by_default(tmp_path, reg):
    class BadFilter:
        def select(self, b):
            raise KeyError("acc")

    m = manager({}, tmp_path, reg)
    from rlhooks.core.manager import Registered

    m.filters.append((Registered("bad", "filter", "filters[0]", "test", BadFilter(), "raise"), BadFilter()))
    with pytest.raises(PluginError, match="plugin 'bad' from test failed in select"):
        m.apply_filters(batch())


def test_filter_keeping_part_of_a_group_is_rejected(tmp_path, reg):
    class HalfGroup:
        def select(self, b):
            return np.array([True, False, True, True])

    m = manager({}, tmp_path, reg)
    from rlhooks.core.manager import Registered

    m.filters.append((Registered("half", "filter", "filters[0]", "test", HalfGroup(), "raise"), HalfGroup()))
    with pytest.raises(PluginError, match="kept only part of a group"):
        m.apply_filters(batch())


def test_metric_hook_returning_garbage_is_a_plugin_failure(tmp_path, reg, capsys):
    class Garbage:
        @hookimpl
        def on_step_end(self):
            return {"ok": "not a number"}

    m = manager({}, tmp_path, reg, extra_plugins=[("garbage", Garbage())])
    assert m.step_end(1, batch(), {}) == {}
    assert "metric 'ok' must be a number" in capsys.readouterr().err


def test_running_fires_run_end_with_status_even_on_failure(tmp_path, reg):
    statuses = []

    class End:
        @hookimpl
        def on_run_end(self, status):
            statuses.append(status)

    m = manager({}, tmp_path, reg, extra_plugins=[("end", End())])
    with pytest.raises(RuntimeError):
        with m.running():
            raise RuntimeError("training crashed")
    with m.running():
        pass
    assert statuses == ["failed", "success"]


def test_tables_emitted_through_context_are_dispatched_after_metrics(tmp_path, reg):
    seen = []

    class Emitter:
        @hookimpl
        def on_run_start(self, run):
            self.run = run

        @hookimpl
        def on_step_end(self, step):
            self.run.log_table("t", [{"a": 1}])
            self.run.log_histogram("h", np.array([1.0, np.nan, 2.0]))

    class Sink:
        @hookimpl
        def log_metrics(self, step, metrics):
            seen.append(("metrics", step))

        @hookimpl
        def log_table(self, step, name, rows):
            seen.append(("table", step, name, rows))

        @hookimpl
        def log_histogram(self, step, name, values):
            seen.append(("hist", step, name, values.tolist()))

    from rlhooks.host import StepDriver

    m = manager({}, tmp_path, reg, extra_plugins=[("emitter", Emitter()), ("sink", Sink())])
    with m.running():
        StepDriver(m).finish_step(3, batch(), {"x": 1.0})
        m.log_table(4, "direct", [{"b": 2}])  # the typed helpers call the hooks directly
        m.log_histogram(4, "direct", np.array([0.5]))
    assert seen == [("metrics", 3), ("table", 3, "t", [{"a": 1}]), ("hist", 3, "h", [1.0, 2.0]),
                    ("table", 4, "direct", [{"b": 2}]), ("hist", 4, "direct", [0.5])]


def test_run_strict_plugins_holds_with_an_engine_registry(tmp_path, reg):
    """run.strict_plugins applies even when the engine passes its own (non-strict) registry."""
    from rlhooks.core.errors import BrokenPluginError

    assert not reg.strict
    with pytest.raises(BrokenPluginError, match="(?s)strict plugin mode.*broken_one"):
        manager({"run": {"strict_plugins": True}}, tmp_path, reg)
    manager({}, tmp_path, reg)  # without it: a warning only


@pytest.mark.parametrize("switch", ["env", "config", "off"])
def test_tracing_logs_each_hook_call(switch, tmp_path, reg, monkeypatch, capsys):
    from rlhooks.logging import configure_logging

    configure_logging(verbose=True)
    monkeypatch.delenv("RLHOOKS_TRACE", raising=False)
    if switch == "env":
        monkeypatch.setenv("RLHOOKS_TRACE", "1")
    try:
        m = manager({"run": {"trace_hooks": switch == "config"}}, tmp_path, reg, extra_plugins=[("healthy", Flaky(0))])
        m.rewards_computed(1, batch())
    finally:
        configure_logging()
    out = capsys.readouterr().err
    traced = "hook" in out and "on_rewards_computed" in out and "plugin=healthy" in out and "ms=" in out
    assert traced == (switch != "off"), out


def test_sampler_built_by_engine_and_state_round_trip(tmp_path, reg):
    m = manager({"sampler": {"name": "FancySampler", "temperature": 0.5}, "plugins": ["counter"]}, tmp_path, reg)
    s = m.build_sampler(DatasetColumns.from_arrays(["a", "b", "a"]), batch_size=2)
    assert list(s) == [0, 1, 2] and s.options.temperature == 0.5 and m.sampler is s
    m.step_end(1, batch(), {})
    m.step_end(2, batch(), {})
    state = m.state_dict()
    assert state["plugins[0]"] == {"calls": [1, 2]} and "sampler" in state
    m2 = manager({"sampler": "FancySampler", "plugins": ["counter"]}, tmp_path, reg)
    m2.load_state_dict(state)
    assert m2.step_end(3, batch(), {}) == {"counter/steps": 3}


def test_a_resumed_run_whose_plugin_list_changed_restores_each_state_into_its_saver(tmp_path, reg):
    """State is saved by config path; a resumed config with a plugin added in front (or the list
    reordered) restores it into the component of the same name, not into whatever is now at that path."""
    m = manager({"plugins": ["counter"]}, tmp_path, reg)
    m.step_end(1, batch(), {})
    state = m.state_dict()
    assert state[NAMES_KEY] == {"plugins[0]": "counter"}
    resumed = manager({"plugins": ["sloppy", "counter"]}, tmp_path, reg)  # sloppy keeps no state
    resumed.load_state_dict(state)
    assert resumed.step_end(2, batch(), {}) == {"counter/steps": 2}
    # a state saved before the names were kept loads by path, as it always did
    older = manager({"plugins": ["counter"]}, tmp_path, reg)
    older.load_state_dict({k: v for k, v in state.items() if k != NAMES_KEY})
    assert older.step_end(2, batch(), {}) == {"counter/steps": 2}


def test_constructor_failure_names_the_plugin(tmp_path, reg):
    with pytest.raises(PluginError, match="'exploding' from options-plugins 0.2 failed in __init__: OSError: no disk"):
        manager({"plugins": ["exploding"]}, tmp_path, reg)


def test_on_step_end_sees_metrics_returned_by_earlier_implementations(tmp_path, reg):
    seen = {}

    class Early:
        @hookimpl
        def on_step_end(self, metrics):
            return {"early/x": 2.0}

    class Watcher:
        @hookimpl(trylast=True)
        def on_step_end(self, metrics):
            seen.update(metrics)
            return {"watch/saw_early": float("early/x" in metrics)}

    m = manager({}, tmp_path, reg, extra_plugins=[("watcher", Watcher()), ("early", Early())])
    engine = {"actor/ppo_kl": 0.1}
    out = m.step_end(1, batch(), engine)
    assert seen == {"actor/ppo_kl": 0.1, "early/x": 2.0}
    assert out == {"early/x": 2.0, "watch/saw_early": 1.0}
    assert engine == {"actor/ppo_kl": 0.1}  # the caller's dict is not touched
