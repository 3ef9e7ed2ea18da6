"""Backends benchmark: top/bottom-k selection, and the training-thread cost of logging.

1. top/bottom-k over 131,072 rows with k=2: ``TopBottomKSamples.on_rewards_computed`` (vectorized
   selection, then only the selected rows become dicts) against the per-row heap of the spec's
   ``TopBottomKFilter`` (push every row into a size-k heap). Target >= 20x.
2. per step, 200 metrics + one sample table with console, JSONL, TensorBoard and W&B (offline)
   on: time spent in the training thread through the RunManager (queued dispatch) against the
   same four backends called inline. Between steps the training thread sleeps (a stand-in for
   the GPU step, which releases the GIL) so the backend threads keep up. Target < 1 ms per step.

    .venv/bin/python -m benchmarks.bench_backends [--quick]
"""

from __future__ import annotations

import contextlib
import heapq
import io
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

import rlhooks
import rlhooks.host
from benchmarks import harness
from rlhooks import Batch
from rlhooks.plugins.backends.console import ConsoleBackend
from rlhooks.plugins.backends.jsonl import JsonlBackend
from rlhooks.plugins.backends.samples import TopBottomKSamples
from rlhooks.plugins.backends.tensorboard_backend import TensorBoardBackend
from rlhooks.plugins.backends.wandb_backend import WandbBackend


class _Sink:
    seed = 0

    def __init__(self) -> None:
        self.tables: list = []

    def log_table(self, name: str, rows: list, step: int | None = None) -> None:
        self.tables.append(rows)


