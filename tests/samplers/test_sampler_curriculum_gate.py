"""RewardCurriculumSampler.gate_metric: which feedback-batch column the threshold is compared with."""

from __future__ import annotations

import pickle
from types import MappingProxyType

import numpy as np
import pytest
import structlog
from .sampler_helpers import Stream, source_of

from rlhooks import Batch, BatchError, ConfigError, DataError, DatasetColumns
from rlhooks.plugins.samplers.curriculum import RewardCurriculumOptions, RewardCurriculumSampler

GATE = {"min_batches_per_level": 0, "check_frequency": 1, "reward_alpha": 1.0}
FORMAT_REWARD = 5.5  # what the format functions alone gave on the CPU learner


def feedback(data: DatasetColumns, idx: np.ndarray, acc_of_source: dict[str, float], *, extra: dict | None = None,
             n: int = 4) -> Batch:
    """``n`` trajectories per prompt; each source's rows are correct (acc 1) at the given rate, and the
    sequence reward is the format reward plus 3 for a correct answer, as on the CPU learner."""
    rows = np.repeat(np.asarray(idx, dtype=np.int64), n)
    src = source_of(data, rows)
    acc = np.zeros(len(rows))
    for name, rate in acc_of_source.items():  # exactly `rate` of each 10 rows of the source are correct
        mine = src == name
        acc[mine] = np.arange(mine.sum()) % 10 < round(rate * 10)
    cols = {"uid": np.repeat(np.arange(len(idx)), n), "index": rows, "data_source": src,
            "reward": FORMAT_REWARD + 3.0 * acc, "acc": acc, "reward_fn/check_answer": np.where(acc > 0, 3.0, -1.0),
            **(extra or {})}
    return Batch(cols, meta={"reward_extra_keys": ["acc"], "reward_functions": ["check_answer"]})


def step(s: RewardCurriculumSampler, data: DatasetColumns, stream: Stream, acc_of_source: dict[str, float],
         **kw) -> dict:
    return s.on_rewards_computed(s._feedback + 1, feedback(data, stream.take(s.batch_size), acc_of_source, **kw))


def test_default_gate_is_the_sequence_reward_as_before() -> None:
    assert RewardCurriculumOptions(reward_threshold=0.5).gate_metric == "reward"


def test_reward_gate_opens_on_format_rewards_alone_the_accuracy_gate_does_not(data: DatasetColumns) -> None:
    """The CPU learner's failure: a 6.0 threshold on the summed reward is passed at 20% accuracy."""
    by_reward = RewardCurriculumSampler({**GATE, "reward_threshold": 6.0}, data, batch_size=20)
    by_acc = RewardCurriculumSampler({**GATE, "reward_threshold": 0.5, "gate_metric": "acc"}, data, batch_size=20)
    for s in (by_reward, by_acc):
        stream = Stream(s)
        for _ in range(3):
            m = step(s, data, stream, {"logicif": 0.2, "iftrain": 1.0})
    assert by_reward.level == 3  # 5.5 + 3 * 0.2 = 6.1 >= 6.0 on every check
    assert by_acc.level == 0 and m["curriculum/reward_ema"] == pytest.approx(0.2)
    stream = Stream(by_acc)
    step(by_acc, data, stream, {"logicif": 0.5, "iftrain": 0.0})
    assert by_acc.level == 1 and by_acc._cur_ema == pytest.approx(0.5)  # inclusive, like the reward gate


def test_accuracy_gate_reads_only_the_curriculum_source_rows(data: DatasetColumns) -> None:
    s = RewardCurriculumSampler({**GATE, "reward_threshold": 0.5, "gate_metric": "acc"}, data, batch_size=20)
    stream = Stream(s)
    m = step(s, data, stream, {"logicif": 0.3, "iftrain": 1.0})
    assert s.level == 0 and m["curriculum/reward_ema"] == pytest.approx(0.3)
    # the adaptive weights still follow the sequence reward of every source
    assert m["sampler/reward_ema/iftrain"] == pytest.approx(FORMAT_REWARD + 3.0)
    assert m["sampler/reward_ema/logicif"] == pytest.approx(FORMAT_REWARD + 0.9)


def test_gate_on_one_reward_functions_column_and_its_ema(data: DatasetColumns) -> None:
    s = RewardCurriculumSampler({**GATE, "reward_alpha": 0.5, "reward_threshold": 1.0,
                                 "gate_metric": "reward_fn/check_answer"}, data, batch_size=20)
    stream = Stream(s)
    step(s, data, stream, {"logicif": 0.2, "iftrain": 0.2})  # 0.2 * 3 - 0.8 * 1 = -0.2
    step(s, data, stream, {"logicif": 1.0, "iftrain": 1.0})  # 3.0 -> EMA 1.4
    assert s._cur_ema == pytest.approx(0.5 * 3.0 + 0.5 * -0.2) and s.level == 1


