"""benchmarks/cpu_step.py: its CPU meter (real processes read from ``/proc``), the step ends it reads from a V1 run's
metrics file, and the published page is the saved runs. The runs themselves take ~4-6 min on 2 cores, so they are
not a test."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import cpu_step as bench

ROOT = Path(__file__).resolve().parents[2]


def test_the_meter_counts_what_this_process_started_by_name_and_nothing_else():
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass"
    meter = bench.CPUMeter(interval=0.05)
    meter.start()
    start = time.time()
    # an orphan (its parent shell ends at once): not this process's, whatever it burns
    subprocess.run(["bash", "-c", f"(exec -a notours {sys.executable} -c '{burn}') &"], check=True)
    child = subprocess.run([sys.executable, "-c", burn])
    time.sleep(0.3)  # the orphan ends too, and a sample or more follows
    end = time.time()
    meter.stop()
    assert child.returncode == 0
    used = meter.between(start, end)
    assert 0.6 <= used[Path(sys.executable).name] <= 2.0, used  # its 0.6 s, the interpreter's start
    assert "notours" not in meter.history[-1][1], meter.history[-1][1]
    assert "driver (this process)" in meter.history[-1][1]


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
    meter.history = [(10.0, {"a": 1.0}), (20.0, {"a": 3.0, "b": 1.0}), (30.0, {"a": 7.0, "b": 1.5})]
    out = bench.cpu_per_step(meter, {1: 5.0, 2: 10.0, 3: 20.5, 4: 31.0})
    assert out == {"steps": 2, "wall_s": 21.0, "by_process": {"a": 3.0, "b": 0.75}}


def test_the_published_page_is_the_saved_runs():
    result = json.loads((ROOT / "benchmarks" / "CPU_STEP.json").read_text())
    assert bench.markdown(result) == (ROOT / "benchmarks" / "CPU_STEP.md").read_text()
