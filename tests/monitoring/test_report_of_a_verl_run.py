"""The report of a real verl V1 run (issue 38 items 6-8).

``recorded/v1-train`` is the metrics.jsonl and reward_monitor.json of a real run: the cut-down ``rlhooks train``
V1 run of tests/verl/test_cpu_v1_learner.py (``train_command_run``: 2 steps on the CPU learner, the dapo filter,
two reward functions, source_metrics, reward_monitor, validation at step 2 only), copied from its pytest
temporary directory (run directory paths in its run_start record shortened). Its one validation point is the
case item 6 is about. The async variant adds the ``staleness/lag_mean`` and ``filter/stale_evicted_groups`` of
steps 1-2 of the real ``colocate_async`` run saved in benchmarks/CPU_ASYNC.json.
"""

from __future__ import annotations

import html
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from rlhooks.palette import series_colours
from rlhooks.report import _runs_table, no_tables_note, validation_accuracy
from rlhooks.report.charts import CHARTS, Chart, render_chart
from rlhooks.report.reader import load_run

from ..headless_browser import CHROMEDRIVER, CHROMIUM, MISSING, chromium

RECORDED = Path(__file__).resolve().parent / "recorded" / "v1-train"
ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("add_carry", "add_small")  # the run's validation sources: accuracy 0.0 and 0.5 at step 2


@pytest.fixture
def v1_run(tmp_path: Path) -> Path:
    run_dir = tmp_path / "train-v1"
    shutil.copytree(RECORDED, run_dir)
    return run_dir


def async_copy(run_dir: Path) -> Path:
    """The recorded run with the staleness figures of the real colocate_async run (benchmarks/CPU_ASYNC.json)."""
    bench = next(r for r in json.loads((ROOT / "benchmarks" / "CPU_ASYNC.json").read_text()) if r["mode"] == "colocate_async")
    lines = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec["kind"] == "metrics":
            real = bench["steps"][str(rec["step"])]
            rec["metrics"] |= {"staleness/lag_mean": real["staleness/lag_mean"],
                               "staleness/evicted_groups": real["filter/stale_evicted_groups"],
                               "filter/stale_evicted_groups": real["filter/stale_evicted_groups"]}
        lines.append(json.dumps(rec))
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    return run_dir


def data_pixels(rgb: np.ndarray, colours: list[str], tol: float = 60.0) -> int:
    """Pixels of ``colours`` between the top and bottom spines of the one axes in ``rgb`` (legend and tick
    labels, below the bottom spine, left out): what the chart drew as data."""
    dark = (rgb[..., :3].max(axis=-1) < 90).sum(axis=1)  # spines: the rows with the longest dark lines
    rows = np.flatnonzero(dark > 0.5 * dark.max())
    top, bottom = int(rows.min()), int(rows.max())
    inside = rgb[top + 2:bottom - 1, :, :3].astype(np.float64)
    total = 0
    for c in colours:
        want = np.array([int(c[i:i + 2], 16) for i in (1, 3, 5)], dtype=np.float64)
        total += int((np.linalg.norm(inside - want, axis=-1) < tol).sum())
    return total


def _validation_colours() -> list[str]:
    colours = series_colours(SOURCES)
    return [colours[s] for s in SOURCES]


def test_a_lone_validation_point_is_drawn(v1_run, tmp_path):
    """Item 6: the run's only validation (step 2) is a point, not an invisible one-point line."""
    import matplotlib.image

    run = load_run(v1_run)
    panel = next(p for c in CHARTS for p in c.panels if p.title.startswith("validation accuracy"))
    assert [label for label, _ in panel.matches(run)] == list(SOURCES)
    assert run.series["val-core/add_small/acc/mean@1"][0].tolist() == [2]
    png = render_chart(Chart("validation.png", "validation", (panel,), "none"), [run], tmp_path)  # one panel: ~0.2 s
    rgb = (matplotlib.image.imread(png) * 255).astype(np.uint8)
    assert data_pixels(rgb, _validation_colours()) > 10


def test_a_lone_step_gets_whole_step_ticks():
    """One step on the x axis: matplotlib's range around it (1.9-2.1) is widened to a step either side, so the
    ticks are whole steps (seen in a 2-step run's report in Chromium: 1.900, 1.925, ...)."""
    from rlhooks.report.charts import whole_step_limits

    assert whole_step_limits(1.9, 2.1) == pytest.approx((1.0, 3.0))
    assert whole_step_limits(0.95, 40.05) == (0.95, 40.05)  # a run's steps: left as matplotlib chose


