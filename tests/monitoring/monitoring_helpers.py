"""Helpers shared by the monitoring tests (a simulated run, its logged metric keys)."""

from __future__ import annotations

import json
from pathlib import Path

from rlhooks.cli import main


def simulate(out: Path, *extra: str, steps: int = 12) -> Path:
    """A real simulated run (the demo config, shortened) in ``out``; returns its run directory."""
    rc = main(["simulate", "--out", str(out), "--no-progress", "--no-report", "--set", f"run.steps={steps}", *extra])
    assert rc == 0
    return out / "demo"


def metric_keys(run_dir: Path) -> set[str]:
    keys: set[str] = set()
    for line in (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        if rec.get("kind") == "metrics":
            keys.update(rec["metrics"])
    return keys
