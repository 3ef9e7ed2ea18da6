"""The V1 trainer fires the hooks the legacy one does (issue 32 on verl's V1 trainer): verl's validation
results reach ``on_validation_end`` per source (the initial validation as step 0), a plugin's
``run.request_stop`` ends verl's own V1 ``fit()`` loop after that step with a checkpoint, and the checkpoint
hooks fire around ``rlhooks.pt``.

verl's ``PPOTrainer.fit`` runs unchanged on the rlhooks trainer built without its ``__init__`` (which
needs Ray, workers and TransferQueue). What needs those is replaced on the instance, each keeping the
contract fit() relies on: ``step`` returns an (empty) ``KVBatchMeta`` as verl's does, verl's
``_validate`` returns metrics under verl's own key scheme (``val-core/<source>/<var>/<metric>``), the
checkpoint manager's ``update_weights``, TransferQueue's ``kv_clear`` and verl's own ``_compute_metrics``
(TransferQueue reads) are no-ops, the trained batch read from TransferQueue is a two-row Batch with its
columns, the actor worker group writes its checkpoint folder as verl's FSDP manager lays it out."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

pytest.importorskip("verl.trainer.ppo.v1", reason="needs verl[verl-core]")

from rlhooks.core.batch import Batch  # noqa: E402
from rlhooks.core.driver import StepDriver  # noqa: E402
from rlhooks.core.manager import RunManager  # noqa: E402
from rlhooks.engines.verl.checkpoints import MANIFEST_KEY, read_state  # noqa: E402
from rlhooks.engines.verl.config import rlhooks_config  # noqa: E402
from rlhooks.engines.verl.main import build_config  # noqa: E402

from .verl_shim_helpers import Validations, set_verls_checkpoint_callback  # noqa: E402

pytestmark = pytest.mark.verl

VAL = {"val-core/openai/gsm8k/reward/mean@1": 0.75, "val-core/math/reward/mean@1": 0.25}


class ActorFiles:
    """The actor worker group's ``save_checkpoint``/``load_checkpoint`` contract: the role folder with verl's FSDP file names."""

    def save_checkpoint(self, local_path, hdfs_path, global_step, max_ckpt_to_keep=None):
        os.makedirs(local_path, exist_ok=True)
        with open(os.path.join(local_path, "fsdp_config.json"), "w") as fh:
            json.dump({"world_size": 1}, fh)
        for name in ("model", "optim", "extra_state"):
            with open(os.path.join(local_path, f"{name}_world_size_1_rank_0.pt"), "wb") as fh:
                fh.write(b"weights of step %d" % global_step)

    def load_checkpoint(self, local_path, del_local_after_load=False):
        for name in ("model", "optim", "extra_state"):  # what verl's FSDP manager opens
            with open(os.path.join(local_path, f"{name}_world_size_1_rank_0.pt"), "rb") as fh:
                fh.read()


class NoWeightSync:
    def update_weights(self, step):
        pass


def v1_trainer(tmp_path, monkeypatch, plugin, steps=3, *overrides):
    import transfer_queue as tq
    from torchdata.stateful_dataloader import StatefulDataLoader
    from transfer_queue import KVBatchMeta
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    from rlhooks.engines.verl.v1.replay_buffer import RLHooksReplayBuffer
    from rlhooks.engines.verl.v1.trainer import RLHooksPPOTrainerSync

    cfg = build_config(None, [f"trainer.default_local_dir={tmp_path / 'ckpt'}", "trainer.logger=[console]",
                              "trainer.test_freq=1", "trainer.save_freq=-1", f"trainer.total_training_steps={steps}",
                              f"rlhooks.run.out_dir={tmp_path}", "rlhooks.run.name=run", "rlhooks.backends=[jsonl]",
                              *overrides])
    monkeypatch.setattr(PPOTrainer, "_validate", lambda self: dict(VAL))
    monkeypatch.setattr(PPOTrainer, "_compute_metrics", lambda self, batch, metrics, timing_raw, global_steps, epoch: None)
    monkeypatch.setattr(tq, "kv_clear", lambda keys, partition_id: None)
    t = object.__new__(RLHooksPPOTrainerSync)
    t.config, t.global_steps, t.use_critic, t.use_reference_policy = cfg, 0, False, False
    t.total_training_steps, t.steps_per_epoch = steps, steps
    t._saved_folder, t._checkpoint_writer, t._val_metrics, t._prompts_drawn = None, None, None, 0
    t.adapter_functions, t._step_metrics = (), {}
    t.actor_rollout_wg, t.checkpoint_manager = ActorFiles(), NoWeightSync()
    t.replay_buffer = object.__new__(RLHooksReplayBuffer)  # what rlhooks.pt reads of it: the verdict cache
    t.replay_buffer._dapo_classification_cache = {"train": {}, "val": {}}
    set_verls_checkpoint_callback(t, cfg)
    t.train_dataloader = StatefulDataLoader(list(range(8)), batch_size=2)
    t._init_dump_executor()
    t.rl = RunManager(rlhooks_config(cfg, steps=steps), extra_plugins=[("rec", plugin)])
    t.driver = StepDriver(t.rl)
    t.step = lambda metrics, timing_raw: KVBatchMeta(partition_id="train", keys=[], tags=[])
    t._trained_batch = lambda batch, verl_data=None: Batch({"uid": np.array(["a", "a"], dtype=object), "advantage": np.zeros(2),
                                            "acc": np.ones(2)})  # what _trained_batch reads from TransferQueue
    return t


def test_verls_v1_validation_reaches_plugins_per_source_and_their_metrics_are_logged(tmp_path, monkeypatch):
    rec = Validations()
    trainer = v1_trainer(tmp_path, monkeypatch, rec, 2)
    trainer._load_checkpoint()
    trainer.fit(agent_loop_manager=None)
    seen = rec.of("on_validation_end")
    assert [e[1] for e in seen] == [0, 1, 2]  # the initial validation (val_before_train) as step 0
    assert seen[0][2] == VAL and seen[0][3] == {"openai/gsm8k": {"score": 0.75, "reward/mean@1": 0.75},
                                                "math": {"score": 0.25, "reward/mean@1": 0.25}}
    assert rec.of("on_run_end") == [("on_run_end", "success")]
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    logged = {r["step"]: r["metrics"] for r in records if r["kind"] == "metrics"}
    assert logged[1]["held_out/sources"] == logged[2]["held_out/sources"] == 2  # merged into the step's metrics
    # issue 38 item 2: the initial validation reaches metrics.jsonl as step 0 (the run's starting accuracy)
    assert sorted(logged) == [0, 1, 2] and logged[0] == {**VAL, "held_out/sources": 2}


def test_a_plugin_stops_verls_v1_loop_with_a_checkpoint_and_resume_fires_on_load(tmp_path, monkeypatch):
    rec = Validations(stop_at=1)
    trainer = v1_trainer(tmp_path, monkeypatch, rec, 3)
    trainer._load_checkpoint()
    trainer.fit(agent_loop_manager=None)
    ckpt = tmp_path / "ckpt" / "global_step_1"
    assert sorted({e[1] for e in rec.of("on_step_end")}) == [1]  # verl's loop ended after step 1
    assert rec.of("on_save_checkpoint") == [("on_save_checkpoint", 1, ckpt)]
    assert rec.of("on_run_end") == [("on_run_end", "stopped")] and rec.run.stop_reason == "stop at 1"
    assert (tmp_path / "ckpt" / "latest_checkpointed_iteration.txt").read_text() == "1"
    assert (ckpt / "rlhooks.pt").exists() and (ckpt / "data.pt").exists()
    # the plugin's own file, written in on_save_checkpoint after the seal, is listed in it (rotated with it)
    assert read_state(ckpt)[MANIFEST_KEY]["validations.txt"] == (ckpt / "validations.txt").stat().st_size
    end = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()][-1]
    assert end["kind"] == "run_end" and end["status"] == "stopped"

    again = Validations()
    resumed = v1_trainer(tmp_path, monkeypatch, again, 2)
    resumed._load_checkpoint()
    assert resumed.global_steps == 1
    resumed.fit(agent_loop_manager=None)
    assert again.events[0] == ("on_load_checkpoint", 1, ckpt)  # before on_run_start, as documented
    assert sorted({e[1] for e in again.of("on_step_end")}) == [2]



def test_the_v1_trainer_reads_the_dataset_columns_a_sampler_declares(tmp_path, monkeypatch):
    """verl's V1 ``PPOTrainer.__init__`` and ``_init_dataloader`` (RLHFDataset over a parquet file) build the
    rlhooks sampler of verl's StatefulDataLoader with the columns it declares (``columns``)."""
    import attrs

    from rlhooks.core.config import ComponentConfig
    from rlhooks.engines.verl.v1 import trainer as v1

    from ..samplers.test_sampler_columns import ShortestFirst
    from .verl_shim_helpers import make_tokenizer, write_dataset

    class ShortestFirstByIndex(ShortestFirst):  # the columns this test's parquet file has
        columns = ("prompt_chars", "extra_info.index")

        def __init__(self, options, data, *, batch_size, seed=0):
            super(ShortestFirst, self).__init__(options, data, batch_size=batch_size, seed=seed)
            self.order = np.lexsort((data.column("extra_info.index"), data.column("prompt_chars")))
            self.pos = 0

    def with_sampler(*args, **kwargs):  # the sampler's config entry as the registry gives it, not installed
        comp = ComponentConfig(kind="sampler", name="shortest_first", path="sampler", options=None, on_error="raise",
                               obj=ShortestFirstByIndex, distribution="tests")
        return attrs.evolve(rlhooks_config(*args, **kwargs), sampler=comp)

    monkeypatch.setattr(v1, "rlhooks_config", with_sampler)
    data = write_dataset(tmp_path / "train.parquet", 12)
    cfg = build_config(None, [f"data.train_files={data}", f"data.val_files={data}", "data.train_batch_size=4",
                              "actor_rollout_ref.rollout.n=2", "data.max_prompt_length=64",
                              "data.dataloader_num_workers=0", f"rlhooks.run.out_dir={tmp_path}"])
    trainer = v1.RLHooksPPOTrainerSync(cfg)
    trainer.tokenizer, trainer.processor = make_tokenizer(), None  # what _init_tokenizer sets (no model here)
    trainer._init_dataloader()
    sampler = trainer.train_dataloader.sampler
    assert isinstance(sampler, ShortestFirstByIndex)
    rows = trainer.train_dataset.inner.dataframe.to_list()
    assert sampler.data.column("prompt_chars").tolist() == [float(len(r["prompt"][0]["content"])) for r in rows]
    assert sampler.data.column("extra_info.index").tolist() == [float(r["extra_info"]["index"]) for r in rows]
