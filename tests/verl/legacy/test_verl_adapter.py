"""DataProto -> Batch (lazy, no copies of unread tensors) and a keep mask applied back."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("verl")

from ..verl_shim_helpers import make_tokenizer  # noqa: E402

from rlhooks.engines.verl.legacy import adapter  # noqa: E402
from verl import DataProto  # noqa: E402

pytestmark = pytest.mark.verl


def trajectories() -> DataProto:
    tok = make_tokenizer()
    ids = tok(["the answer is 3", "answer 4", "the answer is 5", "answer 0"], padding="max_length",
              max_length=5)["input_ids"]
    responses = torch.tensor(ids)
    mask = (responses != tok.pad_token_id).long()
    scores = torch.zeros(4, 5)
    scores[torch.arange(4), mask.sum(-1) - 1] = torch.tensor([1.0, 0.0, 1.0, 0.0])
    adv = torch.tensor([0.5, -0.5, 2.0, -2.0])[:, None] * mask
    return DataProto.from_dict(
        tensors={"responses": responses, "response_mask": mask, "token_level_scores": scores,
                 "token_level_rewards": scores - 0.25 * mask, "advantages": adv},
        non_tensors={"uid": np.array(["a", "a", "b", "b"], dtype=object),
                     "data_source": np.array(["gsm8k", "gsm8k", "math", "math"], dtype=object),
                     adapter.ROW_KEY: np.array([7, 7, 2, 2]), "acc": np.array([1.0, 0.0, 1.0, 0.0], dtype=object),
                     "reward_model": np.array([{"ground_truth": "3"}] * 2 + [{"ground_truth": "5"}] * 2)},
        meta_info={"reward_extra_keys": ["acc"]},
    ), tok


def test_columns_from_a_dataproto_are_lazy_and_exact():
    data, tok = trajectories()
    b = adapter.trajectory_batch(data, tok)
    assert b.materialized == ["index", "uid", "data_source", "reward"]  # the rest waits for a reader
    assert b["index"].tolist() == [7, 7, 2, 2] and b["reward"].tolist() == [1.0, 0.0, 1.0, 0.0]
    assert b["final_reward"].tolist() == pytest.approx([0.0, -0.5, 0.0, -0.5])
    assert b["advantage"].tolist() == pytest.approx([0.5, -0.5, 2.0, -2.0])  # masked mean = sequence value
    assert b["response_length"].tolist() == [4, 2, 4, 2]
    assert b["response"].tolist() == ["the answer is 3", "answer 4", "the answer is 5", "answer 0"]
    assert b["target"].tolist() == ["3", "3", "5", "5"]
    assert b["acc"].dtype == np.float64 and b.reward_extra_keys() == ["acc"]
    assert b.groups.n_groups == 2


def test_keep_mask_and_concat_back_to_dataproto():
    data, _ = trajectories()
    assert adapter.select_rows(data, np.ones(4, bool)) is data  # nothing dropped: no copy
    kept = adapter.select_rows(data, np.array([False, False, True, True]))
    assert kept.non_tensor_batch["uid"].tolist() == ["b", "b"]
    assert kept.batch["token_level_scores"].sum(-1).tolist() == [1.0, 0.0]
    data.meta_info["timing"] = {"gen": 1.0}
    other = adapter.select_rows(data, np.array([0, 1]))
    other.meta_info = {**data.meta_info, "timing": {"gen": 2.0}}  # DataProto.concat would assert here
    both = adapter.concat([kept, other])
    assert both.non_tensor_batch["uid"].tolist() == ["b", "b", "a", "a"] and both.meta_info["timing"] == {"gen": 2.0}
    with pytest.raises(ValueError, match="keep mask has shape"):
        adapter.select_rows(data, np.ones(3, bool))
