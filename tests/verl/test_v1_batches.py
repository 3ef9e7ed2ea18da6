"""V1 trajectories -> rlhooks Batch, in-process: the TensorDict is built by verl's own
``list_of_dict_to_tensordict``, as V1's agent loop builds what it puts into TransferQueue."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("verl.trainer.ppo.v1", reason="needs verl[verl-core]")

import torch  # noqa: E402

from rlhooks.engines.verl.v1.batches import adapter_error_counts, group_order, scored_batch, sessions  # noqa: E402

from .verl_shim_helpers import make_tokenizer  # noqa: E402

pytestmark = pytest.mark.verl


def _trajectories(tok, rows):
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    fields = []
    for uid, session, text, score, extra in rows:
        response = tok(text)["input_ids"]
        rm = torch.zeros(len(response))
        rm[-1] = score
        fields.append({"uid": uid, "data_source": "easy", "rlhooks_row": 7, "prompts": torch.tensor(tok("what is 2")["input_ids"]),
                       "responses": torch.tensor(response), "rm_scores": rm,
                       "extra_fields": {"reward_extra_info": extra, "min_global_steps": 3, "max_global_steps": 3},
                       "reward_model": {"ground_truth": "3"}, "extra_info": {"complexity_score": 1.5}})
    keys = [f"{uid}_{session}_0" for uid, session, *_ in rows]
    return list_of_dict_to_tensordict(fields), keys


def test_groups_are_made_contiguous_and_sessions_named():
    keys = ["b_1_0", "a_0_0", "b_0_0", "a_1_0"]
    assert [keys[i] for i in group_order(keys)] == ["b_0_0", "b_1_0", "a_0_0", "a_1_0"]
    uid, sample = sessions(["u1_0_0", "u1_1_2"])
    assert uid.tolist() == ["u1", "u1"] and sample.tolist() == ["u1/0", "u1/1"]


def test_scored_batch_reads_the_columns_the_legacy_adapter_builds():
    tok = make_tokenizer()
    extra = {"check_answer": 3.0, "acc": 1.0, "reward_errors": 1.0, "reward_errors/check_answer": 0.0,
             "reward_errors/format_exact": 1.0, "format_exact": 0.0}
    data, keys = _trajectories(tok, [("u1", 0, "the answer is 3", 3.0, extra), ("u1", 1, "answer 0", 0.0, extra)])
    batch = scored_batch(data, keys, tok, adapter_functions=("check_answer", "format_exact"))
    assert batch["uid"].tolist() == ["u1", "u1"] and batch["sample_id"].tolist() == ["u1/0", "u1/1"]
    assert batch["index"].tolist() == [7, 7] and batch["reward"].tolist() == [3.0, 0.0]
    assert batch["policy_version"].tolist() == [3, 3] and batch["acc"].tolist() == [1.0, 1.0]
    assert batch["reward_fn/check_answer"].tolist() == [3.0, 3.0]  # the adapter's functions: reward_fn/<name>
    assert batch.meta["reward_functions"] == ("check_answer", "format_exact")
    assert batch["response"].tolist() == ["the answer is 3", "answer 0"] and batch["target"].tolist() == ["3", "3"]
    assert batch["response_length"].tolist() == [4, 2] and np.allclose(batch["complexity"], 1.5)
    assert adapter_error_counts(batch, ("check_answer", "format_exact")) == {
        "rewards/errors/check_answer": 0.0, "rewards/errors/format_exact": 2.0}


def test_the_adapter_is_recognized_by_path_and_its_functions_read_from_reward_kwargs():
    from rlhooks.engines.verl.main import compose_verl_config
    from rlhooks.engines.verl.v1.trainer import adapter_functions
    from rlhooks.plugins.rewards.verl_adapter import DEFAULT_FUNCTIONS

    assert adapter_functions(compose_verl_config([])) == ()
    cfg = compose_verl_config(["reward.custom_reward_function.path=pkg://rlhooks.plugins.rewards.verl_adapter"])
    assert adapter_functions(cfg) == DEFAULT_FUNCTIONS
    cfg = compose_verl_config(["reward.custom_reward_function.path=/x/rlhooks/plugins/rewards/verl_adapter.py",
                               "+reward.custom_reward_function.reward_kwargs.functions=[check_answer]"])
    assert adapter_functions(cfg) == ("check_answer",)


def test_prompt_stage_top_ups_concatenate_with_a_batch_that_carries_global_steps():
    """A prompt filter's refill on V1: the step's earlier prompt batch carries the ``global_steps`` the
    trainer assigned, a fresh top-up from verl's dataloader does not; TensorDict.cat needs equal keys."""
    from verl.utils import tensordict_utils as tu

    from rlhooks.engines.verl.v1.trainer import _PromptSource

    first = tu.get_tensordict({"uid": np.array(["a"], dtype=object), "rlhooks_row": torch.tensor([4])})
    tu.assign_non_tensor_data(first, "global_steps", 2)
    top_up = tu.get_tensordict({"uid": np.array(["b"], dtype=object), "rlhooks_row": torch.tensor([7])})
    out = _PromptSource(None).concat([first, top_up])
    assert list(out["uid"]) == ["a", "b"] and out["rlhooks_row"].tolist() == [4, 7]
