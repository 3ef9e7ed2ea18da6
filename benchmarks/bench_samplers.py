"""Samplers at scale: 10M rows over 4 sources (quick: 200k), against torch's WeightedRandomSampler.

Cases (each side by side with the reference on the same data, in the same run):

* construction from the dataset's columns (reference: building WeightedRandomSampler's per-row
  weight tensor from the same source weights);
* bytes per row held / peak while building (reference: the per-row float64 weight tensor);
* one batch of 1024 indices, against (a) a minimal two-stage numpy sampler (each row picks a
  source by weight, then a row of that source uniformly: no passes, no exact shares, no state)
  and (b) WeightedRandomSampler drawing a whole epoch at once (per-row weights, one multinomial
  over every row), timed per batch of 1024;
* a curriculum level-up and the first batch after it (reference: recomputing the per-row weight
  tensor for the widened pool, as a WeightedRandomSampler-based curriculum must);
* reading the two sampler columns from parquet (reference: materializing data_source as Python
  objects, the per-row approach).

Run: ``.venv/bin/python -m benchmarks.bench_samplers [--quick]``.
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import structlog
import torch

from benchmarks.harness import Result, markdown_table, median_time, peak_memory
from rlhooks.core.data import DatasetColumns
from rlhooks.plugins.samplers.curriculum import RewardCurriculumSampler
from rlhooks.plugins.samplers.multi_source import MultiSourceSampler

SOURCES = ("gsm8k", "logicif", "math", "code")
WEIGHTS = {"gsm8k": 1.0, "logicif": 2.0, "math": 1.0, "code": 0.5}
BATCH = 1024


def make_columns(n: int, seed: int = 0) -> DatasetColumns:
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, len(SOURCES), n, dtype=np.int8)
    comp = rng.random(n, dtype=np.float32)
    return DatasetColumns(codes, tuple(sorted(SOURCES)), comp, origin=f"synthetic-{n}")


def reference_weights(data: DatasetColumns, mask: np.ndarray | None = None) -> torch.Tensor:
    """Per-row weights a WeightedRandomSampler needs for the same source mix."""
    counts = np.bincount(data.source_codes, minlength=len(data.source_names))
    per_source = np.array([WEIGHTS[s] for s in data.source_names]) / np.maximum(counts, 1)
    w = per_source[data.source_codes]
    if mask is not None:
        w = np.where(mask, w, 0.0)
    return torch.from_numpy(w)


class TwoStageSampler:
    """The minimal two-stage sampler: each row picks a source by weight, then a row of that source.

    With replacement, no largest-remainder composition, no passes and no resumable state: the
    floor under which a sampler with rlhooks' properties cannot go.
    """

    def __init__(self, data: DatasetColumns, weights: dict[str, float], seed: int) -> None:
        order = np.argsort(data.source_codes, kind="stable")
        counts = np.bincount(data.source_codes, minlength=len(data.source_names))
        self.rows = np.split(order, np.cumsum(counts)[:-1])
        p = np.array([weights[s] for s in data.source_names], dtype=np.float64)
        self.p = p / p.sum()
        self.rng = np.random.default_rng(seed)

    def draw(self, m: int) -> np.ndarray:
        source = self.rng.choice(len(self.p), size=m, p=self.p)
        out = np.empty(m, dtype=np.int64)
        for s, rows in enumerate(self.rows):
            at = source == s
            out[at] = rows[self.rng.integers(0, len(rows), int(at.sum()))]
        return out


def held_bytes(s: MultiSourceSampler) -> int:
    """Index arrays the sampler holds: per-source rows, the curriculum order, each pool's pass order."""
    return (sum(r.nbytes for r in s._rows)
            + (s._cur_rows.nbytes if hasattr(s, "_cur_rows") and not any(r is s._cur_rows for r in s._rows) else 0)
            + sum(order.nbytes for _, order in s._pools._orders.values()))


