"""The HTML report shows the reward monitor's alert summary, including never-seen alert metrics."""

from __future__ import annotations

import html
import json
import shutil

import pytest

from rlhooks.report import write_report


def check_alert_section(section: str, demo_run) -> None:
    alerts = json.loads((demo_run / "reward_monitor.json").read_text())["alerts"]
    assert alerts["by_metric"]["filter/kept_ratio"]["count"] >= 1  # the run's alert fired (short name resolved)
    levels = ", ".join(f"{k} {v}" for k, v in alerts["by_level"].items())
    assert f"<b>{alerts['total']}</b> alert(s): {levels}" in section
    for metric, v in alerts["by_metric"].items():
        assert (f"<td>{metric}</td><td class='num'>{v['count']}</td><td class='num'>{v['first_step']}</td>"
                f"<td class='num'>{v['last_step']}</td>") in section
    assert "DAPO keeps under 90% of the groups" in section
    assert "alert on kl_divergense never checked: no step logged it; did you mean training/kl_divergence?" in section


def test_report_alert_section(demo_run):
    from rlhooks.report import _alerts_section, load_run  # the page's section, without drawing every chart

    check_alert_section(html.unescape(_alerts_section(load_run(demo_run))), demo_run)


@pytest.mark.slow  # draws every report chart (matplotlib)
def test_report_page_has_the_alert_summary(demo_run, tmp_path):
    page = html.unescape(write_report([demo_run], tmp_path / "report").read_text(encoding="utf-8"))
    check_alert_section(page[page.index("<h2 id='alerts'>Alerts</h2>"):page.index("<h2>Samples</h2>")], demo_run)


def test_report_without_a_monitor_summary_says_why(demo_run, tmp_path):
    from rlhooks.report import _alerts_section, load_run  # the page's section, without drawing every chart

    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(demo_run / "metrics.jsonl", run / "metrics.jsonl")
    section = _alerts_section(load_run(run))
    assert "alert(s) so far; the run-end summary (reward_monitor.json) is not written yet" in section


def test_report_shows_each_alert_episode_once_and_the_hacking_and_quality_panels(demo_run):
    from rlhooks.report import _alerts_section, _hacking_section, _quality_section, load_run

    run = load_run(demo_run)
    summary = json.loads((demo_run / "reward_monitor.json").read_text())
    episodes = summary["alerts"]["episodes"]
    kept = [e for e in episodes if e["metric"] == "filter/kept_ratio"]
    fired = summary["alerts"]["by_metric"]["filter/kept_ratio"]["count"]
    assert kept and sum(e["steps"] for e in kept) == fired  # every firing step is in exactly one episode
    section = html.unescape(_alerts_section(run))
    assert section.count("<td>filter/kept_ratio</td><td>warning</td>") == len(kept)  # once per episode, not per step
    assert "one row per episode" in section and "latest alerts" not in section
    hacking = html.unescape(_hacking_section(run))
    assert summary["reward_hacking"]["verdict"] in hacking and "task change (standard errors)" in hacking
    assert "class='verdict clear'" in hacking  # the demo learns: no false verdict
    quality = html.unescape(_quality_section(run))
    assert f"quality score <b>{summary['quality']['quality_score']:.4g}</b> / 100" in quality
    assert "discriminability" in quality
