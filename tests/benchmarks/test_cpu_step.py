"""benchmarks/cpu_step.py: its CPU meter (real processes read from ``/proc``), the step ends it reads from a V1 run's
metrics file, and the published page is the saved runs. The runs themselves take ~4-6 min on 2 cores, so they are
not a test."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks import cpu_step as bench

ROOT = Path(__file__).resolve().parents[2]
BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass"


def test_the_meter_counts_what_this_process_started_by_name_and_nothing_else():
    meter = bench.CPUMeter(interval=0.05)
    meter.start()
    start = time.time()
    # an orphan: its parent shell ends at once, and it runs as "notours" only once it is not this process's any more
    subprocess.run(["bash", "-c", f"(sleep 1; exec -a notours {sys.executable} -c '{BURN}') &"], check=True)
    child = subprocess.run([sys.executable, "-c", BURN + "\ntime.sleep(0.5)"])  # sampled after its burn too
    time.sleep(1.2)  # the orphan burns while the meter samples
    end = time.time()
    meter.stop()
    assert child.returncode == 0
    used = meter.between(start, end)
    # its 0.6 s and the interpreter's start (a busy machine may delay the meter's thread: a wide margin)
    assert 0.3 <= used.get(Path(sys.executable).name, 0) <= 2.5, (used, meter.history[-1])
    names = {name for name, _ in meter.history[-1][1].values()}
    assert "notours" not in names and "driver (this process)" in names, names


def test_a_process_counts_under_its_last_name_and_a_pid_used_again_is_another_process():
    meter = bench.CPUMeter()
    meter.history = [
        (10.0, {(7, 100): ("ray::IDLE", 5.0), (8, 100): ("raylet", 1.0)}),
        (20.0, {(7, 100): ("ray::WorkerDict", 9.0), (8, 100): ("raylet", 1.5), (8, 900): ("ray::IDLE", 0.25)}),
    ]
    # the worker's 4 s under the name it has at the end; pid 8's new process from 0, not from the old one's 1.5
    assert meter.between(10.0, 20.0) == {"ray::WorkerDict": 4.0, "raylet": 0.5, "ray::IDLE": 0.25}


def test_the_meter_says_when_it_failed_instead_of_publishing_stale_figures(tmp_path):
    meter = bench.CPUMeter(interval=0.01)

    def broken(now: float) -> None:
        raise ValueError("unreadable")

    meter.watch = broken
    meter.start()
    time.sleep(0.05)
    with pytest.raises(RuntimeError, match="the CPU meter stopped: ValueError"):
        meter.stop()


def test_the_step_ends_of_a_v1_run_are_read_from_its_metrics_file_as_written(tmp_path):
    log = tmp_path / "verl_metrics.jsonl"
    ended: dict[int, float] = {}
    watch = bench._step_end_watcher(log, ended)
    watch(1.0)  # no file yet
    log.write_text(json.dumps({"step": 0, "data": {"val-core/x": 1}}) + "\n"
                   + json.dumps({"step": 1, "data": {"timing_s/step": 2.0}}) + "\n" + '{"step": 2, "da')
    watch(2.0)
    assert ended == {1: 2.0}  # validation and a half-written line are not step ends
    log.write_text(log.read_text()[: -len('{"step": 2, "da')] + json.dumps({"step": 2, "data": {"timing_s/step": 1}}))
    watch(3.0)
    watch(4.0)
    assert ended == {1: 2.0, 2: 3.0}  # the first time seen, not the last


def test_cpu_a_step_is_over_steps_3_onwards():
    meter = bench.CPUMeter()
    meter.history = [(10.0, {(1, 1): ("a", 1.0)}), (20.0, {(1, 1): ("a", 3.0), (2, 1): ("b", 1.0)}),
                     (30.0, {(1, 1): ("a", 7.0), (2, 1): ("b", 1.5)})]
    out = bench.cpu_per_step(meter, {1: 5.0, 2: 10.0, 3: 20.5, 4: 31.0})
    assert out == {"steps": 2, "wall_s": 21.0, "by_process": {"a": 3.0, "b": 0.75}}


def test_the_published_page_is_the_saved_runs():
    result = json.loads((ROOT / "benchmarks" / "CPU_STEP.json").read_text())
    assert bench.markdown(result) == (ROOT / "benchmarks" / "CPU_STEP.md").read_text()


def test_the_step_in_two_is_the_median_of_each_step_from_step_2():
    run = {"timing": {1: {"timing_s/gen": 9.0, "timing_s/step": 10.0},  # step 1 warms up: left out
                      2: {"timing_s/gen": 1.0, "timing_s/step": 1.5},
                      3: {"timing_s/gen": 3.0, "timing_s/step": 3.2},
                      4: {"timing_s/gen": 2.0, "timing_s/step": 2.6},
                      5: {"timing_s/step": 0.1},  # no generation timed: left out
                      6: {"timing_s/gen": 0.1, "timing_s/step": 0.2},  # no trajectories counted: left out
                      7: {"timing_s/gen": 0.1, "timing_s/step": 0.2}},  # none generated: left out
           "generated": {1: 64, 2: 100, 3: 200, 4: 80, 7: 0}}
    out = bench.side_by_side(run)
    assert out["trajectories"] == 100 and out["gen_s"] == 2.0 and out["step_s"] == 2.6
    assert out["gen_ms_per_trajectory"] == pytest.approx(15.0)  # 10, 15, 25 ms: not 2.0 s / 100
    assert out["rest_s"] == pytest.approx(0.5)  # 0.5, 0.2, 0.6
    as_saved = json.loads(json.dumps(run))  # the page is rendered from the JSON: string keys
    assert bench.side_by_side(as_saved) == out
    with pytest.raises(ValueError, match="no step 2 onwards"):
        bench.side_by_side({"timing": {1: {"timing_s/gen": 1.0, "timing_s/step": 2.0}}, "generated": {1: 64}})


def test_a_v1_steps_decoding_is_the_decodes_begun_in_it_and_the_last_step_has_none(tmp_path):
    trace, decodes = tmp_path / "trace.txt", tmp_path / "decodes.txt"
    trace.write_text("0.9 1.0 dispatch\n9.0 10.0 step_end\n15.0 20.0 step_end\n"
                     "25.0 25.5 judge\n29.0 30.0 step_end\n39.0 40.0 step_end\n")
    decodes.write_text("\n".join(["5.0 6.0 64",  # step 1: not counted
                                   "11.0 11.5 32", "19.9 20.2 8",  # step 2, the second ending in step 3
                                   "21.0 21.25 64", "20.0 20.1 1",  # step 3; begun at step 2's very end: step 2
                                   "35.0 36.0 9"]) + "\n")  # the last step: its validation
    out = bench.decode_per_step(trace, decodes)
    assert list(out) == [2, 3]
    assert out[2] == pytest.approx(0.5 + 0.3 + 0.1) and out[3] == pytest.approx(0.25)
    run = {"timing": {2: {"timing_s/gen": 1.0, "timing_s/step": 2.0}, 3: {"timing_s/gen": 1.0, "timing_s/step": 2.0}},
           "generated": {2: 100, 3: 50}, "decode_s": {"2": out[2], "3": out[3]}}
    assert bench.side_by_side(run)["decode_ms_per_trajectory"] == pytest.approx((9.0 + 5.0) / 2)
