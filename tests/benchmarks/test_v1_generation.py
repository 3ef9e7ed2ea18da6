"""benchmarks/v1_generation.py's reading of the stub rollout server's log (the runs themselves are the benchmark)."""

from __future__ import annotations

from benchmarks.v1_generation import generation_rate


def test_the_rate_counts_the_window_after_warm_up_and_the_time_the_server_was_awake(tmp_path):
    log = tmp_path / "server.log"
    batches = [f"{t:.1f} 10 150" for t in range(11)]  # 10 samples a second for 10 s
    log.write_text("\n".join([*batches[:5], "4.5 sleep", "6.5 wake", *batches[5:], "11.0 sleep"]) + "\n")
    got = generation_rate(log, warmup=0.0)
    assert got["samples"] == 100 and got["window_s"] == 10.0 and got["awake_s"] == 8.0 and got["sleeps"] == 2
    assert got["samples_per_s"] == 10.0 and got["samples_per_awake_s"] == 12.5
    # the first 10% of samples are warm-up: the window starts at the batch after them
    assert generation_rate(log)["window_s"] == 9.0 and generation_rate(log)["samples"] == 90
    # asleep at the window's start (a sleep before its first batch)
    log.write_text("\n".join(["-1.0 sleep", *batches[:3], "2.5 wake", *batches[3:]]) + "\n")
    assert generation_rate(log, warmup=0.0)["awake_s"] == 7.5
