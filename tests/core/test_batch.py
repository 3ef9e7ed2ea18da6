import numpy as np
import pytest

from rlhooks import Batch
from rlhooks.core.batch import BatchError, GroupIndex


def make(uids, rewards):
    return Batch({"uid": np.asarray(uids, dtype=object), "reward": np.asarray(rewards, float)})


def reference_groups(uids, values):
    """Plain-Python per-group statistics, groups in order of first appearance."""
    order, by = [], {}
    for u, v in zip(uids, values):
        if u not in by:
            order.append(u)
            by[u] = []
        by[u].append(v)
    return order, by


@pytest.mark.parametrize("contiguous", [True, False])
def test_group_reductions_match_python_reference(contiguous):
    rng = np.random.default_rng(0)
    sizes = rng.integers(1, 6, 50)
    uids = np.repeat(np.array([f"u{i}" for i in range(50)], dtype=object), sizes)
    if not contiguous:
        uids = uids[rng.permutation(len(uids))]
    vals = rng.normal(size=len(uids))
    g = GroupIndex.from_keys(uids)
    assert g.contiguous is contiguous
    order, by = reference_groups(uids.tolist(), vals.tolist())
    assert g.keys.tolist() == order
    assert g.sizes.tolist() == [len(by[u]) for u in order]
    np.testing.assert_allclose(g.mean(vals), [np.mean(by[u]) for u in order])
    np.testing.assert_allclose(g.std(vals), [np.std(by[u]) for u in order], atol=1e-12)
    np.testing.assert_allclose(g.min(vals), [min(by[u]) for u in order])
    np.testing.assert_allclose(g.max(vals), [max(by[u]) for u in order])
    np.testing.assert_allclose(g.sum(vals), [sum(by[u]) for u in order])
    assert [order[c] for c in g.codes] == uids.tolist()


def test_repeated_run_heads_fall_back_to_full_factorization():
    # "a" appears in two separate runs: the contiguous fast path must not be taken
    g = GroupIndex.from_keys(np.array(["a", "a", "b", "a"], dtype=object))
    assert not g.contiguous
    assert g.keys.tolist() == ["a", "b"]
    assert g.sizes.tolist() == [3, 1]


def test_nan_in_a_group_gives_nan_std_not_a_crash():
    b = make(["a", "a", "b", "b"], [1.0, np.nan, 0.0, 1.0])
    std = b.groups.std(b["reward"])
    assert np.isnan(std[0]) and std[1] == pytest.approx(0.5)


def test_empty_batch_groups():
    b = Batch({"uid": np.array([], dtype=object), "reward": np.array([])})
    assert len(b) == 0 and b.groups.n_groups == 0
    assert b.groups.mean(b["reward"]).shape == (0,)
    assert b.groups.max(b["reward"]).shape == (0,)


def test_select_concat_and_lazy_columns():
    calls = []

    def decode():
        calls.append(1)
        return np.array(["t0", "t1", "t2", "t3"], dtype=object)

    b = Batch({"uid": np.array([1, 1, 2, 2]), "reward": np.arange(4.0)}, lazy={"response": decode})
    assert b.is_lazy("response") and "response" in b.columns
    sub = b.select(np.array([False, True, True, False]))
    assert calls == []  # selecting does not decode
    assert sub["response"].tolist() == ["t1", "t2"] and len(calls) == 1
    assert sub["reward"].tolist() == [1.0, 2.0]
    both = Batch.concat([sub, b.select([3])])
    assert both["reward"].tolist() == [1.0, 2.0, 3.0]
    assert both["response"].tolist() == ["t1", "t2", "t3"]
    assert len(both) == 3


def test_with_columns_does_not_mutate_original():
    b = make(["a", "b"], [1.0, 2.0])
    b2 = b.with_columns(advantage=np.array([0.5, -0.5]))
    assert "advantage" in b2 and "advantage" not in b
    with pytest.raises(TypeError):
        b.meta["x"] = 1  # meta is read-only


def test_ragged_and_missing_columns_are_clear_errors():
    with pytest.raises(BatchError, match="ragged"):
        Batch({"a": np.zeros(3), "b": np.zeros(2)})
    with pytest.raises(BatchError, match="no column 'acc'.*available columns: uid, reward"):
        make(["a"], [1.0])["acc"]
    with pytest.raises(BatchError, match="keep mask has shape"):
        make(["a"], [1.0]).select(np.array([True, False]))


def test_reward_components_and_extras():
    b = Batch(
        {"uid": np.array([1]), "reward": np.array([2.0]), "reward_fn/check_answer": np.array([3.0]), "acc": np.array([1.0])},
        meta={"reward_extra_keys": ["acc", "score"]},
    )
    assert list(b.reward_components()) == ["check_answer"]
    assert b.reward_extra_keys() == ["acc"]  # "score" is declared but absent


def test_to_rows_for_tables():
    b = make(["a", "b"], [1.0, 2.0])
    assert b.to_rows(["uid", "reward", "missing"], rows=[1]) == [{"uid": "b", "reward": 2.0}]


def test_row_lazy_columns_decode_only_selected_rows():
    from rlhooks.core.batch import RowLazy

    source = np.array(["r0", "r1", "r2", "r3", "r4"], dtype=object)
    asked = []

    def decode(rows):
        asked.append(None if rows is None else rows.tolist())
        return source if rows is None else source[rows]

    b = Batch({"reward": np.arange(5.0)}, lazy={"response": RowLazy(decode)})
    top = b.select(np.array([4, 1, 3])).select(np.array([0, 2]))
    assert top["response"].tolist() == ["r4", "r3"]
    assert asked == [[4, 3]]  # only the two selected rows were decoded
    assert b["response"].tolist() == source.tolist() and asked[-1] is None
