"""The numeric building blocks: permutation, pools, largest remainder, ratio clamp."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlhooks.plugins.samplers._draw import (
    Permutation,
    Pools,
    clamp_ratio,
    largest_remainder,
    softmax_weights,
    weight_bounds,
)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 16, 17, 100, 1023, 1024, 1025, 4099])
@pytest.mark.parametrize("key", [0, 1, 2**63 + 5])
def test_permutation_is_a_bijection(n: int, key: int) -> None:
    perm = Permutation(n, np.full(4, key, dtype=np.uint64) + np.arange(4, dtype=np.uint64))
    assert n <= perm.domain < 4 * max(n, 2)
    y = perm.encrypt(np.arange(perm.domain, dtype=np.uint64))
    assert sorted(y.tolist()) == list(range(perm.domain))  # a bijection of the domain
    assert sorted(y[y < n].tolist()) == list(range(n))  # so a pass over the domain yields each row once


def test_permutation_shuffles_and_depends_on_key() -> None:
    n = 1000
    pa, pb = Permutation(n, np.arange(4, dtype=np.uint64)), Permutation(n, np.arange(4, dtype=np.uint64) + 7)
    a = pa.encrypt(np.arange(pa.domain, dtype=np.uint64))
    a = a[a < n].astype(np.int64)
    b = pb.encrypt(np.arange(pb.domain, dtype=np.uint64))
    b = b[b < n].astype(np.int64)
    assert not np.array_equal(a, b)
    # not close to the identity: Spearman correlation of position and value near 0 (|rho| < 0.1 for n=1000)
    assert abs(np.corrcoef(np.arange(n), a)[0, 1]) < 0.1


def test_pools_pass_visits_every_row_once_then_starts_again() -> None:
    rows = np.arange(100, 137)
    pools = Pools(seed=3)
    first = np.concatenate([pools.draw("p", rows, 10) for _ in range(3)] + [pools.draw("p", rows, 7)])
    assert sorted(first.tolist()) == rows.tolist()
    second = pools.draw("p", rows, 37)
    assert sorted(second.tolist()) == rows.tolist() and not np.array_equal(first, second)
    # a draw larger than the pool wraps into the next pass
    big = pools.draw("p", rows, 80)
    assert np.bincount(big - 100).max() <= 3


def test_pools_state_round_trip_and_growth() -> None:
    rows = np.arange(50)
    a = Pools(seed=1)
    a.draw("p", rows[:20], 7)
    saved = a.state_dict()
    expected = a.draw("p", rows[:20], 9)
    b = Pools(seed=1)
    b.load_state_dict(saved)
    assert np.array_equal(b.draw("p", rows[:20], 9), expected)
    grown = b.draw("p", rows, 50)  # the pool grew: a fresh pass over all 50 rows
    assert sorted(grown.tolist()) == rows.tolist()
    with pytest.raises(ValueError, match="empty"):
        b.draw("q", rows[:0], 1)


def test_largest_remainder_exact_long_run_shares() -> None:
    w = np.array([1.0, 1.0, 1.0])
    carry = np.zeros(3)
    total = np.zeros(3, dtype=np.int64)
    for b in range(1, 301):
        c = largest_remainder(w, 100, carry)
        assert c.sum() == 100 and set(c.tolist()) <= {33, 34}
        total += c
        # the carried remainders keep every source within one row of its exact share, at all times
        assert np.abs(total - b * 100 / 3).max() < 1.0 + 1e-9


@given(
    w=st.lists(st.floats(0.01, 100.0), min_size=1, max_size=6),
    total=st.integers(1, 600),
    batches=st.integers(1, 20),
)
@settings(max_examples=60, deadline=None)
def test_largest_remainder_property(w: list[float], total: int, batches: int) -> None:
    w_arr = np.asarray(w)
    carry = np.zeros(len(w))
    cum = np.zeros(len(w))
    for b in range(1, batches + 1):
        c = largest_remainder(w_arr, total, carry)
        assert c.sum() == total and (c >= 0).all()
        cum += c
        assert np.abs(cum - b * total * w_arr / w_arr.sum()).max() < 1.0 + 1e-6


def test_largest_remainder_zero_weight_gets_nothing() -> None:
    carry = np.zeros(3)
    for _ in range(20):
        assert largest_remainder(np.array([0.0, 2.0, 1.0]), 7, carry)[0] == 0


@given(
    w=st.lists(st.floats(1e-6, 1.0), min_size=2, max_size=8),
    ratio=st.floats(1.0, 10.0),
)
@settings(max_examples=100, deadline=None)
def test_clamp_ratio_property(w: list[float], ratio: float) -> None:
    out = clamp_ratio(np.asarray(w), ratio)
    assert abs(out.sum() - 1) < 1e-9
    assert out.max() / out.min() <= ratio * (1 + 1e-6)
    # order is kept: a source with a larger input weight never gets a smaller output weight
    order = np.argsort(w, kind="stable")
    assert (np.diff(out[order]) >= -1e-12).all()


def test_clamp_ratio_leaves_compliant_weights_and_bounds() -> None:
    assert np.allclose(clamp_ratio(np.array([2.0, 1.0]), 3.0), [2 / 3, 1 / 3])
    assert np.allclose(clamp_ratio(np.array([0.99, 0.01]), 3.0), [0.75, 0.25])
    assert weight_bounds(2, 3.0) == (0.25, 0.75)
    lo, hi = weight_bounds(4, 3.0)
    assert np.isclose(lo, 1 / 10) and np.isclose(hi, 3 / 6)


def test_softmax_weights_lower_reward_higher_weight() -> None:
    w = softmax_weights(np.array([1.0, 0.0]), 1.0)
    assert w[1] > w[0] and np.isclose(w[1] / w[0], np.e)
    assert np.isfinite(softmax_weights(np.array([1e6, -1e6]), 0.01)).all()
