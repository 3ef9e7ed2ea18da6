"""Issue 18: one outcome everywhere, an ordered and bounded end (see README "Guarantees")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import structlog

import rlhooks.host


def _manager(tmp_path: Path, backends: list) -> rlhooks.host.RunManager:
    cfg = rlhooks.host.load_config({"run": {"name": "end", "out_dir": str(tmp_path)}, "backends": backends})
    return rlhooks.host.RunManager(cfg)


@pytest.mark.parametrize("backend", [{"name": "test_full_at_end"},
                                     {"name": "test_hang_at_end", "flush_timeout_s": 0.5}])
def test_a_backend_losing_data_in_its_final_flush_fails_the_run_everywhere(dispatch_site, tmp_path: Path,
                                                                          backend: dict) -> None:
    """Case 4: ENOSPC or a hang in on_run_end is lost data: "failed", also in the JSONL run_end."""
    m = _manager(tmp_path, [backend, "jsonl"])
    with structlog.testing.capture_logs() as logs, m.running():
        for step in range(1, 4):
            m.log_metrics(step, {"a": float(step)})
    rec = next(r for r in m.components if r.name == backend["name"])
    if backend["name"] == "test_hang_at_end":
        rec.obj.release.set()
    assert m.final_status == "failed"
    lost = m.lost_data()
    assert len(lost) == 1 and lost[0].startswith(f"{backend['name']} (backends[0])")
    records = [json.loads(line) for line in (tmp_path / "end" / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["kind"] == "run_end" and records[-1]["status"] == "failed"
    assert any(backend["name"] in e["event"] and "on_run_end" in e["event"] for e in logs), logs
