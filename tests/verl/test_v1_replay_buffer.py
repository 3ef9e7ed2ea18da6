"""rlhooks on verl's V1 trainer, on real verl objects: the rlhooks trainer built by verl's own
``PPOTrainer.__init__`` (which loads the rlhooks replay buffer as its custom sampler) and
``_init_dataloader`` (RLHFDataset over a parquet file, StatefulDataLoader), TransferQueue started by
``tq.init`` with verl's default transfer_queue config on a local Ray.

TransferQueue needs Ray (its controller and storage are actors): this module uses the session's shared
Ray (``cpu_v1_ray``) and is slow-marked all the same (TransferQueue's actors start in ~1 min here); the
trajectories are put into TransferQueue with the fields and tags V1's agent loop writes
(``AgentLoopWorkerTQ._agent_loop_postprocess``, checked below against its source).
"""

from __future__ import annotations

import inspect
from collections import Counter

import numpy as np
import pytest

pytest.importorskip("verl.trainer.ppo.v1", reason="needs verl[verl-core]")

import torch  # noqa: E402

from .verl_shim_helpers import Recorder, make_tokenizer, write_dataset  # noqa: E402

pytestmark = [pytest.mark.verl, pytest.mark.slow]

N = 2  # responses per prompt


@pytest.fixture(scope="module")
def transfer_queue(cpu_v1_ray):
    """TransferQueue (one storage unit, as the CPU learner's config has) on the session's shared hermetic Ray
    (tests/verl/conftest.py), closed after this module, before a V1 run starts its own in its TaskRunner."""
    import transfer_queue as tq

    from rlhooks.engines.verl.main import compose_verl_config

    tq.init(compose_verl_config(["transfer_queue.backend.SimpleStorage.num_data_storage_units=1"]).transfer_queue)
    yield tq
    tq.close()


def _trainer(tmp_path, *overrides, plugins=()):
    from rlhooks.engines.verl.main import build_config
    from rlhooks.engines.verl.v1.trainer import RLHooksPPOTrainerSync

    data = write_dataset(tmp_path / "train.parquet", 12)
    cfg = build_config(None, [f"data.train_files={data}", f"data.val_files={data}", "data.train_batch_size=4",
                              f"actor_rollout_ref.rollout.n={N}", "data.max_prompt_length=16",
                              "data.dataloader_num_workers=0", *overrides])
    trainer = RLHooksPPOTrainerSync(cfg, rlhooks_plugins=plugins)  # verl loads the custom sampler here
    trainer.tokenizer, trainer.processor = make_tokenizer(), None  # what _init_tokenizer sets (no model here)
    trainer._init_dataloader()
    trainer.global_steps = 1
    trainer.on_step_begin()
    return trainer


