"""The dashboard script rendered headlessly (Streamlit's AppTest, no browser): what a redraw costs.

The browser test (test_dashboard.py, slow) checks what the page shows; this one checks that a redraw,
which happens every --refresh seconds while a run grows, does not serialize the whole metrics table."""

from __future__ import annotations

import sys

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