def run(quick: bool) -> list[Result]:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))  # quiet the samplers' info lines
    n = 200_000 if quick else 10_000_000
    repeat = 3 if quick else 3
    data = make_columns(n)
    results: list[Result] = []
    opts = {"source_weights": WEIGHTS}
    gc.freeze()  # the harness collects before every timed call; keep that cheap (torch/pandas objects)

    # -- construction + memory -------------------------------------------------------------
    build = lambda: MultiSourceSampler(opts, data, batch_size=BATCH, seed=0)  # noqa: E731
    t_build = median_time(build, repeat=repeat, warmup=1)
    t_ref = median_time(lambda: torch.utils.data.WeightedRandomSampler(reference_weights(data), BATCH), repeat=repeat)
    results.append(Result(f"construct MultiSourceSampler, {n:,} rows / 4 sources", t_build, t_ref, rows=n,
                          target="< 3 s", max_s=3.0))
    sampler, peak = peak_memory(build)
    sampler.draw_batch(BATCH)  # every source's pass order now exists
    ref_bytes = reference_weights(data).nbytes
    per_row_peak, per_row_held = peak / n, held_bytes(sampler) / n
    results.append(Result("bytes per row (construction peak; held index arrays)", t_build, None, rows=n, peak_bytes=peak,
                          target="< 32 B/row", met=per_row_peak < 32, margin=f"{per_row_peak / 32:.0%} of 32 B/row",
                          note=f"peak {per_row_peak:.1f} B/row, held after a draw {per_row_held:.1f} B/row; "
                               f"WeightedRandomSampler holds {ref_bytes / n:.1f} B/row"))

    cur_build = lambda: RewardCurriculumSampler(  # noqa: E731
        {**opts, "reward_threshold": 0.5, "complexity_source": "logicif"}, data, batch_size=BATCH, seed=0)
    t_cur = median_time(cur_build, repeat=repeat, warmup=0)
    cur, cur_peak = peak_memory(cur_build)
    results.append(Result(f"construct RewardCurriculumSampler (argsort of {int(cur.source_sizes[cur._cur]):,} rows)",
                          t_cur, t_ref, rows=n, peak_bytes=cur_peak, target="< 3 s, < 32 B/row", max_s=3.0,
                          met=t_cur < 3.0 and cur_peak / n < 32, margin=f"{cur_peak / n / 32:.0%} of 32 B/row", note=f"peak {cur_peak / n:.1f} B/row"))

    # -- one batch ------------------------------------------------------------------------------
    t_batch = median_time(lambda: sampler.draw_batch(BATCH), repeat=200, warmup=3)
    it = iter(sampler)
    t_iter = median_time(lambda: [next(it) for _ in range(BATCH)], repeat=50, warmup=3)
    two_stage = TwoStageSampler(data, WEIGHTS, seed=0)
    t_two = median_time(lambda: two_stage.draw(BATCH), repeat=200, warmup=3)
    results.append(Result(f"draw a batch of {BATCH} indices", t_batch, t_two, rows=BATCH,
                          target="< 1 ms, <= 1.5x two-stage", max_s=1e-3, min_ratio=1 / 1.5,
                          note="reference: minimal two-stage numpy sampler (source by weight, then a row)"))
    ref_w = reference_weights(data)
    epoch = torch.utils.data.WeightedRandomSampler(ref_w, n, replacement=True)
    t_epoch = median_time(lambda: list(epoch), repeat=1, warmup=0)
    results.append(Result(f"draw a batch of {BATCH} indices (vs a whole epoch)", t_batch, t_epoch * BATCH / n, rows=BATCH,
                          note=f"reference: WeightedRandomSampler drawing all {n:,} indices at once "
                               f"({t_epoch:.2f} s), per batch of {BATCH}"))
    fresh = build()
    t_first = median_time(lambda: fresh.draw_batch(BATCH), repeat=1, warmup=0)
    _, first_peak = peak_memory(lambda: build().draw_batch(BATCH))
    results.append(Result("first batch of a pass (shuffles each source's order)", t_first, None, rows=n,
                          peak_bytes=first_peak,
                          note=f"once per pass of a source: amortized over the pass's ~{n // BATCH:,} batches, "
                               f"{t_first / (n // BATCH) * 1e6:.1f} µs per batch"))
    del fresh
    results.append(Result(f"pull {BATCH} indices through __iter__", t_iter, t_two, rows=BATCH, target="< 1 ms",
                          max_s=1e-3, note="Python ints, as a DataLoader does; reference: two-stage batch"))

    # -- curriculum level-up ---------------------------------------------------------------------
    cur._cur_ema = 1.0  # as if the gate had opened

    def level_up_and_draw() -> None:
        if cur.level >= cur.options.num_intervals:
            cur.level = 0
        cur._level_up(1.0, "Benchmark:")
        cur.draw_batch(BATCH)

    t_level = median_time(level_up_and_draw, repeat=9, warmup=1)
    ranks = np.empty(n, dtype=np.int64)
    ranks[cur._cur_rows] = np.arange(len(cur._cur_rows))
    is_cur = data.source_codes == data.source_names.index("logicif")

    def reference_level_up() -> None:
        mask = ~is_cur | (ranks < cur.num_items)
        w = reference_weights(data, mask)
        list(torch.utils.data.WeightedRandomSampler(w, BATCH))

    t_ref_level = median_time(reference_level_up, repeat=3, warmup=1)
    results.append(Result("curriculum level-up + first batch", t_level, t_ref_level, rows=BATCH,
                          note="reference: rebuild per-row weights for the new pool"))

    # -- parquet ---------------------------------------------------------------------------------
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "train.parquet"
        names = np.asarray(data.source_names)[data.source_codes]
        extra = pa.StructArray.from_arrays([pa.array(data.complexity)], ["complexity_score"])
        pq.write_table(pa.table({"data_source": names, "extra_info": extra}), path)
        del names, extra
        t_pq = median_time(lambda: DatasetColumns.from_parquet(path), repeat=1 if not quick else 3, warmup=0)
        t_pq_ref = median_time(lambda: pq.read_table(path, columns=["data_source"]).column(0).to_pylist(),
                               repeat=1, warmup=0)
        results.append(Result("DatasetColumns.from_parquet (data_source + complexity)", t_pq, t_pq_ref, rows=n,
                              note="reference: data_source as Python objects"))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200k rows instead of 10M")
    args = parser.parse_args()
    t0 = time.perf_counter()
    results = run(args.quick)
    print(markdown_table(results))
    print(f"(total {time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    main()