def _put_groups(tq, trainer, accs: list[list[float]], dispatched: bool = False) -> list[str]:
    """One finished prompt group per entry of ``accs`` (one acc per response), written as V1's agent loop
    writes them: trajectories ``{uid}_{session}_0`` with their fields and tags, then the prompt's status.
    ``dispatched``: the prompts went through the trainer's dispatch (the buffer knows their rows and sources)."""
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    prompts = trainer._next_train_batch(len(accs))  # verl's own dataloader fetch (uids, rlhooks_row, ...)
    if dispatched:
        trainer.replay_buffer.remember_dispatched(prompts)  # what _submit_batch_to_rollout does
    uids = list(prompts["uid"])
    tq.kv_batch_put(keys=uids, partition_id="train",
                    tags=[{"is_prompt": True, "status": "running", "global_steps": 1} for _ in uids])
    keys, fields, tags = [], [], []
    tok = trainer.tokenizer
    for i, (uid, group) in enumerate(zip(uids, accs)):
        row = {k: (v[i] if not isinstance(v, torch.Tensor) else v[i]) for k, v in prompts.items()
               if k not in ("global_steps",)}
        for session, acc in enumerate(group):
            response = tok("the answer is 3" if acc else "answer 0")["input_ids"]
            rm = torch.zeros(len(response))
            rm[-1] = acc
            field = {**{k: (v.data if hasattr(v, "data") and not isinstance(v, torch.Tensor) else v)
                        for k, v in row.items()},
                     "prompts": torch.tensor(tok("what is 2 plus 1")["input_ids"]), "responses": torch.tensor(response),
                     "response_mask": torch.ones(len(response), dtype=torch.int64), "rm_scores": rm,
                     "extra_fields": {"reward_extra_info": {"acc": acc, "score": acc}, "min_global_steps": 0,
                                      "max_global_steps": 0},
                     "session_id": session, "num_turns": 2}
            keys.append(f"{uid}_{session}_0")
            fields.append(field)
            tags.append({"status": "success", "prompt_len": 4, "response_len": len(response),
                         "seq_len": 4 + len(response), "global_steps": 1, "min_global_steps": 0, "max_global_steps": 0})
    tq.kv_batch_put(keys=keys, partition_id="train", fields=list_of_dict_to_tensordict(fields), tags=tags)
    tq.kv_batch_put(keys=uids, partition_id="train",
                    tags=[{"is_prompt": True, "status": "finished", "global_steps": 1} for _ in uids])
    return uids


def test_the_fields_written_here_are_the_ones_v1s_agent_loop_writes():
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ

    source = inspect.getsource(AgentLoopWorkerTQ._agent_loop_postprocess)
    for name in ('keys.append(f"{uid}_{session_id}_{i}")', "field.update(kwargs)", '"status": "success"',
                 '"min_global_steps"', '"global_steps": kwargs["global_steps"]'):
        assert name in source, name


def test_rlhooks_and_verls_own_v1_buffer_drop_the_same_groups(tmp_path, transfer_queue):
    """algorithm.filter_groups means on the rlhooks replay buffer what it means in verl's built-in V1 one."""
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

    from rlhooks.engines.verl.v1.replay_buffer import RLHooksReplayBuffer

    recorder = Recorder()
    trainer = _trainer(tmp_path, "algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=acc",
                       plugins=[("recorder", recorder)])
    assert isinstance(trainer.replay_buffer, RLHooksReplayBuffer)  # loaded by verl from custom_sampler
    assert trainer.trainer_mode == "sync" and trainer.registered_mode == "rlhooks_sync"  # verl's sync branches
    assert trainer.config.data.gen_batch_size == 1  # verl's own rule for filter_groups
    accs = [[1.0, 1.0], [0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 1.0]]
    uids = _put_groups(transfer_queue, trainer, accs)

    verls = ReplayBuffer(trainer_mode="sync", trainer_config={}, max_off_policy_threshold=8,
                         max_off_policy_strategy="drop", sampler_kwargs={}, refill_fn=lambda n: n,
                         filter_groups_metric="acc", train_batch_size=4, gen_batch_size=1)
    verls._sync_metadata_from_transfer_queue()
    verl_dropped, verl_counts = verls._dapo_filtered_keys("train")

    ours = trainer.replay_buffer
    ours._sync_metadata_from_transfer_queue()
    dropped, counts = ours._dapo_filtered_keys("train")
    assert dropped == verl_dropped == {uids[0], uids[1], uids[4]}
    assert counts == verl_counts == Counter({1.0: 2, 0.0: 1})

    # on_rewards_computed saw every finished group before filtering, with the legacy path's columns
    (event,) = recorder.of("on_rewards_computed")
    assert event[1] == 1 and event[3] == len(accs) * N
    assert trainer._step_counts["generated"] == 6 and trainer._step_counts["kept"] == 3
    # a second poll judges nothing again (each group once, when it finishes)
    ours._sync_metadata_from_transfer_queue()
    assert ours._dapo_filtered_keys("train")[0] == dropped and len(recorder.of("on_rewards_computed")) == 1
    transfer_queue.kv_clear(keys=list(transfer_queue.kv_list("train").get("train", {})), partition_id="train")


