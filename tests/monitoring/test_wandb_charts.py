"""W&B: the document's custom charts and every metric against the training step, read back from
an offline simulated run's files (the .wandb transaction log and the chart tables it references)."""

from __future__ import annotations

import json

import pytest
from ..wandb_records import read_wandb_records
from .monitoring_helpers import demo_config_with, simulate

from rlhooks.plugins.backends.wandb_backend import CHARTS, STEP_METRIC

STEPS = 6


@pytest.fixture(scope="module")
def wandb_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wb")
    mp = pytest.MonkeyPatch()
    mp.setenv("WANDB_MODE", "offline")
    mp.setenv("WANDB_SILENT", "true")
    mp.setenv("WANDB_DIR", str(tmp / "wandb-env"))
    try:
        cfg = demo_config_with(tmp, {"name": "wandb", "mode": "offline", "project": "rlhooks-test",
                                     "settings": {"console": "off"}})
        run_dir = simulate(tmp / "out", str(cfg), steps=STEPS)
        import wandb

        wandb.teardown()  # the wandb-core service writes the log's last block when it stops
    finally:
        mp.undo()
    (wandb_file,) = run_dir.rglob("run-*.wandb")
    return run_dir, wandb_file.parent, read_wandb_records(wandb_file)


def jsonl_series(run_dir, key):
    out = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec["kind"] == "metrics" and rec["metrics"].get(key) is not None:
            out[rec["step"]] = rec["metrics"][key]
    return out


def test_every_metric_is_defined_against_the_training_step(wandb_run):
    run_dir, _, records = wandb_run
    metrics = [r.metric for r in records if r.WhichOneof("record_type") == "metric"]
    assert any(m.name == STEP_METRIC for m in metrics)
    (glob,) = [m for m in metrics if m.glob_name]
    assert glob.glob_name == "*" and glob.step_metric == STEP_METRIC
    history = [r.history for r in records if r.WhichOneof("record_type") == "history"]
    rows = [{i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in h.item} for h in history]
    assert [r[STEP_METRIC] for r in rows] == [r["_step"] for r in rows] == list(range(1, STEPS + 1))
    assert all("rewards/mean" in r for r in rows)


def test_the_documents_custom_charts_are_wandb_charts_of_the_logged_values(wandb_run):
    run_dir, wb_dir, records = wandb_run
    visualize = {}
    for r in records:
        if r.WhichOneof("record_type") == "config":
            for u in r.config.update:
                path = [u.key] if u.key else list(u.nested_key)
                if path[:2] == ["_wandb", "visualize"]:
                    visualize[path[2]] = json.loads(u.value_json)
    assert set(visualize) == {f"charts/{name}" for name in CHARTS}
    for name, (title, _rx) in CHARTS.items():
        panel = visualize[f"charts/{name}"]["panel_config"]
        assert panel["panelDefId"] == "wandb/lineseries/v0"
        assert panel["stringSettings"] == {"title": title, "xname": STEP_METRIC}

    def chart_table(name):
        (path,) = (wb_dir / "files" / "media" / "table" / "charts").glob(f"{name}_table_*.table.json")
        t = json.loads(path.read_text())
        by_key = {}
        for row in t["data"]:
            rec = dict(zip(t["columns"], row))
            by_key.setdefault(rec["lineKey"], {})[rec["step"]] = rec["lineVal"]
        return by_key

    funcs = ["check_answer", "check_numbers", "format_approx", "format_exact"]
    breakdown = chart_table("reward_breakdown")
    assert sorted(breakdown) == [f"rewards/functions/{f}" for f in funcs]
    for key, points in breakdown.items():
        assert points == pytest.approx(jsonl_series(run_dir, key))  # the values the run logged, by step
    assert sorted(chart_table("contributions")) == [f"contributions/{f}" for f in funcs]
    assert sorted(chart_table("quality_metrics")) == ["rewards/entropy", "rewards/signal_to_noise", "rewards/variance"]
    assert sorted(chart_table("training_dynamics")) == [
        "training/advantage_mean", "training/advantage_std", "training/kl_divergence", "training/policy_entropy",
        "training/policy_update_kl"]
    alerts = chart_table("alerts")
    assert sorted(alerts) == ["alerts/critical", "alerts/info", "alerts/warning"]
    assert sorted(alerts["alerts/warning"]) == list(range(1, STEPS + 1))
