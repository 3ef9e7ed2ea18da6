"""Issue 40 item 5 on a shared machine: the hot paths against their faithful references in CPU time, side by side.

    python -m benchmarks.bench_cpu_time            # full sizes; writes its benchmarks/RESULTS.md section (with the load)
    python -m benchmarks.bench_cpu_time --quick    # small sizes (make bench-quick)

Wall-clock medians carry whatever else the machine runs; here each repeat times the reference and rlhooks back to
back (interleaved, so a burst of load falls on both), in the thread's CPU time (``time.thread_time``: time other
processes take is not counted), and keeps each one's minimum. The references are the other modules' own, unchanged:

* built-in reward functions' ``score_batch`` on 4,096 distinct responses vs one compiled-regex search per response
  (``bench_rewards.regex_pass``; issue 40: within 3x);
* per-source metrics (``SourceMetrics.on_step_end``) at 8,192 x 16 rows and 2 to 200 sources vs per_source_tracking.md's
  code as written (``bench_filters.spec_source_metrics``; at least 20x).

Both outputs are checked equal to the reference's before timing.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks.harness import Result

FUNCTIONS = ("format_exact", "format_approx", "check_answer", "check_numbers")


def side_by_side(ours: Callable[[], Any], ref: Callable[[], Any], repeat: int) -> tuple[float, float]:
    """(min CPU seconds of ``ours()``, of ``ref()``), the two timed alternately ``repeat`` times after a warm-up."""
    ours(), ref()
    best_ours = best_ref = float("inf")
    for _ in range(repeat):
        t0 = time.thread_time()
        ours()
        best_ours = min(best_ours, time.thread_time() - t0)
        t0 = time.thread_time()
        ref()
        best_ref = min(best_ref, time.thread_time() - t0)
    return best_ours, best_ref


def reward_functions(n: int, repeat: int) -> list[Result]:
    from benchmarks.bench_rewards import regex_pass, responses
    from rlhooks.plugins.rewards.functions import BUILTIN_FUNCTIONS

    rs, ts = responses(n)
    out = []
    for name in FUNCTIONS:
        fn = BUILTIN_FUNCTIONS[name]
        assert fn.score_batch(rs, ts).tolist() == [fn(r, t) for r, t in zip(rs.tolist(), ts.tolist())], name
        t, t_ref = side_by_side(lambda fn=fn: fn.score_batch(rs, ts), lambda: regex_pass(rs), repeat)
        out.append(Result(
            case=f"reward function {name}.score_batch, {n:,} distinct responses, CPU time (ref: one compiled-regex "
                 f"search each)", rlhooks_s=t, reference_s=t_ref, rows=n, target="<= 3x the regex pass's time",
            met=t <= 3 * t_ref, margin=f"{t / t_ref:.2f}x the regex pass's time", note=f"min of {repeat}, interleaved"))
    return out


def source_metrics(n_prompts: int, n: int, sources: tuple[int, ...], repeat: int) -> list[Result]:
    from benchmarks.bench_filters import make_input, spec_source_metrics
    from rlhooks import Batch
    from rlhooks.plugins.rewards.source_metrics import SourceMetrics

    out = []
    for k in sources:
        cols = make_input(n_prompts, n, seed=1, n_sources=k)
        del cols["acc"]  # as bench_filters: the document tracks count and reward only
        sm = SourceMetrics()
        got, want = sm.on_step_end(step=1, batch=Batch(cols)), spec_source_metrics(cols["data_source"], cols["reward"])
        assert got.keys() == want.keys() and all(np.isclose(got[key], want[key]) for key in want), "outputs differ"
        t, t_ref = side_by_side(lambda sm=sm, cols=cols: sm.on_step_end(step=1, batch=Batch(cols)),
                                lambda cols=cols: spec_source_metrics(cols["data_source"], cols["reward"]), repeat)
        out.append(Result(f"source metrics {n_prompts}x{n}, {k} sources, CPU time", t, t_ref, rows=n_prompts * n,
                          note=f"per_source_tracking.md's code as written; min of {repeat}, interleaved",
                          target=">= 20x", min_ratio=20))
    return out


def run(quick: bool = False) -> list[Result]:
    if quick:
        return reward_functions(256, 3) + source_metrics(64, 16, (2, 200), 3)
    return reward_functions(4096, 41) + source_metrics(8192, 16, (2, 16, 50, 200), 25)


def main(argv: list[str] | None = None) -> int:
    from benchmarks.harness import markdown_table
    from benchmarks.run_all import machine, write_results

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    load0 = os.getloadavg()[0]
    got = run(args.quick)
    load1 = os.getloadavg()[0]
    table = markdown_table(got)
    shared = "shared machine; " if max(load0, load1) > (os.cpu_count() or 2) else ""
    print(table)
    if not args.quick:
        write_results({"bench_cpu_time": f"## bench_cpu_time\n\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
                                         f"{machine()}; load average {load0:.1f} -> {load1:.1f} ({shared}CPU "
                                         f"time, interleaved)\n\n{table}"})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
