"""Config composition for `rlhooks train`: override routing, the verl: section, clear conflicts."""

from __future__ import annotations

import copy
import textwrap

from omegaconf import OmegaConf

import pytest

pytest.importorskip("verl.trainer.ppo.ray_trainer", reason="needs verl[verl-core]")

from rlhooks import hookimpl  # noqa: E402
from rlhooks.cli import main as rlhooks_main  # noqa: E402
from rlhooks.core.errors import ConfigError  # noqa: E402
from rlhooks.engines.verl.config import rlhooks_config  # noqa: E402
from rlhooks.engines.verl.main import build_config, compose_verl_config, split_overrides  # noqa: E402

pytestmark = pytest.mark.verl


@pytest.fixture(autouse=True)
def _in_a_scratch_directory(tmp_path, monkeypatch):
    """A real start takes the run's lock and writes runs/<name>/ in the working directory: in the checkout, two
    xdist workers starting the default run (gsm8k) at once refused each other as 'in use' (CI, 2026-11-29)."""
    monkeypatch.chdir(tmp_path)


def test_split_overrides_routes_by_prefix():
    verl, rl, path = split_overrides([
        "data.train_batch_size=8", "+rlhooks.run.max_num_gen_batches=3", "rlhooks.filters[0].metric=score",
        "data.sampler.class_name=MultiSourceSampler", "rlhooks.config=x.yaml",
    ])
    assert verl == ["data.train_batch_size=8"]
    assert rl == ["run.max_num_gen_batches=3", "filters[0].metric=score", "sampler.class_name=MultiSourceSampler"]
    assert path == "x.yaml"


