"""JSONL and console backends: contract kit, and real runs read back from the file / stdout."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

import rlhooks
import rlhooks.host
from rlhooks.core import dispatch
from rlhooks.plugins.backends.console import ConsoleBackend
from rlhooks.plugins.backends.jsonl import JsonlBackend
from rlhooks.testing.contracts import (
    LogHistogramContract,
    LogMetricsContract,
    LogTableContract,
    OnRunEndContract,
    OnRunStartContract,
)

# One class per contract: HookPluginContract's LogMetrics/LogTable/LogHistogram contracts share a
# helper name (_log), so combined the table/histogram checks call the metrics helper.
CONTRACTS = (OnRunStartContract, LogMetricsContract, LogTableContract, LogHistogramContract, OnRunEndContract)


def _jsonl_plugin(self):
    return JsonlBackend()


def _console_plugin(self):
    return ConsoleBackend(ConsoleBackend.Options(histograms=True))


for _contract in CONTRACTS:
    for _name, _factory in (("Jsonl", _jsonl_plugin), ("Console", _console_plugin)):
        _cls = type(f"Test{_name}{_contract.__name__}", (_contract,), {"plugin": pytest.fixture(_factory)})
        globals()[_cls.__name__] = _cls


def _run(tmp_path: Path, backend: dict, steps: int = 20, **extra) -> rlhooks.host.RunManager:
    cfg = rlhooks.host.load_config({"run": {"name": "jl"}, "backends": [backend], **extra})
    m = rlhooks.host.RunManager(cfg, run_dir=tmp_path / "run")
    with m.running():
        for step in range(1, steps + 1):
            m.log_metrics(step, {"rewards/mean": step / 10, "source/a/count": step, "bad/nan": float("nan"),
                                 "bad/inf": float("-inf"), "np": np.float32(0.5)})
            m.context.step = step
            m.context.log_table("samples/t", [{"prompt": "p" * 500, "reward": step, "x": float("nan")}])
            m.context.log_histogram("rewards/distribution", np.arange(step, dtype=float))
            m.dispatch_emitted()
    return m


def test_jsonl_every_line_parses_and_counts_match(tmp_path: Path) -> None:
    _run(tmp_path, {"name": "jsonl"}, steps=25)
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]  # strict JSON: no NaN tokens allowed below
    assert all("NaN" not in line and "Infinity" not in line for line in lines)
    kinds = [r["kind"] for r in records]
    assert kinds[0] == "run_start" and kinds[-1] == "run_end"
    assert kinds.count("metrics") == kinds.count("table") == kinds.count("histogram") == 25
    assert records[0]["name"] == "jl" and records[0]["config"]["backends"][0]["name"] == "jsonl"
    metrics = [r for r in records if r["kind"] == "metrics"]
    assert [r["step"] for r in metrics] == list(range(1, 26))
    for r in metrics:
        s = r["step"]
        assert r["metrics"] == {"rewards/mean": s / 10, "source/a/count": s, "bad/nan": None, "bad/inf": None, "np": 0.5}
        assert r["nonfinite"] == {"bad/nan": "nan", "bad/inf": "-inf"}
    tables = [r for r in records if r["kind"] == "table"]
    assert tables[3] == {**tables[3], "step": 4, "name": "samples/t", "rows": [{"prompt": "p" * 500, "reward": 4, "x": None}]}
    hist = [r for r in records if r["kind"] == "histogram"]
    assert hist[9]["values"] == list(np.arange(10, dtype=float))
    assert records[-1]["status"] == "success"


def test_jsonl_histogram_summary_custom_path_and_append(tmp_path: Path) -> None:
    out = tmp_path / "elsewhere" / "log.jsonl"
    _run(tmp_path, {"name": "jsonl", "path": str(out), "histograms": "summary"}, steps=3)
    _run(tmp_path, {"name": "jsonl", "path": str(out), "histograms": "summary"}, steps=2)  # a resume appends
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["kind"] for r in records].count("run_start") == 2
    assert sum(r["kind"] == "metrics" for r in records) == 5
    h = [r for r in records if r["kind"] == "histogram"][2]  # step 3: values 0, 1, 2
    assert h["summary"]["count"] == 3 and h["summary"]["mean"] == 1.0 and h["summary"]["p50"] == 1.0
    assert "values" not in h


def test_jsonl_is_readable_while_running(tmp_path: Path) -> None:
    cfg = rlhooks.host.load_config({"run": {"name": "live"}, "backends": ["jsonl"]})
    m = rlhooks.host.RunManager(cfg, run_dir=tmp_path / "run")
    with m.running():
        for step in range(1, 11):
            m.log_metrics(step, {"a": step})
        assert dispatch.flush_all(10)
        lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
        assert [json.loads(x)["kind"] for x in lines] == ["run_start"] + ["metrics"] * 10


def test_jsonl_bad_option_is_a_config_error() -> None:
    with pytest.raises(rlhooks.ConfigError, match=r"backends\[0\]\.histograms \(jsonl\)"):
        rlhooks.host.load_config({"backends": [{"name": "jsonl", "histograms": "all"}]})


def test_console_line_keys_interval_and_tables(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    _run(tmp_path, {"name": "console", "keys": ["rewards/*", "np", "missing"], "interval": 5, "max_text": 20,
                    "histograms": True}, steps=10)
    out = capsys.readouterr().out
    lines = [x for x in out.splitlines() if x.startswith("step ") and "|" in x and "rewards/distribution" not in x]
    assert lines == ["step 1 | rewards/mean 0.1 | np 0.5", "step 5 | rewards/mean 0.5 | np 0.5",
                     "step 10 | rewards/mean 1 | np 0.5"]
    assert out.count("── samples/t · step ") == 10
    first = out.split("── samples/t · step 1 · 1 row ──\n", 1)[1]
    row = json.loads(first[: first.index("\n}") + 2])
    assert row == {"prompt": "p" * 20 + "… [+480 chars]", "reward": 1, "x": None}
    assert "step 3 | rewards/distribution n=3 mean=1" in out
    assert out.rstrip().endswith("run ended: success")


def test_console_default_line_is_capped(capsys: pytest.CaptureFixture) -> None:
    c = ConsoleBackend(ConsoleBackend.Options(max_keys=2))
    line = c.format_metrics(7, {"b": 1.23456789, "a": 2, "c": math.nan})
    assert line == "step 7 | a 2 | b 1.235 | … +1 more"


def test_console_opens_the_run_and_prints_above_a_progress_bar(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    import re
    import sys

    from tqdm import tqdm

    cfg = rlhooks.host.load_config({"run": {"name": "bar"}, "backends": [{"name": "console", "keys": ["a"]}]})
    m = rlhooks.host.RunManager(cfg, run_dir=tmp_path / "run")
    bar = tqdm(total=3, file=sys.stdout, desc="train", mininterval=0)  # the bar and the lines share stdout
    try:
        with m.running():
            for step in (1, 2, 3):
                bar.update(1)
                m.log_metrics(step, {"a": step})
                assert dispatch.flush_all(10)
    finally:
        bar.close()
    out = capsys.readouterr().out
    # each line starts a fresh terminal line (after the bar was cleared), never glued to the bar's text
    segments = re.split(r"[\r\n]", out)
    assert f"run bar started; output in {tmp_path / 'run'}" in segments
    for step in (1, 2, 3):
        assert f"step {step} | a {step}" in segments, out
    assert "run ended: success" in segments


def test_console_default_line_shows_what_rlhooks_did_before_verls_metrics() -> None:
    """Issue 38 item 1: a real V1 step's ~170 metrics (tests/monitoring/recorded/v1-train, step 2): validation,
    per-source accuracy, the filter, rlhooks's share, rewards and alerts come before verl's actor/*."""
    recorded = Path(__file__).resolve().parents[1] / "monitoring" / "recorded" / "v1-train" / "metrics.jsonl"
    step2 = next(r["metrics"] for r in map(json.loads, recorded.read_text().splitlines())
                 if r["kind"] == "metrics" and r["step"] == 2)
    line = ConsoleBackend().format_metrics(2, step2)
    shown = [part.rsplit(" ", 1)[0] for part in line.split(" | ")[1:-1]]
    assert shown[:9] == ["val-core/add_carry/acc/mean@1", "val-core/add_small/acc/mean@1", "source/add_carry/acc",
                         "source/add_small/acc", "task/acc", "filter/kept_ratio", "timing/rlhooks_share",
                         "rewards/mean", "alerts/total"]
    assert shown[9:] == ["actor/entropy", "actor/grad_norm", "actor/loss"] and line.endswith(f"+{len(step2) - 12} more")
