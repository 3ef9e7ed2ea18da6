"""Declared sampler columns (``Sampler.columns``) at 10M rows (quick: 200k), against today's loading.

One parquet file in verl's layout: ``data_source`` (4 sources), ``extra_info`` {complexity_score,
difficulty}, ``prompt`` as a chat list. Cases, each in a fresh subprocess so its peak resident memory
(Arrow's allocations included, which tracemalloc does not see) is its own:

* today: ``DatasetColumns.from_parquet`` (data_source + complexity), the reference of every case;
* + one declared numeric column (``extra_info.difficulty``);
* + ``prompt_chars`` (computed from the prompt text in slices of ``PROMPT_SLICE_ROWS`` rows).

Reported per case: wall time, bytes per row the loaded columns hold, peak memory above the process's
baseline (after imports). Run: ``.venv/bin/python -m benchmarks.bench_sampler_columns [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from benchmarks.harness import Result, markdown_table

SOURCES = ("gsm8k", "logicif", "math", "code")

#: one case, in a subprocess: load, then print time, bytes held and peak RSS above the baseline
_CASE = r"""
import json, resource, sys, time
import numpy as np, pyarrow as pa, pyarrow.compute, pyarrow.parquet  # imported before the baseline
from rlhooks.core.data import DatasetColumns, read_parquet_columns
path, columns = sys.argv[1], [c for c in sys.argv[2].split(",") if c]
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
data = DatasetColumns.from_parquet(path)
extra = read_parquet_columns(path, columns) if columns else {}
seconds = time.perf_counter() - t0
held = data.source_codes.nbytes + (data.complexity.nbytes if data.complexity is not None else 0)
held += sum(v.nbytes for v in extra.values())
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base
print(json.dumps({"s": seconds, "held": held, "peak": peak * 1024, "rows": len(data)}))
"""


def write_file(path: Path, n: int, seed: int = 0) -> None:
    """Written in row groups of 1M rows, so writing 10M rows stays within a few hundred MB."""
    rng = np.random.default_rng(seed)
    writer = None
    for start in range(0, n, 1_000_000):
        m = min(1_000_000, n - start)
        ids = pa.array(np.arange(start, start + m))
        content = pc.binary_join_element_wise("What is ", pc.cast(ids, pa.string()), " plus 17?", "")
        messages = pa.StructArray.from_arrays([pa.array(["user"] * m), content], ["role", "content"])
        prompt = pa.ListArray.from_arrays(pa.array(np.arange(m + 1, dtype=np.int32)), messages)
        info = pa.StructArray.from_arrays(
            [pa.array(rng.random(m, dtype=np.float32)), pa.array(rng.integers(0, 10, m).astype(np.float64))],
            ["complexity_score", "difficulty"])
        table = pa.table({"data_source": pa.array(np.asarray(SOURCES)[rng.integers(0, 4, m)]),
                          "prompt": prompt, "extra_info": info})
        if writer is None:
            writer = pq.ParquetWriter(path, table.schema)
        writer.write_table(table)
    writer.close()


def _case(path: Path, columns: tuple[str, ...]) -> dict:
    out = subprocess.run([sys.executable, "-c", _CASE, str(path), ",".join(columns)], check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(quick: bool) -> list[Result]:
    n = 200_000 if quick else 10_000_000
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "train.parquet"
        write_file(path, n)
        today = _case(path, ())
        for label, columns in (("+ extra_info.difficulty", ("extra_info.difficulty",)),
                               ("+ prompt_chars", ("prompt_chars",)),
                               ("+ both", ("extra_info.difficulty", "prompt_chars"))):
            got = _case(path, columns)
            results.append(Result(
                f"sampler columns {label}, {n:,} rows (ref: today's data_source + complexity)", got["s"],
                today["s"], rows=n, peak_bytes=got["peak"],
                note=(f"held {got['held'] / n:.0f} B/row vs {today['held'] / n:.0f}; peak RSS above baseline "
                      f"{got['peak'] / 2**20:,.0f} MiB vs {today['peak'] / 2**20:,.0f} MiB"),
                target="held <= 5 + 4 B/row per declared column", met=got["held"] <= today["held"] + 4 * n * len(columns),
            ))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200k rows instead of 10M")
    args = parser.parse_args()
    t0 = time.perf_counter()
    print(markdown_table(run(args.quick)))
    print(f"(total {time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    main()
