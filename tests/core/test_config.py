"""Every config error form: what, where (file, key path, plugin), what to do."""

import textwrap

import pytest

from rlhooks import ConfigError
from rlhooks.host import load_config
from rlhooks.core.config import REDACTED, redact_secrets


def write(tmp_path, text):
    p = tmp_path / "cfg.yaml"
    p.write_text(textwrap.dedent(text))
    return p


def issues(exc_info):
    return [str(i) for i in exc_info.value.issues]


def test_bare_names_and_mappings(reg, tmp_path):
    cfg = load_config(write(tmp_path, """\
        run: {name: t, steps: 3}
        backends:
          - alpha_only
          - {name: opt_backend, log_dir: /tmp/x, interval: 5}
        rewards: [{name: const_reward, weight: 2.5}]
    """), registry=reg)
    assert cfg.run.steps == 3 and cfg.run.name == "t"
    assert [c.name for c in cfg.backends] == ["alpha_only", "opt_backend"]
    assert cfg.backends[1].options.interval == 5 and cfg.backends[1].options.mode == "online"
    assert cfg.backends[1].path == "backends[1]" and cfg.backends[1].distribution == "options-plugins 0.2"
    assert cfg.rewards[0].is_reward_function and cfg.rewards[0].weight == 2.5


def test_unknown_option_has_path_plugin_and_did_you_mean(reg):
    with pytest.raises(ConfigError) as err:
        load_config({"backends": ["alpha_only", {"name": "opt_backend", "log_dri": "x"}]}, registry=reg)
    msgs = issues(err)
    assert "backends[1] (opt_backend): option 'log_dri' is not known; did you mean 'log_dir'?" in msgs
    # log_dir is then missing too, reported in the same error
    assert any("backends[1]" in m and "log_dir" in m and "missing" in m for m in msgs), msgs


def test_all_errors_reported_at_once_with_file_name(reg, tmp_path):
    path = write(tmp_path, """\
        run: {steps: -1, seeed: 3}
        backend: [console]
        filters: [nonexistent_filter]
        backends:
          - {name: opt_backend, log_dir: 3.5, interval: "many", mode: cloud, ratio: 2.0}
    """)
    with pytest.raises(ConfigError) as err:
        load_config(path, registry=reg)
    text = str(err.value)
    assert str(path) in text
    msgs = issues(err)
    assert "backend: section 'backend' is not known; did you mean 'backends'?" in msgs
    assert "run: option 'seeed' is not known; did you mean 'seed'?" in msgs
    assert any(m.startswith("run.steps: must be > 0") for m in msgs), msgs
    assert any(m.startswith("filters[0] (nonexistent_filter): unknown filter 'nonexistent_filter'") for m in msgs)
    assert any(m.startswith("backends[0].interval (opt_backend): expected an integer, got 'many'") for m in msgs), msgs
    assert any(m.startswith("backends[0].mode (opt_backend): must be one of") and "cloud" in m for m in msgs), msgs
    assert any(m.startswith("backends[0].ratio (opt_backend):") and "2.0" in m for m in msgs), msgs
    assert err.value.issues and len(msgs) >= 7


def test_nested_options_errors_have_paths_down_to_the_leaf(reg):
    with pytest.raises(ConfigError) as err:
        load_config({"sampler": {"name": "FancySampler", "stages": [
            {"level": 1}, {"level": "high", "mod": "slow"}, {"mode": "warp"}]}}, registry=reg)
    msgs = issues(err)
    assert "sampler.stages[1].level (FancySampler): expected an integer, got 'high'" in msgs, msgs
    assert "sampler.stages[1] (FancySampler): option 'mod' is not known; did you mean 'mode'?" in msgs, msgs
    assert "sampler.stages[2] (FancySampler): required option 'level' is missing" in msgs, msgs
    assert any(m.startswith("sampler.stages[2].mode (FancySampler): must be one of") and "warp" in m for m in msgs), msgs
    cfg = load_config({"sampler": {"name": "FancySampler", "stages": [{"level": 2, "mode": "slow"}]}}, registry=reg)
    assert cfg.sampler.options.stages[0].level == 2 and cfg.resolved()["sampler"]["stages"] == [{"level": 2, "mode": "slow"}]


