"""benchmarks/cpu_async.py's published figures: the page and the docs quote the saved runs
(``benchmarks/CPU_ASYNC.json``), and a page is written only from runs of one set of options. The runs
themselves take ~28 min on 2 cores (docs/how-to/async.md), so they are not a test."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from benchmarks import cpu_async as bench

ROOT = Path(__file__).resolve().parents[2]
RUNS = json.loads((ROOT / "benchmarks" / "CPU_ASYNC.json").read_text())


def test_the_published_page_is_the_saved_runs():
    page = (ROOT / "benchmarks" / "CPU_ASYNC.md").read_text()
    assert bench.summarize(RUNS) in page
    o = RUNS[0]["options"]
    assert f"--steps {o['steps']} --test-freq {o['test_freq']}" in page


@pytest.mark.parametrize("page", ["docs/how-to/async.md", "docs/how-to/verl.md"])
def test_the_docs_quote_the_published_runs(page):
    rows = {line.split("|")[1].strip(): line for line in (ROOT / page).read_text().splitlines()
            if line.startswith("| `rlhooks_")}
    for run in RUNS:
        steps = {int(k): v for k, v in run["steps"].items()}
        row = rows[f"`rlhooks_{run['mode']}`"]
        assert f"| {statistics.mean(steps[s]['timing_s/step'] for s in steps if s > 1):.1f} s" in row, row
        accuracy = ", ".join(f"{a:.3f}" for _, a in sorted((int(k), v) for k, v in run["accuracy"].items()))
        assert f"| {accuracy} |" in row, row
    assert f"{RUNS[0]['options']['steps']} steps" in (ROOT / page).read_text()


def test_runs_of_different_options_are_not_published(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "HERE", tmp_path / "benchmarks")
    mixed = [RUNS[0], {**RUNS[1], "options": {**RUNS[1]["options"], "steps": 6}}]
    with pytest.raises(SystemExit, match="one set of options"):
        bench.publish(mixed)
    assert not (tmp_path / "benchmarks").exists()
