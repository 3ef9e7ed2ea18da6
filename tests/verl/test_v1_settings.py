"""verl V1 settings on the rlhooks path (issue 39): each works as in verl or is refused before Ray starts with
the key named. On real verl objects (its config, replay buffer, trainer construction, rollout skip); no Ray."""

from __future__ import annotations

import pytest

pytest.importorskip("verl.trainer.ppo.v1", reason="needs verl[verl-core]")

from rlhooks.core.errors import ConfigError  # noqa: E402
from rlhooks.engines.verl.main import build_config  # noqa: E402

pytestmark = pytest.mark.verl


def test_a_colocated_reward_model_is_refused_at_start_naming_the_key():
    """verl refuses filtering with a colocated reward model (it scores after sampling); on the rlhooks path
    the buffer always reads scores when groups finish, so the guard applies to every run."""
    with pytest.raises(ConfigError, match=r"reward\.reward_model\.enable_resource_pool: is false with "
                                          r"reward\.reward_model\.enable=true .*enable_resource_pool=true"):
        build_config(None, ["reward.reward_model.enable=true"])
    cfg = build_config(None, ["reward.reward_model.enable=true", "reward.reward_model.enable_resource_pool=true"])
    assert cfg.reward.reward_model.enable_resource_pool


def _rollout_skip_sync_step(cfg, then) -> int:
    from verl.utils.skip import SkipManager

    SkipManager.init(cfg)  # as PPOTrainer.fit does with the trainer's config
    try:
        return SkipManager.skip_instances["rollout_tq"].parameter_sync_step
    finally:
        SkipManager.init(then)  # verl's class-level state, as the next trainer would leave it


def test_verls_rollout_skip_reads_the_separate_async_parameter_sync_step():
    """verl's rollout skip looks up trainer.v1.<trainer_mode>.parameter_sync_step by the mode's name
    (rlhooks_separate_async): the value verl's separate_async trainer reads is mirrored there."""
    cfg = build_config(None, ["trainer.v1.trainer_mode=rlhooks_separate_async",
                              "trainer.v1.separate_async.parameter_sync_step=2"])
    assert cfg.trainer.v1.rlhooks_separate_async.parameter_sync_step == 2
    sync = build_config(None, [])
    assert _rollout_skip_sync_step(cfg, sync) == 2
    assert _rollout_skip_sync_step(sync, sync) == 1  # sync: none, as verl's sync mode
    with pytest.raises(ConfigError, match=r"trainer\.v1\.rlhooks_separate_async\.parameter_sync_step: is 3 but "
                                          r"verl's trainer\.v1\.separate_async\.parameter_sync_step is 2"):
        build_config(None, ["trainer.v1.trainer_mode=rlhooks_separate_async",
                            "trainer.v1.separate_async.parameter_sync_step=2",
                            "+trainer.v1.rlhooks_separate_async.parameter_sync_step=3"])


def _buffer():
    from rlhooks.engines.verl.v1.replay_buffer import RLHooksReplayBuffer

    # the arguments verl's _build_replay_buffer gives a custom sampler
    return RLHooksReplayBuffer(trainer_mode="sync", trainer_config={}, max_off_policy_threshold=8,
                               max_off_policy_strategy="drop", sampler_kwargs={}, refill_fn=lambda n: n)


def test_sync_refill_failed_groups_reaches_the_rlhooks_buffer():
    """trainer.v1.sampler.sync_refill_failed_groups=true: verl passes it only to its built-in buffer; the
    rlhooks trainer hands it to the rlhooks buffer, whose verl eviction then refills failed groups."""
    buffer = _buffer()
    buffer.attach(object(), filters=False, train_batch_size=4, gen_batch_size=1, max_inflight_gen_batches=1,
                  sync_refill_failed_groups=True)
    assert buffer.sync_refill_failed_groups and buffer.gen_batch_size == 1
    buffer.failure_keys["train"] = {"failed"}  # a group with no trajectory left
    buffer.finished_keys["train"] = set()
    assert buffer._terminal_eviction_reasons(1, "train")[2] == {"failed"}  # verl's sample() refills these
    with pytest.raises(ValueError, match="sync_refill_failed_groups requires gen_batch_size=1"):  # verl's rule
        _buffer().attach(object(), filters=False, train_batch_size=4, gen_batch_size=2, max_inflight_gen_batches=1,
                         sync_refill_failed_groups=True)
    off = _buffer()
    off.attach(object(), filters=False, train_batch_size=4, gen_batch_size=4, max_inflight_gen_batches=1)
    off.failure_keys["train"] = {"failed"}
    assert off._terminal_eviction_reasons(1, "train")[2] == set()  # verl's default: not refilled


