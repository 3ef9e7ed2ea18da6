"""Resuming from state_dict continues with exactly the indices of an uninterrupted run.

All three samplers run with adaptive weights on and rewards fed back after every batch; the
curricula also level up / widen during the run, before and after the checkpoint.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from .sampler_helpers import Stream, run_with_feedback, trajectories, two_sources
from torchdata.stateful_dataloader import StatefulDataLoader

from rlhooks.core.data import DataError
from rlhooks.plugins.samplers.curriculum import RewardCurriculumSampler, TimeCurriculumSampler
from rlhooks.plugins.samplers.multi_source import MultiSourceSampler

ADAPTIVE = {"adaptive_weights": True, "update_frequency": 2, "temperature": 0.2}
CASES = {
    "multi_source": (MultiSourceSampler, {**ADAPTIVE, "source_weights": {"iftrain": 1.0, "logicif": 2.0, "third": 1.0}}),
    "time_curriculum": (TimeCurriculumSampler, {**ADAPTIVE, "complexity_warmup_steps": 8}),
    "reward_curriculum": (RewardCurriculumSampler, {**ADAPTIVE, "reward_threshold": 0.4, "min_batches_per_level": 2,
                                                    "check_frequency": 1, "focus_new_intervals": True,
                                                    "num_intervals": 4}),
}


def reward(src: np.ndarray, idx: np.ndarray) -> np.ndarray:
    # deterministic in the drawn rows, different per source, with some NaN
    r = (idx % 7) / 7.0 + np.where(src == "logicif", 0.1, 0.0)
    return np.where(idx % 11 == 0, np.nan, r)


@pytest.fixture
def data():
    return two_sources(n_each=60, names=("iftrain", "logicif", "third"))


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("cut", [3, 7])
def test_resume_after_feedback_matches_uninterrupted_run(data, case: str, cut: int) -> None:
    cls, opts = CASES[case]
    total = 14
    full = run_with_feedback(cls(opts, data, batch_size=16, seed=7), data, total, reward)

    first = cls(opts, data, batch_size=16, seed=7)
    head = run_with_feedback(first, data, cut, reward)
    state = pickle.loads(pickle.dumps(first.state_dict()))  # as a checkpoint stores it
    resumed = cls(opts, data, batch_size=16, seed=0)  # the seed comes from the state
    resumed.load_state_dict(state)
    tail = run_with_feedback(resumed, data, total - cut, reward)
    assert all(np.array_equal(a, b) for a, b in zip(full, head + tail))
    if case == "reward_curriculum":
        assert resumed.level >= 2  # the gate opened during the run, also after the resume
    if case == "time_curriculum":
        assert resumed.percentile == 100


@pytest.mark.parametrize("case", list(CASES))
def test_resume_mid_batch_and_across_epochs(data, case: str) -> None:
    cls, opts = CASES[case]
    a = cls(opts, data, batch_size=16, seed=3)
    sa = Stream(a)
    run_with_feedback(a, data, 2, reward, sa)
    sa.take(5)  # a partly consumed batch
    state = a.state_dict()
    expected = sa.take(400)  # crosses the end of the epoch (len = 180)
    b = cls(opts, data, batch_size=16, seed=3)
    b.load_state_dict(state)
    assert np.array_equal(Stream(b).take(400), expected)


def test_state_is_small_and_plain(data) -> None:
    cls, opts = CASES["reward_curriculum"]
    s = cls(opts, data, batch_size=16)
    run_with_feedback(s, data, 5, reward)
    blob = pickle.dumps(s.state_dict())
    assert len(blob) < 4096  # counters, EMAs and the rest of one batch; no per-row arrays


def test_state_from_another_dataset_is_refused(data) -> None:
    s = MultiSourceSampler({}, data, batch_size=16)
    other = MultiSourceSampler({}, two_sources(n_each=10, names=("iftrain", "logicif", "third")), batch_size=16)
    with pytest.raises(DataError, match="cannot resume from this state.*source_sizes"):
        other.load_state_dict(s.state_dict())


class PromptDataset(torch.utils.data.Dataset):
    """A small real map-style dataset: row -> (index, source code)."""

    def __init__(self, data) -> None:
        self.codes = torch.as_tensor(data.source_codes.astype(np.int64))

    def __len__(self) -> int:
        return len(self.codes)

    def __getitem__(self, i: int) -> dict:
        return {"index": i, "source": self.codes[i]}


def loader_for(sampler, data) -> StatefulDataLoader:
    return StatefulDataLoader(PromptDataset(data), batch_size=sampler.batch_size, sampler=sampler,
                              drop_last=True, num_workers=0)


def train(loader, sampler, data, batches: int, out: list) -> None:
    """As verl does: pull a batch, generate + reward it, feed the rewards back, repeat."""
    while len(out) < batches:
        for step, batch in enumerate(loader, len(out) + 1):
            idx = batch["index"].numpy()
            sampler.on_rewards_computed(step, trajectories(data, idx, reward))
            out.append(idx)
            if len(out) >= batches:
                return


@pytest.mark.parametrize("case", list(CASES))
def test_stateful_dataloader_resume(data, case: str) -> None:
    cls, opts = CASES[case]
    total, cut = 16, 6  # len(sampler)=180 -> 11 batches of 16 per epoch: the run crosses an epoch
    s_full = cls(opts, data, batch_size=16, seed=11)
    full: list = []
    train(loader_for(s_full, data), s_full, data, total, full)

    s1 = cls(opts, data, batch_size=16, seed=11)
    l1 = loader_for(s1, data)
    head: list = []
    train(l1, s1, data, cut, head)
    saved = pickle.loads(pickle.dumps(l1.state_dict()))

    s2 = cls(opts, data, batch_size=16, seed=11)
    l2 = loader_for(s2, data)
    l2.load_state_dict(saved)
    tail: list = []
    train(l2, s2, data, total - cut, tail)
    assert [b.tolist() for b in full] == [b.tolist() for b in head + tail]
