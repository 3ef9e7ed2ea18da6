"""benchmarks/v1_generation.py's reading of the stub rollout server's log (the runs themselves are the benchmark)."""

from __future__ import annotations

import json

import pytest

from benchmarks.v1_generation import (
    bound_results,
    clip,
    gaps,
    generation_rate,
    held_back,
    intersect,
    length,
    read_trace,
    results,
    rlhooks_seconds,
    union,
)


def test_the_rate_counts_the_window_after_warm_up_and_the_time_the_server_was_awake(tmp_path):
    log = tmp_path / "server.log"
    batches = [f"{t:.1f} 10 150" for t in range(11)]  # 10 samples a second for 10 s
    log.write_text("\n".join([*batches[:5], "4.5 sleep", "6.5 wake", *batches[5:], "11.0 sleep"]) + "\n")
    got = generation_rate(log, warmup=0.0)
    assert got["samples"] == 100 and got["window_s"] == 10.0 and got["awake_s"] == 8.0 and got["sleeps"] == 2
    assert got["samples_per_s"] == 10.0 and got["samples_per_awake_s"] == 12.5
    assert got["tokens"] == 1500 and got["tokens_per_awake_s"] == 187.5  # the batches after the window's first
    # the first 10% of samples are warm-up: the window starts at the batch after them
    assert generation_rate(log)["window_s"] == 9.0 and generation_rate(log)["samples"] == 90
    # asleep at the window's start (a sleep before its first batch)
    log.write_text("\n".join(["-1.0 sleep", *batches[:3], "2.5 wake", *batches[3:]]) + "\n")
    assert generation_rate(log, warmup=0.0)["awake_s"] == 7.5


