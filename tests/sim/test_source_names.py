"""A simulated run whose sources are verl's real data_source names (with '/'): every reader keeps them whole."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from rlhooks.cli import main
from rlhooks.core.metrics import split_source_key
from rlhooks.engines.sim.data import generate_table
from rlhooks.report import load_run
from rlhooks.report.charts import CHARTS

# data_source values of verl's own preprocessing scripts / default reward router (verl.utils.reward_score)
VERL_NAMES = {"arith_add": "openai/gsm8k", "arith_mul": "lighteval/MATH",
              "chain": "DigitalLearningGmbH/MATH-lighteval", "logic": "HuggingFaceH4/MATH-500"}


@pytest.mark.slow  # make test's 5-minute budget (CI runs slow tests)
def test_simulated_run_on_verl_source_names_keeps_every_name(tmp_path, capsys):
    table = generate_table(60, 0, None)
    src = table.column("data_source").to_pylist()
    table = table.set_column(table.schema.get_field_index("data_source"), "data_source",
                             pa.array([VERL_NAMES[s] for s in src], pa.string()))
    data = tmp_path / "verl.parquet"
    pq.write_table(table, data)
    names = sorted(VERL_NAMES.values())
    assert sorted(pc.unique(table.column("data_source")).to_pylist()) == names
    cfg = tmp_path / "c.yaml"
    cfg.write_text(textwrap.dedent("""
        run: {name: verl-names, steps: 3, train_batch_size: 8, gen_batch_size: 12, n: 4,
              max_num_gen_batches: 4, on_gen_limit: continue}
        sampler: {name: multi_source, adaptive_weights: true, update_frequency: 1}
        filters: [{name: dapo, metric: acc}]
        rewards: [format_exact, check_answer, source_metrics, reward_monitor]
        backends: [jsonl, tensorboard]
    """))
    assert main(["simulate", str(cfg), "--data", str(data), "--out", str(tmp_path / "runs"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    run_dir = tmp_path / "runs" / "verl-names"

    # printed summary: whole names in the source table and the sampler weights
    table_lines = [ln.split() for ln in out.splitlines() if ln.startswith("  ") and ln.split()]
    assert sorted(ln[0] for ln in table_lines if ln[0] in names) == names
    weights_line = next(ln for ln in out.splitlines() if "sampler weights:" in ln)
    for name in names:
        assert f"{name} " in weights_line

    # summary.json: every source, its sampler weight and its last-step per-source metrics
    summary = json.loads((run_dir / "summary.json").read_text())
    assert sorted(summary["sources"]) == names and sorted(summary["sampler_weights"]) == names
    for name in names:
        assert summary["sources"][name]["last_step"]["generated_count"] > 0

    # the report's per-source charts: one series per source, labelled by its whole name
    run = load_run(run_dir)
    per_source = [p for c in CHARTS for p in c.panels if p.source_metric is not None]
    assert {p.source_metric for p in per_source} >= {"reward", "count", "generated_count", "generated_reward"}
    for panel in per_source:
        if panel.source_metric != "generated_acc":
            assert sorted(label for label, _ in panel.matches(run)) == names, panel.title
    weights = next(p for c in CHARTS for p in c.panels if p.title == "sampling weight per source")
    assert sorted(label for label, _ in weights.matches(run)) == names
    for png in ("batch_composition.png", "reward_per_source.png", "sampler_weights.png"):
        assert (run_dir / "report" / png).stat().st_size > 0

    # TensorBoard: a scalar per source, under its whole name
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard")).Reload()
    tags = events.Tags()["scalars"]
    sources_in_tb = {split_source_key(t)[0] for t in tags if split_source_key(t) and t.endswith("/count")}
    assert sorted(sources_in_tb) == names
    assert np.isfinite([events.Scalars(f"source/{n}/generated_count")[-1].value for n in names]).all()
    # ... and the Custom Scalars layout's per-source charts pick up every source's tag
    import re

    from rlhooks.plugins.backends.tensorboard_backend import LAYOUT

    for title, (_, patterns) in LAYOUT["source"].items():
        shown = {t for t in tags for p in patterns if re.search(p, t)}
        if title.endswith("by source") or "by source (" in title:
            labels = {split_source_key(t)[0] if t.startswith("source/") else t.split("/", 2)[2] for t in shown}
            assert labels == set(names), title
