"""Read back what each built-in backend persisted, from its real output, for BackendContract.

Each reader takes ``(plugin, run_dir, test)`` (``test`` is the test-class instance, which holds
``capsys`` for the console backend) and returns a ReadBack. A built-in backend without a reader
here fails a meta-test in test_builtin_contracts.py.
"""

from __future__ import annotations

import json
import math
import re
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlhooks.testing import ReadBack

_NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def read_jsonl(plugin: Any, run_dir: Path, test: Any) -> ReadBack:
    path = Path(plugin.path) if getattr(plugin, "path", None) else run_dir / "metrics.jsonl"
    metrics: dict[int, dict[str, Any]] = {}
    tables: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        if rec["kind"] == "metrics":
            values = dict(rec["metrics"])
            for k, name in rec.get("nonfinite", {}).items():
                values[k] = _NONFINITE[name]
            metrics.setdefault(rec["step"], {}).update(values)
        elif rec["kind"] == "table":
            tables.setdefault((rec["step"], rec["name"]), []).extend(rec["rows"])
    return ReadBack(metrics=metrics, tables=tables)


def read_tensorboard(plugin: Any, run_dir: Path, test: Any) -> ReadBack:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log_dir = Path(plugin.log_dir) if getattr(plugin, "log_dir", None) else run_dir / "tensorboard"
    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})
    acc.Reload()
    metrics: dict[int, dict[str, Any]] = {}
    for tag in acc.Tags()["scalars"]:
        for ev in acc.Scalars(tag):
            metrics.setdefault(ev.step, {})[tag] = ev.value
    return ReadBack(metrics=metrics)  # tables are markdown text summaries: not compared cell by cell


_STEP_LINE = re.compile(r"^step (\d+) \| (.*)$")


def read_console(plugin: Any, run_dir: Path, test: Any) -> ReadBack:
    out = test.capsys.readouterr()
    text = out.out if plugin.options.stream == "stdout" else out.err
    metrics: dict[int, dict[str, Any]] = {}
    for line in text.splitlines():
        m = _STEP_LINE.match(line)
        if not m:
            continue
        values = metrics.setdefault(int(m.group(1)), {})
        for part in m.group(2).split(" | "):
            name, _, value = part.rpartition(" ")
            values[name] = float(value)
    return ReadBack(metrics=metrics)


_WANDB_HEADER = b":W&B\xe1\xbe\x00"  # ident, magic 0xBEE1 (little endian), version 0
_BLOCK = 32768
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def wandb_records(path: Path) -> Iterator[bytes]:
    """Records of a .wandb transaction log: the LevelDB log format (32 KiB blocks of
    7-byte-header chunks: crc32, length, type) after a 7-byte W&B file header. The crc is not checked."""
    data = path.read_bytes()
    assert data[:4] == _WANDB_HEADER[:4], f"{path} is not a W&B transaction log"
    pos, pending = len(_WANDB_HEADER), b""
    while pos + 7 <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < 7:  # block trailer padding
            pos += left
            continue
        length, kind = struct.unpack_from("<HB", data, pos + 4)
        chunk = data[pos + 7: pos + 7 + length]
        pos += 7 + length
        if kind == _FULL:
            yield chunk
        elif kind == _FIRST:
            pending = chunk
        elif kind == _MIDDLE:
            pending += chunk
        elif kind == _LAST:
            yield pending + chunk
            pending = b""
        else:  # zero padding at the end of a block
            pos += _BLOCK - pos % _BLOCK if pos % _BLOCK else 0


def read_wandb(plugin: Any, run_dir: Path, test: Any) -> ReadBack:
    """The offline run's .wandb transaction log, decoded with wandb's own protobuf Record."""
    from google.protobuf.message import DecodeError
    from wandb.proto import wandb_internal_pb2

    files = sorted(run_dir.rglob("*.wandb"), key=lambda p: p.stat().st_mtime)
    assert files, f"no .wandb file under {run_dir}"
    # wandb-core (0.31) may return from run.finish() before its writer has flushed the log:
    # wait for the run's exit record, as `wandb sync` would only see a finished log.
    deadline = time.monotonic() + 20
    while True:
        records = []
        try:
            for raw in wandb_records(files[-1]):
                rec = wandb_internal_pb2.Record()
                rec.ParseFromString(raw)
                records.append(rec)
        except DecodeError:  # a record still being written
            records = []
        if any(r.WhichOneof("record_type") == "exit" for r in records) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    metrics: dict[int, dict[str, Any]] = {}
    for rec in records:
        if rec.WhichOneof("record_type") != "history":
            continue
        step = rec.history.step.num
        for item in rec.history.item:
            key = item.key or "/".join(item.nested_key)
            if key.startswith("_"):
                continue
            value = json.loads(item.value_json)
            if isinstance(value, (int, float)):
                metrics.setdefault(step, {})[key] = value
            elif value in ("NaN", "Infinity", "-Infinity"):
                metrics.setdefault(step, {})[key] = float(value.replace("Infinity", "inf"))
    return ReadBack(metrics=metrics)


READERS = {"jsonl": read_jsonl, "tensorboard": read_tensorboard, "console": read_console, "wandb": read_wandb}