def _batch(n: int, seed: int = 0) -> Batch:
    rng = np.random.default_rng(seed)
    reward = np.round(rng.random(n), 3)  # rounded: plenty of ties
    uid = np.repeat(np.arange(n // 8), 8)
    texts = np.array([f"response {i}" for i in range(n)], dtype=object)
    return Batch({"uid": uid, "index": np.arange(n), "data_source": np.where(uid % 2, "a", "b"), "reward": reward},
                 lazy={"response": lambda: texts})


def heap_reference(batch: Batch, k: int) -> list[dict]:
    """The spec's style: every row becomes a dict and goes through two size-k heaps."""
    top: list = []
    bottom: list = []
    cols = {c: batch[c] for c in ("uid", "index", "data_source", "reward", "response")}
    for i in range(len(batch)):
        sample = {c: v[i] for c, v in cols.items()}
        r = float(sample["reward"])
        entry = (r, -i, sample)
        if len(top) < k:
            heapq.heappush(top, entry)
        elif entry[:2] > top[0][:2]:
            heapq.heapreplace(top, entry)
        entry = (-r, -i, sample)
        if len(bottom) < k:
            heapq.heappush(bottom, entry)
        elif entry[:2] > bottom[0][:2]:
            heapq.heapreplace(bottom, entry)
    return [e[2] for e in sorted(top, key=lambda e: e[:2], reverse=True)] + [
        e[2] for e in sorted(bottom, key=lambda e: e[:2], reverse=True)]


def bench_selection(quick: bool) -> harness.Result:
    n, k = 131_072, 2
    batch = _batch(n)
    comp = TopBottomKSamples(TopBottomKSamples.Options(k=k))
    sink = _Sink()
    comp.on_run_start(sink)

    def ours() -> None:
        comp.on_rewards_computed(1, batch)
        comp.on_step_end(1, batch)

    ours()
    ref_rows = heap_reference(batch, k)
    assert [r["index"] for r in sink.tables[-1]] == [int(r["index"]) for r in ref_rows], "selection differs from reference"
    repeat = 3 if quick else 7
    t_ours = harness.median_time(ours, repeat=repeat)
    t_ref = harness.median_time(lambda: heap_reference(batch, k), repeat=1 if quick else 3)
    _, peak = harness.peak_memory(ours)
    ratio = t_ref / t_ours
    return harness.Result("top/bottom-k selection, 131,072 rows, k=2", t_ours, t_ref, rows=n, peak_bytes=peak,
                          target=">=20x", min_ratio=20)


def _metrics(step: int, n: int = 200) -> dict[str, float]:
    return {f"group{i % 10}/metric{i}": step * 0.001 + i for i in range(n)}


def _rows(step: int) -> list[dict[str, Any]]:
    return [{"step": step, "selection": s, "rank": 1, "uid": f"u{step}", "prompt": "p" * 400, "response": "r" * 800,
             "reward": 0.5} for s in ("top", "top", "bottom", "bottom")]


def bench_training_thread(quick: bool, tmp: Path) -> list[harness.Result]:
    steps = 30 if quick else 200
    pause = 0.01 if quick else 0.02  # the "GPU step" between two logging calls
    os.environ.setdefault("WANDB_SILENT", "true")
    devnull = io.StringIO()
    # quick mode leaves W&B out: starting and finishing an offline run alone takes seconds
    wandb_opts = {"mode": "offline", "project": "rlhooks-bench", "settings": {"console": "off"}}
    backends: list[Any] = [{"name": "console", "max_keys": 8, "tables": True}, "jsonl", "tensorboard"]
    if not quick:
        backends.append({"name": "wandb", **wandb_opts})
    cfg = rlhooks.host.load_config({"run": {"name": "bench"}, "backends": backends})
    per_step = []
    with contextlib.redirect_stdout(devnull):
        m = rlhooks.host.RunManager(cfg, run_dir=tmp / "dispatched")
        with m.running():
            if not quick:
                time.sleep(0.5)  # let wandb start on its thread; the training thread never waits for it
            for step in range(1, steps + 1):
                t0 = time.perf_counter()
                m.log_metrics(step, _metrics(step))
                m.context.step = step
                m.context.log_table("samples/top_bottom_k", _rows(step))
                m.dispatch_emitted()
                per_step.append(time.perf_counter() - t0)
                time.sleep(pause)

            def one_more(step: int = steps + 1) -> None:
                m.log_metrics(step, _metrics(step))
                m.context.step = step
                m.context.log_table("samples/top_bottom_k", _rows(step))
                m.dispatch_emitted()

            # traced: the training thread's calls (and whatever backend threads allocate meanwhile)
            _, peak = harness.peak_memory(one_more)
            t_end = time.perf_counter()
        flush_s = time.perf_counter() - t_end

        # reference: the same four backends called inline in the training thread
        ctx = rlhooks.RunContext(cfg, tmp / "inline", lambda *a: None)
        ctx.run_dir.mkdir(parents=True, exist_ok=True)
        inline: list[Any] = [ConsoleBackend(ConsoleBackend.Options(max_keys=8)), JsonlBackend(), TensorBoardBackend()]
        if not quick:
            inline.append(WandbBackend(WandbBackend.Options(**wandb_opts)))
        for b in inline:
            if hasattr(b, "on_run_start"):
                b.on_run_start(ctx)
        ref_step = []
        for step in range(1, steps + 1):
            metrics, rows = _metrics(step), _rows(step)
            t0 = time.perf_counter()
            for b in inline:
                b.log_metrics(step, metrics)
                b.log_table(step, "samples/top_bottom_k", [dict(r) for r in rows])
            ref_step.append(time.perf_counter() - t0)
            time.sleep(pause)
        for b in inline:
            b.on_run_end("success")
    ours = float(np.median(per_step))
    ref = float(np.median(ref_step))
    return [
        harness.Result("training thread per step: 200 metrics + 1 table, console+jsonl+tensorboard"
                       + ("" if quick else "+wandb offline"),
                       ours, ref, peak_bytes=peak, target="<1 ms", max_s=1e-3,
                       note=f"median of {steps} steps; p99 {np.percentile(per_step, 99) * 1e3:.2f} ms; "
                            f"flush at run end {flush_s:.2f} s; reference = the backends called inline"),
    ]


def run(quick: bool) -> list[harness.Result]:
    results = [bench_selection(quick)]
    with tempfile.TemporaryDirectory() as d:
        results += bench_training_thread(quick, Path(d))
    return results


if __name__ == "__main__":
    print(harness.markdown_table(run("--quick" in sys.argv)))
