"""The dashboard script rendered headlessly (Streamlit's AppTest, no browser): what a redraw costs.

The browser test (test_dashboard.py, slow) checks what the page shows; this one checks that a redraw,
which happens every --refresh seconds while a run grows, does not serialize the whole metrics table."""

from __future__ import annotations

import base64
import json
import sys

import numpy as np
import pytest

pytest.importorskip("streamlit", reason="the dashboard extra is not installed")
pd = pytest.importorskip("pandas")


def test_a_redraw_does_not_build_the_csv_download(demo_run, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from rlhooks.dashboard import app

    calls = []
    to_csv = pd.DataFrame.to_csv
    monkeypatch.setattr(pd.DataFrame, "to_csv", lambda self, *a, **k: calls.append(len(self)) or to_csv(self, *a, **k))
    monkeypatch.setattr(sys, "argv", ["app", str(demo_run), "--refresh", "1"])
    page = AppTest.from_file(app.__file__, default_timeout=60)
    page.run()
    assert not page.exception
    assert [b.label for b in page.get("download_button")] == ["download demo metrics (CSV)"]
    assert calls == []  # made on click only (20,000 steps x 110 metrics: ~5 s and ~46 MB per redraw otherwise)
    # a simulated run has no verl validation: no empty chart for it
    assert not any("validation accuracy by source" in c.proto.spec for c in page.get("plotly_chart"))


def plotted(values) -> list:
    """A trace's values as sent to the browser: a list, or plotly's typed array (base64 + dtype)."""
    if isinstance(values, dict):
        return np.frombuffer(base64.b64decode(values["bdata"]), dtype=values["dtype"]).tolist()
    return list(values)


def test_the_sources_panel_draws_verls_validation_accuracy_per_source(tmp_path, monkeypatch):
    """A verl run's learning curve (val-core/<source>/acc/mean@1 every trainer.test_freq steps) is a chart."""
    import rlhooks.host
    from streamlit.testing.v1 import AppTest

    from rlhooks.dashboard import app

    cfg = rlhooks.host.load_config({"run": {"name": "v", "out_dir": str(tmp_path)}, "backends": ["jsonl"]})
    m = rlhooks.host.RunManager(cfg)
    with m.running():
        for step in range(1, 21):
            metrics = {"critic/score/mean": 0.1 * step}
            if step % 10 == 0:
                metrics |= {"val-core/add_small/acc/mean@1": 0.4 + step / 100,
                            "val-core/mul_small/acc/mean@1": 0.2 + step / 200,
                            "val-core/add_small/reward/mean@1": 5.0}  # a reward, not an accuracy: not drawn
            m.log_metrics(step, metrics)
    monkeypatch.setattr(sys, "argv", ["app", str(tmp_path / "v"), "--refresh", "1"])
    page = AppTest.from_file(app.__file__, default_timeout=60)
    page.run()
    assert not page.exception
    spec = next(c.proto.spec for c in page.get("plotly_chart") if "validation accuracy by source" in c.proto.spec)
    drawn = {t["name"]: (plotted(t["x"]), plotted(t["y"])) for t in json.loads(spec)["data"]}
    assert sorted(drawn) == ["add_small", "mul_small"]
    assert drawn["add_small"][0] == [10, 20] and drawn["add_small"][1] == pytest.approx([0.5, 0.6])
