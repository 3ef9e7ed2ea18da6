"""Reading a W&B offline run back: the records of its ``.wandb`` transaction log (shared by the
backend tests and the W&B chart tests)."""

from __future__ import annotations

from pathlib import Path


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