def test_non_finite_gate_values_are_skipped_not_averaged(data: DatasetColumns) -> None:
    s = RewardCurriculumSampler({**GATE, "reward_threshold": 0.5, "gate_metric": "score"}, data, batch_size=20)
    stream = Stream(s)
    idx = stream.take(20)
    rows = np.repeat(idx, 4)
    score = np.where(np.arange(len(rows)) % 2 == 0, 1.0, np.nan)
    m = s.on_rewards_computed(1, feedback(data, idx, {"logicif": 0.0, "iftrain": 0.0}, extra={"score": score}))
    assert m["curriculum/reward_ema"] == pytest.approx(1.0) and s.level == 1
    assert m["sampler/nan_rewards"] == 0  # the counter is of the sequence reward, which was finite


def test_batches_without_curriculum_rows_leave_the_gate_alone(data: DatasetColumns) -> None:
    s = RewardCurriculumSampler({**GATE, "reward_threshold": 0.5, "gate_metric": "acc"}, data, batch_size=20)
    iftrain = np.flatnonzero(source_of(data, np.arange(len(data))) == "iftrain")[:20]
    m = s.on_rewards_computed(1, feedback(data, iftrain, {"iftrain": 1.0}))
    assert s.level == 0 and "curriculum/reward_ema" not in m


def test_a_gate_column_the_batch_lacks_is_refused_naming_the_choices(data: DatasetColumns) -> None:
    s = RewardCurriculumSampler({"reward_threshold": 0.5, "gate_metric": "accuracy"}, data, batch_size=20)
    with pytest.raises(BatchError) as exc:
        step(s, data, Stream(s), {"logicif": 1.0, "iftrain": 1.0})
    msg = str(exc.value)
    assert "gate_metric 'accuracy' is not a column" in msg
    assert "Reward extras: acc" in msg and "reward functions: reward_fn/check_answer" in msg
    assert "sampler.gate_metric" in msg


def test_a_text_gate_column_is_refused(data: DatasetColumns) -> None:
    s = RewardCurriculumSampler({"reward_threshold": 0.5, "gate_metric": "data_source"}, data, batch_size=20)
    with pytest.raises(BatchError, match="gate_metric 'data_source' is not numeric"):
        step(s, data, Stream(s), {"logicif": 1.0, "iftrain": 1.0})


