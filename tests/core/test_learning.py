"""LearningState: update rules against a dict-of-rows reference, memory, queries, exact state round trip."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

from rlhooks import Batch
from rlhooks.core.batch import BatchError
from rlhooks.core.learning import ROW_ARRAYS, UNSEEN_LEARNABILITY, LearningState


def groups_batch(index, acc_rows, uid_base=0):
    """One group per entry of ``index``; ``acc_rows[i]`` are that group's accuracies."""
    uid = np.concatenate([np.full(len(a), uid_base + i) for i, a in enumerate(acc_rows)])
    idx = np.concatenate([np.full(len(a), r) for r, a in zip(index, acc_rows)])
    acc = np.concatenate([np.asarray(a, dtype=np.float64) for a in acc_rows])
    return Batch({"uid": uid, "index": idx, "acc": acc, "reward": acc * 2})


class Reference:
    """The same rules written plainly: a dict per row, groups in order, the latest group wins."""

    def __init__(self, alpha=0.3, threshold=0.5):
        self.rows: dict[int, dict] = {}
        self.alpha, self.threshold = alpha, threshold

    def update(self, index, acc_rows, step):
        for r, a in zip(index, acc_rows):
            a = np.asarray(a, dtype=np.float64)
            rec = self.rows.setdefault(r, {"times": 0, "ema": None, "run": 0, "last_step": 0, "mean": None})
            rec["times"] += 1
            rec["last_step"], rec["mean"] = step, a.mean()
            p = float((a >= self.threshold).mean())
            rec["ema"] = p if rec["ema"] is None else (1 - self.alpha) * rec["ema"] + self.alpha * p
            const = len(a) > 1 and a.max() == a.min()
            if const and a.mean() >= self.threshold:
                rec["run"] = rec["run"] + 1 if rec["run"] > 0 else 1
            elif const:
                rec["run"] = rec["run"] - 1 if rec["run"] < 0 else -1
            else:
                rec["run"] = 0


def test_update_matches_a_plain_reference_over_many_batches():
    rng = np.random.default_rng(0)
    state, ref = LearningState(50), Reference()
    for step in range(1, 30):
        index = rng.choice(50, 12, replace=False)
        p = rng.choice([0.0, 0.5, 1.0], 12)
        acc_rows = [(rng.random(4) < pi).astype(float) for pi in p]
        state.update(groups_batch(index, acc_rows, uid_base=step * 100), step)
        ref.update(index.tolist(), acc_rows, step)
    for r, rec in ref.rows.items():
        assert state.times_sampled[r] == rec["times"]
        assert state.last_step[r] == rec["last_step"]
        assert state.zero_var_run[r] == rec["run"]
        assert abs(float(state.pass_ema[r]) - rec["ema"]) < 2e-3  # float16 storage
        assert abs(float(state.last_mean[r]) - rec["mean"]) < 1e-3
    unseen = np.setdiff1d(np.arange(50), list(ref.rows))
    assert (state.times_sampled[unseen] == 0).all() and np.isnan(state.pass_ema[unseen].astype(float)).all()


def test_runs_grow_flip_and_reset():
    s = LearningState(3)
    s.update(groups_batch([0, 1, 2], [[1, 1], [0, 0], [1, 0]]), 1)
    s.update(groups_batch([0, 1, 2], [[1, 1], [0, 0], [0, 0]]), 2)
    assert s.zero_var_run.tolist() == [2, -2, -1]
    assert s.solved_run([0, 1, 2]).tolist() == [2, 0, 0] and s.unsolved_run([0, 1, 2]).tolist() == [0, 2, 1]
    s.update(groups_batch([0, 1], [[0, 0], [1, 0]]), 3)
    assert s.zero_var_run.tolist() == [-1, 0, -1]


def test_a_row_twice_in_one_batch_counts_twice_and_keeps_its_last_group():
    s = LearningState(2)
    s.update(groups_batch([1, 1], [[0, 0, 0], [1, 1, 1]]), 4)
    assert s.times_sampled[1] == 2 and s.zero_var_run[1] == 1 and float(s.last_mean[1]) == 1.0


