"""Issue 18, case 7: one table cell's text is capped before any backend sees it, with a visible marker."""

from __future__ import annotations

import json
from pathlib import Path

import rlhooks.host
from rlhooks.core.manager import TABLE_CELL_MAX_CHARS, cap_cells


def test_a_huge_table_cell_is_capped_with_a_marker_in_every_backend(tmp_path: Path) -> None:
    cfg = rlhooks.host.load_config({"run": {"name": "cap", "out_dir": str(tmp_path)},
                                    "backends": ["jsonl", {"name": "tensorboard", "max_text": 0}]})
    m = rlhooks.host.RunManager(cfg)
    huge = "x" * 1_000_000
    with m.running():
        m.log_table(1, "samples", [{"target": huge, "reward": 1.0, "short": "ok"}])
    assert m.final_status == "success"
    rows = [json.loads(line) for line in (tmp_path / "cap" / "metrics.jsonl").read_text().splitlines()
            if '"kind": "table"' in line][0]["rows"]
    cell = rows[0]["target"]
    cut = 1_000_000 - TABLE_CELL_MAX_CHARS
    assert cell == "x" * TABLE_CELL_MAX_CHARS + f"… [+{cut} chars]"
    assert rows[0]["short"] == "ok" and rows[0]["reward"] == 1.0
    assert (tmp_path / "cap" / "metrics.jsonl").stat().st_size < 100_000

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path / "cap" / "tensorboard"), size_guidance={"tensors": 0})
    acc.Reload()
    texts = [v.decode("utf-8", "replace") for tag in acc.Tags()["tensors"] if "samples" in tag
             for ev in acc.Tensors(tag) for v in ev.tensor_proto.string_val]
    assert any(f"… [+{cut} chars]" in t for t in texts), [t[:200] for t in texts]
    assert all(len(t) < 2 * TABLE_CELL_MAX_CHARS + 1000 for t in texts)


def test_cap_cells_leaves_short_rows_as_they_are() -> None:
    rows = [{"a": "short", "b": 3}]
    assert cap_cells(rows) is not rows and cap_cells(rows)[0] is rows[0]
    assert cap_cells([{"a": "abcdef"}], 3) == [{"a": "abc… [+3 chars]"}]
