"""RewardCurriculumSampler.gate_metric: which feedback-batch column the threshold is compared with."""

from __future__ import annotations

import numpy as np
import pytest
import structlog
from .sampler_helpers import Stream, source_of

from rlhooks import Batch, BatchError, ConfigError, DatasetColumns
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
    ("validation/logicif/acc", "gating on a validation metric is not available yet"),
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
