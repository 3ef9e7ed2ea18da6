"""``rlhooks dashboard`` in a real headless Chromium: every panel renders with data, runs overlay,
and the page follows lines appended to metrics.jsonl.

The server is the real command (``rlhooks dashboard``, Streamlit) on 127.0.0.1 and a free port; the
browser is Debian's chromium driven through its chromedriver (selenium). Every wait is bounded.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from ..headless_browser import CHROMEDRIVER, CHROMIUM, MISSING, chromium
from .conftest import DEMO_STEPS as STEPS

pytest.importorskip("streamlit", reason="the dashboard extra is not installed (pip install 'rlhooks[dashboard]')")
selenium = pytest.importorskip("selenium", reason="selenium is part of the test extra")
pytestmark = pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER), reason=MISSING)

LIVE_STEPS = 5
PANELS = ("overview", "hacking", "functions", "quality", "dynamics", "sources", "sampler", "filter", "alerts", "samples", "raw")
#: plots per panel (each drawn with at least one trace)
PLOTS = {"overview": 1, "functions": 2, "quality": 3, "dynamics": 3, "sources": 4, "sampler": 4, "filter": 4, "alerts": 1}
WAIT_S = 90


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what: str, check, timeout: float = WAIT_S, every: float = 0.5):
    end = time.monotonic() + timeout
    last = None
    while time.monotonic() < end:
        try:
            last = check()
        except Exception as exc:  # noqa: BLE001 - the page is still re-rendering
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


@pytest.fixture(scope="module")
def runs(demo_run, tmp_path_factory):
    """The shared finished run ('demo', with alerts that fire) and a live run ('other') cut at LIVE_STEPS:
    the same records under another name, written line by line as a run would."""
    lines = (demo_run / "metrics.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    start = json.loads(lines[0])
    assert start["kind"] == "run_start"
    lines[0] = json.dumps({**start, "name": "other"}) + "\n"
    cut = next(i for i, line in enumerate(lines) if f'"step": {LIVE_STEPS + 1},' in line)
    live = tmp_path_factory.mktemp("live") / "other"
    live.mkdir()
    (live / "metrics.jsonl").write_text("".join(lines[:cut]), encoding="utf-8")
    return demo_run, live, lines[cut:]


@pytest.fixture(scope="module")
def server(runs, tmp_path_factory):
    base, live, _rest = runs
    port = free_port()
    log = (tmp_path_factory.mktemp("dash-log") / "server.log").open("w")
    cmd = [sys.executable, "-m", "rlhooks.cli", "dashboard", str(base), str(live), "--port", str(port), "--refresh", "1"]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        def healthy():
            if proc.poll() is not None:
                raise AssertionError(f"dashboard exited with {proc.returncode}: {Path(log.name).read_text()}")
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                return r.read() == b"ok"
        wait_for("the dashboard server", healthy, timeout=60)
        yield url
    finally:
        os.killpg(proc.pid, 15)  # the command and the Streamlit server it started (its own session)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait(timeout=5)
        log.close()


@pytest.fixture(scope="module")
def browser():
    with chromium() as driver:
        yield driver


SNAPSHOT_JS = """
const out = {};
for (const name of arguments[0]) {
  const el = document.querySelector('.st-key-panel-' + name);
  if (!el) continue;
  out[name] = {
    text: el.innerText,
    traces: Array.from(el.querySelectorAll('.js-plotly-plot')).map(p => p.querySelectorAll('.scatterlayer .trace').length),
    tables: el.querySelectorAll('table').length,
    rowcounts: Array.from(el.querySelectorAll('[aria-rowcount]')).map(e => parseInt(e.getAttribute('aria-rowcount'))).sort((a, b) => a - b),
    displayed: el.getBoundingClientRect().height > 0,
  };
}
return out;
"""


#: per plot of a panel: each trace's name and colour, and whether its legend lies clear of the plot area
TRACES_JS = """
const el = document.querySelector('.st-key-panel-' + arguments[0]);
return Array.from(el.querySelectorAll('.js-plotly-plot')).map(p => {
  const area = p.querySelector('.nsewdrag').getBoundingClientRect();
  const legend = p.querySelector('.legend');
  const box = legend ? legend.getBoundingClientRect() : null;
  return {
    title: (p.querySelector('.gtitle') || {}).textContent || '',
    traces: p.data.map(t => [t.name, (t.line || {}).color || (t.marker || {}).color]),
    legend_clear: box === null || box.top >= area.bottom || box.left >= area.right,
  };
});
"""


def snapshot(driver) -> dict:
    """Every panel's text, plot traces, tables and data-grid row counts, in one round trip."""
    return driver.execute_script(SNAPSHOT_JS, list(PANELS))


def all_plots_drawn(driver):
    snap = snapshot(driver)
    ok = all(p in snap and len(snap[p]["traces"]) >= n and min(snap[p]["traces"]) > 0 for p, n in PLOTS.items())
    ok = ok and all(p in snap for p in PANELS) and len(snap["raw"]["rowcounts"]) == 2  # both runs' data grids
    return snap if ok else None