@pytest.mark.parametrize("filters", [True, False], ids=["filters", "no-filter"])
def test_the_sync_buffer_judges_whole_waves_in_draw_order(tmp_path, transfer_queue, filters):
    """Exact resume (docs/how-to/verl.md): groups finished while another of the step still generates stay
    "running" for verl's loop, then the whole wave is judged in one on_rewards_computed call, its groups in
    the order their prompts were drawn (the uids count them); verl's selection takes the first drawn. Without
    rlhooks filters too: a generation batch is one on_rewards_computed call whatever the polls found (a
    curriculum counting feedback batches advanced with poll timing before)."""
    from rlhooks.engines.verl.v1.trainer import prompt_uid

    recorder = Recorder()
    # without filters verl fetches whole gen batches: gen_batch_size 1 lets the test draw five prompts
    overrides = (["algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=acc"] if filters
                 else ["data.gen_batch_size=1"])
    trainer = _trainer(tmp_path, *overrides, plugins=[("recorder", recorder)])
    uids = _put_groups(transfer_queue, trainer, [[1.0, 0.0], [1.0, 1.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
    assert uids == [prompt_uid(i) for i in range(5)]  # the run's first five prompts
    transfer_queue.kv_batch_put(keys=[uids[2]], partition_id="train",  # one group still generating
                                tags=[{"is_prompt": True, "status": "running", "global_steps": 1}])
    buffer = trainer.replay_buffer
    buffer._sync_metadata_from_transfer_queue()
    assert buffer.finished_keys["train"] == set() and buffer.running_keys["train"] == set(uids)
    assert buffer._dapo_filtered_keys("train")[0] == set() and recorder.of("on_rewards_computed") == []
    transfer_queue.kv_batch_put(keys=[uids[2]], partition_id="train",
                                tags=[{"is_prompt": True, "status": "finished", "global_steps": 1}])
    buffer._sync_metadata_from_transfer_queue()
    assert buffer.finished_keys["train"] == set(uids) and not buffer.running_keys["train"]
    assert buffer._dapo_filtered_keys("train")[0] == ({uids[1]} if filters else set())  # all-correct: no signal
    (event,) = recorder.of("on_rewards_computed")  # the wave, once
    assert event[3] == 5 * N
    sampleable = set(uids) - ({uids[1]} if filters else set())
    selected, _, _ = buffer._select_prompt_uids("train", sampleable, 3)
    assert selected == ([uids[0], uids[2], uids[3]] if filters else uids[:3])  # the first drawn, whatever a set's order
    transfer_queue.kv_clear(keys=list(transfer_queue.kv_list("train").get("train", {})), partition_id="train")


def test_the_scored_batch_has_the_legacy_columns(tmp_path, transfer_queue):
    seen = []

    class Columns:
        import rlhooks

        @rlhooks.hookimpl
        def on_rewards_computed(self, step, batch):
            seen.append({c: batch[c].tolist() for c in ("uid", "index", "data_source", "reward", "acc", "sample_id",
                                                        "policy_version", "response_length", "target", "response")})

    trainer = _trainer(tmp_path, "data.gen_batch_size=1", plugins=[("columns", Columns())])
    uids = _put_groups(transfer_queue, trainer, [[1.0, 0.0], [0.0, 0.0]])
    buffer = trainer.replay_buffer
    buffer._sync_metadata_from_transfer_queue()
    assert buffer._dapo_filtered_keys("train")[0] == set()  # no rlhooks filter: nothing evicted
    (cols,) = seen
    assert cols["uid"] == [uids[0], uids[0], uids[1], uids[1]]  # a group's rows contiguous
    assert cols["sample_id"] == [f"{uids[0]}/0", f"{uids[0]}/1", f"{uids[1]}/0", f"{uids[1]}/1"]
    assert cols["reward"] == [1.0, 0.0, 0.0, 0.0] and cols["acc"] == [1.0, 0.0, 0.0, 0.0]
    assert all(0 <= i < 12 for i in cols["index"]) and set(cols["data_source"]) <= {"easy", "hard", "mixed"}
    assert cols["policy_version"] == [0, 0, 0, 0] and cols["response"][0] == "the answer is 3"
    assert cols["response_length"] == [4, 2, 2, 2] and all(t is not None for t in cols["target"])
    transfer_queue.kv_clear(keys=list(transfer_queue.kv_list("train").get("train", {})), partition_id="train")


def test_judging_reads_only_the_fields_the_plugins_declare(tmp_path, transfer_queue, monkeypatch):
    """Issue 40: the groups are read with the fields the plugins read for every row (declared in
    ``batch_columns``), the reward from the score extra (verl's naive reward manager), the lengths from the tags;
    a column read for a few rows (a table's text) is read for those rows when read."""
    import rlhooks

    reads = []
    real = transfer_queue.kv_batch_get

    def counting(keys, partition_id, select_fields=None):
        reads.append((tuple(select_fields or ()), len(keys)))
        return real(keys=keys, partition_id=partition_id, select_fields=select_fields)

    monkeypatch.setattr(transfer_queue, "kv_batch_get", counting)
    seen = []

    class Table:
        batch_columns = ("uid", "acc", "reward")

        @rlhooks.hookimpl
        def on_rewards_computed(self, step, batch):
            seen.append((batch["reward"].tolist(), batch["response_length"].tolist(),
                         batch.select(np.array([0]))["response"].tolist()))

    trainer = _trainer(tmp_path, "algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=acc",
                       plugins=[("table", Table())])
    uids = _put_groups(transfer_queue, trainer, [[1.0, 0.0], [0.0, 0.0]], dispatched=True)
    buffer = trainer.replay_buffer
    buffer._sync_metadata_from_transfer_queue()
    assert buffer._dapo_filtered_keys("train")[0] == {uids[1]}
    ((reward, lengths, text),) = seen
    assert reward == [1.0, 0.0, 0.0, 0.0] and lengths == [4, 2, 2, 2] and text == ["the answer is 3"]
    probe, judged, shown = reads
    assert probe[1] == 1  # once per run: the fields TransferQueue holds, from one trajectory
    assert judged == (("extra_fields",), 4)  # the dataset row and source came with the dispatch
    assert shown[1] == 1 and "responses" in shown[0] and "rm_scores" not in shown[0]  # the shown row's only

    # the step's end: the judged rows' values kept (no read), the per-token fields from verl's own metric read
    from transfer_queue import KVBatchMeta

    listed = transfer_queue.kv_list("train")["train"]
    keys = sorted(k for k in listed if "_" in k and k.split("_")[0] == uids[0])  # its trajectories
    meta = KVBatchMeta(partition_id="train", keys=keys, tags=[listed[k] for k in keys])
    verl_read = real(keys=keys, partition_id="train", select_fields=["rm_scores", "responses"])  # what it holds of verl's
    del reads[:]
    trained = trainer._trained_batch(meta, verl_read)
    assert trained["reward"].tolist() == [1.0, 0.0] and trained["final_reward"].tolist() == [1.0, 0.0]
    assert reads == []  # nothing read again
    assert buffer.judged_values("train", keys) is None  # forgotten once the step ended on them
    again = trainer._trained_batch(meta)  # a group judged before a resume: read again, equal
    assert again["reward"].tolist() == trained["reward"].tolist() and again["index"].tolist() == trained["index"].tolist()
    assert again["final_reward"].tolist() == trained["final_reward"].tolist() and reads
    assert again["data_source"].tolist() == trained["data_source"].tolist()  # kept from the dispatch = stored
    transfer_queue.kv_clear(keys=list(transfer_queue.kv_list("train").get("train", {})), partition_id="train")
