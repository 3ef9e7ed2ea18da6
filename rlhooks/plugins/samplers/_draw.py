"""Numeric building blocks of the samplers: counts per batch, weight clamping, pools.

Nothing here holds per-row Python objects. A pool is a numpy array of row indices; drawing from
it without replacement walks the pool's order for the current pass, a shuffled int32 copy of the
pool made when the pass starts (seeded by seed, pool name, pass number and pool size, so it is
reproduced exactly from those few integers on resume). A draw is then a slice: O(draws) with a
tiny constant, and the shuffle's O(pool) cost is paid once per pass.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np


def stratum_id(name: str) -> int:
    """A stable integer for a pool name (Python's hash() is salted per process)."""
    return zlib.crc32(name.encode("utf-8"))


class Pools:
    """Without-replacement draws from named pools, in passes, with tiny resumable state.

    Each pool keeps ``[pass, cursor, size]`` (the cursor counts rows drawn in the pass). A pass
    visits every row of the pool once, in a pseudo-random order keyed by (seed, pool, pass,
    size); when a pass ends the next begins in a new order. When the pool's size changes (a
    curriculum unlocked rows) a new pass starts over the new pool, so rows drawn just before the
    change may come again before the others. The rows of a pool of a given name and size must
    not change (they are the sampler's fixed per-source or complexity-ordered index arrays).
    Memory: the current pass's order, one int32/int64 copy of each pool being drawn from.
    """

    def __init__(self, seed: int) -> None:
        self.seed = int(seed)
        self.state: dict[str, list[int]] = {}
        self._orders: dict[str, tuple[tuple[int, int], np.ndarray]] = {}

    def _order(self, name: str, rows: np.ndarray, pass_no: int) -> np.ndarray:
        n = len(rows)
        cached = self._orders.get(name)
        if cached is not None and cached[0] == (pass_no, n):
            return cached[1]
        rng = np.random.default_rng([self.seed & 0xFFFFFFFF, stratum_id(name), pass_no, n])
        order = np.array(rows, copy=True)
        rng.shuffle(order)
        self._orders[name] = ((pass_no, n), order)
        return order

    def draw(self, name: str, rows: np.ndarray, count: int) -> np.ndarray:
        """``count`` row indices from pool ``rows`` (wrapping into new passes as needed)."""
        n = len(rows)
        if count <= 0:
            return np.zeros(0, dtype=np.int64)
        if n == 0:
            raise ValueError(f"pool {name!r} is empty; cannot draw {count} rows from it")
        st = self.state.get(name)
        if st is None:
            st = self.state[name] = [0, 0, n]
        elif st[2] != n:  # the pool grew or shrank: a fresh pass over the new pool
            st[0], st[1], st[2] = st[0] + 1, 0, n
        parts = []
        while count > 0:
            if st[1] >= n:  # the pass is over: the next one, in a new order
                st[0], st[1] = st[0] + 1, 0
            take = min(count, n - st[1])
            parts.append(self._order(name, rows, st[0])[st[1]:st[1] + take])
            st[1] += take
            count -= take
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def state_dict(self) -> dict[str, list[int]]:
        return {k: list(v) for k, v in self.state.items()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.state = {str(k): [int(x) for x in v] for k, v in state.items()}
        self._orders.clear()

    def restart_passes(self) -> None:
        """Begin a new pass in every pool (for states whose cursors meant something else)."""
        for st in self.state.values():
            st[0], st[1] = st[0] + 1, 0
        self._orders.clear()


_MASK64 = (1 << 64) - 1


def splitmix64(x: int) -> int:
    """splitmix64 of a Python int: a cheap, well-distributed 64-bit hash."""
    z = (x + 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


class KeyedShuffle:
    """``shuffle(array, counter)``: an in-place shuffle determined by (seed, salt, counter).

    A PCG64 generator whose 128-bit state is set from a hash of the three numbers, so that each
    batch's shuffle is reproducible from its number alone (nothing to save) and costs ~10 µs
    (building a Generator from a SeedSequence per batch cost more than the rest of the draw).
    """

    def __init__(self, seed: int, salt: int) -> None:
        self._key = splitmix64(splitmix64(int(seed) & _MASK64) ^ salt)
        self._bits = np.random.PCG64(0)
        self._rng = np.random.Generator(self._bits)
        self._inc = (splitmix64(self._key ^ 0x1) << 1) | 1  # PCG's stream: any odd number

    def shuffle(self, array: np.ndarray, counter: int) -> None:
        lo = splitmix64(self._key ^ int(counter))
        hi = splitmix64(lo ^ self._key)
        self._bits.state = {"bit_generator": "PCG64", "state": {"state": (hi << 64) | lo, "inc": self._inc},
                            "has_uint32": 0, "uinteger": 0}
        self._rng.shuffle(array)


def largest_remainder(weights: np.ndarray, total: int, carry: np.ndarray) -> np.ndarray:
    """Integer counts summing to ``total`` in proportion to ``weights`` (normalized).

    Hamilton's largest-remainder method on quotas ``w * total + carry``; ``carry`` (updated in
    place) keeps each count's rounding error for the next batch, so over many batches every
    source receives its exact share, not a rounding bias toward the first sources.
    Ties go to the lower index.
    """
    w = np.asarray(weights, dtype=np.float64)
    s = w.sum()
    quota = (w / s if s > 0 else w) * total + carry
    counts = np.floor(quota).astype(np.int64)
    counts = np.maximum(counts, 0)
    short = int(total - counts.sum())
    if short > 0:
        frac = np.where(w > 0, quota - counts, -np.inf)
        order = np.argsort(-frac, kind="stable")
        counts[order[:short]] += 1
    elif short < 0:  # carries can push the floor sum past total; take back from the smallest remainders
        frac = np.where(counts > 0, quota - counts, np.inf)
        order = np.argsort(frac, kind="stable")
        for i in order[: -short]:
            counts[i] -= 1
    carry[:] = np.where(w > 0, quota - counts, 0.0)
    return counts


def clamp_ratio(weights: np.ndarray, max_ratio: float) -> np.ndarray:
    """Normalized weights whose max/min is at most ``max_ratio`` (min raised, max lowered).

    Solves for the floor ``lo`` such that ``clip(w, lo, max_ratio * lo)`` sums to 1; the sum is
    continuous and increasing in ``lo``, so bisection finds it. Already-compliant weights are
    returned normalized and otherwise unchanged.
    """
    w = np.asarray(weights, dtype=np.float64)
    w = w / w.sum()
    if len(w) < 2 or w.max() <= max_ratio * w.min():
        return w
    lo, hi = 0.0, 1.0 / len(w)
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if np.clip(w, mid, max_ratio * mid).sum() < 1.0:
            lo = mid
        else:
            hi = mid
    out = np.clip(w, hi, max_ratio * hi)
    return out / out.sum()


def weight_bounds(n_sources: int, max_ratio: float) -> tuple[float, float]:
    """The smallest and largest weight any source can get under ``max_ratio`` (spec log line)."""
    if n_sources < 2:
        return 1.0, 1.0
    return 1.0 / (1.0 + (n_sources - 1) * max_ratio), max_ratio / (max_ratio + n_sources - 1)


def softmax_weights(ema: np.ndarray, temperature: float) -> np.ndarray:
    """softmax(-ema / temperature): lower reward, higher weight (shifted for stability)."""
    ema = np.asarray(ema, dtype=np.float64)
    with np.errstate(over="ignore"):  # shift first: z <= 0, the lowest EMA gets exp(0) = 1
        z = -(ema - ema.min()) / temperature
    e = np.exp(z)
    return e / e.sum()