@pytest.mark.parametrize("value,message", [
    ("", "must name a feedback-batch column"),
    ("validation/", "names no validation metric: write validation/score"),
])
def test_bad_gate_metric_is_refused_at_configuration(data: DatasetColumns, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as exc:
        RewardCurriculumSampler({"reward_threshold": 0.5, "gate_metric": value}, data, batch_size=20)
    assert "gate_metric" in str(exc.value)


def test_resume_keeps_the_gate_ema_and_restarts_it_for_another_gate(data: DatasetColumns) -> None:
    opts = {**GATE, "reward_alpha": 0.5, "reward_threshold": 0.9, "gate_metric": "acc"}
    s = RewardCurriculumSampler(opts, data, batch_size=20)
    stream = Stream(s)
    for rate in (0.2, 0.6):
        step(s, data, stream, {"logicif": rate, "iftrain": 1.0})
    state = s.state_dict()
    assert state["extra"]["gate_metric"] == "acc"
    same = RewardCurriculumSampler(opts, data, batch_size=20)
    same.load_state_dict(state)
    assert same._cur_ema == pytest.approx(0.4)
    other = RewardCurriculumSampler({**opts, "gate_metric": "reward"}, data, batch_size=20)
    with structlog.testing.capture_logs() as logs:
        other.load_state_dict(state)
    assert other._cur_ema is None and other.level == s.level
    assert any("the saved curriculum EMA is of 'acc', this run gates on 'reward'" in e["event"] for e in logs)
    # a state saved before gate_metric existed gated on the sequence reward: kept for a reward gate
    old = {**state, "extra": {k: v for k, v in state["extra"].items() if k != "gate_metric"}}
    legacy = RewardCurriculumSampler({**opts, "gate_metric": "reward"}, data, batch_size=20)
    legacy.load_state_dict(old)
    assert legacy._cur_ema == pytest.approx(0.4)


# -- gate_metric: validation/<metric>, from on_validation_end ------------------------------------
VAL_GATE = {"gate_metric": "validation/score", "reward_threshold": 0.5, "min_batches_per_level": 0}


def validate(s: RewardCurriculumSampler, step: int, score: float, source: str = "logicif", **more: float) -> dict | None:
    """on_validation_end as the engines call it: read-only views, verl's per_source shape."""
    per_source = {source: MappingProxyType({"score": score, "acc/mean@1": score, **more}), "iftrain": {"score": 0.0}}
    return s.on_validation_end(step=step, per_source=MappingProxyType(per_source))


def test_validation_gate_moves_at_most_one_level_per_fresh_result(data: DatasetColumns) -> None:
    s = RewardCurriculumSampler({**VAL_GATE, "check_frequency": 1}, data, batch_size=20)
    stream = Stream(s)
    m = validate(s, 2, 0.8)
    assert s.level == 1 and m["curriculum/level"] == 1
    assert m["curriculum/validation_value"] == 0.8 and m["curriculum/validation_step"] == 2
    for _ in range(4):  # perfect batches do not move a validation gate, nor does the stale 0.8
        m = step(s, data, stream, {"logicif": 1.0, "iftrain": 1.0})
    assert s.level == 1 and "curriculum/reward_ema" not in m and m["curriculum/validation_value"] == 0.8
    assert validate(s, 2, 0.9) is None and s.level == 1  # the same step again: not fresh
    validate(s, 4, 0.3)
    assert s.level == 1 and s._val_value == 0.3  # below the threshold: kept, no level
    validate(s, 6, 0.5)
    assert s.level == 2  # inclusive, like the batch gates


def test_validation_gate_waits_min_batches_per_level(data: DatasetColumns) -> None:
    s = RewardCurriculumSampler({**VAL_GATE, "min_batches_per_level": 2}, data, batch_size=20)
    stream = Stream(s)
    validate(s, 0, 0.9)  # verl's validation before training: no batch at level 0 yet
    assert s.level == 0
    step(s, data, stream, {"logicif": 0.0})
    step(s, data, stream, {"logicif": 0.0})
    assert s.level == 0  # the stale result is not checked again at the batches
    validate(s, 2, 0.9)
    assert s.level == 1 and s._batches_at_level == 0


def test_validation_gate_reads_the_named_metric_of_the_curriculum_source(data: DatasetColumns) -> None:
    s = RewardCurriculumSampler({**VAL_GATE, "gate_metric": "validation/acc/maj@4/mean"}, data, batch_size=20)
    validate(s, 1, 0.2, **{"acc/maj@4/mean": 0.7})
    assert s.level == 1 and s._val_value == 0.7
    with pytest.raises(DataError) as exc:
        validate(s, 2, 0.9, source="logicif")  # no acc/maj@4/mean in this result
    msg = str(exc.value)
    assert "no 'acc/maj@4/mean'" in msg and "they have: score, acc/mean@1" in msg and "sampler.gate_metric" in msg


def test_validation_without_the_curriculum_source_warns_once_and_keeps_the_level(data: DatasetColumns) -> None:
    s = RewardCurriculumSampler(VAL_GATE, data, batch_size=20)
    with structlog.testing.capture_logs() as logs:
        assert validate(s, 1, 0.9, source="held/out") is None
        assert s.on_validation_end(step=2, per_source=MappingProxyType({})) is None
        assert validate(s, 3, float("nan")) is None  # a NaN result is not a result
    assert s.level == 0 and s._val_value is None
    missing = [e["event"] for e in logs if "have no source 'logicif'" in e["event"]]
    assert len(missing) == 1 and "they have: held/out, iftrain" in missing[0]
    assert any("is nan: ignored" in e["event"] for e in logs)


def test_batch_gates_ignore_validation_results(data: DatasetColumns) -> None:
    s = RewardCurriculumSampler({**GATE, "reward_threshold": 0.5, "gate_metric": "acc"}, data, batch_size=20)
    assert validate(s, 1, 1.0) is None and s.level == 0


def test_validation_gate_resume_is_exact_and_a_revalidated_step_is_not_fresh(data: DatasetColumns) -> None:
    opts = {**VAL_GATE, "min_batches_per_level": 1}
    full = RewardCurriculumSampler(opts, data, batch_size=20)
    stream = Stream(full)
    step(full, data, stream, {"logicif": 0.5})
    validate(full, 1, 0.6)
    step(full, data, stream, {"logicif": 0.5})
    state = pickle.loads(pickle.dumps(full.state_dict()))
    assert state["extra"]["validation_value"] == 0.6 and state["extra"]["validation_step"] == 1
    resumed = RewardCurriculumSampler(opts, data, batch_size=20)
    resumed.load_state_dict(state)
    assert validate(resumed, 1, 0.99) is None  # a resumed engine validating the saved step again
    for s in (full, resumed):
        validate(s, 2, 0.7)
    assert resumed.level == full.level == 2 and resumed.state_dict() == full.state_dict()
    assert np.array_equal(Stream(resumed).take(40), stream.take(40))
    # a state from before the validation gate (no validation keys) loads with no result yet
    old = {**state, "extra": {k: v for k, v in state["extra"].items() if not k.startswith("validation_")}}
    legacy = RewardCurriculumSampler(opts, data, batch_size=20)
    legacy.load_state_dict(old)
    assert legacy._val_value is None and legacy._val_step is None and legacy.level == 1