@pytest.mark.parametrize("dry_run", [["--dry-run"], []])
def test_a_key_verls_config_lacks_is_one_error_that_says_where_and_the_plus(tmp_path, capsys, monkeypatch, dry_run):
    """A verl key Hydra cannot override (misspelled, or new without its '+') was Hydra's traceback; now one
    problem line naming the key, where it was set, and the '+' that adds it, before Ray (dry run and start)."""
    from rlhooks.engines.verl import main as verl_main

    monkeypatch.setattr(verl_main, "run", lambda *a, **k: pytest.fail("rlhooks train started the run"))
    yaml_file = tmp_path / "rlhooks.yaml"
    yaml_file.write_text("filters: [dapo]\nverl: {trainer: {no_such_key: 1}}\n")
    assert rlhooks_main(["train", "--config", str(yaml_file), *dry_run]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert [line for line in err.splitlines() if line.startswith("error:")] == [
        f"error: invalid verl config (from {yaml_file} and the command line): 1 problem"], err
    assert ("  - verl.trainer.no_such_key: verl's config has no such key (set in the verl: section): check its "
            "spelling, or add it as a new key with a leading '+' ('+no_such_key:' in the verl: section)") in err, err
    (tmp_path / "ok.yaml").write_text("filters: [dapo]\n")
    assert rlhooks_main(["train", "--config", str(tmp_path / "ok.yaml"), *dry_run,
                         "ray_kwargs.ray_init.include_dashboard=true"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and ("  - verl.ray_kwargs.ray_init.include_dashboard: verl's config has no such key "
                                       "(set in the command line)") in err, err
    assert "(+ray_kwargs.ray_init.include_dashboard=<value>)" in err


def test_an_override_hydra_cannot_parse_is_hydras_message_in_one_problem(tmp_path):
    with pytest.raises(ConfigError) as caught:
        build_config(None, ["trainer.logger=[console"])
    (issue,) = caught.value.issues
    assert issue.path == "verl" and issue.message.startswith("Hydra could not compose verl's config: ")
    assert "[console" in issue.message and "\n" not in issue.message


def test_build_config_merges_yaml_verl_section_and_overrides(tmp_path):
    yaml_file = tmp_path / "rlhooks.yaml"
    yaml_file.write_text(textwrap.dedent("""
        run: {max_num_gen_batches: 5}
        filters: [{name: dapo, metric: acc}]
        verl:
          data: {train_batch_size: 16, gen_batch_size: 32}
          actor_rollout_ref: {rollout: {n: 4}}
          trainer: {logger: [console], experiment_name: from-yaml}
    """))
    cfg = build_config(str(yaml_file), ["data.train_batch_size=8", "rlhooks.run.max_num_gen_batches=7"])
    assert cfg.data.train_batch_size == 8  # the command line beats the file's verl: section
    assert cfg.data.gen_batch_size == 32 and list(cfg.trainer.logger) == ["console"]
    assert cfg.trainer.use_v1 is True  # verl's default trainer, not forced to legacy
    rl = rlhooks_config(cfg)
    assert (rl.run.train_batch_size, rl.run.gen_batch_size, rl.run.n) == (8, 32, 4)  # taken from verl
    assert rl.run.max_num_gen_batches == 7 and rl.run.name == "from-yaml"
    assert [f.name for f in rl.filters] == ["dapo"]


def test_conflicting_sizes_are_errors(tmp_path):
    yaml_file = tmp_path / "rlhooks.yaml"
    yaml_file.write_text("run: {train_batch_size: 64, n: 8}\n")
    with pytest.raises(ConfigError) as err:
        build_config(str(yaml_file), ["data.train_batch_size=8", "actor_rollout_ref.rollout.n=4"])
    msg = str(err.value)
    assert "rlhooks.run.train_batch_size: is 64 but verl's data.train_batch_size is 8" in msg
    assert "rlhooks.run.n: is 8 but verl's actor_rollout_ref.rollout.n is 4" in msg


def test_verl_style_sampler_maps_onto_the_rlhooks_sampler(tmp_path):
    yaml_file = tmp_path / "rlhooks.yaml"
    yaml_file.write_text("sampler: {name: some_sampler}\n")
    with pytest.raises(ConfigError, match="give either 'name' or 'class_name', not both"):
        build_config(str(yaml_file), ["data.sampler.class_name=Other"])
    # a verl: section entry is routed the same way; an unknown class_path is a clear error
    yaml_file.write_text("verl: {data: {sampler: {class_name: Nope, class_path: pkg://no_such_module}}}\n")
    with pytest.raises(ConfigError, match="class_path 'pkg://no_such_module': cannot import 'no_such_module'"):
        build_config(str(yaml_file), [])


#: what verl's validate_config needs beyond its defaults (no dynamic batch size): the micro batch sizes
MICRO = ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
         "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2"]


def test_rlhooks_train_dry_run_prints_both_configs(tmp_path, capsys):
    yaml_file = tmp_path / "rlhooks.yaml"
    yaml_file.write_text("filters: [dapo]\n")
    rc = rlhooks_main(["train", "--config", str(yaml_file), "--dry-run", "data.train_batch_size=4",
                       "actor_rollout_ref.actor.ppo_mini_batch_size=4", *MICRO, "trainer.n_gpus_per_node=1",
                       "algorithm.adv_estimator=grpo",
                       "actor_rollout_ref.rollout.n=2", "rlhooks.run.on_gen_limit=continue"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "train_batch_size: 4" in out and "# rlhooks (resolved)" in out
    assert "on_gen_limit: continue" in out and "name: dapo" in out


def test_unknown_filter_is_reported_before_ray(tmp_path, capsys):
    yaml_file = tmp_path / "rlhooks.yaml"
    yaml_file.write_text("filters: [dapoo]\n")
    assert rlhooks_main(["train", "--config", str(yaml_file), "--dry-run"]) == 1
    assert "filters[0]" in capsys.readouterr().err


def test_dry_run_runs_verls_own_validation(tmp_path, capsys):
    """--dry-run's verdict is the run's: verl's validate_config refuses what the run would refuse,
    as one error naming the verl keys, not a Hydra traceback."""
    yaml_file = tmp_path / "rlhooks.yaml"
    yaml_file.write_text("filters: [dapo]\nverl: {data: {train_batch_size: 4}, trainer: {n_gpus_per_node: 1},\n"
                         "       algorithm: {adv_estimator: grpo}}\n")
    assert rlhooks_main(["train", "--config", str(yaml_file), "--dry-run"]) == 1
    err = capsys.readouterr().err
    assert f"invalid verl config (from {yaml_file} and the command line): 1 problem" in err
    assert "validate_config refused" in err and "ppo_micro_batch_size_per_gpu" in err
    assert "Traceback" not in err
    assert rlhooks_main(["train", "--config", str(yaml_file), "--dry-run", *MICRO,
                         "actor_rollout_ref.actor.ppo_mini_batch_size=4"]) == 0


def _readme_verl_examples() -> tuple[list[str], list[list[str]]]:
    """The docs' and README's rlhooks YAML blocks with a verl: section, and their `rlhooks train --dry-run`
    commands (the verl guide, docs/how-to/verl.md, holds them)."""
    import re
    import shlex

    from ..docs.pages import pages

    text = "\n".join(p.read_text(encoding="utf-8") for p in pages())
    yamls = [b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if re.search(r"^verl:", b, re.M)]
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("#")[0].strip()
            if line.startswith("rlhooks train --dry-run"):
                commands.append(shlex.split(line)[3:])
    return yamls, commands


def test_every_verl_config_in_the_readme_and_scripts_passes_verls_validation(tmp_path):
    from pathlib import Path

    from rlhooks.engines.verl.main import validate_verl_config

    yamls, commands = _readme_verl_examples()
    assert yamls and commands, "the docs' verl examples moved: point this test at them"
    files = [tmp_path / f"readme_{i}.yaml" for i in range(len(yamls))]
    for f, text in zip(files, yamls):
        f.write_text(text)
    files.append(Path(__file__).resolve().parents[2] / "scripts" / "gpu_smoke.yaml")
    for f in files:
        cfg = build_config(str(f), [])
        validate_verl_config(cfg, str(f))  # raises ConfigError quoting verl
    for args in commands:
        validate_verl_config(build_config(None, args))


@pytest.mark.slow  # make test's 5-minute budget (CI runs slow tests)
def test_verl_plugins_entry_point_configures_worker_logging():
    """`import verl` loads rlhooks' verl.plugins entry point, which follows RLHOOKS_LOG_JSON (as Ray workers do)."""
    import json
    import os
    import subprocess
    import sys

    code = "import verl, structlog; structlog.get_logger('rlhooks.test').warning('from a worker', k=1)"
    env = {**os.environ, "RLHOOKS_LOG_JSON": "1", "VERL_USE_EXTERNAL_PLUGINS": "auto"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=True)
    lines = [ln for ln in (out.stdout + out.stderr).splitlines() if "from a worker" in ln]
    assert len(lines) == 1 and json.loads(lines[0])["k"] == 1  # JSON: the entry point configured structlog


# -- algorithm.filter_groups (the dynamic-sampling document's keys) ---------------------------------

DOC_KEYS = ["algorithm.filter_groups.enable=True", "algorithm.filter_groups.metric=acc",
            "algorithm.filter_groups.max_num_gen_batches=10", "data.gen_batch_size=1536",
            "data.train_batch_size=512", "actor_rollout_ref.rollout.n=5"]


def test_documents_filter_groups_command_shows_the_dapo_filter(capsys):
    import yaml

    assert rlhooks_main(["train", "--dry-run", *DOC_KEYS, *MICRO, "algorithm.adv_estimator=grpo"]) == 0
    resolved = yaml.safe_load(capsys.readouterr().out.split("# rlhooks (resolved)")[1])
    assert [(f["name"], f["metric"]) for f in resolved["filters"]] == [("dapo", "acc")]
    assert resolved["run"]["max_num_gen_batches"] == 10
    assert (resolved["run"]["train_batch_size"], resolved["run"]["gen_batch_size"], resolved["run"]["n"]) == (512, 1536, 5)


def test_filter_groups_metric_names_and_limits_map_like_verl():
    rl = rlhooks_config(build_config(None, ["algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=reward",
                                            "algorithm.filter_groups.max_num_gen_batches=-1"]))
    assert rl.filters[0].options.metric == "seq_reward" and rl.run.max_num_gen_batches == 0  # verl: <= 0 = no limit
    rl = rlhooks_config(build_config(None, ["algorithm.filter_groups.enable=true"]))  # verl's defaults: reward, 0
    assert rl.filters[0].options.metric == "seq_reward" and rl.run.max_num_gen_batches == 0
    # disabled: nothing added, rlhooks' own limit stays
    rl = rlhooks_config(build_config(None, ["algorithm.filter_groups.metric=acc", "rlhooks.run.max_num_gen_batches=3"]))
    assert rl.filters == () and rl.run.max_num_gen_batches == 3


def test_filter_groups_with_an_agreeing_rlhooks_dapo_entry_registers_it_once(tmp_path):
    yaml_file = tmp_path / "rlhooks.yaml"
    yaml_file.write_text("filters: [{name: dapo, min_mean: 0.1}]\nrun: {max_num_gen_batches: 10}\n")
    rl = rlhooks_config(build_config(str(yaml_file), DOC_KEYS))
    assert [(f.name, f.options.metric, f.options.min_mean) for f in rl.filters] == [("dapo", "acc", 0.1)]
    assert rl.run.max_num_gen_batches == 10


def test_filter_groups_conflicts_name_both_keys(tmp_path):
    yaml_file = tmp_path / "rlhooks.yaml"
    yaml_file.write_text("filters: [{name: dapo, metric: score}]\nrun: {max_num_gen_batches: 4}\n")
    with pytest.raises(ConfigError) as err:
        build_config(str(yaml_file), DOC_KEYS)
    msg = str(err.value)
    assert "rlhooks.filters[0].metric: is 'score' but verl's algorithm.filter_groups.metric is 'acc'" in msg
    assert "rlhooks.run.max_num_gen_batches: is 4 but verl's algorithm.filter_groups.max_num_gen_batches is 10" in msg
    # the document's grouping (the limit on the filter entry) is named as written
    yaml_file.write_text("filters: [{name: dapo, max_num_gen_batches: 4}]\n")
    with pytest.raises(ConfigError, match=r"rlhooks.filters\[0\].max_num_gen_batches: is 4 but verl's "
                                          r"algorithm.filter_groups.max_num_gen_batches is 10"):
        build_config(str(yaml_file), DOC_KEYS)


def test_max_num_gen_batches_on_the_dapo_entry_is_the_run_limit(tmp_path):
    from rlhooks.core.config import load_config

    yaml_file = tmp_path / "rlhooks.yaml"
    yaml_file.write_text("filters: [{name: dapo, metric: acc, max_num_gen_batches: 7}]\n")
    cfg = load_config(yaml_file)  # any engine: plain rlhooks YAML
    assert cfg.run.max_num_gen_batches == 7 and cfg.filters[0].options.metric == "acc"
    assert rlhooks_config(build_config(str(yaml_file), [])).run.max_num_gen_batches == 7  # and under verl
    yaml_file.write_text("run: {max_num_gen_batches: 3}\nfilters: [{name: dapo, max_num_gen_batches: 7}]\n")
    with pytest.raises(ConfigError, match=r"filters\[0\].max_num_gen_batches: is 7 but run.max_num_gen_batches is 3"):
        load_config(yaml_file)
    yaml_file.write_text("run: {max_num_gen_batches: 7}\nfilters: [{name: dapo, max_num_gen_batches: 7}]\n")
    assert load_config(yaml_file).run.max_num_gen_batches == 7  # the same value twice is fine


def test_source_metrics_on_by_default_under_verl_and_off_by_a_run_option():
    assert [c.name for c in rlhooks_config(build_config(None, [])).rewards] == ["source_metrics"]
    off = rlhooks_config(build_config(None, ["rlhooks.run.source_metrics=false"]))
    assert off.rewards == () and off.run.source_metrics is False
    listed = rlhooks_config(build_config(None, ["+rlhooks.rewards=[source_metrics]"]))
    assert [c.name for c in listed.rewards] == ["source_metrics"] and listed.rewards[0].path == "rewards[0]"


# -- a verl: section means the same to every command (the dynamic-sampling document, items 6-8) -----

DOC_SECTION = """\
verl:
  algorithm:
    filter_groups: {enable: true, metric: acc, max_num_gen_batches: 10}
  data: {gen_batch_size: 12, train_batch_size: 8}
  actor_rollout_ref: {rollout: {n: 4}}
  trainer: {total_training_steps: 2}
"""


@pytest.mark.parametrize("form", ["nested", "overrides"])
def test_config_check_simulate_and_train_read_a_verl_section_alike(form, tmp_path, capsys):
    import yaml

    from rlhooks.engines.sim.engine import load_sim_config

    text = DOC_SECTION if form == "nested" else (
        "verl: [algorithm.filter_groups.enable=true, algorithm.filter_groups.metric=acc,\n"
        "       algorithm.filter_groups.max_num_gen_batches=10, data.gen_batch_size=12, data.train_batch_size=8,\n"
        "       actor_rollout_ref.rollout.n=4, trainer.total_training_steps=2]\n")
    path = tmp_path / "doc.yaml"
    path.write_text(text)
    assert rlhooks_main(["config", "check", str(path)]) == 0
    checked = yaml.safe_load(capsys.readouterr().out)
    simulated = load_sim_config(str(path))
    trained = rlhooks_config(build_config(str(path), []))
    for cfg in (simulated, trained):
        run = cfg.run
        assert (run.train_batch_size, run.gen_batch_size, run.n, run.max_num_gen_batches) == (8, 12, 4, 10)
        assert [(f.name, f.options.metric) for f in cfg.filters] == [("dapo", "acc")]
    assert simulated.run.steps == trained.run.steps == checked["run"]["steps"] == 2
    assert {k: checked["run"][k] for k in ("train_batch_size", "gen_batch_size", "n", "max_num_gen_batches")} == {
        "train_batch_size": 8, "gen_batch_size": 12, "n": 4, "max_num_gen_batches": 10}
    assert [(f["name"], f["metric"]) for f in checked["filters"]] == [("dapo", "acc")]


def test_simulate_runs_a_config_with_a_verl_section(tmp_path, capsys):
    """What `config check` calls valid, `rlhooks simulate` runs (it used to refuse 'verl')."""
    import json

    path = tmp_path / "doc.yaml"
    path.write_text(DOC_SECTION)
    assert rlhooks_main(["simulate", str(path), "--out", str(tmp_path / "runs"), "--no-progress", "--no-report"]) == 0
    summary = json.loads(next((tmp_path / "runs").glob("*/summary.json")).read_text())
    assert summary["steps"] == 2


def test_a_disagreeing_run_key_names_both_keys_in_the_yaml(tmp_path):
    from rlhooks.engines.sim.engine import load_sim_config

    path = tmp_path / "doc.yaml"
    path.write_text(DOC_SECTION + "run: {train_batch_size: 16}\n")
    with pytest.raises(ConfigError, match=r"run.train_batch_size: is 16 but verl's verl.data.train_batch_size is 8"):
        load_sim_config(str(path))


def test_verl_config_sections_list_matches_verls_own_config():
    from rlhooks.core.config import VERL_CONFIG_SECTIONS

    assert set(VERL_CONFIG_SECTIONS) == set(compose_verl_config([]).keys())


def test_rlhooks_environment_reaches_ray_workers_through_runtime_env():
    """On a cluster started with `ray start`, the TaskRunner and workers inherit the nodes' environment,
    not the driver's: `run` puts the driver's RLHOOKS_* variables into runtime_env env_vars, which verl's
    run_ppo merges into ray.init's; a value the config sets itself wins."""
    from omegaconf import OmegaConf

    from rlhooks.engines.verl.main import forward_rlhooks_env

    cfg = compose_verl_config(["+ray_kwargs.ray_init.runtime_env.env_vars.RLHOOKS_TRACE=0"])
    added = forward_rlhooks_env(cfg, {"RLHOOKS_LOG_JSON": "1", "RLHOOKS_TRACE": "1", "WANDB_API_KEY": "secret"})
    assert added == {"RLHOOKS_LOG_JSON": "1"}
    env_vars = OmegaConf.to_container(cfg.ray_kwargs.ray_init.runtime_env.env_vars)
    assert env_vars == {"RLHOOKS_TRACE": 0, "RLHOOKS_LOG_JSON": "1"}  # no secrets: verl prints ray.init's kwargs


# -- which trainer: verl's config decides (issue 30) --------------------------------------------------


def test_verls_default_trainer_v1_runs_with_the_rlhooks_mode_and_replay_buffer_set_openly(capsys):
    from rlhooks.engines.verl import v1

    cfg = build_config(None, [])
    assert cfg.trainer.use_v1 is True
    assert cfg.trainer.v1.trainer_mode == v1.TRAINER_MODE
    assert dict(cfg.trainer.v1.sampler.custom_sampler) == {"path": v1.REPLAY_BUFFER_PATH, "name": v1.REPLAY_BUFFER_NAME}
    err = capsys.readouterr().err
    assert "sets these verl keys, which were at verl's defaults: trainer.v1.trainer_mode=rlhooks_sync" in err


def test_use_v1_false_keeps_the_legacy_trainer_and_touches_no_v1_key():
    cfg = build_config(None, ["trainer.use_v1=false"])
    assert cfg.trainer.use_v1 is False
    assert cfg.trainer.v1.trainer_mode == "sync" and cfg.trainer.v1.sampler.custom_sampler.path is None


def test_verls_own_mode_names_run_as_the_rlhooks_trainers_of_those_modes_said_in_one_line(capsys):
    """`rlhooks train` exists to run the hooks: verl's mode names (as verl's docs and scripts write them) run as the
    rlhooks trainer of that mode, said in one line; rlhooks's own names are kept; a mode rlhooks does not extend
    is refused (issue 38, item 11)."""
    from rlhooks.engines.verl import v1

    cfg = build_config(None, ["trainer.v1.trainer_mode=rlhooks_sync"])
    assert cfg.trainer.v1.trainer_mode == "rlhooks_sync"
    capsys.readouterr()
    for mode, ours in (("sync", v1.TRAINER_MODE), *v1.ASYNC_TRAINER_MODES.items()):
        cfg = build_config(None, [f"trainer.v1.trainer_mode={mode}"])
        assert cfg.trainer.v1.trainer_mode == ours
        buffer = v1.ASYNC_REPLAY_BUFFER_NAME if mode in v1.ASYNC_TRAINER_MODES else v1.REPLAY_BUFFER_NAME
        assert cfg.trainer.v1.sampler.custom_sampler.name == buffer
        said = [line for line in capsys.readouterr().err.splitlines() if "trainer.v1.trainer_mode" in line]
        assert len(said) == 1 and f"runs trainer.v1.trainer_mode={mode} as {ours} (verl's {mode} trainer with the " \
                                   "rlhooks hooks)" in said[0], said
    with pytest.raises(ConfigError, match=r"trainer.v1.trainer_mode: is 'fully_async'.*not one of them.*"
                                          r"trainer.use_v1=false") as err:
        build_config(None, ["trainer.v1.trainer_mode=fully_async"])
    assert str(err.value).startswith("invalid verl config")
    cfg = build_config(None, ["+trainer.v1.sampler.custom_sampler.path=pkg://my.buffer",
                              "+trainer.v1.sampler.custom_sampler.name=Mine"])
    assert cfg.trainer.v1.sampler.custom_sampler.path == "pkg://my.buffer"  # kept; the start checks load it


def test_filter_groups_null_metric_reads_as_each_trainer_reads_it():
    """verl main's default algorithm.filter_groups.metric is null: V1 filters on the sequence reward there;
    the legacy path keeps the DAPO recipe's acc."""
    v1 = rlhooks_config(build_config(None, ["algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=null"]))
    assert [(f.name, f.options.metric) for f in v1.filters] == [("dapo", "seq_reward")]
    legacy = rlhooks_config(build_config(None, ["trainer.use_v1=false", "algorithm.filter_groups.enable=true",
                                                "algorithm.filter_groups.metric=null"]))
    assert [(f.name, f.options.metric) for f in legacy.filters] == [("dapo", "acc")]


def test_run_picks_the_task_runner_of_the_trainer_in_use(monkeypatch):
    import verl.trainer.main_ppo as main_ppo

    from rlhooks.engines.verl import main as rl_main

    picked = []
    monkeypatch.setattr(main_ppo, "run_ppo", lambda cfg, task_runner_class: picked.append(task_runner_class))
    monkeypatch.setattr(rl_main, "validate_verl_config", lambda cfg: None)
    rl_main.run(build_config(None, []))
    from rlhooks.engines.verl.v1.runner import RLHooksTaskRunnerV1

    assert picked == [RLHooksTaskRunnerV1]  # the legacy trainer's: tests/verl/legacy/test_legacy_entry.py


def test_an_rlhooks_without_the_legacy_trainer_refuses_use_v1_false_by_name(monkeypatch):
    """What deleting legacy/ and its trainers.REMOVABLE entry leaves: trainer.use_v1=false is a config error."""
    import verl.trainer.main_ppo as main_ppo

    from rlhooks.engines.verl import main as rl_main
    from rlhooks.engines.verl import trainers

    monkeypatch.setattr(trainers, "REMOVABLE", {})
    monkeypatch.setattr(main_ppo, "run_ppo", lambda cfg, task_runner_class: pytest.fail("ran"))
    monkeypatch.setattr(rl_main, "validate_verl_config", lambda cfg: None)
    with pytest.raises(ConfigError, match=r"verl.trainer.use_v1: this rlhooks has no legacy trainer: it runs verl's V1"):
        rl_main.run(build_config(None, ["trainer.use_v1=false"]))


# -- rewards: on V1 (verl's reward loop scores through the rlhooks adapter) ---------------------------

ADAPTER = "pkg://rlhooks.engines.verl.reward_function"


def _rewards_yaml(tmp_path, rewards, verl=None):
    import yaml

    path = tmp_path / "rlhooks.yaml"
    path.write_text(yaml.safe_dump({"rewards": rewards, **({"verl": verl} if verl else {})}))
    return str(path)


def test_v1_rewards_list_becomes_verls_reward_function_openly(tmp_path, capsys):
    """rewards: (names, weights, error scores, options) -> the adapter's reward_kwargs, which verl's own
    loader (get_custom_reward_fn) turns into the function its reward-loop workers call."""
    from verl.trainer.ppo.reward import get_custom_reward_fn

    rewards = [{"name": "check_answer", "weight": 2.0, "error_score": -1.0}, "format_exact", "source_metrics",
               "reward_monitor"]
    cfg = build_config(_rewards_yaml(tmp_path, rewards), [])
    custom = cfg.reward.custom_reward_function
    assert custom.path == ADAPTER and custom.name == "compute_score"
    assert OmegaConf.to_container(custom.reward_kwargs) == {
        "functions": ["check_answer", "format_exact"], "weights": [2.0, 1.0],
        "error_score": {"check_answer": -1.0, "format_exact": 0.0}}
    assert "reward.custom_reward_function (at verl's default) is set to the rlhooks adapter" in capsys.readouterr().err
    scores = get_custom_reward_fn(cfg)("math", "<reasoning>3+4</reasoning><answer>7</answer>", "7")
    assert scores["check_answer"] > 0 and set(scores) >= {"check_answer", "format_exact", "acc"}
    assert scores["score"] == pytest.approx(2.0 * scores["check_answer"] + scores["format_exact"])


def test_v1_rewards_fill_the_adapter_the_user_named_without_functions(tmp_path, capsys):
    verl = {"reward": {"custom_reward_function": {"path": ADAPTER, "name": "compute_score"}}}
    cfg = build_config(_rewards_yaml(tmp_path, ["check_numbers", "reward_monitor"], verl), [])
    assert list(cfg.reward.custom_reward_function.reward_kwargs.functions) == ["check_numbers"]
    assert "its reward_kwargs (no functions set) are now {'functions': ['check_numbers']" in capsys.readouterr().err
    # the same functions named in both places agree: kept as the user wrote them
    same = ["+reward.custom_reward_function.reward_kwargs.functions=[check_numbers]"]
    cfg = build_config(_rewards_yaml(tmp_path, ["check_numbers"], verl), same)
    assert OmegaConf.to_container(cfg.reward.custom_reward_function.reward_kwargs) == {"functions": ["check_numbers"]}


def test_v1_rewards_conflicting_with_verls_reward_function_name_both_keys(tmp_path):
    other = {"reward": {"custom_reward_function": {"path": "/my/score.py", "name": "my_score"}}}
    with pytest.raises(ConfigError, match=r"(?s)rlhooks\.rewards: names the reward functions \['check_answer'\], but "
                                          r"reward\.custom_reward_function\.path is '/my/score\.py'.*remove "
                                          r"reward\.custom_reward_function"):
        build_config(_rewards_yaml(tmp_path, ["check_answer"], other), [])
    ours = {"reward": {"custom_reward_function": {"path": ADAPTER, "+reward_kwargs": {"functions": ["format_exact"]}}}}
    with pytest.raises(ConfigError, match=r"rlhooks\.rewards: names the reward functions \['check_answer'\], but "
                                          r"reward\.custom_reward_function\.reward_kwargs\.functions is \['format_exact'\]"):
        build_config(_rewards_yaml(tmp_path, ["check_answer"], ours), [])


def test_v1_observers_alone_and_the_legacy_trainer_leave_verls_reward_function_alone(tmp_path):
    cfg = build_config(_rewards_yaml(tmp_path, ["source_metrics", "reward_monitor"]), [])
    assert cfg.reward.custom_reward_function.path is None
    cfg = build_config(_rewards_yaml(tmp_path, ["check_answer"]), ["trainer.use_v1=false"])
    assert cfg.reward.custom_reward_function.path is None  # legacy scores rewards: in rlhooks itself


class _Stopper:
    """A plugin asking the run to stop (``run.request_stop``), as reward_monitor does."""

    @hookimpl
    def on_run_start(self, run):
        run.request_stop("enough for this test")


@pytest.mark.parametrize("stop, code", [(False, 0), (True, 3)])
def test_rlhooks_train_exits_with_the_runs_recorded_outcome(tmp_path, monkeypatch, capsys, stop, code):
    """verl's run_ppo returns normally either way; the run's own run_end record (a real RunManager with the
    jsonl backend, in the run directory rlhooks train names) decides: stopped exits 3, as rlhooks simulate."""
    import verl.trainer.main_ppo as main_ppo

    from rlhooks.core.manager import RunManager
    from rlhooks.engines.verl import main as rl_main

    def task_runner(cfg, task_runner_class):  # what the rlhooks trainer does in the TaskRunner, minus training
        rl = RunManager(rlhooks_config(cfg), extra_plugins=[("stopper", _Stopper())] if stop else [])
        with rl.running():
            pass

    monkeypatch.setattr(main_ppo, "run_ppo", task_runner)
    monkeypatch.setattr(rl_main, "validate_verl_config", lambda cfg, source=None: None)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "r").mkdir(parents=True)
    (tmp_path / "runs" / "r" / "metrics.jsonl").write_text('{"kind": "run_end", "time": 0, "status": "failed"}\n')
    rc = rlhooks_main(["train", "rlhooks.run.name=r", "rlhooks.run.out_dir=runs", "rlhooks.backends=[jsonl]"])
    assert rc == code  # the earlier run's "failed" record (before this run's start) does not count
    assert '"status": "' + ("stopped" if stop else "success") in (tmp_path / "runs" / "r" / "metrics.jsonl").read_text()


def test_an_rlhooks_error_raised_in_the_task_runner_is_one_line_not_rays_traceback(monkeypatch, capsys):
    import verl.trainer.main_ppo as main_ppo
    from ray.exceptions import RayTaskError

    from rlhooks.engines.verl import main as rl_main
    from rlhooks.engines.verl.checkpoints import CheckpointError

    def task_runner(cfg, task_runner_class):  # ray.get of the TaskRunner's run raises what Ray wrapped
        try:
            raise CheckpointError("cannot resume from step 3: the folder does not exist")
        except CheckpointError as exc:
            wrapped = RayTaskError("TaskRunner.run", "Traceback (most recent call last):\n  remote frames", exc)
            raise wrapped.as_instanceof_cause() from None

    monkeypatch.setattr(main_ppo, "run_ppo", task_runner)
    monkeypatch.setattr(rl_main, "validate_verl_config", lambda cfg, source=None: None)
    assert rlhooks_main(["train"]) == 1
    err = capsys.readouterr().err
    assert "error: cannot resume from step 3: the folder does not exist\n" in err
    assert "Traceback" not in err and "remote frames" not in err


# -- bad input caught before Ray: the dry run and the real start run one validation (issue 38, items 9-14) --

#: a config the start checks pass (verl's validate_config too): 4 prompts x 2 answers, micro-batches of 2
CHECKED = [*MICRO, "data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
           "actor_rollout_ref.rollout.n=2", "algorithm.adv_estimator=grpo", "trainer.n_gpus_per_node=1"]


@pytest.fixture(scope="module")
def checked():
    """CHECKED composed once for the module (Hydra takes seconds); each test edits its own deep copy."""
    from rlhooks.engines.verl.main import validate_verl_config

    cfg = build_config(None, CHECKED)
    validate_verl_config(copy.deepcopy(cfg))  # as composed, it passes
    return cfg


SEPARATE = {"trainer.v1.trainer_mode": "rlhooks_separate_async"}
#: (verl keys set on CHECKED, what the one error says): each a value verl's trainer or workers refuse inside Ray
BAD_INPUT = [
    ({"trainer.v1.sampler.max_off_policy_threshold": "abc"},
     "trainer.v1.sampler.max_off_policy_threshold: is 'abc': verl's replay buffer takes"),
    ({"trainer.v1.sampler.max_off_policy_threshold": -1}, "max_off_policy_threshold: is -1"),
    ({"trainer.v1.sampler.max_off_policy_threshold": 0}, "a whole number >= 1, or null for no limit"),
    ({"trainer.v1.sampler.max_off_policy_strategy": "keep"}, "max_off_policy_strategy: is 'keep'"),
    ({"algorithm.filter_groups.max_inflight_gen_batches": -5},
     "algorithm.filter_groups.max_inflight_gen_batches: is -5: verl's replay buffer takes"),
    ({"trainer.v1.sampler.custom_sampler.path": "/etc/passwd", "trainer.v1.sampler.custom_sampler.name": "Any"},
     "trainer.v1.sampler.custom_sampler.path: is '/etc/passwd': not a Python file (.py)"),
    ({"trainer.v1.sampler.custom_sampler.path": "/etc/passwd", "trainer.v1.sampler.custom_sampler.name": None},
     "trainer.v1.sampler.custom_sampler.name: is unset while trainer.v1.sampler.custom_sampler.path is set"),
    ({"trainer.v1.sampler.custom_sampler.path": "pkg://json", "trainer.v1.sampler.custom_sampler.name": "JSONDecoder"},
     "is 'JSONDecoder' from 'pkg://json', not a subclass of RLHooksReplayBuffer"),
    ({**SEPARATE, "trainer.v1.separate_async.parameter_sync_step": 0},
     "trainer.v1.separate_async.parameter_sync_step: is 0: separate_async takes"),
    ({**SEPARATE, "trainer.v1.separate_async.parameter_sync_step": 2},
     "verl's separate_async needs data.train_batch_size (4) = trainer.v1.separate_async.parameter_sync_step (2) x "
     "actor_rollout_ref.actor.ppo_mini_batch_size: set ppo_mini_batch_size=2"),
    (SEPARATE, "actor_rollout_ref.rollout.checkpoint_engine.backend: is 'naive'"),
    ({"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 3},
     "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu: is 3, which does not divide 8: each rank updates on "
     "ppo_mini_batch_size x n / 1 data-parallel rank = 4 x 2 / 1 = 8 samples"),
    ({"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": 16},
     "log_prob_micro_batch_size_per_gpu: is 16, which does not divide 8: each rank computes log-probs on"),
    ({"actor_rollout_ref.actor.use_kl_loss": True, "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": 5},
     "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu: is 5, which does not divide 8"),
]


@pytest.mark.parametrize("updates, says", BAD_INPUT, ids=[next(iter(u)).split(".")[-1] + f"-{i}"
                                                          for i, (u, _) in enumerate(BAD_INPUT)])
def test_the_start_checks_refuse_what_verl_refuses_inside_ray(checked, updates, says):
    """Each value `--dry-run` passed on main and verl refused minutes later inside Ray (its replay buffer's
    asserts, separate_async's, the workers' micro-batch split): one ConfigError naming the key and what to do."""
    from rlhooks.engines.verl.main import validate_verl_config

    cfg = copy.deepcopy(checked)
    for key, value in updates.items():
        OmegaConf.update(cfg, key, value, force_add=True)
    with pytest.raises(ConfigError) as err:
        validate_verl_config(cfg)
    assert str(err.value).startswith("invalid verl config (from the command line)") and says in str(err.value)


def test_the_start_checks_accept_what_verl_accepts(checked, tmp_path):
    from rlhooks.engines.verl.main import validate_verl_config

    buffer = tmp_path / "my_buffer.py"
    buffer.write_text("from rlhooks.engines.verl.v1.replay_buffer import RLHooksReplayBuffer\n\n\n"
                      "class Mine(RLHooksReplayBuffer):\n    pass\n")
    for updates in ({"trainer.v1.sampler.max_off_policy_threshold": None},  # null: no limit
                    {"trainer.v1.sampler.custom_sampler.path": str(buffer),
                     "trainer.v1.sampler.custom_sampler.name": "Mine"},
                    {**SEPARATE, "trainer.v1.separate_async.parameter_sync_step": 2,
                     "actor_rollout_ref.actor.ppo_mini_batch_size": 2, "actor_rollout_ref.rollout.nnodes": 1,
                     "actor_rollout_ref.rollout.n_gpus_per_node": 1,
                     "actor_rollout_ref.rollout.checkpoint_engine.backend": "nccl",
                     "trainer.v1.sampler.custom_sampler.path": "pkg://rlhooks.engines.verl.v1.async_trainers",
                     "trainer.v1.sampler.custom_sampler.name": "RLHooksReplayBufferAsync"}):
        cfg = copy.deepcopy(checked)
        for key, value in updates.items():
            OmegaConf.update(cfg, key, value, force_add=True)
        from rlhooks.engines.verl import checks

        assert checks.start_issues(cfg) == [], updates  # nothing refused, and the whole start validation passes
        validate_verl_config(cfg)


@pytest.mark.parametrize("bad, says", [
    ("trainer.v1.sampler.max_off_policy_threshold=abc", "trainer.v1.sampler.max_off_policy_threshold: is 'abc'"),
    ("trainer.v1=5", "trainer.v1: is 5, not a mapping: verl's V1 trainer reads its settings under it"),
])
def test_the_dry_run_and_the_real_start_refuse_alike_before_ray(monkeypatch, capsys, bad, says):
    """The real start and `--dry-run` (written after the overrides, as the issue's user did) give the same one
    error, and verl's run_ppo (Ray) never starts; `trainer.v1=5` was a Python traceback (main.py)."""
    import verl.trainer.main_ppo as main_ppo

    started = []
    monkeypatch.setattr(main_ppo, "run_ppo", lambda *args, **kwargs: started.append(args))
    assert rlhooks_main(["train", *CHECKED, bad]) == 1
    assert rlhooks_main(["train", *CHECKED, bad, "--dry-run"]) == 1
    err = capsys.readouterr().err
    assert err.count(says) == 2 and "Traceback" not in err and not started


def test_flags_after_the_overrides_are_flags(tmp_path, capsys):
    """`rlhooks train key=v --dry-run` (and --config there too) read as flags, not as overrides (item 10)."""
    yaml_file = tmp_path / "rlhooks.yaml"
    yaml_file.write_text("filters: [dapo]\n")
    assert rlhooks_main(["train", *CHECKED, "--config", str(yaml_file), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "train_batch_size: 4" in out and "name: dapo" in out.split("# rlhooks (resolved)")[1]
    with pytest.raises(SystemExit) as exit_:  # an unknown flag is argparse's usage error, not an override
        rlhooks_main(["train", *CHECKED, "--dry-rn"])
    assert exit_.value.code == 2 and "unrecognized arguments: --dry-rn" in capsys.readouterr().err


def test_separate_async_on_the_cpu_learner_sets_what_it_needs_where_unset(tmp_path, monkeypatch, capsys):
    """verl's `separate_async` on the CPU learner needs six settings (runner.separate_async_overrides): left unset,
    `rlhooks train` sets them and says so in one line (item 12); one the user chose is kept, and a wrong one is
    refused naming it (parameter_sync_step=0 used to read as 1)."""
    from rlhooks.engines.verl import checks
    from rlhooks.engines.verl.cpu import ray_learner, runner

    monkeypatch.chdir(tmp_path)
    runner.prepare(tmp_path)  # the local policy and prompts the start checks look for
    base = [*runner.verl_overrides("policy", "train.parquet"), "data.train_batch_size=8",
            "actor_rollout_ref.rollout.n=8", "trainer.v1.trainer_mode=separate_async"]
    cfg = build_config(None, base)
    assert cfg.trainer.v1.trainer_mode == "rlhooks_separate_async"
    wanted = dict(o.split("=", 1) for o in runner.separate_async_overrides(8)[1:])
    assert len(wanted) == 6 and {k: str(OmegaConf.select(cfg, k)) for k in wanted} == wanted
    ray_learner.check_v1_config(cfg)
    assert checks.start_issues(cfg) == []
    said = [line for line in capsys.readouterr().err.splitlines() if "separate_async on the CPU learner: set" in line]
    assert len(said) == 1 and all(f"{k}={v}" in said[0] for k, v in wanted.items()), said
    cfg = build_config(None, [*base, "trainer.v1.separate_async.parameter_sync_step=0"])
    assert cfg.trainer.v1.separate_async.parameter_sync_step == 0  # the user's, kept
    issues = [str(i) for i in checks.start_issues(cfg)]
    assert issues == ["verl.trainer.v1.separate_async.parameter_sync_step: is 0: on the CPU learner it must be 1 "
                      "(verl keeps the old policy's weights with .cpu(), which does not copy a tensor already on the "
                      "CPU); set it to 1 and actor_rollout_ref.actor.ppo_mini_batch_size=data.train_batch_size"]


def test_a_runs_checkpoints_default_to_its_run_directory(capsys):
    """verl's default trainer.default_local_dir (checkpoints/<project>/<experiment>) is shared by every run of
    those names: it becomes the run's own directory; a directory the user chose is kept (item 13)."""
    cfg = build_config(None, ["rlhooks.run.name=other", "rlhooks.run.out_dir=/data/runs"])
    assert cfg.trainer.default_local_dir == "/data/runs/other/checkpoints"
    assert "trainer.default_local_dir=/data/runs/other/checkpoints" in capsys.readouterr().err
    assert build_config(None, ["trainer.use_v1=false"]).trainer.default_local_dir == "runs/gsm8k/checkpoints"
    assert build_config(None, ["trainer.default_local_dir=/elsewhere"]).trainer.default_local_dir == "/elsewhere"


def test_a_run_refuses_before_ray_to_resume_a_checkpoint_another_run_wrote(checked, tmp_path, monkeypatch, capsys):
    """A checkpoint in this run's checkpoint directory written by another run (name, trainer or mode: rlhooks.pt
    says who) is refused before Ray, naming both and the way out; its own resumes (item 13)."""
    from rlhooks.engines.verl import checkpoints

    monkeypatch.chdir(tmp_path)
    ckpt = tmp_path / "runs" / "other" / "checkpoints"
    (ckpt / "global_step_3" / "actor").mkdir(parents=True)  # complete: a layout the seal vouches for, verl's data.pt
    (ckpt / "global_step_3" / "actor" / "weights").write_bytes(b"w")
    (ckpt / "global_step_3" / checkpoints.DATA_FILE).write_bytes(b"d")
    legacy = build_config(None, ["trainer.use_v1=false"])
    checkpoints.write_state(ckpt / "global_step_3", {"components": {}, checkpoints.OWNER_KEY:
                                                     checkpoints.owner_of(legacy, "legacy")})
    checkpoints.write_tracker(ckpt, 3)
    args = ["train", *CHECKED, "rlhooks.run.name=other", "--dry-run"]
    assert rlhooks_main(args) == 1
    err = capsys.readouterr().err
    assert (f"trainer.default_local_dir: cannot resume from step 3: {ckpt / 'global_step_3'} was written by run "
            "'legacy' on the legacy trainer, and this is run 'other' on the V1 trainer in mode rlhooks_sync") in err
    assert "start it as it was (rlhooks.run.name=legacy trainer.use_v1=false)" in err and "Traceback" not in err
    checkpoints.write_state(ckpt / "global_step_3", {"components": {}, checkpoints.OWNER_KEY:
                                                     checkpoints.owner_of(checked, "other")})
    assert rlhooks_main(args) == 0


def test_keys_verls_v1_trainer_ignores_are_named_at_start(capsys):
    """run.max_num_gen_batches / on_gen_limit (and verl's filter_groups.max_num_gen_batches) limit the legacy
    trainer's generation rounds and do nothing on V1: one warning at start names them (item 14)."""
    build_config(None, ["rlhooks.run.max_num_gen_batches=4", "rlhooks.run.on_gen_limit=continue"])
    err = capsys.readouterr().err
    assert ("rlhooks.run.max_num_gen_batches, rlhooks.run.on_gen_limit: the legacy trainer's limit on generation "
            "rounds, which verl's V1 trainer ignores") in err
    build_config(None, DOC_KEYS)
    assert "algorithm.filter_groups.max_num_gen_batches: the legacy trainer's limit" in capsys.readouterr().err
    build_config(None, ["trainer.use_v1=false", "rlhooks.run.max_num_gen_batches=4"])
    build_config(None, [])
    assert "the legacy trainer's limit" not in capsys.readouterr().err
