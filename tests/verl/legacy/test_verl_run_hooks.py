"""The legacy trainer fires the hooks users expect (issue 32): verl's own ``_validate`` results reach
``on_validation_end`` per source, a plugin's ``run.request_stop`` ends the loop with verl's checkpoint,
and the checkpoint hooks fire around ``rlhooks.pt``. Real verl trainer code on the CPU stand-ins."""

from __future__ import annotations

import pytest

pytest.importorskip("verl.trainer.ppo.ray_trainer", reason="needs verl[verl-core]")

import numpy as np  # noqa: E402

from rlhooks.engines.verl.adapter import validation_per_source  # noqa: E402
from rlhooks.engines.verl.checkpoints import MANIFEST_KEY, read_state  # noqa: E402
from verl.trainer.ppo.ray_trainer import RayPPOTrainer  # noqa: E402
from .test_verl_trainer import make_trainer, verl_config  # noqa: E402
from ..verl_shim_helpers import Validations, write_dataset  # noqa: E402

pytestmark = pytest.mark.verl


@pytest.fixture(scope="module")
def data_file(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("data") / "train.parquet", rows=60)


@pytest.fixture(scope="module")
def tokenizer():
    from ..verl_shim_helpers import make_tokenizer

    return make_tokenizer()


def test_validation_per_source_reads_verls_own_metric_keys():
    # verl's _val_metrics_update on real inputs: sources with '/', n=2 samples, acc and reward
    sources = np.array(["openai/gsm8k"] * 4 + ["math"] * 4, dtype=object)
    uids = ["a", "a", "b", "b", "c", "c", "d", "d"]
    infos = {"reward": [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0], "acc": [1, 0, 1, 1, 0, 0, 1, 0]}
    metrics = RayPPOTrainer._val_metrics_update(None, sources, uids, infos, [])
    per = validation_per_source(metrics)
    assert set(per) == {"openai/gsm8k", "math"}
    assert per["openai/gsm8k"]["score"] == per["openai/gsm8k"]["acc/mean@2"] == 0.75
    assert per["math"]["score"] == 0.25
    assert per["math"]["reward/mean@2"] == 0.25 and "acc/best@2/mean" in per["math"]
    # every per-source key verl wrote is there, under its own name
    assert sum(len(m) - 1 for m in per.values()) == len(metrics)


def test_verls_validation_reaches_plugins_per_source(tmp_path, data_file, tokenizer):
    rec = Validations()
    cfg = verl_config(data_file, tmp_path, 3, {}, "trainer.val_before_train=true", "trainer.test_freq=2",
                      "trainer.save_freq=-1")
    make_trainer(cfg, tokenizer, rec).fit()
    vals = rec.of("on_validation_end")
    assert [v[1] for v in vals] == [0, 2, 3]  # before training (after on_run_start), test_freq, the last step
    assert [e[0] for e in rec.events[:2]] == ["on_run_start", "on_validation_end"]
    _, _, metrics, per_source = vals[1]
    assert per_source and all("score" in m for m in per_source.values())
    for source, m in per_source.items():
        core = [k for k in metrics if k.startswith(f"val-core/{source}/") and "/mean@" in k]
        assert m["score"] == metrics[core[0]]
    assert rec.logged[2]["held_out/sources"] == len(per_source)  # returned metrics: in the step's
    # issue 38 item 2: the initial validation reaches the backends as step 0, what plugins returned with it
    assert rec.logged[0] == {**vals[0][2], "held_out/sources": len(vals[0][3])}


def test_a_plugin_stops_verls_loop_with_a_checkpoint_and_resume_fires_on_load(tmp_path, data_file, tokenizer):
    rec = Validations(stop_at=1)
    cfg = verl_config(data_file, tmp_path, 4, {}, "trainer.save_freq=-1")
    make_trainer(cfg, tokenizer, rec).fit()
    ckpt = tmp_path / "ckpt" / "global_step_1"
    assert sorted({e[1] for e in rec.of("on_step_end")}) == [1]
    assert rec.of("on_save_checkpoint") == [("on_save_checkpoint", 1, ckpt)]
    assert rec.of("on_run_end") == [("on_run_end", "stopped")] and rec.run.stop_reason == "stop at 1"
    assert (ckpt / "rlhooks.pt").exists() and (ckpt / "data.pt").exists()
    # the plugin's file is in the seal's list: rotation removes it with the checkpoint, resume checks its size
    assert read_state(ckpt)[MANIFEST_KEY]["validations.txt"] == (ckpt / "validations.txt").stat().st_size

    again = Validations()
    make_trainer(verl_config(data_file, tmp_path, 2, {}, "trainer.save_freq=-1"), tokenizer, again).fit()
    assert again.events[0] == ("on_load_checkpoint", 1, ckpt)  # before on_run_start, as documented
    assert sorted({e[1] for e in again.of("on_step_end")}) == [2]


def test_verl_dataset_columns_read_what_a_sampler_declares(data_file, tokenizer):
    from omegaconf import OmegaConf

    from rlhooks.engines.verl.adapter import RowIndexedDataset, dataset_columns
    from verl.utils.dataset.rl_dataset import RLHFDataset

    cfg = OmegaConf.create({"filter_overlong_prompts": False, "max_prompt_length": 512})
    ds = RowIndexedDataset(RLHFDataset(data_files=str(data_file), tokenizer=tokenizer, config=cfg))
    cols = dataset_columns(ds, columns=("prompt_chars", "extra_info.index"))
    rows = ds.inner.dataframe.to_list()
    assert cols.column("prompt_chars").tolist() == [float(len(r["prompt"][0]["content"])) for r in rows]
    assert cols.column("extra_info.index").tolist() == [float(r["extra_info"]["index"]) for r in rows]