def test_type_coercions_are_strict(reg):
    with pytest.raises(ConfigError, match=r"run.trace_hooks: expected true or false, got 'maybe'"):
        load_config({"run": {"trace_hooks": "maybe"}}, registry=reg)
    with pytest.raises(ConfigError, match=r"run.seed: expected an integer, got 1.5"):
        load_config({"run": {"seed": 1.5}}, registry=reg)
    # YAML 1.1 reads 1e-3 as a string; a float option still accepts it
    cfg = load_config({"sampler": {"name": "FancySampler", "temperature": "1e-3"}}, registry=reg)
    assert cfg.sampler.options.temperature == pytest.approx(1e-3)


def test_section_that_is_not_a_mapping_is_an_error(reg):
    assert load_config({"run": None}, registry=reg).run.steps == 100  # `run:` with nothing under it
    for value in ([], "", 0, False):
        with pytest.raises(ConfigError, match="run: expected a mapping of options, got"):
            load_config({"run": value}, registry=reg)


def test_component_shape_errors(reg):
    with pytest.raises(ConfigError) as err:
        load_config({"backends": [{"log_dir": "x"}, 42], "filters": "x: y"}, registry=reg)
    msgs = issues(err)
    assert any(m.startswith("backends[0]: component has no 'name'") for m in msgs)
    assert any(m.startswith("backends[1]: a component is a name or a mapping") for m in msgs)


def test_function_reward_takes_only_weight_and_error_score(reg):
    with pytest.raises(ConfigError) as err:
        load_config({"rewards": [{"name": "const_reward", "weight": "heavy", "scale": 2}]}, registry=reg)
    msgs = issues(err)
    assert "rewards[0].weight (const_reward): expected a number, got 'heavy'" in msgs
    assert any("option 'scale' is not known" in m and "weight, error_score" in m for m in msgs)


def test_on_error_is_validated(reg):
    with pytest.raises(ConfigError, match=r"backends\[0\].on_error \(alpha_only\): must be one of raise, warn, disable"):
        load_config({"backends": [{"name": "alpha_only", "on_error": "ignore"}]}, registry=reg)


def test_verl_extensions_sampler_block_verbatim(reg):
    cfg = load_config({"sampler": {"class_name": "FancySampler", "class_path": "pkg://verl_extensions.multi_source_sampler",
                                   "temperature": 0.3, "source_weights": {"a": 1.0}}}, registry=reg)
    assert cfg.sampler.name == "FancySampler" and cfg.sampler.options.temperature == 0.3
    with pytest.raises(ConfigError, match="either 'name' or 'class_name'"):
        load_config({"sampler": {"class_name": "FancySampler", "name": "FancySampler"}}, registry=reg)


def test_class_path_imports_a_user_class_directly(reg):
    cfg = load_config({"sampler": {"class_name": "FancySampler", "class_path": "pkg://options_plugins"}}, registry=reg)
    assert cfg.sampler.distribution == "options_plugins (class_path)"
    with pytest.raises(ConfigError, match="cannot import 'no_such_module_here'"):
        load_config({"sampler": {"class_name": "X", "class_path": "no_such_module_here"}}, registry=reg)


def test_deprecated_alias_resolves_and_is_logged(reg, capsys):
    cfg = load_config({"sampler": "OldFancySampler"}, registry=reg)
    assert cfg.sampler.obj.__name__ == "FancySampler"
    assert "'OldFancySampler' is deprecated; use 'FancySampler'" in capsys.readouterr().err


