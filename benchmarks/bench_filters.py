"""DAPO group filter and per-source metrics vs straightforward Python-loop references (recipe style).

Same input for both sides, one run, outputs checked equal before timing:

* dapo filter: ``DapoGroupFilter.select`` on a fresh Batch (so uid factorization is included) vs
  the recipe's loops (dict of lists per uid, ``np.std`` per uid, then a membership test per row).
  The recipe tests membership in a *list* (quadratic); the main case uses a set so the reference is
  the fastest plain-loop version; the list version is timed on a smaller batch.
* source metrics: ``SourceMetrics.on_step_end`` (count and mean reward per source) vs
  per_source_tracking.md's code as written (``Counter`` for counts, a dict of lists of
  ``float(reward)`` per source, ``np.mean`` per source), at 2, 16, 50 and 200 sources. The
  reference gets the rewards as a numpy array (the document sums a torch tensor, slower to
  iterate), so it is if anything faster than the document's.

    .venv/bin/python -m benchmarks.bench_filters [--quick]
"""

from __future__ import annotations

import argparse
import uuid
import warnings
from collections import Counter, defaultdict

import numpy as np

from benchmarks.harness import Result, markdown_table, median_time, peak_memory
from rlhooks.core.batch import Batch
from rlhooks.plugins.filters.dapo import DapoGroupFilter
from rlhooks.plugins.rewards.source_metrics import SourceMetrics

SOURCES = np.array(["gsm8k", "math", "logic_if", "if_train"], dtype=object)


def make_input(n_prompts: int, n: int, seed: int = 0, n_sources: int | None = None) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    sources = SOURCES if n_sources is None else np.array([f"source_{i:03d}" for i in range(n_sources)], dtype=object)
    rows = n_prompts * n
    uids = np.array([str(uuid.UUID(int=int(x))) for x in rng.integers(0, 2**63, n_prompts)], dtype=object)
    p = rng.random(n_prompts) ** 2  # many easy/hard prompts -> many constant groups
    acc = (rng.random(rows) < np.repeat(p, n)).astype(np.float64)
    return {
        "uid": np.repeat(uids, n),
        "data_source": np.repeat(sources[rng.integers(0, len(sources), n_prompts)], n),
        "acc": acc,
        "reward": acc * 2.0 - 1.0 + rng.normal(0, 0.1, rows),
    }


def to_batch(cols: dict[str, np.ndarray]) -> Batch:
    return Batch(cols, meta={"reward_extra_keys": ["acc"]})


# -- references, written the recipe's / spec's way -------------------------------------------------


def recipe_filter(uids: np.ndarray, metric: np.ndarray, list_lookup: bool = False) -> np.ndarray:
    uid2vals = defaultdict(list)
    for uid, v in zip(uids, metric):
        uid2vals[uid].append(v)
    uid2std = {uid: np.std(vals) for uid, vals in uid2vals.items()}
    kept = [uid for uid, std in uid2std.items() if std > 0 or len(uid2vals[uid]) == 1]
    lookup = kept if list_lookup else set(kept)
    kept_idxs = []
    for idx, uid in enumerate(uids):
        if uid in lookup:
            kept_idxs.append(idx)
    mask = np.zeros(len(uids), dtype=bool)
    mask[kept_idxs] = True
    return mask


def spec_source_metrics(sources: np.ndarray, sample_rewards: np.ndarray) -> dict[str, float]:
    """per_source_tracking.md's compute_source_metrics, as the document writes it."""
    out: dict[str, float] = {}
    source_counts = Counter(sources)
    source_rewards = defaultdict(list)
    for reward, source in zip(sample_rewards, sources):
        source_rewards[source].append(float(reward))
    for source, count in source_counts.items():
        out[f"source/{source}/count"] = count
    for source, rewards in source_rewards.items():
        out[f"source/{source}/reward"] = np.mean(rewards)
    return out


# -- cases ---------------------------------------------------------------------------------------


def bench_filter(n_prompts: int, n: int, repeat: int, *, list_lookup: bool, target: bool) -> Result:
    cols = make_input(n_prompts, n)
    flt = DapoGroupFilter()

    def ours() -> np.ndarray:
        return flt.select(to_batch(cols)).keep

    def ref() -> np.ndarray:
        return recipe_filter(cols["uid"], cols["acc"], list_lookup=list_lookup)

    np.testing.assert_array_equal(ours(), ref())
    t = median_time(ours, repeat=repeat)
    slow = list_lookup  # the quadratic reference: fewer runs
    t_ref = median_time(ref, repeat=max(1, repeat // 3) if slow else repeat, warmup=0 if slow else 1)
    _, peak = peak_memory(ours)
    kind = "list lookup, as the recipe" if list_lookup else "loop reference with set lookup"
    res = Result(f"dapo filter {n_prompts}x{n}", t, t_ref, rows=n_prompts * n, peak_bytes=peak, note=kind)
    if target:
        res.target = "<10 ms, >=20x"
        res.max_s, res.min_ratio = 0.010, 20
        res.met = res.distance_ok()
    return res


def bench_source_metrics(n_prompts: int, n: int, repeat: int, n_sources: int) -> Result:
    cols = make_input(n_prompts, n, seed=1, n_sources=n_sources)
    del cols["acc"]  # the document tracks count and reward only; so does the plugin without an acc extra
    sm = SourceMetrics()

    def ours() -> dict:
        return sm.on_step_end(step=1, batch=Batch(cols))

    def ref() -> dict:
        return spec_source_metrics(cols["data_source"], cols["reward"])

    got, want = ours(), ref()
    assert got.keys() == want.keys() and all(np.isclose(got[k], want[k]) for k in want), "outputs differ"
    t = median_time(ours, repeat=repeat)
    t_ref = median_time(ref, repeat=max(3, repeat // 2))
    _, peak = peak_memory(ours)
    res = Result(f"source metrics {n_prompts}x{n}, {n_sources} sources", t, t_ref, rows=n_prompts * n,
                 peak_bytes=peak, note="per_source_tracking.md's code as written", target=">= 20x", min_ratio=20)
    res.met = res.distance_ok()
    return res


def run(quick: bool = False) -> list[Result]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        if quick:
            return [
                bench_filter(512, 16, 3, list_lookup=False, target=False),
                bench_filter(128, 16, 1, list_lookup=True, target=False),
                *(bench_source_metrics(512, 16, 3, k) for k in (2, 16, 50, 200)),
            ]
        return [
            bench_filter(8192, 16, 7, list_lookup=False, target=True),
            bench_filter(1024, 16, 3, list_lookup=True, target=False),
            *(bench_source_metrics(8192, 16, 7, k) for k in (2, 16, 50, 200)),
        ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller inputs, a few seconds")
    print(markdown_table(run(quick=parser.parse_args().quick)))


if __name__ == "__main__":
    main()
