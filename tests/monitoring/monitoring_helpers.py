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


def demo_config_with(tmp: Path, *backends: dict, monitor: dict | None = None, name: str = "config") -> Path:
    """The embedded demo config with extra backends (and reward_monitor options), written to a YAML file."""
    import yaml

    from rlhooks.engines.sim.cli import default_config_path

    cfg = yaml.safe_load(Path(default_config_path()).read_text(encoding="utf-8"))
    cfg["backends"] = [*cfg["backends"], *backends]
    if monitor:
        (mon,) = [r for r in cfg["rewards"] if isinstance(r, dict) and r.get("name") == "reward_monitor"]
        mon.update(monitor)
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


