"""Issue 18: how long the run's *end* takes with 10,000 sources (20,000 rows), on the real command.

The end is measured from the last step's JSONL record to the command's exit: the backends' final
flush, summary.json and the marker, then the report (which draws the 10 largest sources). Run:
``python -m benchmarks.bench_run_end [N_SOURCES]`` (a minute on 2 cores), or through run_all (``--quick``:
300 sources, a smoke test without a target).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.harness import Result

from rlhooks.engines.sim.data import SOURCE_PROFILES, generate_table

CONFIG = "sampler: {name: multi_source}\nbackends: [jsonl, tensorboard]\n"


def many_sources(path: Path, n_sources: int) -> Path:
    t = generate_table(rows_per_source=2 * n_sources // len(SOURCE_PROFILES) + 1).slice(0, 2 * n_sources)
    names = pa.array(np.char.add("src", np.char.zfill((np.arange(2 * n_sources) // 2).astype(str), 5)).astype(object))
    pq.write_table(t.set_column(t.schema.get_field_index("data_source"), "data_source", names), path)
    return path


def main(n_sources: int = 10_000, steps: int = 5) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        data = many_sources(d / "many.parquet", n_sources)
        (d / "c.yaml").write_text(CONFIG)
        cmd = [sys.executable, "-m", "rlhooks.cli", "simulate", str(d / "c.yaml"), "--out", str(d), "--data", str(data),
               "--steps", str(steps), "--no-progress", "--set", "run.name=many"]
        t0 = time.time()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        exited = time.time()
        records = [json.loads(line) for line in (d / "many" / "metrics.jsonl").read_text().splitlines()]
        last_step = max(r["time"] for r in records if r["kind"] == "metrics")
        summary = json.loads((d / "many" / "summary.json").read_text())
        result = {"sources": n_sources, "steps": steps, "exit": proc.returncode, "status": summary["status"],
                  "report": bool(summary.get("report")), "total_s": round(exited - t0, 1),
                  "end_s": round(exited - last_step, 1)}
    print(json.dumps(result))
    return result


def run(quick: bool = False) -> list[Result]:
    n = 300 if quick else 10_000
    r = main(n_sources=n, steps=2 if quick else 5)
    ok = r["exit"] == 0 and r["status"] == "success"
    return [Result(case=f"run end, {n:,} sources ({r['steps']} steps, report)", rlhooks_s=r["end_s"],
                   target="" if quick else "< 30 s on 2 cores", max_s=None if quick else 30.0,
                   met=None if quick else (ok and r["end_s"] < 30.0),
                   note=f"exit {r['exit']}, {r['status']}, whole command {r['total_s']} s")]


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000)
