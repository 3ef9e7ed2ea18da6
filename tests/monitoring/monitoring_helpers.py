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


def read_wandb_records(path: Path) -> list:
    """Records of a .wandb transaction log (LevelDB log format: 32 KiB blocks of framed chunks),
    parsed into wandb's own protobuf Record messages."""
    import struct

    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    block, pos, out, buf = 32768, 7, [], b""  # 7-byte file header ":W&B" + magic + version
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0 and length == 0:
            pos += left
            continue
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind == 1:
            out.append(chunk)
        elif kind == 2:
            buf = chunk
        elif kind == 3:
            buf += chunk
        elif kind == 4:
            out.append(buf + chunk)
    records = []
    for raw in out:
        rec = pb.Record()
        rec.ParseFromString(raw)
        records.append(rec)
    return records
