"""`rlhooks report`, `rlhooks simulate` (default config, --compare) end to end on real files."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from rlhooks.cli import main
from rlhooks.engines.sim.compare import compare
from rlhooks.report import ReportError, load_run, write_report

from .conftest import make_engine, small_config

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "configs"


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.images: list[str] = []
        self.links: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img":
            self.images.append(a.get("src", ""))
        if tag == "a":
            self.links.append(a.get("href", ""))

    def handle_data(self, data):
        self.text.append(data)


def _run_dir(tmp: Path, data, name: str, **sections) -> Path:
    cfg = small_config(tmp, run={"name": name, "steps": 8}, backends=["jsonl"],
                       samples=[{"name": "top_bottom_k", "k": 1, "every": 4}], **sections)
    cfg["rewards"] = cfg["rewards"] + ["source_metrics", "reward_monitor"]
    make_engine(cfg, data, tmp / name).run()
    return tmp / name


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory, small_data):
    tmp = tmp_path_factory.mktemp("runs")
    a = _run_dir(tmp, small_data, "plain")
    b = _run_dir(tmp, small_data, "curric", filters=["dapo"], sampler={
        "name": "reward_curriculum", "complexity_source": "chain", "reward_threshold": 7.0, "num_intervals": 3,
        "min_batches_per_level": 1, "check_frequency": 1})
    return a, b


def test_report_writes_pngs_and_a_self_contained_page(two_runs, tmp_path):
    page = write_report([two_runs[0]], tmp_path / "rep")
    pngs = sorted((tmp_path / "rep").glob("*.png"))
    assert len(pngs) >= 5
    for p in pngs:
        data = p.read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 5000, p.name
    parser = _Page()
    parser.feed(page.read_text())
    embedded = [s for s in parser.images if s.startswith("data:image/png;base64,")]
    assert len(embedded) == len(parser.images) == len(pngs)
    # each embedded image is the PNG file the page links to, byte for byte
    assert sorted(parser.links) == sorted(p.name for p in pngs)
    on_disk = {p.read_bytes() for p in pngs}
    assert {base64.b64decode(s.split(",", 1)[1]) for s in embedded} == on_disk
    text = " ".join(parser.text)
    # no sampler and no filter in this run: those charts are skipped with a note, not a crash
    assert "Sampler weights: skipped" in text and "Curriculum: skipped" in text
    assert "samples/top_bottom_k" in text and "<answer>" in text  # the sample table, escaped


@pytest.fixture(scope="module")
def overlay_page(two_runs, tmp_path_factory) -> Path:
    return write_report(list(two_runs), tmp_path_factory.mktemp("cmp"))


def test_report_overlays_several_runs(two_runs, overlay_page):
    html = overlay_page.read_text()
    assert "plain vs curric" in html
    assert (overlay_page.parent / "curriculum.png").exists()  # one run has a curriculum: drawn
    run = load_run(two_runs[1])
    assert run.name == "curric" and run.status == "success" and run.n_steps == 8
    steps, values = run.series["curriculum/level"]
    assert list(steps) == list(range(1, 9)) and np.all(np.diff(values) >= 0)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian chromium not installed (apt-get install chromium)")
def test_report_renders_in_headless_chromium(overlay_page, tmp_path):
    page = overlay_page
    shot = tmp_path / "page.png"
    subprocess.run(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1200,1600",
         f"--screenshot={shot}", page.resolve().as_uri()],
        check=True, capture_output=True, timeout=90,
    )
    from PIL import Image

    img = np.asarray(Image.open(shot).convert("L"), dtype=np.float64)
    assert img.shape == (1600, 1200)
    # a rendered page with charts is far from blank: many distinct grey levels, dark text on white
    assert len(np.unique(img)) > 50 and img.min() < 60 and img.std() > 15


def test_report_reads_nulls_and_a_torn_last_line(tmp_path):
    f = tmp_path / "r" / "metrics.jsonl"
    f.parent.mkdir()
    lines = [
        {"kind": "run_start", "name": "r", "config": {}},
        {"kind": "metrics", "step": 1, "metrics": {"rewards/mean": 1.0, "filter/kept_ratio": None}},
        {"kind": "metrics", "step": 2, "metrics": {"rewards/mean": 2.0, "filter/kept_ratio": 0.5}},
    ]
    f.write_text("\n".join(json.dumps(x) for x in lines) + "\n{\"kind\": \"metr")
    run = load_run(f.parent)
    assert run.status is None and run.n_steps == 2
    assert np.isnan(run.series["filter/kept_ratio"][1][0]) and run.last("filter/kept_ratio") == 0.5
    page = write_report([f.parent], tmp_path / "out")
    assert "unfinished" in page.read_text()


def test_report_errors_say_what_to_do(tmp_path):
    with pytest.raises(ReportError, match="does not exist"):
        load_run(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReportError, match="add 'jsonl'"):
        load_run(tmp_path / "empty")


@pytest.mark.slow
def test_cli_simulate_default_config_end_to_end(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc = main(["simulate", "--steps", "6", "--no-progress", "--set", "run.train_batch_size=16",
               "--set", "run.gen_batch_size=24", "--set", "simulate.rows_per_source=200"])
    assert rc == 0
    out = capsys.readouterr().out
    run_dir = tmp_path / "runs" / "demo"
    assert "rlhooks simulate: demo: 6 steps" in out and "curriculum: level" in out and "alerts:" in out
    for name in ("arith_add", "arith_mul", "chain", "logic"):
        assert name in out
    for f in ("metrics.jsonl", "config.yaml", "data.parquet", "summary.json", "report/report.html", "tensorboard"):
        assert (run_dir / f).exists(), f
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 6 and summary["trained_trajectories"] == 6 * 16 * 8
    # a rerun replaces the earlier simulated run (same name)
    assert main(["simulate", "--steps", "2", "--no-progress", "--no-report", "--set", "simulate.rows_per_source=100"]) == 0
    assert not (run_dir / "report").exists()
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == 2


def test_simulate_without_the_jsonl_backend_finishes_and_says_why_there_is_no_report(tmp_path, capsys):
    cfg = tmp_path / "nojsonl.yaml"
    cfg.write_text(f"run: {{name: nojsonl, out_dir: {tmp_path}, steps: 2, train_batch_size: 8, gen_batch_size: 8}}\n"
                   f"simulate: {{rows_per_source: 100}}\nbackends: [console]\n")
    assert main(["simulate", str(cfg), "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert "rlhooks simulate: nojsonl: 2 steps" in captured.out
    assert "no report:" in captured.err and "add 'jsonl' to the run's backends" in captured.err
    summary = json.loads((tmp_path / "nojsonl" / "summary.json").read_text())
    assert summary["status"] == "success" and summary.get("report") is None


def test_cli_report_command(tmp_path, capsys):
    f = tmp_path / "r" / "metrics.jsonl"
    f.parent.mkdir()
    recs = [{"kind": "metrics", "step": s, "metrics": {"filter/kept_ratio": 0.5 + 0.01 * s}} for s in range(1, 6)]
    f.write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert main(["report", str(f.parent)]) == 0
    assert "report.html" in capsys.readouterr().out
    assert (f.parent / "report" / "filter.png").read_bytes().startswith(PNG_MAGIC)


def test_cli_errors(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["simulate", "a.yaml", "--compare", "b.yaml", "c.yaml"]) == 1
    assert "not both" in capsys.readouterr().err
    (tmp_path / "runs" / "demo").mkdir(parents=True)
    (tmp_path / "runs" / "demo" / "mine.txt").write_text("user data")
    assert main(["simulate", "--steps", "1", "--no-progress"]) == 1
    assert "was not made by 'rlhooks simulate'" in capsys.readouterr().err
    assert (tmp_path / "runs" / "demo" / "mine.txt").exists()
    assert main(["simulate", "--set", "simulate.learner.sharpness=-1", "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "simulate.learner" in err and "'sharpness' must be > 0" in err


def test_compare_reward_curriculum_reaches_the_target_before_uniform(tmp_path):
    """A property of the simulated learner: on the default data, the example curriculum config
    brings the curriculum source (chain) to the target accuracy in fewer steps than uniform sampling
    (measured 32 vs 44 steps to 0.5)."""
    result = compare([EXAMPLES / "uniform.yaml", EXAMPLES / "curriculum.yaml"],
                     ["run.steps=60", "simulate.target_accuracy=0.5"], out=tmp_path, report=False)
    uniform, curriculum = result["runs"]
    u, c = uniform["sources"]["chain"]["steps_to_target"], curriculum["sources"]["chain"]["steps_to_target"]
    assert c is not None and (u is None or c + 5 <= u), (u, c)
    assert uniform["generated_trajectories"] == curriculum["generated_trajectories"]  # no filter: same cost
    table = (tmp_path / "compare" / "comparison.md").read_text()
    assert "steps to 0.50: chain" in table and "| uniform" in table and "curriculum" in table


def test_simulate_without_backends_warns_that_metrics_go_nowhere(tmp_path):
    import attrs
    import structlog

    from rlhooks.engines.sim.engine import load_sim_config
    from rlhooks.engines.sim.runs import warn_without_backends

    cfg = tmp_path / "nobackends.yaml"
    cfg.write_text(f"run: {{name: quiet, out_dir: {tmp_path}, steps: 1, train_batch_size: 8, gen_batch_size: 8}}\n"
                   f"simulate: {{rows_per_source: 100}}\nrewards: [check_answer, source_metrics]\nbackends: []\n")
    config = load_sim_config(str(cfg))
    observer = attrs.evolve(config.rewards[1], kind="plugin", path="plugins[0]")
    with structlog.testing.capture_logs() as logs:  # simulate_run calls it before the run starts
        warn_without_backends(config)
        warn_without_backends(attrs.evolve(config, plugins=(observer,)))  # the plugins whose metrics are lost
        warn_without_backends(load_sim_config(str(cfg), overrides=["backends=[console]"]))
    assert [e["event"] for e in logs] == [
        "no backends configured (backends: []): the run's metrics, every step's, are written nowhere (only "
        "summary.json is); add backends, e.g. backends: [console, jsonl]",
        "no backends configured (backends: []): the run's metrics, its plugins' metrics (source_metrics) included, "
        "are written nowhere (only summary.json is); add backends, e.g. backends: [console, jsonl]"]