@pytest.mark.slow  # a Streamlit server and a browser: ~1 min on 2 cores (CI runs the slow tests)
def test_every_panel_renders_with_data_overlays_runs_and_follows_appended_lines(runs, server, browser):
    base, live, rest = runs
    browser.get(server)
    snap = wait_for("every panel's plots", lambda: all_plots_drawn(browser))

    for name in PANELS:
        assert snap[name]["displayed"], name
    # overlay: both runs in the overview table, the per-function chart has both runs' four functions
    overview = snap["overview"]["text"]
    assert "demo" in overview and "other" in overview and f"other: last step {LIVE_STEPS}, running" in overview
    assert "demo · rewards/min" in overview and "demo · rewards/max" in overview  # the min / max chart's legend
    hacking = snap["hacking"]["text"]  # the finished run's verdict with its numbers; none yet for the live one
    assert "Reward hacking check" in hacking and "no verdict yet" in hacking
    assert "no reward hacking" in hacking and "task/acc rose" in hacking and "task change (standard errors)" in hacking
    functions = snap["functions"]
    assert functions["traces"][0] == 8 and "demo · check_answer" in functions["text"] and "other · format_exact" in functions["text"]
    assert snap["quality"]["traces"] == [2, 2, 2]
    assert sum(snap["dynamics"]["traces"]) == 2 * 5  # KL (reference, update), policy entropy, advantage mean + std
    assert all(s in snap["sources"]["text"] for s in ("arith_add", "arith_mul", "chain", "logic"))
    assert "sampling weight by source" in snap["sampler"]["text"] and "curriculum level" in snap["sampler"]["text"]
    assert "kept ratio" in snap["filter"]["text"]
    alerts = snap["alerts"]["text"]
    assert "DAPO keeps under 90% of the groups" in alerts  # the fired alerts, as a table
    assert "filter/kept_ratio" in alerts  # the run-end alert summary of the finished run:
    assert "first_step" in alerts and "last_step" in alerts  # its by-metric table
    assert "alert on kl_divergense never checked: no step logged it — did you mean training/kl_divergence?" in alerts
    # one colour per source, the report's palette (rlhooks.palette), in every chart; legends off the data
    from rlhooks.palette import series_colours

    colours = series_colours(["arith_add", "arith_mul", "chain", "logic"])
    for panel in ("sources", "sampler"):
        for plot in browser.execute_script(TRACES_JS, panel):
            assert plot["legend_clear"], (panel, plot["title"])
            for name, colour in plot["traces"]:
                source = name.split(" · ")[-1]
                if source in colours:
                    assert colour == colours[source], (panel, plot["title"], name)
    samples = snap["samples"]
    assert samples["tables"] >= 1 and "selection" in samples["text"] and "top" in samples["text"]
    raw = snap["raw"]
    assert raw["rowcounts"] == [LIVE_STEPS + 1, STEPS + 1]  # header + one row per step, per run
    assert "reward_monitor.json" in raw["text"] and "quality_score" in raw["text"]

    # live: the rest of the other run's lines arrive; the page follows without a reload
    with (live / "metrics.jsonl").open("a", encoding="utf-8") as fh:
        fh.writelines(rest)

    def updated():
        snap = snapshot(browser)
        return (f"other: last step {STEPS}, success" in snap["overview"]["text"]
                and snap["raw"]["rowcounts"] == [STEPS + 1, STEPS + 1] and snap["functions"]["traces"][0] == 8)
    wait_for("the appended steps on the page", updated, timeout=30)

    if os.environ.get("RLHOOKS_DASHBOARD_SCREENSHOT"):  # refreshes docs/img/dashboard.png
        browser.execute_script("window.scrollTo(0, 0)")
        browser.save_screenshot(os.environ["RLHOOKS_DASHBOARD_SCREENSHOT"])


def test_dashboard_refuses_a_directory_without_metrics(tmp_path, capsys):
    from rlhooks.cli import main

    assert main(["dashboard", str(tmp_path)]) == 1
    assert "no metrics.jsonl here" in capsys.readouterr().err


def test_dashboard_binds_localhost_headless_by_default():
    from rlhooks.dashboard.cli import streamlit_command

    cmd = streamlit_command(["runs/demo/metrics.jsonl"], "127.0.0.1", 8501, 2.0, open_browser=False)
    opts = dict(zip(cmd[5::2], cmd[6::2]))
    assert opts["--server.address"] == "127.0.0.1" and opts["--server.headless"] == "true"
    assert opts["--browser.gatherUsageStats"] == "false"
    # --open still never opens a browser without a terminal (this test's stdout is captured)
    cmd = streamlit_command(["x"], "127.0.0.1", 8501, 2.0, open_browser=True)
    assert dict(zip(cmd[5::2], cmd[6::2]))["--server.headless"] == "true"


def test_dashboard_refuses_a_taken_port_before_printing_its_url(demo_run, capsys):
    from rlhooks.cli import main

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["dashboard", str(demo_run), "--port", str(port)]) == 1
    out, err = capsys.readouterr()
    assert f"cannot serve on 127.0.0.1:{port}" in err and "pick a free port with --port N" in err
    assert "http://" not in out  # no URL printed for a page that is not this dashboard


def test_without_the_extra_the_error_says_how_to_install_it(demo_run, monkeypatch, capsys):
    from rlhooks.cli import main

    monkeypatch.setitem(sys.modules, "streamlit", None)  # as if not installed: import raises ImportError
    assert main(["dashboard", str(demo_run)]) == 1
    err = capsys.readouterr().err
    assert "needs the dashboard extra (streamlit is not installed)" in err
    assert "pip install -e '.[dashboard]'" in err and "Traceback" not in err
