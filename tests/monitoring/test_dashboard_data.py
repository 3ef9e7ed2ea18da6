"""RunTail: the dashboard's incremental reader of metrics.jsonl (no browser needed)."""

from __future__ import annotations

import json

import pytest

pd = pytest.importorskip("pandas", reason="the dashboard extra is not installed")

from rlhooks.dashboard.data import DashboardError, RunTail  # noqa: E402


def line(**rec) -> str:
    return json.dumps(rec, ensure_ascii=False) + "\n"


def test_tail_reads_only_complete_lines_and_follows_appends(tmp_path):
    f = tmp_path / "metrics.jsonl"
    names = ["openai/gsm8k", "my data v2", "数学"]  # '/', spaces and unicode in source names
    f.write_text(
        line(kind="run_start", name="r1", config={"run": {}})
        + line(kind="metrics", step=1, metrics={"rewards/mean": 1.0, **{f"source/{n}/count": 2 for n in names}})
        + '{"kind": "metrics", "step": 2, "metr',  # a line still being written
        encoding="utf-8")
    t = RunTail(tmp_path)
    assert t.refresh() and t.name == "r1" and t.last_step == 1 and t.status is None
    assert {n: cols["count"] for n, cols in t.sources().items()} == {n: f"source/{n}/count" for n in names}
    assert not t.refresh()  # nothing new
    with f.open("a", encoding="utf-8") as fh:  # the rest of line 2, a table, a re-logged step (resume), the end
        fh.write('ics": {"rewards/mean": 2.0, "x": null}}\n')
        fh.write(line(kind="table", step=2, name="alerts", rows=[{"metric": "rewards/mean", "message": "low"}]))
        fh.write(line(kind="metrics", step=2, metrics={"rewards/mean": 2.5}))
        fh.write("not json\n")
        fh.write(line(kind="run_end", status="success"))
    assert t.refresh()
    assert t.frame["step"].tolist() == [1, 2] and t.last("rewards/mean") == 2.5  # the last value for a step wins
    assert t.status == "success" and t.alert_rows == [{"metric": "rewards/mean", "message": "low"}]
    assert t.skipped_lines == 1
    f.write_text(line(kind="metrics", step=1, metrics={"rewards/mean": 9.0}), encoding="utf-8")  # rewritten
    assert t.refresh() and t.frame["step"].tolist() == [1] and t.last("rewards/mean") == 9.0
    new = tmp_path / "new.jsonl"  # replaced by a longer file (a new run in the same place)
    new.write_text("".join(line(kind="metrics", step=s, metrics={"rewards/mean": float(s)}) for s in range(1, 40)))
    new.replace(f)
    assert t.refresh() and t.frame["step"].tolist() == list(range(1, 40))


def test_missing_run_is_a_clear_error(tmp_path):
    with pytest.raises(DashboardError, match="no metrics.jsonl here; the dashboard reads what the 'jsonl' backend writes"):
        RunTail(tmp_path)
    with pytest.raises(DashboardError, match="no such run directory"):
        RunTail(tmp_path / "nope")


def test_runs_sharing_a_name_get_distinct_labels_after_their_run_start(tmp_path):
    """Two seeds of 'demo' (runs/demo, runs0/demo) overlaid: the legends and tables tell them apart,
    also when the run_start record (read by refresh) renames a run after the page labelled it."""
    from rlhooks.dashboard.data import label_runs

    dirs = [tmp_path / "runs" / "demo", tmp_path / "runs0" / "demo", tmp_path / "runs" / "seed1"]
    for d in dirs:
        d.mkdir(parents=True)
        (d / "metrics.jsonl").write_text(line(kind="run_start", name="demo", config={}), encoding="utf-8")
    tails = [RunTail(d) for d in dirs] + [RunTail(dirs[2])]  # the last directory given twice
    for t in tails:
        t.refresh()
    label_runs(tails)
    labels = [t.label for t in tails]
    assert len(set(labels)) == 4 and all(t.name == "demo" for t in tails)
    assert labels[0] == f"demo ({dirs[0]})" and labels[1] == f"demo ({dirs[1]})"
    label_runs(tails[:1])
    assert tails[0].label == "demo"  # alone, a run is its name


def test_blocks_and_chunks_give_the_frame_a_single_read_gives(tmp_path, monkeypatch):
    """A long run's file is read in blocks and parsed into frames in chunks (bounded memory): lines
    across block edges, a line longer than a block, metrics that appear late and an unfinished last
    line give exactly what one read of the whole file gives."""
    import rlhooks.dashboard.data as data

    f = tmp_path / "metrics.jsonl"
    lines = [line(kind="run_start", name="long", config={})]
    for s in range(1, 301):
        metrics = {"rewards/mean": s / 3, "loss": -s}
        if s > 250:
            metrics["late/metric"] = float(s)
        if s == 123:
            metrics["padding"] = "x" * 700  # longer than a block: parsed whole, not split
        lines.append(line(kind="metrics", step=s, metrics=metrics))
    f.write_text("".join(lines) + '{"kind": "metrics", "step": 301', encoding="utf-8")
    whole = RunTail(tmp_path)
    assert whole.refresh()
    monkeypatch.setattr(data, "READ_BLOCK", 256)
    monkeypatch.setattr(data, "FRAME_CHUNK", 7)
    blocks = RunTail(tmp_path)
    assert blocks.refresh() and not blocks.refresh()
    pd.testing.assert_frame_equal(blocks.frame, whole.frame, check_like=True)
    assert blocks.frame["step"].tolist() == list(range(1, 301)) and blocks.last("late/metric") == 300.0
    assert blocks.frame["late/metric"].isna().sum() == 250 and blocks.name == "long"
    with f.open("a", encoding="utf-8") as fh:  # the unfinished line completes later
        fh.write(', "metrics": {"rewards/mean": 1.5}}\n')
    assert blocks.refresh() and blocks.last_step == 301 and blocks.last("rewards/mean") == 1.5