def test_singletons_have_no_variance_run_and_nonfinite_groups_are_not_recorded():
    s = LearningState(3)
    b = Batch({"uid": np.array([0, 1, 1]), "index": np.array([0, 1, 1]), "acc": np.array([1.0, np.nan, 1.0])})
    s.update(b, 1)
    assert s.zero_var_run[0] == 0 and float(s.pass_ema[0]) == 1.0  # a single response: no spread to judge
    assert s.times_sampled[1] == 1 and np.isnan(float(s.pass_ema[1]))  # counted, not recorded


def test_memory_is_at_most_16_bytes_per_row():
    assert LearningState.bytes_per_row() <= 16
    s = LearningState(1000)
    assert s.nbytes == 1000 * LearningState.bytes_per_row()


def test_learnability_queries_and_source_means_stay_exact():
    codes = np.array([0, 0, 1, 1, 1], dtype=np.int8)
    s = LearningState(5, source_codes=codes, source_names=("a", "b"))
    np.testing.assert_allclose(s.learnability(np.arange(5)), UNSEEN_LEARNABILITY)
    rng = np.random.default_rng(1)
    for step in range(1, 8):
        idx = rng.choice(5, 3, replace=False)
        s.update(groups_batch(idx, [(rng.random(6) < 0.5).astype(float) for _ in idx], step * 10), step)
    lrn = s.learnability(np.arange(5))
    expected = [lrn[codes == c].mean() for c in (0, 1)]  # unseen rows count UNSEEN_LEARNABILITY
    np.testing.assert_allclose(s.source_mean_learnability(), expected, rtol=1e-9)


def test_state_round_trip_is_exact_through_pickle_and_json():
    s = LearningState(40, source_codes=np.arange(40) % 3, source_names=("a", "b", "c"))
    rng = np.random.default_rng(2)
    for step in range(1, 6):
        idx = rng.choice(40, 10, replace=False)
        s.update(groups_batch(idx, [(rng.random(4) < 0.6).astype(float) for _ in idx], step * 100), step)
    for codec in (lambda x: pickle.loads(pickle.dumps(x)), lambda x: json.loads(json.dumps(x))):
        t = LearningState(40, source_codes=np.arange(40) % 3, source_names=("a", "b", "c"))
        t.load_state_dict(codec(s.state_dict()))
        for name, (dtype, _) in ROW_ARRAYS.items():
            a, b = getattr(s, name), getattr(t, name)
            assert b.dtype == dtype and a.tobytes() == b.tobytes(), name
        np.testing.assert_array_equal(t.source_learnability, s.source_learnability)
        assert t.rows_seen == s.rows_seen


def test_bad_input_is_a_clear_error():
    s = LearningState(3)
    with pytest.raises(BatchError, match="outside the dataset's 3 rows"):
        s.update(groups_batch([7], [[1, 0]]), 1)
    with pytest.raises(BatchError, match="'uid'"):
        s.update(Batch({"index": np.array([0]), "acc": np.array([1.0])}), 1)
    t = LearningState(3, metric="score")
    with pytest.raises(BatchError, match="run.learning_metric"):
        t.update(groups_batch([0], [[1, 0]]), 1)
    with pytest.raises(ValueError, match="same dataset"):
        LearningState(4).load_state_dict(s.state_dict())


def test_auto_metric_falls_back_to_reward():
    s = LearningState(2, pass_threshold=1.0)
    s.update(Batch({"uid": np.array([0, 0]), "index": np.array([1, 1]), "reward": np.array([2.0, 2.0])}), 1)
    assert s.zero_var_run[1] == 1


def test_resume_on_other_sources_is_an_error_and_other_settings_a_warning():
    import structlog

    s = LearningState(6, source_codes=np.arange(6) % 3, source_names=("a", "b", "c"))
    s.update(groups_batch([0, 1], [[1.0, 0.0], [1.0, 1.0]]), 1)
    with pytest.raises(ValueError, match="3 sources, this run's data has 2; resume with the same dataset"):
        LearningState(6, source_codes=np.arange(6) % 2, source_names=("a", "b")).load_state_dict(s.state_dict())
    retuned = LearningState(6, source_codes=np.arange(6) % 3, source_names=("a", "b", "c"), ema_alpha=0.5)
    with structlog.testing.capture_logs() as logs:
        retuned.load_state_dict(s.state_dict())
    (warning,) = [e for e in logs if e["log_level"] == "warning"]
    assert warning["saved"] == {"ema_alpha": 0.3} and warning["now"] == {"ema_alpha": 0.5}
    np.testing.assert_array_equal(retuned.source_learnability, s.source_learnability)
