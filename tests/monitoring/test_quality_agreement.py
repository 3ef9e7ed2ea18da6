"""One quality score per run: the monitor's run-end analysis and RewardAnalyzer.from_jsonl agree."""

from __future__ import annotations

import json
import shutil

import pytest
from .conftest import DEMO_STEPS

from rlhooks.monitoring import RewardAnalyzer
from rlhooks.monitoring.analyzer import DECLARED, OBSERVED


def test_run_end_and_from_jsonl_agree_on_a_simulated_run(demo_run):
    summary = json.loads((demo_run / "reward_monitor.json").read_text())
    assert summary["reward_range"] == [-3.5, 10.0]  # the four functions' declared ranges, summed
    report = RewardAnalyzer.from_jsonl(demo_run).analyze_quality()
    assert report.to_dict() == summary["quality"]
    assert report.coverage_basis == DECLARED and report.reward_range == [-3.5, 10.0]
    assert (report.first_step, report.last_step, report.n_steps) == (1, DEMO_STEPS, DEMO_STEPS)


def test_without_the_monitor_summary_the_difference_is_named(demo_run, tmp_path):
    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copy(demo_run / "metrics.jsonl", copy / "metrics.jsonl")
    summary = json.loads((demo_run / "reward_monitor.json").read_text())
    report = RewardAnalyzer.from_jsonl(copy).analyze_quality()
    assert report.coverage_basis == OBSERVED and summary["quality"]["coverage_basis"] == DECLARED
    assert report.coverage != pytest.approx(summary["quality"]["coverage"])  # the only dimension that differs
    for dim in ("consistency", "discriminability", "stability"):
        assert report.to_dict()[dim] == summary["quality"][dim]
    # giving the declared range back restores the same score
    again = RewardAnalyzer.from_jsonl(copy, reward_range=tuple(summary["reward_range"])).analyze_quality()
    assert again.quality_score == summary["quality"]["quality_score"]