def test_the_learner_chart_says_simulated_only_for_a_simulated_run(v1_run):
    """Item 7: on a real run the actor/* panels are verl's values, titled so."""
    real = load_run(v1_run)
    learner = next(c for c in CHARTS if c.file == "learner.png")
    assert learner.title_for([real]) == "Policy updates (verl's actor)"
    titles = [p.title_for(False) for p in learner.panels if p.matches(real)]
    assert titles == ["update KL (actor/ppo_kl)", "policy entropy (actor/entropy)"]
    assert not any("simulated" in t for t in titles)
    sim = load_run(v1_run)
    sim.series["sim/skill/add_small"] = (np.array([1, 2]), np.array([0.1, 0.2]))
    assert learner.title_for([sim]) == "Simulated learner"
    assert [p.title_for(True) for p in learner.panels if p.matches(sim)][-1] == "policy entropy (simulated)"


def test_the_runs_table_shows_the_trainer_validation_and_lag(v1_run, tmp_path):
    """Item 8: trainer (and mode, from summary.json), validation accuracy first to last, the mean lag."""
    sync = load_run(v1_run)
    assert validation_accuracy(sync) == (0.25, 0.25, 2, 2)  # mean of 0.0 and 0.5, one validation
    table = html.unescape(_runs_table([sync]))
    assert "<td>verl</td>" in table and "validation accuracy" in table and "0.25 (step 2) → 0.25 (step 2)" in table
    assert "lag" not in table  # a sync run has none
    (v1_run / "summary.json").write_text(json.dumps({"trainer": "verl V1", "mode": "rlhooks_colocate_async"}))
    asynchronous = load_run(async_copy(v1_run))
    table = html.unescape(_runs_table([asynchronous]))
    assert "<td>verl V1, rlhooks_colocate_async</td>" in table and "lag (mean, policy updates)" in table
    lag = asynchronous.series["staleness/lag_mean"][1]
    assert f"<td class='num'>{float(lag.mean()):.4g}</td>" in table


def test_an_async_run_gets_the_staleness_chart_and_a_sync_run_does_not(v1_run):
    """Item 8: the lag and stale-eviction chart reads the async run's staleness/* metrics."""
    chart = next(c for c in CHARTS if c.file == "staleness.png")
    sync = load_run(v1_run)
    assert not any(p.matches(sync) for p in chart.panels)
    asynchronous = load_run(async_copy(v1_run))
    assert [[k for _, k in p.matches(asynchronous)] for p in chart.panels] == [
        ["staleness/lag_mean"], ["staleness/evicted_groups"]]


def test_no_sample_tables_says_the_run_was_shorter_than_every(v1_run):
    """Item 8: top_bottom_k every 10 on a 2-step run is not "enable top_bottom_k"."""
    run = load_run(v1_run)
    assert no_tables_note([run]).startswith("No sample tables were logged (enable top_bottom_k")  # none configured
    run.config["samples"] = [{"name": "top_bottom_k", "k": 2, "every": 10}]
    note = no_tables_note([run])
    assert "top_bottom_k (every 10 steps)" in note and "in its 2 steps" in note and "enable" not in note


@pytest.mark.slow  # draws the whole report (~10 s) and starts Chromium (~5 s)
@pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None, reason=MISSING)
def test_the_report_of_a_real_v1_run_in_headless_chromium(v1_run):
    """The report page of the real V1 run, as Chromium shows it: the validation panel (bottom left of the
    overview: reward per source, filter kept ratio, validation) has data, the runs table has the trainer and
    validation accuracy, the actor panels are not called simulated."""
    from PIL import Image
    from selenium.webdriver.common.by import By

    from rlhooks.report import write_report

    page = write_report([v1_run], v1_run / "report")
    with chromium(window="1400,1000") as driver:
        driver.get(page.resolve().as_uri())
        text = driver.find_element(By.TAG_NAME, "body").text
        figure = driver.find_element(By.CSS_SELECTOR, "figure#overview img")
        assert driver.execute_script("return arguments[0].complete && arguments[0].naturalWidth", figure) > 0
        import io

        shot = np.asarray(Image.open(io.BytesIO(figure.screenshot_as_png)).convert("RGB"))
    assert "verl" in text and "0.25 (step 2)" in text
    assert "Policy updates (verl's actor)" in text and "Simulated learner" not in text
    h, w = shot.shape[:2]
    validation_panel = shot[h // 2:, : w // 2]  # the third of three panels, two columns
    assert data_pixels(validation_panel, _validation_colours()) > 10
