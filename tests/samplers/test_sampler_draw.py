"""The numeric building blocks: pools and their pass order, the batch shuffle, largest remainder, ratio clamp."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlhooks.plugins.samplers._draw import (
    KeyedShuffle,
    Pools,
    clamp_ratio,
    largest_remainder,
    softmax_weights,
    weight_bounds,
)


@pytest.mark.parametrize("n", [1, 2, 3, 17, 1024, 4099])
def test_pools_pass_order_is_a_keyed_shuffle_of_the_pool(n: int) -> None:
    rows = np.arange(1000, 1000 + n, dtype=np.int32)
    a, b, other = Pools(seed=5), Pools(seed=5), Pools(seed=6)
    first = a.draw("p", rows, n)
    assert sorted(first.tolist()) == rows.tolist()  # every row once per pass
    assert first.dtype == rows.dtype  # no widening: the pass order costs the pool's own bytes per row
    assert np.array_equal(b.draw("p", rows, n), first)  # (seed, pool, pass, size) decide the order
    if n >= 1000:
        assert not np.array_equal(other.draw("p", rows, n), first)
        assert not np.array_equal(a.draw("p", rows, n), first)  # the next pass: a new order
        # not close to the identity: correlation of position and value near 0
        assert abs(np.corrcoef(np.arange(n), first)[0, 1]) < 0.1


def test_keyed_shuffle_depends_on_seed_and_counter_only() -> None:
    x = np.arange(1024)

    def shuffled(seed: int, counter: int) -> np.ndarray:
        y = x.copy()
        KeyedShuffle(seed, 0x5A17).shuffle(y, counter)
        return y

    s = KeyedShuffle(3, 0x5A17)
    again = x.copy()
    s.shuffle(again, 9)
    s.shuffle(again.copy(), 10)  # no hidden state: batch 9 is the same before and after batch 10
    again2 = x.copy()
    s.shuffle(again2, 9)
    assert np.array_equal(again, again2) and np.array_equal(again, shuffled(3, 9))
    assert sorted(again.tolist()) == x.tolist()
    assert not np.array_equal(shuffled(3, 9), shuffled(3, 10)) and not np.array_equal(shuffled(3, 9), shuffled(4, 9))


def test_version_1_state_resumes_with_new_passes() -> None:
    from rlhooks import DatasetColumns
    from rlhooks.plugins.samplers.multi_source import MultiSourceSampler

    data = DatasetColumns.from_arrays(["a"] * 30 + ["b"] * 20)
    s = MultiSourceSampler({"source_weights": {"a": 2.0, "b": 1.0}, "adaptive_weights": True}, data, batch_size=5)
    s.draw_batch()
    state = s.state_dict()
    state.update(version=1, weights=[0.25, 0.75])
    fresh = MultiSourceSampler({"source_weights": {"a": 2.0, "b": 1.0}, "adaptive_weights": True}, data, batch_size=5)
    fresh.load_state_dict(state)
    assert fresh.weights == {"a": 0.25, "b": 0.75}  # learned state is kept
    assert all(st[0] == 1 and st[1] == 0 for st in fresh._pools.state.values())  # each source: a new pass
    assert len(fresh.draw_batch()) == 5


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
