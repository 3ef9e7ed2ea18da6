"""The HTML report shows the reward monitor's alert summary, including never-seen alert metrics."""

from __future__ import annotations

import html
import re

from monitoring_helpers import demo_config_with, simulate

from rlhooks.report import write_report


def test_report_has_the_alert_summary(tmp_path):
    cfg = demo_config_with(tmp_path, monitor={"alerts": [
        {"metric": "kept_ratio", "condition": "less", "threshold": 0.9, "message": "DAPO keeps under 90%"},
        {"metric": "kl_divergense", "condition": "greater", "threshold": 1.0}]})
    run = simulate(tmp_path / "out", str(cfg), steps=4)
    page = html.unescape(write_report([run], tmp_path / "report").read_text(encoding="utf-8"))
    section = page[page.index("<h2 id='alerts'>Alerts</h2>"):page.index("<h2>Samples</h2>")]
    assert "<b>4</b> alert(s): info 0, warning 4, critical 0" in section
    assert re.search(r"<td>filter/kept_ratio</td><td class='num'>4</td><td class='num'>1</td><td class='num'>4</td>", section)
    assert "DAPO keeps under 90%" in section
    assert "alert on kl_divergense never checked: no step logged it; did you mean training/kl_divergence?" in section


def test_report_without_a_monitor_summary_says_why(tmp_path):
    run = simulate(tmp_path / "out", steps=2)
    (run / "reward_monitor.json").unlink()
    page = write_report([run], tmp_path / "report").read_text(encoding="utf-8")
    assert "run-end summary (reward_monitor.json) is not written yet" in page
