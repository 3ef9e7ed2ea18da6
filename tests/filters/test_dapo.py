"""DapoGroupFilter against a recipe-style Python-loop reference, plus its metrics and bad input."""

from __future__ import annotations

import warnings
from collections import defaultdict

import numpy as np
import pytest

from rlhooks import Batch, ConfigError, FilterDecision
from rlhooks.host import load_config
from rlhooks.core.batch import BatchError
from rlhooks.plugins.filters.dapo import DapoGroupFilter, DapoOptions

# Exactly representable values, so np.std of a constant group is exactly 0 (see test_rounding_*).
VALUES = np.array([0.0, 0.25, 0.5, 1.0, 2.0])


def recipe_keep(uids, values, min_mean=None, max_mean=None):
    """The DAPO recipe's algorithm, written the recipe's way (dicts and loops over uids)."""
    uid2vals = defaultdict(list)
    for uid, v in zip(uids, values):
        uid2vals[uid].append(v)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # np.std of inf/NaN
        uid2std = {uid: np.std(vals) for uid, vals in uid2vals.items()}
        uid2mean = {uid: np.mean(vals) for uid, vals in uid2vals.items()}
    kept_uids = []
    for uid, std in uid2std.items():
        if not (std > 0 or len(uid2vals[uid]) == 1):
            continue
        m = uid2mean[uid]
        if min_mean is not None and not (m >= min_mean):
            continue
        if max_mean is not None and not (m <= max_mean):
            continue
        kept_uids.append(uid)
    return np.array([uid in kept_uids for uid in uids], dtype=bool)


def random_batch(seed: int, *, interleave: bool = False, n_groups: int = 60, nonfinite: float = 0.05):
    rng = np.random.default_rng(seed)
    sizes = rng.choice([1, 2, 3, 4, 8], size=n_groups, p=[0.15, 0.2, 0.2, 0.25, 0.2])
    uids = np.repeat(np.array([f"u{seed}-{g}" for g in range(n_groups)], dtype=object), sizes)
    n = len(uids)
    # ties on purpose: many groups constant, others drawn from few values
    constant = np.repeat(rng.random(n_groups) < 0.4, sizes)
    group_value = np.repeat(rng.choice(VALUES, n_groups), sizes)
    values = np.where(constant, group_value, rng.choice(VALUES, n))
    special = rng.random(n) < nonfinite
    values[special] = rng.choice([np.nan, np.inf, -np.inf], special.sum())
    if interleave:  # groups not contiguous: the GroupIndex slow path
        perm = rng.permutation(n)
        uids, values = uids[perm], values[perm]
    return uids, values


def make_batch(uids, values, column="acc"):
    return Batch({"uid": uids, column: values, "reward": np.nan_to_num(values)}, meta={"reward_extra_keys": [column]})


@pytest.mark.parametrize("interleave", [False, True], ids=["contiguous", "interleaved"])
@pytest.mark.parametrize("seed", range(12))
def test_kept_set_equals_recipe(seed, interleave):
    uids, values = random_batch(seed, interleave=interleave)
    decision = DapoGroupFilter().select(make_batch(uids, values))
    assert isinstance(decision, FilterDecision)
    np.testing.assert_array_equal(decision.keep, recipe_keep(uids, values))


@pytest.mark.parametrize("seed", range(8))
def test_band_pass_equals_reference(seed):
    uids, values = random_batch(seed)
    opts = DapoOptions(metric="score", min_mean=0.25, max_mean=0.75)
    decision = DapoGroupFilter(opts).select(make_batch(uids, values, column="score"))
    np.testing.assert_array_equal(decision.keep, recipe_keep(uids, values, 0.25, 0.75))


def test_metric_counts_computed_by_hand():
    # groups: a=[1,1,1] all max, b=[0,0] all min, c=[0,1] spread, d=[1] singleton,
    # e=[nan,1,0] non-finite, f=[inf] singleton non-finite, g=[0.5,0.5] constant, neither extreme
    uids = np.array(list("aaabbccdeeefgg"), dtype=object)
    acc = np.array([1, 1, 1, 0, 0, 0, 1, 1, np.nan, 1, 0, np.inf, 0.5, 0.5])
    d = DapoGroupFilter().select(make_batch(uids, acc))
    kept = sorted(set(uids[d.keep]))
    assert kept == ["c", "d", "f"]
    assert d.metrics == {
        "filter/dropped_constant": 3,  # a, b, g
        "filter/dropped_all_max": 1,  # a (acc max is 1)
        "filter/dropped_all_min": 1,  # b
        "filter/dropped_band": 0,
        "filter/dropped_nonfinite": 1,  # e
        "filter/nonfinite_rows": 2,
        "filter/nonfinite_groups": 2,  # e, f
        "filter/singleton_groups": 2,  # d, f
    }


def test_dropped_counts_add_up_to_dropped_groups():
    for seed in range(6):
        uids, values = random_batch(seed)
        d = DapoGroupFilter(DapoOptions(metric="acc", min_mean=0.2, max_mean=0.9)).select(make_batch(uids, values))
        n_groups = len(set(uids))
        n_kept = len(set(uids[d.keep]))
        m = d.metrics
        assert m["filter/dropped_constant"] + m["filter/dropped_nonfinite"] + m["filter/dropped_band"] == n_groups - n_kept


