"""benchmarks/v1_generation.py's reading of the stub rollout server's log (the runs themselves are the benchmark)."""

from __future__ import annotations

import json

from benchmarks.v1_generation import bound_results, generation_rate, rlhooks_seconds


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


def test_the_bound_sums_rlhooks_trainer_seconds_and_compares_them_with_the_awake_seconds(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    lines = [{"kind": "run_start", "step": 0},
             {"kind": "metrics", "step": 1, "metrics": {"timing_s/rlhooks": 0.25, "timing_s/gen": 9.0}},
             {"kind": "table", "step": 1, "name": "samples", "rows": []},
             {"kind": "metrics", "step": 2, "metrics": {"timing_s/rlhooks": 0.5, "timing_s/rlhooks_step_end": 0.25}},
             {"kind": "metrics", "step": 3, "metrics": {"timing_s/rlhooks": None}}]
    metrics.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    assert rlhooks_seconds(metrics) == 1.0
    result = {"steps": 16, "runs": {"builtins": [{"rlhooks_s": 1.0, "awake_total_s": 100.0},
                                                 {"rlhooks_s": 1.5, "awake_total_s": 100.0}]}}
    (row,) = bound_results(result)
    assert row.met and "at least 0.985x" in row.margin and "1.00%, 1.50%" in row.margin
    result["runs"]["builtins"][1]["rlhooks_s"] = 2.5  # one run's share over 2%: not met
    assert not bound_results(result)[0].met