def test_the_rlhooks_trainer_passes_sync_refill_failed_groups_from_the_config(tmp_path):
    from rlhooks.engines.verl.v1.trainer import RLHooksPPOTrainerSync

    from .verl_shim_helpers import make_tokenizer, write_dataset

    data = write_dataset(tmp_path / "train.parquet", 8)
    cfg = build_config(None, [f"data.train_files={data}", f"data.val_files={data}", "data.train_batch_size=4",
                              "data.max_prompt_length=16", "data.dataloader_num_workers=0",
                              "trainer.v1.sampler.sync_refill_failed_groups=true"])
    trainer = RLHooksPPOTrainerSync(cfg)
    trainer.tokenizer, trainer.processor = make_tokenizer(), None  # what _init_tokenizer sets (no model here)
    trainer._init_dataloader()
    assert trainer.replay_buffer.sync_refill_failed_groups is True
    assert trainer.replay_buffer.gen_batch_size == 1 == trainer.config.data.gen_batch_size  # verl's rule


def test_the_train_dataloader_is_verls_own_rebuilt_over_the_row_indexed_dataset(tmp_path, monkeypatch):
    """issue 39 item 3: ``_init_dataloader`` keeps what verl's built (its arguments read back from verl's loader,
    its sampler when rlhooks has none), only the dataset (each prompt's row) and batch size are rlhooks's."""
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    from rlhooks.engines.verl.adapter import RowIndexedDataset
    from rlhooks.engines.verl.v1.trainer import RLHooksPPOTrainerSync

    from .verl_shim_helpers import make_tokenizer, write_dataset

    built = {}
    verls = PPOTrainer._init_dataloader

    def init_dataloader(self):  # verl's, the loader it built kept aside
        verls(self)
        built["loader"] = self.train_dataloader

    monkeypatch.setattr(PPOTrainer, "_init_dataloader", init_dataloader)
    data = write_dataset(tmp_path / "train.parquet", 8)
    cfg = build_config(None, [f"data.train_files={data}", f"data.val_files={data}", "data.train_batch_size=4",
                              "data.max_prompt_length=16", "data.dataloader_num_workers=1"])
    trainer = RLHooksPPOTrainerSync(cfg)
    trainer.tokenizer, trainer.processor = make_tokenizer(), None  # what _init_tokenizer sets (no model here)
    trainer._init_dataloader()
    ours, theirs = trainer.train_dataloader, built["loader"]
    assert ours is not theirs and isinstance(ours.dataset, RowIndexedDataset) and ours.dataset.inner is theirs.dataset
    assert ours.sampler is theirs.sampler and ours.batch_size == theirs.batch_size == 4  # no rlhooks sampler, filters
    for name in ("num_workers", "collate_fn", "drop_last", "pin_memory", "timeout", "worker_init_fn", "prefetch_factor",
                 "persistent_workers", "generator", "in_order", "snapshot_every_n_steps"):
        assert getattr(ours, name) == getattr(theirs, name), name
    assert (ours.num_workers, ours.drop_last) == (1, True)


def test_the_checkpoint_follows_the_installed_verls_callback_and_transfer_queue_gate(monkeypatch):
    """verl 0.9.1 calls its checkpoint callback and always writes TransferQueue's state in async modes; verl
    main has no callback and writes it only where _tq_supports_checkpoint() says TransferQueue can."""
    from verl.trainer.ppo.v1 import trainer_base

    from rlhooks.engines.verl.v1.trainer import tq_checkpoint_wanted

    gate = getattr(trainer_base, "_tq_supports_checkpoint", None)  # verl main's; 0.9.1 has none
    assert tq_checkpoint_wanted("colocate_async") == tq_checkpoint_wanted("separate_async") == (gate is None or gate())
    assert not tq_checkpoint_wanted("sync")
    monkeypatch.delattr(trainer_base, "_tq_supports_checkpoint", raising=False)  # verl 0.9.1: always, in async modes
    assert tq_checkpoint_wanted("colocate_async") and tq_checkpoint_wanted("separate_async")
    monkeypatch.setattr(trainer_base, "_tq_supports_checkpoint", lambda: False, raising=False)  # verl main's gate
    assert not tq_checkpoint_wanted("colocate_async")
    monkeypatch.setattr(trainer_base, "_tq_supports_checkpoint", lambda: True, raising=False)
    assert tq_checkpoint_wanted("separate_async")
