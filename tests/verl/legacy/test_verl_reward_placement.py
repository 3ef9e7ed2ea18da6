"""rlhooks rewards reach verl's tensors by assignment, under the legacy DataProto and under a view
that behaves like verl's next one (NeoProto, verl PR #7557: reads from ``.batch`` are copies, writes
reach storage only through assignment), on selected, reordered and concatenated rows."""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch

pytest.importorskip("verl.trainer.ppo.ray_trainer", reason="needs verl[verl-core]")

from .test_verl_adapter import trajectories  # noqa: E402

from rlhooks.engines.verl.legacy import adapter  # noqa: E402
from rlhooks.engines.verl.main import compose_verl_config  # noqa: E402
from rlhooks.engines.verl.legacy.trainer import VerlRollout  # noqa: E402
from verl import DataProto  # noqa: E402

pytestmark = pytest.mark.verl


class CopyOnReadTensorDict:
    """NeoProto's ``.batch``: a tensor read by key is a copy; ``view[key] = t`` writes storage."""

    def __init__(self, storage):
        object.__setattr__(self, "_storage", storage)

    def __getitem__(self, key):
        value = self._storage[key]
        return value.clone() if isinstance(key, str) else value  # row indexing builds a new TensorDict anyway

    def __setitem__(self, key, value):
        self._storage[key] = value

    def __contains__(self, key):
        return key in self._storage.keys()

    def __getattr__(self, name):  # keys(), batch_size, pop, ... as the TensorDict has them
        return getattr(self._storage, name)


class NeoStyleProto(DataProto):
    """A DataProto (verl's public class and its methods: select_idxs, concat, ...) whose ``batch`` is
    a copy-on-read view of its storage."""

    @property
    def batch(self):
        storage = self.__dict__.get("_storage")
        return None if storage is None else CopyOnReadTensorDict(storage)

    @batch.setter
    def batch(self, td):
        self.__dict__["_storage"] = td._storage if isinstance(td, CopyOnReadTensorDict) else td


def as_neo(data: DataProto) -> NeoStyleProto:
    return NeoStyleProto(batch=data.batch, non_tensor_batch=dict(data.non_tensor_batch), meta_info=dict(data.meta_info))


def rollout(kl_in_reward: bool) -> VerlRollout:
    config = compose_verl_config([f"algorithm.use_kl_in_reward={str(kl_in_reward).lower()}"])
    return VerlRollout(types.SimpleNamespace(config=config), timing_raw={})


def shapes(data: DataProto) -> dict[str, DataProto]:
    """The rows a step's placement sees: a filter's selection, a reorder (balance), a concat."""
    return {
        "selected": adapter.select_rows(data, np.array([False, True, True, False])),
        "reordered": data.select_idxs(np.array([3, 0, 2, 1])),
        "concatenated": adapter.concat([adapter.select_rows(data, np.array([2, 3])), adapter.select_rows(data, np.array([0]))]),
    }


def test_the_view_is_faithful_in_place_writes_are_lost():
    data, _ = trajectories()
    view = as_neo(data.select(deepcopy=True))
    view.batch["token_level_scores"].add_(5.0)  # what the shim used to do: no effect on storage
    assert view.batch["token_level_scores"].sum().item() == pytest.approx(2.0)
    assert type(view.select_idxs(np.array([1, 0]))) is NeoStyleProto  # verl's methods keep the view


@pytest.mark.parametrize("flavour", ["legacy", "neo"])
@pytest.mark.parametrize("kl_in_reward", [False, True], ids=["no-kl", "kl-in-reward"])
def test_rewards_land_on_selected_reordered_and_concatenated_rows(flavour, kl_in_reward):
    data, tok = trajectories()  # token_level_rewards = scores - 0.25 per valid token (an in-reward penalty)
    if not kl_in_reward:
        data.batch["token_level_rewards"] = data.batch["token_level_scores"]
    for name, part in shapes(data).items():
        part = part.select(deepcopy=True)
        if flavour == "neo":
            part = as_neo(part)
        penalty = (part.batch["token_level_scores"] - part.batch["token_level_rewards"]).sum(-1)
        trajectories_before = adapter.trajectory_batch(part, tok)  # built before placement, read after
        reward = np.linspace(0.5, 2.0, len(part))
        placed = rollout(kl_in_reward).place_rewards(part, reward)

        scores = placed.batch["token_level_scores"]
        assert scores.sum(-1).numpy() == pytest.approx(reward), name
        last = placed.batch["response_mask"].sum(-1) - 1  # at the last valid token, as verl's managers place
        assert scores[torch.arange(len(part)), last].numpy() == pytest.approx(reward), name
        final = placed.batch["token_level_rewards"].sum(-1)
        assert final.numpy() == pytest.approx(reward - penalty.numpy()), name  # the same penalty kept
        assert trajectories_before["final_reward"] == pytest.approx(reward - penalty.numpy()), name
