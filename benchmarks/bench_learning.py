"""Prompt-level learning state (core/learning.py): memory per row and update cost, vs a dict of rows.

* memory: ``LearningState`` over 10M rows (held bytes / row; target <= 16 B/row) vs the plain
  Python way, one dict per seen row (measured on 100k rows, per row).
* update: one generation batch of 1024 prompts x 16 responses recorded into a 10M-row state, vs
  the same rules written as a loop over groups into a dict of rows (outputs checked equal first).
  O(rows in the batch): the same update on a 100k-row state costs about the same.
* prompt filter: selective_rollout on 1024 sampled prompts with their learning columns.

    .venv/bin/python -m benchmarks.bench_learning [--quick]
"""

from __future__ import annotations

import argparse

import numpy as np

from benchmarks.harness import Result, markdown_table, median_time, peak_memory
from rlhooks.core.batch import Batch
from rlhooks.core.learning import LearningState
from rlhooks.plugins.filters.selective_rollout import SelectiveRollout

ALPHA, THRESHOLD = 0.3, 0.5


def make_batch(n_rows: int, n_prompts: int, n: int, seed: int) -> Batch:
    rng = np.random.default_rng(seed)
    rows = rng.choice(n_rows, n_prompts, replace=False)
    p = rng.random(n_prompts) ** 2
    acc = (rng.random((n_prompts, n)) < p[:, None]).astype(np.float64).ravel()
    uid = np.repeat(np.arange(n_prompts) + seed * 1_000_000, n)
    return Batch({"uid": uid, "index": np.repeat(rows, n), "acc": acc})


def reference_update(table: dict[int, dict], batch: Batch, step: int) -> None:
    """The learning-state rules as a loop over groups into a dict of rows (the simple way)."""
    groups: dict[int, list] = {}
    for uid, row, a in zip(batch["uid"].tolist(), batch["index"].tolist(), batch["acc"].tolist()):
        groups.setdefault(uid, [row, []])[1].append(a)
    for row, acc in groups.values():
        rec = table.setdefault(row, {"times": 0, "last_step": 0, "mean": None, "ema": None, "run": 0, "abs_adv": 0.0})
        rec["times"] += 1
        rec["last_step"] = step
        mean = sum(acc) / len(acc)
        rec["mean"] = mean
        p = sum(a >= THRESHOLD for a in acc) / len(acc)
        rec["ema"] = p if rec["ema"] is None else (1 - ALPHA) * rec["ema"] + ALPHA * p
        const = len(acc) > 1 and max(acc) == min(acc)
        if const and mean >= THRESHOLD:
            rec["run"] = rec["run"] + 1 if rec["run"] > 0 else 1
        elif const:
            rec["run"] = rec["run"] - 1 if rec["run"] < 0 else -1
        else:
            rec["run"] = 0
        if not const and len(acc) > 1:
            sd = (sum((a - mean) ** 2 for a in acc) / (len(acc) - 1)) ** 0.5
            rec["abs_adv"] = sum(abs(a - mean) for a in acc) / len(acc) / (sd + 1e-6)
        else:
            rec["abs_adv"] = 0.0


def bench_memory(n_rows: int, ref_rows: int) -> Result:
    state, peak = peak_memory(lambda: LearningState(n_rows))
    held = state.nbytes / n_rows

    def build_reference() -> dict:
        return {r: {"times": 1, "last_step": 1, "mean": 0.5, "ema": 0.5, "run": 0, "abs_adv": 0.0} for r in range(ref_rows)}

    _, ref_peak = peak_memory(build_reference)
    ref_per_row = ref_peak / ref_rows
    return Result(
        f"learning state memory, {n_rows:,} rows", median_time(lambda: LearningState(n_rows), repeat=3),
        rows=n_rows, peak_bytes=peak, target="<= 16 B/row", met=held <= 16,
        margin=f"{held:.0f} B/row held ({held / 16:.0%} of 16 B/row); dict of rows: {ref_per_row:.0f} B/row",
        note=f"construction peak {peak / n_rows:.1f} B/row; reference: one dict per row, measured on {ref_rows:,} rows",
    )


def bench_update(n_rows: int, n_prompts: int, n: int, repeat: int) -> list[Result]:
    batches = [make_batch(n_rows, n_prompts, n, seed) for seed in range(repeat + 2)]
    # same outputs first (on a fresh state and table)
    state, table = LearningState(n_rows), {}
    for step, b in enumerate(batches[:3], 1):
        state.update(b, step)
        reference_update(table, b, step)
    for row, rec in table.items():
        assert state.times_sampled[row] == rec["times"] and state.zero_var_run[row] == rec["run"]
        assert abs(float(state.pass_ema[row]) - rec["ema"]) < 2e-3
        assert abs(float(state.last_abs_adv[row]) - rec["abs_adv"]) < 2e-2 * max(1.0, rec["abs_adv"])

    it = iter(range(10**9))
    t = median_time(lambda: state.update(batches[next(it) % len(batches)], 10), repeat=repeat)
    it_ref = iter(range(10**9))
    t_ref = median_time(lambda: reference_update(table, batches[next(it_ref) % len(batches)], 10), repeat=repeat)
    _, peak = peak_memory(lambda: state.update(batches[0], 11))
    small = LearningState(100_000)
    small_batches = [make_batch(100_000, n_prompts, n, seed) for seed in range(3)]
    it_small = iter(range(10**9))
    t_small = median_time(lambda: small.update(small_batches[next(it_small) % 3], 10), repeat=repeat)
    rows = n_prompts * n
    return [
        Result(f"learning state update, {n_prompts}x{n} into {n_rows:,} rows", t, t_ref, rows=rows, peak_bytes=peak,
               target="O(rows in the batch)", met=t < 3 * t_small,
               margin=f"{t / t_small:.1f}x the time into 100,000 rows",
               note="reference: loop over groups into a dict of rows; peak memory independent of dataset size"),
    ]


def bench_prompt_filter(n_rows: int, n_prompts: int, repeat: int) -> Result:
    state = LearningState(n_rows)
    for step in range(1, 6):
        state.update(make_batch(n_rows, 4096, 8, step), step)
    idx = np.random.default_rng(9).choice(n_rows, n_prompts, replace=False)
    flt = SelectiveRollout()

    def call() -> np.ndarray:
        b = Batch({"index": idx}, meta={"step": 6, "generation": 1, "draw": 1}).with_columns(**state.columns(idx))
        return flt.select(b).keep

    t = median_time(call, repeat=repeat)
    return Result(f"selective_rollout on {n_prompts} prompts (learning columns from {n_rows:,} rows)", t,
                  rows=n_prompts, note="gathering the learning/* columns + the skip draw", unit="us")


def run(quick: bool = False) -> list[Result]:
    if quick:
        return [bench_memory(200_000, 20_000), *bench_update(200_000, 256, 8, 3), bench_prompt_filter(200_000, 256, 3)]
    return [bench_memory(10_000_000, 100_000), *bench_update(10_000_000, 1024, 16, 7), bench_prompt_filter(10_000_000, 1024, 7)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    print(markdown_table(run(quick=ap.parse_args().quick)))


if __name__ == "__main__":
    main()
