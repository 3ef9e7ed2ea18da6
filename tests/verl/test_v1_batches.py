"""V1 trajectories -> rlhooks Batch, in-process: the TensorDict is built by verl's own
``list_of_dict_to_tensordict``, as V1's agent loop builds what it puts into TransferQueue."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("verl.trainer.ppo.v1", reason="needs verl[verl-core]")

import torch  # noqa: E402

from rlhooks.engines.verl.v1.batches import (  # noqa: E402
    SCORED_FIELDS, adapter_error_counts, group_order, scored_batch, scored_fields, sessions,
)

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


class Store:
    """What TransferQueue's kv_batch_get returns, over a TensorDict in verl's layout: the fields asked for, of
    the keys asked for (their rows in order); every read is recorded (fields, keys)."""

    def __init__(self, data, keys):
        self.data, self.row = data, {k: i for i, k in enumerate(keys)}
        self.reads: list[tuple[tuple[str, ...], tuple[str, ...]]] = []

    def fetch(self, fields, keys):
        from verl.utils import tensordict_utils as tu

        self.reads.append((tuple(fields), tuple(keys)))
        return tu.index_select_tensor_dict(self.data.select(*fields), [self.row[k] for k in keys])


def test_only_the_fields_the_plugins_use_are_read_and_text_for_the_rows_shown():
    tok = make_tokenizer()
    extra = {"score": 0.1, "acc": 1.0}
    data, keys = _trajectories(tok, [("u1", 0, "the answer is 3", 0.1, extra), ("u1", 1, "answer 0", 0.1, extra),
                                     ("u2", 0, "answer 5", 0.1, extra)])
    present = set(data.keys())
    # the example config's plugins (dapo on acc, source metrics, reward monitor, a top/bottom-k table on reward)
    example = frozenset({"uid", "acc", "reward", "data_source", "advantage", "reward_fn/*", "sample_id"})
    assert scored_fields(example, present, reward_in_extras=True) == ["data_source", "extra_fields"]
    assert scored_fields(frozenset({"uid", "acc"}), present, reward_in_extras=True) == ["extra_fields"]
    assert scored_fields(frozenset({"uid", "acc"}), present) == ["rm_scores", "extra_fields"]
    everything = scored_fields(None, present)  # a plugin that declares nothing: every field but the row-wise ones
    assert set(everything) == set(SCORED_FIELDS) - {"uid", "prompts", "responses", "reward_model", "extra_info"}

    store = Store(data, keys)
    read = store.fetch(scored_fields(frozenset({"uid", "acc"}), present, reward_in_extras=True), keys)
    tags = [{"response_len": 4, "prompt_len": 3}, {"response_len": 2, "prompt_len": 3}, {"response_len": 2, "prompt_len": 3}]
    batch = scored_batch(read, keys, tok, fetch=store.fetch, stored=present, tags=tags)
    # the score extra, as rm_scores holds it (float32): equal bit for bit to the rm_scores sum
    rm = scored_batch(data.select("rm_scores", "extra_fields"), keys, tok)["reward"]
    assert batch["reward"].tolist() == rm.tolist() and rm[0] != 0.1
    assert batch["response_length"].tolist() == [4, 2, 2]  # from the tags: no token ids read
    assert len(store.reads) == 1
    shown = batch.select(np.array([2]))  # a table's row: its text only, read when shown
    # the shown row's row-wise fields in one read (a table shows text, target, complexity together)
    assert shown["response"].tolist() == ["answer 5"]
    assert store.reads[-1] == (("rlhooks_row", "data_source", "prompts", "responses", "reward_model", "extra_info"),
                               ("u2_0_0",))
    assert len(store.reads) == 2
    row = shown.to_rows(["index", "data_source", "target", "complexity", "prompt"])[0]
    assert row == {"index": 7, "data_source": "easy", "target": "3", "complexity": 1.5, "prompt": "what is 2"}
    assert len(store.reads) == 2  # the shown row's columns came from that one read


def test_the_reward_falls_back_to_rm_scores_without_a_score_extra():
    tok = make_tokenizer()
    data, keys = _trajectories(tok, [("u1", 0, "answer 0", 2.5, {"format": 1.0}), ("u1", 1, "answer 1", 0.5, {})])
    store = Store(data, keys)
    batch = scored_batch(store.fetch(["extra_fields"], keys), keys, tok, fetch=store.fetch, stored=set(data.keys()))
    assert batch["reward"].tolist() == [2.5, 0.5] and store.reads[-1] == (("rm_scores",), tuple(keys))


def test_the_adapter_is_recognized_by_path_and_its_functions_read_from_reward_kwargs():
    from rlhooks.engines.verl.main import compose_verl_config
    from rlhooks.engines.verl.v1.trainer import adapter_functions
    from rlhooks.engines.verl.reward_function import DEFAULT_FUNCTIONS

    assert adapter_functions(compose_verl_config([])) == ()
    cfg = compose_verl_config(["reward.custom_reward_function.path=pkg://rlhooks.engines.verl.reward_function"])
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
