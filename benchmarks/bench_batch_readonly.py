"""Read-only batch columns: the cost of the flag (issue 21: "a flag, not a copy").

``Batch`` keeps every column as a read-only view (``core/batch.py: _read_only``), so a hook or
filter that writes into its batch raises. Same input for both sides, outputs checked equal, the two sides timed alternately (best of 31):

* the Batch traffic of one generation batch (build from the engine's arrays, ``with_columns`` for
  the reward columns, ``select`` of the kept rows, the DAPO filter's ``select``) with the views vs
  the identical code with ``_read_only`` replaced by the identity (the code before the change);
* one column: the read-only view vs the copy a defensive "copy before handing out" would make.

    .venv/bin/python -m benchmarks.bench_batch_readonly [--quick]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks.harness import Result, markdown_table, peak_memory
from rlhooks.core import batch as batch_module
from rlhooks.core.batch import Batch
from rlhooks.plugins.filters.dapo import DapoGroupFilter

N_COLUMNS = 16  # about what the verl shim's trajectory Batch holds


def engine_columns(prompts: int, n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    rows = prompts * n
    p = rng.random(prompts) ** 2
    acc = (rng.random(rows) < np.repeat(p, n)).astype(np.float64)
    cols: dict[str, np.ndarray] = {
        "uid": np.repeat(np.arange(prompts, dtype=np.int64), n),
        "index": np.repeat(rng.integers(0, 10**6, prompts), n),
        "data_source": np.repeat(np.array(["gsm8k", "math", "logic"], dtype=object)[rng.integers(0, 3, prompts)], n),
        "acc": acc,
    }
    for i in range(N_COLUMNS - len(cols)):
        cols[f"extra_{i}"] = rng.normal(size=rows)
    return cols


def generation_batch_traffic(cols: dict[str, np.ndarray], reward: np.ndarray, flt: DapoGroupFilter) -> Batch:
    batch = Batch(cols, meta={"reward_extra_keys": ["acc"]})
    batch = batch.with_columns(reward=reward, **{"reward_fn/check_answer": reward})
    decision = flt.select(batch)
    return batch.select(decision.keep)


def without_flags(fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` run with the read-only views turned off: the Batch code as it was before them."""

    def run() -> Any:
        original = batch_module._read_only
        batch_module._read_only = lambda arr: arr
        try:
            return fn()
        finally:
            batch_module._read_only = original

    return run


def interleaved_best(ours: Callable[[], Any], ref: Callable[[], Any], repeat: int, calls: int = 1) -> tuple[float, float]:
    """Fastest seconds per call of each (timeit's rule: slower runs measure other load, not the
    code), alternating ours and ref so load on a shared machine hits both alike; ``calls`` calls
    per timing for operations too short to time one by one."""
    times: tuple[list[float], list[float]] = ([], [])
    for fn in (ours, ref):
        fn()  # warm-up
    for _ in range(repeat):
        for fn, out in ((ours, times[0]), (ref, times[1])):
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            out.append((time.perf_counter() - t0) / calls)
    return min(times[0]), min(times[1])


def count_views(fn: Callable[[], Any]) -> int:
    """How many read-only views one call of ``fn`` makes (columns that were not read-only yet)."""
    original, made = batch_module._read_only, []

    def counting(arr: np.ndarray) -> np.ndarray:
        made.append(arr.flags.writeable)
        return original(arr)

    batch_module._read_only = counting
    try:
        fn()
    finally:
        batch_module._read_only = original
    return sum(made)


def view_cost(calls: int = 10_000) -> float:
    """Best seconds per ``_read_only`` call on a writeable column (what each counted view costs)."""
    col = np.zeros(8)
    best = float("inf")
    for _ in range(11):
        t0 = time.perf_counter()
        for _ in range(calls):
            batch_module._read_only(col)
        best = min(best, (time.perf_counter() - t0) / calls)
    return best


def _same(a: Batch, b: Batch) -> None:
    assert a.columns == b.columns and len(a) == len(b)
    for c in a.columns:
        assert np.array_equal(a[c], b[c]), c


def bench_traffic(prompts: int, n: int) -> Result:
    cols = engine_columns(prompts, n)
    reward = cols["acc"] * 2.0 - 1.0
    flt = DapoGroupFilter(DapoGroupFilter.Options(metric="acc"))

    def ours() -> Batch:
        return generation_batch_traffic(cols, reward, flt)

    ref = without_flags(ours)
    got, want = ours(), ref()
    _same(got, want)
    assert not got["reward"].flags.writeable and want["reward"].flags.writeable
    t_ours, t_ref = interleaved_best(ours, ref, repeat=31)
    _, peak = peak_memory(ours)
    _, peak_ref = peak_memory(ref)
    rows = prompts * n
    views = count_views(ours)
    per_view = view_cost()
    return Result(f"one generation batch's Batch traffic + dapo select, {prompts}x{n}, {N_COLUMNS + 2} columns "
                  f"(ref: same code without the read-only flag)", t_ours, t_ref, rows=rows, peak_bytes=peak,
                  note=f"{views} views made x {per_view * 1e6:.2f} µs = {views * per_view * 1e6:.0f} µs "
                  f"({views * per_view / t_ours:.1%} of the traffic: the counted cost; the side-by-side times also "
                  f"carry the shared machine's noise); peak memory {peak / 2**20:.2f} MiB vs {peak_ref / 2**20:.2f} MiB")


def bench_one_column(rows: int) -> Result:
    col = np.random.default_rng(1).normal(size=rows)

    def ours() -> np.ndarray:
        return batch_module._read_only(col)

    def copy() -> np.ndarray:
        out = col.copy()
        out.flags.writeable = False
        return out

    assert np.array_equal(ours(), copy()) and np.shares_memory(ours(), col)
    t_ours, t_ref = interleaved_best(ours, copy, repeat=21, calls=1000)
    return Result(f"one float64 column of {rows} rows made read-only (ref: a read-only copy)", t_ours, t_ref,
                  rows=rows, unit="us", note="a view: O(1), shares the engine's memory")


def run(quick: bool = False) -> list[Result]:
    sizes = [(64, 8)] if quick else [(128, 16), (512, 16), (2048, 16)]  # 512x16: a DAPO generation batch
    return [*(bench_traffic(p, n) for p, n in sizes), bench_one_column(sizes[-1][0] * sizes[-1][1])]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    print(markdown_table(run(quick=ap.parse_args().quick)))


if __name__ == "__main__":
    main()
