"""Numeric building blocks of the samplers: counts per batch, weight clamping, pools.

Nothing here holds per-row Python objects: a pool is a numpy array of row indices and drawing
from it without replacement uses a keyed pseudo-random permutation (a Feistel network with
domain filtering), so a "pass" over a pool of any size costs O(draws), needs no shuffled copy of
the pool, and is reproduced exactly from a few integers (seed, pass number, cursor, pool size).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)
_ROUNDS = 4  # Luby-Rackoff: four rounds make a Feistel network a strong pseudo-random permutation


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: a cheap, well-distributed 64-bit hash (uint64 wraps, no warnings)."""
    x = x ^ (x >> _S30)  # a fresh array; the rest works in place
    x *= _M1
    x ^= x >> _S27
    x *= _M2
    x ^= x >> _S31
    return x


class Permutation:
    """A keyed bijection of ``range(domain)``, ``domain = 4**h >= n``, evaluated on position arrays.

    A balanced Feistel network over ``2h`` bits. A pass over a pool of ``n`` rows walks the
    domain positions in order and keeps the outputs below ``n``: every row comes exactly once
    per pass, and a draw costs one vectorized evaluation (no per-element cycle walking loop).
    The domain is < 4n, so on average fewer than 4 positions are evaluated per row drawn.
    """

    __slots__ = ("n", "domain", "keys", "half", "mask")

    def __init__(self, n: int, key_words: np.ndarray) -> None:
        self.n = int(n)
        bits = max(2, (self.n - 1).bit_length())
        bits += bits % 2
        self.domain = 1 << bits
        self.half = np.uint64(bits // 2)
        self.mask = np.uint64((1 << (bits // 2)) - 1)
        self.keys = np.asarray(key_words, dtype=np.uint64)[:_ROUNDS]

    def encrypt(self, positions: np.ndarray) -> np.ndarray:
        x = np.asarray(positions, dtype=np.uint64)
        left, right = x >> self.half, x & self.mask
        for k in self.keys:
            left, right = right, left ^ (_mix(right ^ k) & self.mask)
        return (left << self.half) | right


def stratum_id(name: str) -> int:
    """A stable integer for a pool name (Python's hash() is salted per process)."""
    return zlib.crc32(name.encode("utf-8"))


class Pools:
    """Without-replacement draws from named pools, in passes, with tiny resumable state.

    Each pool keeps ``[pass, cursor, size]`` (the cursor counts permutation-domain positions).
    A pass visits every row of the pool once in a pseudo-random order keyed by (seed, pool,
    pass, size); when a pass ends the next begins.
    When the pool's size changes (a curriculum unlocked rows) a new pass starts over the new
    pool, so rows drawn just before the change may come again before the others.
    """

    def __init__(self, seed: int) -> None:
        self.seed = int(seed)
        self.state: dict[str, list[int]] = {}
        self._perm_cache: dict[str, tuple[tuple[int, int], Permutation]] = {}

    def _perm(self, name: str, pass_no: int, n: int) -> Permutation:
        cached = self._perm_cache.get(name)
        if cached is not None and cached[0] == (pass_no, n):
            return cached[1]
        words = np.random.SeedSequence([self.seed & 0xFFFFFFFF, stratum_id(name), pass_no, n]).generate_state(
            _ROUNDS, np.uint64
        )
        perm = Permutation(n, words)
        self._perm_cache[name] = ((pass_no, n), perm)
        return perm

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
            perm = self._perm(name, st[0], n)
            if st[1] >= perm.domain:  # the pass is over: the next one, in a new order
                st[0], st[1] = st[0] + 1, 0
                perm = self._perm(name, st[0], n)
            # over-generate domain positions (a share n/domain of them land in the pool)
            span = min(perm.domain - st[1], int(count * perm.domain / n * 1.15) + 16)
            y = perm.encrypt(np.arange(st[1], st[1] + span, dtype=np.uint64))
            keep = np.flatnonzero(y < np.uint64(n))
            if len(keep) > count:
                keep = keep[:count]
                st[1] += int(keep[-1]) + 1
            else:
                st[1] += span
            parts.append(rows[y[keep].astype(np.int64)])
            count -= len(keep)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def state_dict(self) -> dict[str, list[int]]:
        return {k: list(v) for k, v in self.state.items()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.state = {str(k): [int(x) for x in v] for k, v in state.items()}
        self._perm_cache.clear()


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
