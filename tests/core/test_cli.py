"""The core commands of `rlhooks`: --version, log format flags, plugins list (text), no command."""

from __future__ import annotations

import importlib.metadata as md
import json

import pytest

import rlhooks
from rlhooks.cli import main
from rlhooks.logging import configure_logging


@pytest.fixture(autouse=True)
def _reset_logging():
    yield
    configure_logging()  # main() configures structlog globally


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"rlhooks {rlhooks.__version__}"


def test_no_command_prints_help_and_fails(capsys):
    assert main([]) == 2
    out = capsys.readouterr().out
    assert "usage: rlhooks" in out and "plugins" in out and "config" in out


@pytest.mark.parametrize("json_logs", [True, False])
def test_log_json_flag_switches_structlog_output(json_logs, tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("sampler: {class_name: CurriculumMultiSourceSampler}\n")  # a deprecated name: logs a warning
    assert main(["--log-json", "config", "check", str(cfg)] if json_logs else ["config", "check", str(cfg)]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if "deprecated" in line]
    assert len(err) == 1, err
    if json_logs:
        event = json.loads(err[0])
        assert event["level"] == "warning" and event["plugin"] == "CurriculumMultiSourceSampler"
        assert "use 'TimeCurriculumSampler'" in event["event"] and "timestamp" in event
    else:
        with pytest.raises(json.JSONDecodeError):
            json.loads(err[0])
        assert "warning" in err[0] and "plugin=CurriculumMultiSourceSampler" in err[0]


def test_plugins_list_text_shows_kinds_status_and_broken_errors(third_party, capsys):
    assert main(["plugins", "list"]) == 0
    out = capsys.readouterr().out
    assert "samplers (rlhooks.samplers):" in out and "backends (rlhooks.backends):" in out
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ") and line.split()}
    assert "rlhooks 0.1.0" in lines["jsonl"] and "hooks: on_run_start, log_metrics" in lines["jsonl"]
    assert "alpha-plugins 1.0" in lines["alpha_only"] and "hooks: log_metrics" in lines["alpha_only"]
    # one row per component: its canonical name, then its aliases (deprecated ones marked)
    assert "CurriculumMultiSourceSampler" not in lines and "MultiSourceSampler" not in lines
    assert "aliases: TimeCurriculumSampler, CurriculumMultiSourceSampler (deprecated)" in lines["time_curriculum"]
    assert "aliases: MultiSourceSampler" in lines["multi_source"]
    assert "[broken]" in lines["broken_one"] and "broken-plugins 0.1" in lines["broken_one"]
    assert "[duplicate: " in lines["shared_name"]
    # the import error is printed under the broken entry
    after = out.split(lines["broken_one"], 1)[1].splitlines()[1]
    assert after.strip().startswith("error: ModuleNotFoundError") and "a_module_that_does_not_exist_anywhere" in after


def test_plugins_list_kind_filter(capsys):
    assert main(["plugins", "list", "--kind", "filter", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and {r["kind"] for r in rows} == {"filter"}
    dapo = next(r for r in rows if r["name"] == "dapo")
    assert dapo["aliases"] == ["filter_groups"] and "filter_groups" not in {r["name"] for r in rows}
    assert all(r["status"] == "ok" and r["error"] is None for r in rows)


def test_plugins_list_one_row_per_component_and_every_alias_loads(capsys):
    from rlhooks.host import load_config

    assert main(["plugins", "list", "--json"]) == 0
    rows = [r for r in json.loads(capsys.readouterr().out) if r["distribution"] == "rlhooks"]
    values = [(r["kind"], r["value"]) for r in rows]
    assert len(values) == len(set(values))  # no component listed twice
    names = [n for r in rows for n in (r["name"], *r["aliases"])]
    assert len(names) == len(set(names))
    groups = ("rlhooks.samplers", "rlhooks.filters", "rlhooks.prompt_filters", "rlhooks.rewards", "rlhooks.backends")
    declared = {ep.name for g in groups for ep in md.entry_points(group=g) if ep.dist and ep.dist.name == "rlhooks"}
    assert set(names) == declared
    by_name = {r["name"]: r for r in rows}
    assert by_name["reward_curriculum"]["deprecated_aliases"] == {"RewardGatedCurriculumSampler": "RewardCurriculumSampler"}
    sections = {"sampler": lambda n: {"sampler": {"name": n, "reward_threshold": 0.5} if "reward" in n.lower() else n},
                "filter": lambda n: {"filters": [n]}}
    for r in rows:
        if r["kind"] not in sections:
            continue
        canonical = load_config(sections[r["kind"]](r["name"]))
        want = canonical.sampler.obj if r["kind"] == "sampler" else canonical.filters[0].obj
        for alias in r["aliases"]:  # the documents' CamelCase names keep working in configs
            cfg = load_config(sections[r["kind"]](alias))
            got = cfg.sampler.obj if r["kind"] == "sampler" else cfg.filters[0].obj
            assert got is want, alias
