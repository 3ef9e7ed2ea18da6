"""TensorBoard and W&B backends: real event files / offline W&B runs read back after a run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import structlog

import rlhooks
import rlhooks.host
from rlhooks.core import dispatch
from rlhooks.plugins.backends.tensorboard_backend import LAYOUT, TensorBoardBackend
from rlhooks.plugins.backends.wandb_backend import EXTRA_COLUMN, WandbBackend
from ..wandb_records import read_wandb_records
from rlhooks.testing.contracts import (
    LogHistogramContract,
    LogMetricsContract,
    LogTableContract,
    OnRunEndContract,
    OnRunStartContract,
)

CONTRACTS = (OnRunStartContract, LogMetricsContract, LogTableContract, LogHistogramContract, OnRunEndContract)


def _tb_plugin(self):
    return TensorBoardBackend()


def _wandb_plugin(self):
    return WandbBackend(WandbBackend.Options(mode="disabled"))  # the real library, no files: fast


for _contract in CONTRACTS:
    for _name, _factory in (("TensorBoard", _tb_plugin), ("Wandb", _wandb_plugin)):
        _cls = type(f"Test{_name}{_contract.__name__}", (_contract,), {"plugin": pytest.fixture(_factory)})
        globals()[_cls.__name__] = _cls

STEPS = 12


def _metrics(step: int) -> dict[str, float]:
    return {"rewards/mean": step / 7, "source/gsm8k/reward": 1 - step / 20, "source/math/count": step * 3,
            "filter/kept_ratio": 0.5 + step / 100, "curriculum/level": step // 4}


def _rows(step: int) -> list[dict]:
    rows = [{"step": step, "selection": "top", "prompt": f"what is {step}|x?\nline 2", "reward": 1.0},
            {"step": step, "selection": "bottom", "prompt": "p", "reward": None}]
    if step == 5:
        rows[1]["surprise"] = "extra value"  # a key the table does not have
    return rows


def _drive(m: rlhooks.host.RunManager) -> None:
    with m.running():
        for step in range(1, STEPS + 1):
            m.log_metrics(step, _metrics(step))
            m.context.step = step
            m.context.log_table("samples/top_bottom_k", _rows(step))
            m.context.log_histogram("rewards/distribution", np.linspace(0, step, 50))
            m.dispatch_emitted()


def test_tensorboard_event_files_read_back(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.custom_scalar import layout_pb2

    cfg = rlhooks.host.load_config({"run": {"name": "tb"}, "backends": [{"name": "tensorboard", "max_text": 8}]})
    _drive(rlhooks.host.RunManager(cfg, run_dir=tmp_path / "run"))
    acc = EventAccumulator(str(tmp_path / "run" / "tensorboard"),
                           size_guidance={"scalars": 0, "histograms": 0, "tensors": 0, "images": 0,
                                          "audio": 0, "compressedHistograms": 0})
    acc.Reload()
    tags = acc.Tags()
    assert sorted(tags["scalars"]) == sorted(_metrics(1))
    for tag in _metrics(1):
        events = acc.Scalars(tag)
        assert [e.step for e in events] == list(range(1, STEPS + 1))
        np.testing.assert_allclose([e.value for e in events], [_metrics(s)[tag] for s in range(1, STEPS + 1)], rtol=1e-6)
    hist = acc.Histograms("rewards/distribution")
    assert [h.step for h in hist] == list(range(1, STEPS + 1))
    assert hist[-1].histogram_value.max == STEPS and hist[-1].histogram_value.num == 50
    text = acc.Tensors("samples/top_bottom_k/text_summary")
    assert [t.step for t in text] == list(range(1, STEPS + 1))
    md = text[4].tensor_proto.string_val[0].decode()  # step 5
    lines = md.splitlines()
    assert lines[0] == "| step | selection | prompt | reward | surprise |"
    assert lines[2] == "| 5 | top | what is … [+11 chars] | 1.0 |  |"
    assert lines[3] == "| 5 | bottom | p |  | extra va… [+3 chars] |"
    cfg_tensor = acc.Tensors("custom_scalars__config__")[0].tensor_proto.string_val[0]
    layout = layout_pb2.Layout.FromString(cfg_tensor)
    assert [c.title for c in layout.category] == list(LAYOUT)




def test_wandb_offline_run_read_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # mode is also an option: wandb reads WANDB_* once per process, so an earlier run would win
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb-env"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = rlhooks.host.load_config({"run": {"name": "wb"}, "backends": [
        {"name": "wandb", "mode": "offline", "project": "rlhooks-test", "tags": ["t1"], "settings": {"console": "off"}}]})
    m = rlhooks.host.RunManager(cfg, run_dir=tmp_path / "run")
    backend = m.components[0].obj
    with structlog.testing.capture_logs() as logs:
        with m.running():
            for step in range(1, STEPS + 1):
                m.log_metrics(step, _metrics(step))
                m.context.step = step
                m.context.log_table("samples/top_bottom_k", _rows(step))
                m.context.log_histogram("rewards/distribution", np.linspace(0, step, 50))
                m.dispatch_emitted()
            assert dispatch.flush_all(60)
            run = backend.run
            # in-process summary: W&B commits a step's row when the next step starts (or at finish)
            live = dict(run.summary)
            assert live["_step"] in (STEPS - 1, STEPS)
            for k, v in _metrics(live["_step"]).items():
                assert live[k] == pytest.approx(v)
            run_dir = Path(run.dir).parent
            assert run.name == "wb" and list(run.tags) == ["t1"]
            assert run.config["backends"][0]["name"] == "wandb"
    assert str(run_dir).startswith(str(tmp_path / "run"))  # dir defaults to the run directory
    import wandb

    wandb.teardown()  # the wandb-core service writes the transaction log's last block when it stops

    # history, step by step, from the run's transaction log
    (wandb_file,) = run_dir.glob("run-*.wandb")
    history = [r.history for r in read_wandb_records(wandb_file) if r.WhichOneof("record_type") == "history"]
    by_step = {}
    for h in history:
        items = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in h.item}
        by_step[int(items["_step"])] = items
    assert sorted(by_step) == list(range(1, STEPS + 1))
    summary = {}
    for r in read_wandb_records(wandb_file):
        if r.WhichOneof("record_type") == "summary":
            summary.update({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.summary.update})
    assert summary["_step"] == STEPS  # the final summary, written at finish
    for k, v in _metrics(STEPS).items():
        assert summary[k] == pytest.approx(v)
    for step, items in by_step.items():
        for k, v in _metrics(step).items():
            assert items[k] == pytest.approx(v)
        assert items["rewards/distribution/_type"] == "histogram"
        assert items["samples/top_bottom_k/_type"] == "incremental-table-file"

    # every table increment under the run's media folder; all rows, missing cells None
    files = sorted((run_dir / "files" / "media" / "table").rglob("*.table.json"),
                   key=lambda p: int(p.name.split("_")[-2]))
    assert len(files) == STEPS
    rows = []
    for f in files:
        t = json.loads(f.read_text())
        assert t["columns"] == ["step", "selection", "prompt", "reward", EXTRA_COLUMN]
        rows += t["data"]
    expected = []
    for step in range(1, STEPS + 1):
        for r in _rows(step):
            extra = {k: v for k, v in r.items() if k not in ("step", "selection", "prompt", "reward")}
            expected.append([r["step"], r["selection"], r["prompt"], r["reward"], json.dumps(extra) if extra else None])
    assert rows == expected
    warned = [e for e in logs if "not columns of this table" in e["event"]]
    assert len(warned) == 1 and "surprise" in warned[0]["event"]


def test_wandb_option_errors_name_the_key() -> None:
    with pytest.raises(rlhooks.ConfigError, match=r"backends\[0\]\.mode \(wandb\)"):
        rlhooks.host.load_config({"backends": [{"name": "wandb", "mode": "offlin"}]})


def test_wandb_incremental_table_rotates_to_bound_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # an incremental wandb.Table keeps all its rows in memory; max_incremental_rows starts a new one
    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = rlhooks.host.load_config({"run": {"name": "rot"}, "backends": [
        {"name": "wandb", "mode": "offline", "max_incremental_rows": 4, "settings": {"console": "off"}}]})
    m = rlhooks.host.RunManager(cfg, run_dir=tmp_path / "run")
    backend = m.components[0].obj
    with m.running():
        for step in range(1, 6):
            m.log_metrics(step, {"a": float(step)})
            m.context.step = step
            m.context.log_table("t", [{"x": step, "i": 0}, {"x": step, "i": 1}])
            m.dispatch_emitted()
        assert dispatch.flush_all(60)
        run_dir = Path(backend.run.dir).parent
    import wandb

    wandb.teardown()
    (wandb_file,) = run_dir.glob("run-*.wandb")
    increments = []
    for r in read_wandb_records(wandb_file):
        if r.WhichOneof("record_type") == "history":
            items = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
            if "t/increment_num" in items:
                increments.append(items["t/increment_num"])
    assert increments == [0, 1, 0, 1, 0]  # 2 rows per step, at most 4 rows per table
    rows = [row for f in sorted((run_dir / "files" / "media" / "table").rglob("*.table.json"),
                                key=lambda p: int(p.name.split("_")[-2]))
            for row in json.loads(f.read_text())["data"]]
    assert [r[:2] for r in rows] == [[s, i] for s in range(1, 6) for i in (0, 1)]  # no row lost


def test_wandb_chart_values_are_bounded_and_evenly_thinned(tmp_path: Path) -> None:
    # the custom charts keep each charted key's values in memory: a multi-day run must not grow it
    cfg = rlhooks.host.load_config({"run": {"name": "charts"}, "backends": [
        {"name": "wandb", "mode": "disabled", "chart_points": 100}]})
    m = rlhooks.host.RunManager(cfg, run_dir=tmp_path / "run")
    backend = m.components[0].obj
    with m.running():
        for step in range(1, 10_001):
            m.log_metrics(step, {"rewards/functions/check_answer": step * 0.5, "not/charted": 1.0})
        assert dispatch.flush_all(60)
    (series,) = backend.chart_series()["reward_breakdown"].values()
    steps, values = series
    assert len(steps) <= 101 and steps[0] == 1 and steps[-1] == 10_000  # bounded; ends at the last step
    gaps = np.diff(steps[:-1])
    assert len(set(gaps.tolist())) == 1 and len(steps) > 50  # evenly spread, not just truncated
    assert values == [s * 0.5 for s in steps]