def test_rlhooks_seconds_sum_the_trainer_timings_of_every_logged_step(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    lines = [{"kind": "run_start", "step": 0},
             {"kind": "metrics", "step": 1, "metrics": {"timing_s/rlhooks": 0.25, "timing_s/gen": 9.0}},
             {"kind": "table", "step": 1, "name": "samples", "rows": []},
             {"kind": "metrics", "step": 2, "metrics": {"timing_s/rlhooks": 0.5, "timing_s/rlhooks_step_end": 0.25}},
             {"kind": "metrics", "step": 3, "metrics": {"timing_s/rlhooks": None}}]
    metrics.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    assert rlhooks_seconds(metrics) == 1.0


def test_interval_arithmetic():
    assert union([(3, 4), (0, 1), (0.5, 2), (2, 2.5), (5, 5)]) == [(0, 2.5), (3, 4)]  # touching ones merge, empty go
    assert union([]) == [] and length([]) == 0
    assert clip([(0, 2), (3, 4), (6, 9)], 1, 7) == [(1, 2), (3, 4), (6, 7)]
    assert clip([(0, 1)], 2, 3) == [] and clip([(-1, float("inf"))], 2, 3) == [(2, 3)]
    assert gaps([(1, 2), (3, 4)], 0, 5) == [(0, 1), (2, 3), (4, 5)]
    assert gaps([(-1, 2), (3, 9)], 0, 5) == [(2, 3)]  # busy across the window's edges: clipped
    assert gaps([], 0, 5) == [(0, 5)] and gaps([(0, 5)], 0, 5) == []
    assert intersect([(0, 2), (3, 6)], [(1, 4), (5, 7)]) == [(1, 2), (3, 4), (5, 6)]
    assert intersect([(0, 1)], []) == [] and intersect([(0, 1)], [(1, 2)]) == []  # touching: no overlap
    assert length([(0, 2), (1, 3), (5, 6)]) == 4.0


def _stub_log(path, lines):
    path.write_text("\n".join(lines) + "\n")
    return path


def test_held_back_is_rlhooks_time_while_the_server_is_idle_inside_the_window(tmp_path):
    # rate 10 tokens/s: batches busy over [0,2] (warm-up), [3,5], [6,8], [10,12]; asleep 8.5-9.5
    log = _stub_log(tmp_path / "server.log", ["2.0 1 20", "5.0 4 20", "8.0 4 20", "8.5 sleep", "9.5 wake",
                                              "12.0 4 20"])
    trace = _stub_log(tmp_path / "trainer.trace", [
        "1.0 2.5 dispatch",    # before the window (it opens at 2.0, the warm-up batch's end): 0.5 s in it, idle
        "4.0 5.5 judge",       # busy 4-5, idle 5-5.5
        "8.0 9.0 step_end",    # idle, half of it asleep
        "10.5 11.0 judge",     # busy throughout: holds nothing back
        "11.5 13.0 judge"])    # past the window (it closes at 12.0): busy
    got = held_back(log, trace, rate=10.0, warmup=0.0)
    assert got["busy_s"] == 6.0 and got["idle_s"] == 4.0 and got["asleep_s"] == 1.0
    assert got["held_back_s"] == pytest.approx(2.0) and got["held_back_asleep_s"] == pytest.approx(0.5)
    assert got["held_back_by"] == pytest.approx({"dispatch": 0.5, "judge": 0.5, "step_end": 1.0})
    assert got["share"] == pytest.approx(2.0 / 6.0)
    assert got["rlhooks_window_s"] == pytest.approx(0.5 + 1.5 + 1.0 + 0.5 + 0.5)
    assert got["rlhooks_total_s"] == pytest.approx(1.5 + 1.5 + 1.0 + 0.5 + 1.5)
    assert got["busy_asleep_s"] == 0.0
    # warm-up: the window opens at the end of the first batch after the first 10% of samples (here at 5.0)
    got = held_back(log, trace, rate=10.0)
    assert got["busy_s"] == 4.0 and got["held_back_s"] == pytest.approx(0.5 + 1.0)  # 5.0-5.5 and 8.0-9.0
    # a batch decoded while flagged asleep is busy time all the same
    _stub_log(log, ["2.0 1 20", "5.0 4 20", "5.5 sleep", "8.0 4 20", "9.5 wake", "12.0 4 20"])
    got = held_back(log, trace, rate=10.0, warmup=0.0)
    assert got["busy_asleep_s"] == 2.0 and got["held_back_asleep_s"] == pytest.approx(1.0)  # 8.0-9.0 (asleep at 5.5)
    # no trace (the trainer never wrote one): nothing held back, which measure() refuses for a builtins run
    got = held_back(log, tmp_path / "missing", rate=10.0, warmup=0.0)
    assert got["held_back_s"] == 0.0 and got["share"] == 0.0 and got["held_back_by"] == {}
    assert read_trace(tmp_path / "missing") == []


def _run(share, held, busy=100.0):
    return {"samples_per_s": 10.0, "window_s": 120.0, "rlhooks_s": 2.0,
            "overlap": {"share": share, "held_back_s": held, "held_back_asleep_s": 0.1, "busy_s": busy,
                        "idle_s": 20.0, "rlhooks_window_s": 2.0, "rlhooks_total_s": 2.1,
                        "held_back_by": {"judge": held, "step_end": 0.0}}}


def test_the_measured_bound_is_the_worst_builtins_runs_share_and_the_pairs_use_the_window_rate():
    result = {"steps": 16, "rate": 100.0, "ratios": [0.99, 1.01],
              "runs": {"builtins": [_run(0.01, 1.0), _run(0.015, 1.5)], "bare": [_run(0.0, 0.0), _run(0.0, 0.0)]}}
    main, bound = results(result)
    assert main.met and "1.000x the samples a second over the window (pairs: 0.990, 1.010)" in main.margin
    result["ratios"][0] = 0.97  # every pair must be >= 0.98x, not the median
    assert not results(result)[0].met
    assert bound.met and "at least 0.985x" in bound.margin and "1.00%, 1.50%" in bound.margin
    assert "judge 1.50" in bound.note and bound.rlhooks_s == 1.5
    result["runs"]["builtins"][1]["overlap"]["share"] = 0.025  # one run over 2%: not met
    assert not bound_results(result)[0].met
    assert bound_results({"steps": 1, "runs": {"builtins": [{"samples_per_s": 1.0}]}}) == []
