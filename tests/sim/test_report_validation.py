"""The report draws verl's validation accuracy per source: a real learner's learning curve."""

from __future__ import annotations

from pathlib import Path

import pytest

import rlhooks.host
from rlhooks.report import write_report
from rlhooks.report.charts import CHARTS
from rlhooks.report.reader import load_run


def test_the_overview_draws_verls_validation_accuracy_per_source(tmp_path: Path) -> None:
    cfg = rlhooks.host.load_config({"run": {"name": "v", "out_dir": str(tmp_path)}, "backends": ["jsonl"]})
    m = rlhooks.host.RunManager(cfg)
    with m.running():
        for step in range(1, 21):
            metrics = {"critic/score/mean": 0.1 * step}
            if step % 10 == 0:  # trainer.test_freq: validation every 10 steps
                metrics |= {"val-core/add_small/acc/mean@1": 0.4 + step / 100,
                            "val-core/mul_small/acc/mean@1": 0.2 + step / 200,
                            "val-core/add_small/reward/mean@1": 5.0}
            m.log_metrics(step, metrics)
    run = load_run(tmp_path / "v")
    panel = next(p for c in CHARTS for p in c.panels if p.title.startswith("validation accuracy"))
    assert [label for label, _ in panel.matches(run)] == ["add_small", "mul_small"]
    steps, values = run.series["val-core/add_small/acc/mean@1"]
    assert steps.tolist() == [10, 20] and values.tolist() == pytest.approx([0.5, 0.6])
    write_report([tmp_path / "v"], tmp_path / "v" / "report")
    page = (tmp_path / "v" / "report" / "report.html").read_text()
    assert "overview.png" in page and (tmp_path / "v" / "report" / "overview.png").stat().st_size > 0