def test_all_max_min_use_observed_extremes_for_other_metrics():
    # score ranges over 0..2 here: a constant-at-2 group is "all max", constant-at-0.5 neither
    uids = np.array(list("aabbcc"), dtype=object)
    score = np.array([2.0, 2.0, 0.5, 0.5, 0.0, 1.0])
    d = DapoGroupFilter(DapoOptions(metric="score")).select(make_batch(uids, score, "score"))
    assert (d.metrics["filter/dropped_all_max"], d.metrics["filter/dropped_all_min"]) == (1, 0)
    d = DapoGroupFilter(DapoOptions(metric="score", max_value=3.0, min_value=0.5)).select(
        make_batch(uids, score, "score"))
    assert (d.metrics["filter/dropped_all_max"], d.metrics["filter/dropped_all_min"]) == (0, 1)


def test_seq_reward_and_seq_final_reward_read_their_columns():
    uids = np.array(list("aabb"), dtype=object)
    b = Batch({"uid": uids, "reward": [1.0, 2.0, 3.0, 3.0], "final_reward": [1.0, 1.0, 3.0, 4.0]})
    assert DapoGroupFilter(DapoOptions(metric="seq_reward")).select(b).keep.tolist() == [True, True, False, False]
    assert DapoGroupFilter(DapoOptions(metric="seq_final_reward")).select(b).keep.tolist() == [False, False, True, True]


def test_boolean_acc_column_works():
    uids = np.array(list("aabb"), dtype=object)
    b = Batch({"uid": uids, "acc": np.array([True, False, True, True])}, meta={"reward_extra_keys": ["acc"]})
    assert DapoGroupFilter().select(b).keep.tolist() == [True, True, False, False]


def test_rounding_constant_group_is_dropped_unlike_np_std():
    # np.std([0.1]*3) is 1.4e-17 > 0, so the recipe would keep this constant group; we do not.
    assert np.std([0.1] * 3) > 0
    # the DAPO page's example: a group of 12 rounds above 0, a power-of-two group of 16 does not
    assert np.std([0.1] * 12) > 0 and np.std([0.1] * 16) == 0
    uids = np.array(list("aaa"), dtype=object)
    d = DapoGroupFilter(DapoOptions(metric="score")).select(make_batch(uids, np.full(3, 0.1), "score"))
    assert not d.keep.any() and d.metrics["filter/dropped_constant"] == 1


def test_require_variance_false_leaves_only_the_band():
    uids = np.array(list("aabbcc"), dtype=object)
    acc = np.array([1.0, 1.0, 0.0, 1.0, 0.0, 0.0])
    d = DapoGroupFilter(DapoOptions(require_variance=False, min_mean=0.5)).select(make_batch(uids, acc))
    assert d.keep.tolist() == [True, True, True, True, False, False]
    assert d.metrics["filter/dropped_band"] == 1 and d.metrics["filter/dropped_constant"] == 0


# -- bad input ----------------------------------------------------------------------------------


def test_missing_metric_names_available_extras():
    b = Batch({"uid": np.array(["a", "a"], dtype=object), "reward": [0.0, 1.0], "score": [1.0, 2.0],
               "format": [0.0, 1.0]}, meta={"reward_extra_keys": ["score", "format"]})
    with pytest.raises(BatchError) as e:
        DapoGroupFilter().select(b)
    msg = str(e.value)
    assert "'acc'" in msg and "score, format" in msg and "seq_reward" in msg


def test_non_numeric_metric_is_a_clear_error():
    b = Batch({"uid": np.array(["a", "a"], dtype=object), "acc": np.array(["yes", "no"], dtype=object)})
    with pytest.raises(BatchError, match="not numeric"):
        DapoGroupFilter().select(b)


def test_missing_uid_is_a_clear_error():
    with pytest.raises(BatchError, match="'uid'"):
        DapoGroupFilter().select(Batch({"acc": [1.0, 0.0]}))


def test_every_group_dropped():
    uids = np.repeat(np.array(["a", "b", "c"], dtype=object), 4)
    acc = np.repeat([1.0, 0.0, 1.0], 4)
    d = DapoGroupFilter().select(make_batch(uids, acc))
    assert not d.keep.any()
    assert (d.metrics["filter/dropped_all_max"], d.metrics["filter/dropped_all_min"]) == (2, 1)


def test_groups_of_size_one_are_kept():
    uids = np.array(["a", "b", "c"], dtype=object)
    d = DapoGroupFilter().select(make_batch(uids, np.array([1.0, 0.0, np.nan])))
    assert d.keep.all() and d.metrics["filter/singleton_groups"] == 3
    assert d.metrics["filter/nonfinite_rows"] == 1


def test_all_nan_batch_does_not_crash():
    uids = np.repeat(np.array(["a", "b"], dtype=object), 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RuntimeWarning from any reduction
        d = DapoGroupFilter().select(make_batch(uids, np.full(6, np.nan)))
    assert not d.keep.any() and d.metrics["filter/nonfinite_groups"] == 2


def test_empty_batch():
    d = DapoGroupFilter().select(Batch({"uid": np.zeros(0, dtype=object), "acc": np.zeros(0)}))
    assert d.keep.shape == (0,)


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"min_mean": 0.9, "max_mean": 0.1}, "min_mean (0.9) must be <= max_mean (0.1)"),
        ({"metric": ""}, "filters[0].metric (dapo)"),
        ({"min_mean": "nan"}, "must be a finite number"),
        ({"metirc": "acc"}, "did you mean 'metric'"),
    ],
)
def test_bad_options_are_config_errors(options, needle):
    with pytest.raises(ConfigError) as e:
        load_config({"filters": [{"name": "dapo", **options}]})
    assert needle in str(e.value)


def test_alias_filter_groups_resolves_to_the_same_class():
    cfg = load_config({"filters": [{"name": "filter_groups", "metric": "score"}]})
    assert cfg.filters[0].obj is DapoGroupFilter and cfg.filters[0].options.metric == "score"