def test_yaml_syntax_error_names_file_and_line(tmp_path, reg):
    path = write(tmp_path, "run:\n  steps: [1, 2\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, registry=reg)
    assert str(path) in str(err.value) and "line" in str(err.value) and "not valid YAML" in str(err.value)


def test_yaml_is_loaded_safely(tmp_path, reg):
    path = write(tmp_path, "run: !!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(path, registry=reg)


def test_top_level_must_be_a_mapping_and_missing_file(tmp_path, reg):
    with pytest.raises(ConfigError, match="the top level must be a mapping"):
        load_config(write(tmp_path, "- a\n- b\n"), registry=reg)
    with pytest.raises(ConfigError, match="cannot read the file"):
        load_config(tmp_path / "nope.yaml", registry=reg)


def test_overrides(reg):
    cfg = load_config(
        {"run": {"steps": 5}, "backends": ["alpha_only", {"name": "opt_backend", "log_dir": "a"}]},
        overrides=["run.steps=7", "run.name=over", "backends[1].interval=3", "backends[0].on_error=disable"],
        registry=reg,
    )
    assert cfg.run.steps == 7 and cfg.run.name == "over"
    assert cfg.backends[1].options.interval == 3 and cfg.backends[0].on_error == "disable"
    with pytest.raises(ConfigError, match="key.path=value"):
        load_config({}, overrides=["nonsense"], registry=reg)


def test_secrets_redacted_in_resolved_config(reg):
    cfg = load_config({"backends": [{"name": "opt_backend", "log_dir": "x", "api_key": "sk-123"}]}, registry=reg)
    text = cfg.to_yaml()
    assert "sk-123" not in text and REDACTED in text
    assert "sk-123" in cfg.to_yaml(redact=False)
    nested = redact_secrets({"a": {"wandb_token": "t", "password": "p", "key": "reward", "max_tokens": 512}})
    assert nested == {"a": {"wandb_token": REDACTED, "password": REDACTED, "key": "reward", "max_tokens": 512}}


def test_resolved_config_fills_defaults(reg):
    cfg = load_config({"backends": [{"name": "opt_backend", "log_dir": "x"}]}, registry=reg)
    resolved = cfg.resolved()
    assert resolved["run"]["train_batch_size"] == 32
    assert resolved["backends"][0] == {
        "name": "opt_backend", "log_dir": "x", "interval": 1, "mode": "online", "api_key": None,
        "ratio": 0.5, "on_error": "warn",
    }


def test_config_check_cli(reg, third_party, tmp_path, monkeypatch):
    import os
    import subprocess
    import sys

    good = write(tmp_path, "backends: [{name: opt_backend, log_dir: x, api_key: hunter2}]\n")
    env = {**os.environ, "PYTHONPATH": str(third_party)}
    out = subprocess.run([sys.executable, "-m", "rlhooks.cli", "config", "check", str(good)],
                         capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert "valid" in out.stdout and "hunter2" not in out.stdout and "interval: 1" in out.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("backends: [{name: opt_backend, log_dri: x}]\n")
    out = subprocess.run([sys.executable, "-m", "rlhooks.cli", "config", "check", str(bad)],
                         capture_output=True, text=True, env=env)
    assert out.returncode == 1
    assert "backends[0] (opt_backend): option 'log_dri' is not known; did you mean 'log_dir'?" in out.stderr
    assert "Traceback" not in out.stderr


def test_config_check_knows_engine_sections(tmp_path, capsys):
    from rlhooks.cli import main

    good = write(tmp_path, """\
        simulate: {rows_per_source: 10}
        verl: {data: {train_batch_size: 8}}
    """)
    assert main(["config", "check", str(good)]) == 0
    out = capsys.readouterr().out
    assert "rows_per_source: 10" in out and "train_batch_size: 8" in out
    bad = tmp_path / "bad.yaml"
    bad.write_text("simulate: {rows_per_sourc: 10}\nverll: {}\n")
    assert main(["config", "check", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "simulate: option 'rows_per_sourc' is not known; did you mean 'rows_per_source'?" in err
    assert "section 'verll' is not known; did you mean 'verl'?" in err


def test_negative_max_num_gen_batches_is_unlimited_and_a_bad_one_is_named_where_set(reg):
    """The dynamic-sampling document: "0 or negative means unlimited", on run: or on the dapo filter."""
    assert load_config({"run": {"max_num_gen_batches": -1}}, registry=reg).run.max_num_gen_batches == 0
    cfg = load_config({"filters": [{"name": "dapo", "metric": "acc", "max_num_gen_batches": -5}]}, registry=reg)
    assert cfg.run.max_num_gen_batches == 0
    with pytest.raises(ConfigError) as e:
        load_config({"filters": [{"name": "dapo", "max_num_gen_batches": "many"}]}, registry=reg)
    assert [i.path for i in e.value.issues] == ["filters[0].max_num_gen_batches"]
    assert "0 or negative = unlimited" in str(e.value)


def test_verl_sections_at_top_level_say_to_nest_them_under_verl(reg):
    with pytest.raises(ConfigError) as e:
        load_config({"algorithm": {"filter_groups": {"enable": True}}, "data": {"train_batch_size": 8}}, registry=reg)
    messages = {i.path: i.message for i in e.value.issues}
    assert set(messages) == {"algorithm", "data"}
    assert "nest it under 'verl:' (verl: {algorithm: ...})" in messages["algorithm"]
