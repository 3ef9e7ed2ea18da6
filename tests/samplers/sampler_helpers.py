"""Helpers for sampler tests: small real datasets, trajectory batches fed back as a run does."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import numpy as np

from rlhooks import Batch, DatasetColumns


def two_sources(n_each: int = 2000, *, seed: int = 0, names: tuple[str, ...] = ("iftrain", "logicif")) -> DatasetColumns:
    """Rows of each source interleaved, complexity uniform in [0, 1) on every row."""
    rng = np.random.default_rng(seed)
    ds = np.tile(np.asarray(names, dtype=object), n_each)
    return DatasetColumns.from_arrays(ds, rng.random(len(ds)), origin="test-data")


def source_of(data: DatasetColumns, idx: np.ndarray) -> np.ndarray:
    return np.asarray(data.source_names)[data.source_codes[np.asarray(idx)]]


def trajectories(data: DatasetColumns, idx: np.ndarray, reward: Callable[[np.ndarray, np.ndarray], np.ndarray],
                 n: int = 2) -> Batch:
    """``n`` trajectory rows per drawn prompt, rewards from ``reward(sources, indices)``."""
    rows = np.repeat(np.asarray(idx, dtype=np.int64), n)
    src = source_of(data, rows)
    return Batch({"uid": np.repeat(np.arange(len(idx)), n), "index": rows, "data_source": src,
                  "reward": np.asarray(reward(src, rows), dtype=np.float64)})


class Stream:
    """Indices pulled batch by batch from one iterator, across epochs, as a dataloader does."""

    def __init__(self, sampler) -> None:
        self.sampler = sampler
        self.it: Iterator[int] | None = None

    def take(self, n: int) -> np.ndarray:
        out: list[int] = []
        while len(out) < n:
            if self.it is None:
                self.it = iter(self.sampler)
            got = list(itertools.islice(self.it, n - len(out)))
            if len(got) < n - len(out):
                self.it = None
            out += got
        return np.asarray(out, dtype=np.int64)


def run_with_feedback(sampler, data: DatasetColumns, batches: int, reward, stream: Stream | None = None) -> list[np.ndarray]:
    """Draw ``batches`` batches of ``sampler.batch_size``, feeding each one's rewards back."""
    stream = stream or Stream(sampler)
    out = []
    for step in range(1, batches + 1):
        idx = stream.take(sampler.batch_size)
        sampler.on_rewards_computed(step, trajectories(data, idx, reward))
        out.append(idx)
    return out
