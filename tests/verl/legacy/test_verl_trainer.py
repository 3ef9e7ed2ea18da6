"""The shim's fit loop end to end on CPU with real verl objects (see verl_shim_helpers for the stand-ins)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import torch
import pytest

pytest.importorskip("verl.trainer.ppo.ray_trainer", reason="needs verl[verl-core]")

from omegaconf import OmegaConf, open_dict  # noqa: E402
from ..verl_shim_helpers import Recorder, StepSampler, make_tokenizer, write_dataset  # noqa: E402
from .legacy_helpers import CPUTrainer  # noqa: E402

from rlhooks import hookimpl as rlhooks_hookimpl  # noqa: E402
from rlhooks.engines.verl.main import compose_verl_config  # noqa: E402
from verl.trainer.ppo.utils import Role  # noqa: E402
from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn  # noqa: E402

pytestmark = pytest.mark.verl

N, TRAIN_BS, GEN_BS = 4, 4, 4


@pytest.fixture(scope="module")
def tokenizer():
    return make_tokenizer()


@pytest.fixture(scope="module")
def data_file(tmp_path_factory) -> Path:
    return write_dataset(tmp_path_factory.mktemp("data") / "train.parquet", rows=60)


def verl_config(data_file: Path, out: Path, steps: int, rlhooks: dict, *extra: str, gen_bs: int = GEN_BS):
    cfg = compose_verl_config([
        f"data.train_files={data_file}", f"data.val_files={data_file}",
        f"data.train_batch_size={TRAIN_BS}", f"data.gen_batch_size={gen_bs}", "data.dataloader_num_workers=0",
        "data.filter_overlong_prompts=false", "data.shuffle=false", "data.seed=7",
        f"actor_rollout_ref.rollout.n={N}", "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.actor.use_kl_loss=false", "algorithm.use_kl_in_reward=false",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "trainer.logger=[console]", "trainer.val_before_train=false", "trainer.test_freq=-1",
        f"trainer.total_training_steps={steps}", "trainer.total_epochs=3", "trainer.save_freq=2",
        f"trainer.default_local_dir={out / 'ckpt'}", "trainer.use_v1=false", "trainer.device=cpu",
        "trainer.balance_batch=true", "trainer.experiment_name=shim-test",
        "actor_rollout_ref.rollout.agent.num_workers=2",  # the stand-in chunks rows over them as verl does
        *extra,
    ])
    with open_dict(cfg):
        cfg.rlhooks = OmegaConf.create({"run": {"out_dir": str(out / "runs")}, **rlhooks})
    return cfg


def make_trainer(cfg, tokenizer, recorder):
    dataset = RLHFDataset(data_files=cfg.data.train_files, tokenizer=tokenizer, config=cfg.data)
    trainer = CPUTrainer(
        config=cfg, tokenizer=tokenizer, role_worker_mapping={Role.ActorRollout: object},
        resource_pool_manager=None, train_dataset=dataset, val_dataset=dataset, collate_fn=collate_fn,
        rlhooks_plugins=[("recorder", recorder)],
    )
    return trainer.attach_standins()


DAPO = {"filters": [{"name": "dapo", "metric": "acc"}]}
# verl-style sampler in the verl config itself (the removed curriculum format), mapped to rlhooks
LEGACY_SAMPLER = ("+data.sampler.class_name=StepSampler", "+data.sampler.class_path=pkg://tests.verl.verl_shim_helpers")


def test_fit_runs_hooks_in_order_with_dapo_accumulation(tmp_path, data_file, tokenizer, capsys):
    rec = Recorder()
    # 5 prompts per generation batch: 1 or 2 'mixed' groups each, so a step can overshoot 4 and trims
    gen_bs = 5
    cfg = verl_config(data_file, tmp_path, 3, {**DAPO, "backends": ["jsonl"]}, gen_bs=gen_bs)  # + a real backend
    trainer = make_trainer(cfg, tokenizer, rec)
    trainer.fit()

    # hook order: run start, then per step (sampled, rewards)+ ... step end, log_metrics; run end
    names = [e[0] for e in rec.events]
    assert names[0] == "on_run_start" and names[-1] == "on_run_end" and rec.events[-1][1] == "success"
    for step in (1, 2, 3):
        seq = [e[0] for e in rec.events if len(e) > 1 and e[1] == step]
        gens = len([s for s in seq if s == "on_batch_sampled"])
        assert seq == ["on_batch_sampled", "on_rewards_computed"] * gens + ["on_step_end", "log_metrics"]
        logged = rec.logged[step]
        assert logged["train/num_gen_batches"] == gens
        generation_numbers = [e[2] for e in rec.of("on_batch_sampled") if e[1] == step]
        assert generation_numbers == list(range(1, gens + 1))
    # only 'mixed' prompts have reward variance, so a step needs several generation batches
    assert max(rec.logged[s]["train/num_gen_batches"] for s in (1, 2, 3)) >= 2
    # ... and more groups can survive than train: the surplus is trimmed (counted, not trained)
    for step in (1, 2, 3):
        logged = rec.logged[step]
        assert logged["filter/kept_groups"] - logged["filter/trained_groups"] == logged["filter/discarded_surplus"]
    assert any(rec.logged[s]["filter/discarded_surplus"] > 0 for s in (1, 2, 3))

    # prompts: dataset rows (not extra_info.index) with their sources and decoded prompt text
    sampled = rec.of("on_batch_sampled")
    first = sampled[0]
    assert first[3] == [0, 1, 2, 3, 4]  # shuffle=false: SequentialSampler rows
    assert first[4] == ["easy", "hard", "mixed", "easy", "hard"]
    assert first[5][0] == "easy what is 0 plus 1"
    # rewards hook: one row per trajectory, text not decoded unless asked
    rewards = rec.of("on_rewards_computed")
    assert all(e[3] == gen_bs * N for e in rewards)
    assert "response" not in rewards[0][4] and "prompt" not in rewards[0][4]

    # trimmed exactly to train_batch_size groups of n, all with reward variance; GRPO advantages
    for e in rec.of("on_step_end"):
        _, step, rows, adv, uid, acc, metrics = e
        assert rows == TRAIN_BS * N
        # verl's balance_batch reorders rows for the data-parallel ranks: regroup by uid
        order = np.argsort(uid, kind="stable")
        keys, counts = np.unique(uid, return_counts=True)
        assert len(keys) == TRAIN_BS and (counts == N).all()
        acc_g, adv_g = acc[order].reshape(TRAIN_BS, N), adv[order].reshape(TRAIN_BS, N)
        assert (acc_g.std(axis=1) > 0).all()
        # verl's GRPO: (r - mean) / (std_unbiased + eps)
        expected = (acc_g - acc_g.mean(1, keepdims=True)) / (acc_g.std(1, ddof=1, keepdims=True) + 1e-6)
        np.testing.assert_allclose(adv_g, expected, rtol=1e-5, atol=1e-5)
        assert "actor/pg_loss" in metrics and "timing_s/gen" in metrics  # engine metrics seen by on_step_end
    assert [len(b) for b in trainer.trained] == [TRAIN_BS * N] * 3
    for b in trainer.trained:
        assert b.batch["token_level_scores"].shape == b.batch["advantages"].shape

    # per-source metrics and hook metrics reach both the rlhooks backend and verl's console logger
    out = capsys.readouterr().out
    for step in (1, 2, 3):
        logged = rec.logged[step]
        assert logged["source/mixed/reward"] == pytest.approx(0.5)
        assert logged["source/easy/reward"] == 1.0 and logged["source/hard/reward"] == 0.0
        # source_metrics is on by default (not configured here): trained rows are all from 'mixed'
        assert logged["source/mixed/count"] == TRAIN_BS * N and logged["source/easy/count"] == 0
        assert logged["source/easy/generated_count"] > 0
        assert logged["test/trained_rows"] == TRAIN_BS * N
        assert logged["filter/trained_groups"] == TRAIN_BS
        line = next(ln for ln in out.splitlines() if ln.startswith(f"step:{step} - "))
        for key in ("source/mixed/reward", "train/num_gen_batches", "test/trained_rows", "critic/score/mean"):
            m = re.search(rf"{re.escape(key)}:([-0-9.e]+)", line)
            assert m is not None, f"{key} missing from verl's console line for step {step}"
            assert float(m.group(1)) == pytest.approx(logged[key], rel=1e-3)
    # the same merged metrics in the jsonl backend's file (written on its dispatch thread)
    records = [json.loads(x) for x in (tmp_path / "runs" / "shim-test" / "metrics.jsonl").read_text().splitlines()]
    by_step = {r["step"]: r["metrics"] for r in records if r["kind"] == "metrics"}
    assert sorted(by_step) == [1, 2, 3] and records[-1]["kind"] == "run_end"
    for step in (1, 2, 3):
        for key in ("source/mixed/reward", "source/easy/reward", "train/num_gen_batches", "filter/trained_groups",
                    "critic/score/mean", "actor/pg_loss"):
            assert by_step[step][key] == pytest.approx(rec.logged[step][key]), (step, key)
    # verl's own data metrics are computed on the trained (filtered) batch: mixed groups only
    assert rec.logged[1]["critic/score/mean"] == pytest.approx(0.5)


@pytest.mark.slow  # ~9 s; make test keeps the legacy resume with learning samplers (below), and every sampler's
# state across a resume is checked in the simulator (tests/reliability/test_resume.py)
def test_resume_restores_sampler_state_and_continues_the_curriculum(tmp_path, data_file, tokenizer):
    def drawn(rec, steps):
        return [e[3] for e in rec.of("on_batch_sampled") if e[1] in steps]

    full = Recorder()
    t_full = make_trainer(verl_config(data_file, tmp_path / "full", 4, DAPO, *LEGACY_SAMPLER), tokenizer, full)
    t_full.fit()

    first = Recorder()
    t1 = make_trainer(verl_config(data_file, tmp_path / "resumed", 2, DAPO, *LEGACY_SAMPLER), tokenizer, first)
    assert isinstance(t1.rl.sampler, StepSampler) and t1.train_dataloader.sampler is t1.rl.sampler
    t1.fit()
    ckpt = tmp_path / "resumed" / "ckpt" / "global_step_2"
    assert (ckpt / "data.pt").exists() and (ckpt / "rlhooks.pt").exists()
    state_at_2 = t1.rl.sampler.state_dict()

    second = Recorder()
    t2 = make_trainer(verl_config(data_file, tmp_path / "resumed", 4, DAPO, *LEGACY_SAMPLER), tokenizer, second)
    t2.fit()
    assert t2.actor_rollout_wg.loaded == ["2"]  # verl's own _load_checkpoint ran
    steps_run = sorted({e[1] for e in second.of("on_step_end")})
    assert steps_run == [3, 4]
    # the resumed run draws exactly what the uninterrupted run drew at steps 3 and 4 ...
    assert drawn(second, {3, 4}) == drawn(full, {3, 4})
    # ... because the sampler's state (position and reward statistics) came back
    rows_before = state_at_2["reward_rows"]
    assert second.logged[3]["sampler/reward_rows"] == full.logged[3]["sampler/reward_rows"]
    assert second.logged[3]["sampler/reward_rows"] > rows_before > 0
    assert t2.rl.sampler.state_dict() == t_full.rl.sampler.state_dict()


def test_remax_is_a_config_error_naming_the_key(tmp_path, data_file, tokenizer):
    from rlhooks import ConfigError

    cfg = verl_config(data_file, tmp_path, 1, {})
    with open_dict(cfg):
        cfg.algorithm.adv_estimator = "remax"
    with pytest.raises(ConfigError, match=r"algorithm.adv_estimator: remax is not supported"):
        make_trainer(cfg, tokenizer, Recorder())


def test_prompt_filters_run_before_generation_and_the_learning_state_is_checkpointed(tmp_path, data_file, tokenizer):
    """The pre-generation stage in verl's loop: easy (always right) and hard (always wrong) prompts
    seen once are skipped before generate_sequences; every generation batch keeps its size; the
    learning state goes into rlhooks.pt and comes back on resume."""
    import torch

    from rlhooks.core.manager import LEARNING_KEY

    gen_bs = 6
    selective = {**DAPO, "prompt_filters": [{"name": "selective_rollout", "p_easy": 0.05, "p_hard": 0.05,
                                             "adjust_step": 0.0, "seed": 1}]}
    rec = Recorder()
    cfg = verl_config(data_file, tmp_path, 8, selective, gen_bs=gen_bs)  # 60 rows: revisits from step 6
    trainer = make_trainer(cfg, tokenizer, rec)
    trainer.fit()

    sampled = rec.of("on_batch_sampled")
    assert all(len(e[3]) == gen_bs for e in sampled)  # the generation batch keeps its (divisible) size
    assert trainer.async_rollout_manager.calls == len(sampled)  # one generate_sequences per generation batch
    skipped = {s: sum(rec.logged[t].get(f"source/{s}/prompts_skipped", 0) for t in range(1, 9)) for s in ("easy", "hard", "mixed")}
    assert skipped["easy"] > 0 and skipped["hard"] > 0 and skipped["mixed"] == 0, skipped
    assert rec.logged[8]["prompt_filter/skipped_total"] == sum(skipped.values())
    # skipped prompts did not reach generation: revisited easy/hard prompts are rarely generated again
    seen: set[int] = set()
    again = {"easy": 0, "hard": 0, "mixed": 0}
    for e in sampled:
        for row, src in zip(e[3], e[4]):
            again[src] += row in seen
            seen.add(row)
    assert again["mixed"] > 0 and again["easy"] + again["hard"] < 0.2 * (skipped["easy"] + skipped["hard"]), (again, skipped)
    learning = trainer.rl.learning
    assert learning is not None and int(learning.times_sampled.sum()) == sum(e[3] for e in rec.of("on_rewards_computed")) // N

    state = torch.load(tmp_path / "ckpt" / "global_step_8" / "rlhooks.pt", weights_only=False)
    saved = state["components"][LEARNING_KEY]["learning"]
    resumed = make_trainer(verl_config(data_file, tmp_path, 8, selective, gen_bs=gen_bs), tokenizer, Recorder())
    resumed.global_steps = 8  # what fit() sets before loading; resume from the latest checkpoint
    resumed._load_checkpoint()
    assert resumed.rl.learning.state_dict() == saved == learning.state_dict()


@pytest.mark.parametrize("sampler", [
    pytest.param({"name": "learnability", "level": "prompt", "floor": 0.2}, id="learnability"),
    # the same resume path with the other learning-state sampler: ~9 s, in the slow suite (make test's budget)
    pytest.param({"name": "dump_ucb", "window": 40, "temperature": 5.0}, id="dump_ucb", marks=pytest.mark.slow)])
def test_resume_from_rlhooks_pt_with_prompt_filters_and_learning_samplers_equals_uninterrupted(tmp_path, data_file, tokenizer, sampler):
    """verl resume: selective_rollout (self-tuning p), the pre-generation totals, the learning state and
    a learning-driven sampler come back from rlhooks.pt; steps after the checkpoint draw, skip and log
    exactly what the uninterrupted run did."""
    conf = {**DAPO, "sampler": sampler, "prompt_filters": [
        {"name": "selective_rollout", "p_easy": 0.3, "p_hard": 0.3, "adjust_step": 0.05, "seed": 3}]}
    steering = ("prompt_filter/", "selective_rollout/", "sampler/", "learning/", "filter/", "train/num_gen_batches")

    def steered(rec, step):
        return {k: v for k, v in rec.logged[step].items() if k.startswith(steering) or k.endswith("/prompts_skipped")}

    full = Recorder()
    t_full = make_trainer(verl_config(data_file, tmp_path / "full", 8, conf, gen_bs=6), tokenizer, full)
    t_full.fit()
    first = Recorder()
    make_trainer(verl_config(data_file, tmp_path / "resumed", 6, conf, gen_bs=6), tokenizer, first).fit()
    second = Recorder()
    t2 = make_trainer(verl_config(data_file, tmp_path / "resumed", 8, conf, gen_bs=6), tokenizer, second)
    t2.fit()
    assert t2.actor_rollout_wg.loaded == ["6"]
    # selective_rollout's p moved before the checkpoint (on_step_end of step 6 included)
    assert (first.logged[6]["selective_rollout/p_easy"], first.logged[6]["selective_rollout/p_hard"]) != (0.3, 0.3)
    drawn = lambda rec: [(e[1], e[2], e[3]) for e in rec.of("on_batch_sampled") if e[1] in (7, 8)]
    assert drawn(second) == drawn(full)
    for step in (7, 8):
        assert steered(second, step) == steered(full, step), step
    assert second.logged[8]["prompt_filter/skipped_total"] == full.logged[8]["prompt_filter/skipped_total"] > 0
    assert t2.rl.state_dict() == t_full.rl.state_dict()


def test_kl_in_reward_is_applied_before_the_filters_like_the_dapo_recipe(tmp_path, data_file, tokenizer):
    """use_kl_in_reward + seq_final_reward: the penalty is in the metric the filter reads (no PluginError)."""
    beta = 0.5
    kl_keys = ("algorithm.use_kl_in_reward=true", f"algorithm.kl_ctrl.kl_coef={beta}", "algorithm.kl_ctrl.type=fixed")
    rec = Recorder()
    cfg = verl_config(data_file, tmp_path / "final", 2, {"filters": [{"name": "dapo", "metric": "seq_final_reward"}],
                                                          "rewards": ["reward_monitor"]}, *kl_keys)
    trainer = make_trainer(cfg, tokenizer, rec)
    trainer.fit()
    assert trainer.use_reference_policy
    for step in (1, 2):
        logged = rec.logged[step]
        # responses alternate 4 and 2 tokens, so the penalty (beta * 0.1 per token) differs inside every
        # group: every group has a spread in seq_final_reward, the first generation batch is enough
        assert logged["train/num_gen_batches"] == 1 and logged["filter/kept_groups"] == GEN_BS
        assert logged["actor/reward_kl_penalty"] == pytest.approx(0.1)
        assert logged["actor/reward_kl_penalty_coeff"] == pytest.approx(beta)
        assert logged["training/kl_divergence"] == pytest.approx(0.1)  # the KL to the reference policy
        assert logged["training/policy_update_kl"] == pytest.approx(0.01)  # the actor's ppo_kl, under its own name
    # log-probs once per generated row, not again for the trained batch
    assert trainer.ref_calls == [GEN_BS * N] * 2
    for b in trainer.trained:
        mask = b.batch["response_mask"].float()
        expected = b.batch["token_level_scores"] - beta * 0.1 * mask
        torch.testing.assert_close(b.batch["token_level_rewards"], expected)
        assert "old_log_probs" in b.batch.keys() and "ref_log_prob" in b.batch.keys()

    # the same data filtered on seq_reward (pre-KL): only the mixed groups have a spread
    rec = Recorder()
    cfg = verl_config(data_file, tmp_path / "pre", 1, {"filters": [{"name": "dapo", "metric": "seq_reward"}]}, *kl_keys)
    trainer = make_trainer(cfg, tokenizer, rec)
    trainer.fit()
    assert rec.logged[1]["train/num_gen_batches"] > 1
    assert rec.logged[1]["critic/score/mean"] == pytest.approx(0.5)
    assert trainer.ref_calls == [GEN_BS * N] * int(rec.logged[1]["train/num_gen_batches"])


def _one_generated_batch(trainer_cls, tmp_path, data_file, tokenizer):
    """A CPU trainer of ``trainer_cls`` and one generated batch of it, before its log-prob pass."""
    cfg = verl_config(data_file, tmp_path, 1, {})
    dataset = RLHFDataset(data_files=cfg.data.train_files, tokenizer=tokenizer, config=cfg.data)
    trainer = trainer_cls(config=cfg, tokenizer=tokenizer, role_worker_mapping={Role.ActorRollout: object},
                          resource_pool_manager=None, train_dataset=dataset, val_dataset=dataset,
                          collate_fn=collate_fn).attach_standins()
    batch = trainer.async_rollout_manager.generate_sequences(trainer._sample_prompts(1)[0].repeat(N, interleave=True))
    batch.batch["response_mask"] = batch.batch["attention_mask"][:, -batch.batch["responses"].shape[-1]:]
    return trainer, batch


def test_router_replay_r2_r3_conflict_is_verls_error(tmp_path, data_file, tokenizer):
    """verl 0.9.1 fit()'s check: routed_experts from both the rollout (R3) and the log-prob pass (R2)."""
    class RoutedTrainer(CPUTrainer):
        def _compute_old_log_prob(self, batch):
            out, mfu = super()._compute_old_log_prob(batch)
            out.batch["routed_experts"] = torch.zeros(batch.batch["responses"].shape, dtype=torch.long)
            return out, mfu

    trainer, batch = _one_generated_batch(RoutedTrainer, tmp_path, data_file, tokenizer)
    assert "old_log_probs" in trainer._policy_log_probs(batch, {}, {}).batch.keys()  # R2 alone is fine
    # the rollout's (R3): experts per token of the whole sequence, per layer and top-k
    batch.batch["routed_experts"] = torch.zeros((*batch.batch["input_ids"].shape, 1, 2), dtype=torch.long)
    with pytest.raises(ValueError, match="conflicting router replay configuration"):
        trainer._policy_log_probs(batch, {}, {})


def test_log_probs_without_old_log_probs_is_verls_assertion(tmp_path, data_file, tokenizer):
    """verl 0.9.1 fit()'s check after the old log-prob pass: a worker that returns no old_log_probs stops
    the step there, not later inside the advantage or the actor update."""
    class NoOldLogProbTrainer(CPUTrainer):
        def _compute_old_log_prob(self, batch):
            out, mfu = super()._compute_old_log_prob(batch)
            out.batch.pop("old_log_probs")
            return out, mfu

    trainer, batch = _one_generated_batch(NoOldLogProbTrainer, tmp_path, data_file, tokenizer)
    with pytest.raises(AssertionError, match='"old_log_probs" not in'):
        trainer._policy_log_probs(batch, {}, {})


def test_sample_rows_carry_sample_id_policy_version_and_advantage(tmp_path, data_file, tokenizer):
    """sample_level_logging.md's fields: a trajectory id, the weights' version, the advantage (verl's)."""
    def tables(out, name="samples/top_bottom_k"):
        lines = [json.loads(x) for x in (out / "runs" / "shim-test" / "metrics.jsonl").read_text().splitlines()]
        return {r["step"]: r["rows"] for r in lines if r["kind"] == "table" and r["name"] == name}

    rl = {**DAPO, "backends": ["jsonl"],
          "samples": [{"name": "top_bottom_k", "k": 3}, {"name": "per_source_samples", "k": 1}]}
    trainer = make_trainer(verl_config(data_file, tmp_path, 2, rl), tokenizer, Recorder())
    trainer.fit()
    by_step = tables(tmp_path)
    assert sorted(by_step) == [1, 2]
    trained_ids = {s: set(b.non_tensor_batch["rlhooks_sample_id"].tolist()) for s, b in zip((1, 2), trainer.trained)}
    for step, rows in by_step.items():
        assert len(rows) == 6
        for row in rows:
            uid, _, j = row["sample_id"].rpartition("/")
            assert uid == row["uid"] and 0 <= int(j) < N  # <uid>/<response number in its group>
            assert row["policy_version"] == step - 1  # generated with the weights of the previous step's update
            if row["sample_id"] in trained_ids[step]:
                assert isinstance(row["advantage"], float)
            else:
                assert row["advantage"] is None  # dropped by the filter: never trained
        assert any(r["advantage"] is None for r in rows)  # ties go to the first arrivals: 'easy' / 'hard' rows
        mixed = [r for r in tables(tmp_path, "samples/per_source")[step] if r["data_source"] == "mixed"]
        assert mixed and all(isinstance(r["advantage"], float) for r in mixed)  # the first mixed groups trained
    # ids are unique per trajectory across the run and survive balance_batch's reordering
    all_ids = [i for b in trainer.trained for i in b.non_tensor_batch["rlhooks_sample_id"].tolist()]
    assert len(set(all_ids)) == len(all_ids) == 2 * TRAIN_BS * N
    for b in trainer.trained:
        uids = b.non_tensor_batch["uid"].tolist()
        assert all(i.rpartition("/")[0] == u for i, u in zip(b.non_tensor_batch["rlhooks_sample_id"].tolist(), uids))

    # resumed from the step-2 checkpoint: step 3 is generated by step 2's weights
    trainer = make_trainer(verl_config(data_file, tmp_path, 3, rl), tokenizer, Recorder())
    trainer.fit()
    assert {r["policy_version"] for r in tables(tmp_path)[3]} == {2}


class RewardColumns:
    """What on_rewards_computed and on_step_end see of the rlhooks reward functions."""

    def __init__(self):
        self.scored: list[dict] = []
        self.trained: list[dict] = []

    @staticmethod
    def _columns(batch):
        return {c: np.asarray(batch[c]).copy() for c in ("uid", "reward", "reward_fn/check_answer",
                                                          "reward_fn/format_approx", "response", "target")}

    @rlhooks_hookimpl
    def on_rewards_computed(self, step, batch):
        self.scored.append({**self._columns(batch), "functions": batch.meta["reward_functions"]})

    @rlhooks_hookimpl
    def on_step_end(self, step, batch, metrics):
        self.trained.append({**self._columns(batch), "advantage": batch["advantage"].copy(), "metrics": dict(metrics)})


def _fit_with_reward_functions(tmp_path, data_file, tokenizer, steps, *overrides):
    """A CPU run whose rlhooks reward functions (check_answer + 0.5 format_approx) replace verl's score."""
    seen = RewardColumns()
    cfg = verl_config(data_file, tmp_path, steps, {"rewards": ["check_answer", {"name": "format_approx", "weight": 0.5}]},
                      *overrides)
    dataset = RLHFDataset(data_files=cfg.data.train_files, tokenizer=tokenizer, config=cfg.data)
    trainer = CPUTrainer(
        config=cfg, tokenizer=tokenizer, role_worker_mapping={Role.ActorRollout: object},
        resource_pool_manager=None, train_dataset=dataset, val_dataset=dataset, collate_fn=collate_fn,
        rlhooks_plugins=[("recorder", Recorder()), ("rewards", seen)],
    ).attach_standins()
    trainer.fit()
    return trainer, seen


def test_rlhooks_reward_functions_replace_verls_score_at_the_last_token(tmp_path, data_file, tokenizer, monkeypatch):
    from rlhooks.engines.verl.legacy import adapter
    from rlhooks.plugins.rewards.functions import check_answer, format_approx

    built = []  # trajectory Batches built from DataProtos: once per generation batch, not again at step end
    real = adapter.trajectory_batch
    monkeypatch.setattr(adapter, "trajectory_batch", lambda *a, **k: built.append(1) or real(*a, **k))
    trainer, seen = _fit_with_reward_functions(tmp_path, data_file, tokenizer, 2)

    assert len(seen.scored) == 2 and len(seen.trained) == 2
    assert len(built) == len(seen.scored)  # one generation batch per step here: one Batch per step
    for cols in seen.scored:
        assert cols["functions"] == ("check_answer", "format_approx")
        exact = np.array([check_answer(r, t) for r, t in zip(cols["response"], cols["target"])])
        approx = np.array([format_approx(r, t) for r, t in zip(cols["response"], cols["target"])])
        np.testing.assert_allclose(cols["reward_fn/check_answer"], exact)
        np.testing.assert_allclose(cols["reward_fn/format_approx"], approx)
        np.testing.assert_allclose(cols["reward"], exact + 0.5 * approx)
    # the trained batch is the collected one (same rows, same columns) plus the advantage
    for scored, trained in zip(seen.scored, seen.trained):
        for c in ("uid", "reward", "reward_fn/check_answer", "reward_fn/format_approx", "response"):
            assert trained[c].tolist() == scored[c].tolist(), c
        assert np.isfinite(trained["advantage"]).all()
        assert not any(k.startswith("rewards/errors/") for k in trained["metrics"])  # no function failed
    # in verl's tensors the total sits at each response's last valid token, as verl's reward managers put it
    for dp, scored in zip(trainer.trained, seen.scored):
        scores, mask = dp.batch["token_level_scores"], dp.batch["response_mask"]
        last = mask.sum(-1) - 1
        assert len(set(last.tolist())) > 1  # ragged responses: the last token is not one column
        at_last = scores[np.arange(len(dp)), last]
        assert float((scores.abs().sum(-1) - at_last.abs()).abs().max()) == 0.0  # nothing elsewhere
        by_uid = dict(zip(scored["uid"].tolist(), scored["reward"].tolist()))
        for u, r in zip(dp.non_tensor_batch["uid"].tolist(), at_last.tolist()):
            assert r == pytest.approx(by_uid[u])


def test_kl_in_reward_follows_the_rlhooks_reward_functions(tmp_path, data_file, tokenizer):
    """use_kl_in_reward with rlhooks reward functions: the penalty applies to the rlhooks total that
    place_rewards writes, not to verl's score it replaces."""
    beta = 0.5
    kl_keys = ("algorithm.use_kl_in_reward=true", f"algorithm.kl_ctrl.kl_coef={beta}", "algorithm.kl_ctrl.type=fixed")
    trainer, seen = _fit_with_reward_functions(tmp_path, data_file, tokenizer, 1, *kl_keys)
    for dp, scored in zip(trainer.trained, seen.scored):
        scores, mask = dp.batch["token_level_scores"], dp.batch["response_mask"].float()
        np.testing.assert_allclose(scores.sum(-1).numpy(), scored["reward"], rtol=1e-6)
        torch.testing.assert_close(dp.batch["token_level_rewards"], scores - beta * 0.1 * mask)


@pytest.mark.parametrize("world_size, agent_workers", [(8, 2), (2, 8)])
def test_adaptive_generation_batches_stay_divisible_for_the_rollout_workers(tmp_path, data_file, tokenizer,
                                                                            world_size, agent_workers):
    """run.gen_batch_sizing: adaptive cuts a step's later generation batches to what is missing, in
    multiples of lcm(world_size, agent.num_workers) / gcd(that, n) prompts: with n=4, even sizes for
    8 rollout workers, and for 2 rollout workers under verl's default 8 agent loop workers (whose
    DataProto.chunk, in the stand-in as in verl, refuses rows that do not split evenly)."""
    rec = Recorder()
    cfg = verl_config(data_file, tmp_path, 3, {**DAPO, "run": {"out_dir": str(tmp_path / "runs"),
                                                               "gen_batch_sizing": "adaptive"}},
                      f"actor_rollout_ref.rollout.agent.num_workers={agent_workers}", gen_bs=10)
    trainer = make_trainer(cfg, tokenizer, rec)
    trainer.actor_rollout_wg.world_size = world_size
    trainer.fit()
    by_step: dict[int, list[int]] = {}
    for e in rec.of("on_batch_sampled"):
        by_step.setdefault(e[1], []).append(len(e[3]))
    assert all(sizes[0] == 10 for sizes in by_step.values())
    later = [s for sizes in by_step.values() for s in sizes[1:]]
    assert later and all(s % 2 == 0 and s < 10 for s in later), by_step
    assert any(s % 4 for s in later), by_step  # not merely whole batches: a size the rule had to round
    assert [len(b) for b in trainer.trained] == [TRAIN_BS * N] * 3


class _RowsOnly(torch.utils.data.Dataset):
    """A custom verl dataset (data.custom_cls) that has rows but no HuggingFace ``dataframe``."""

    def __init__(self, inner):
        self.inner = inner

    def __len__(self):
        return len(self.inner)

    def __getitem__(self, item):
        return self.inner[item]


def test_a_dataset_without_a_dataframe_trains_unless_a_component_needs_its_columns(tmp_path, data_file, tokenizer):
    """The dataset check asks for the data_source column only when a sampler or prompt filter reads it."""
    from rlhooks.core.data import DataError

    def build(rlhooks_block):
        cfg = verl_config(data_file, tmp_path / str(len(rlhooks_block)), 1, rlhooks_block)
        dataset = _RowsOnly(RLHFDataset(data_files=cfg.data.train_files, tokenizer=tokenizer, config=cfg.data))
        return CPUTrainer(config=cfg, tokenizer=tokenizer, role_worker_mapping={Role.ActorRollout: object},
                          resource_pool_manager=None, train_dataset=dataset, val_dataset=dataset,
                          collate_fn=collate_fn, rlhooks_plugins=[("recorder", rec)]).attach_standins()

    rec = Recorder()
    trainer = build(DAPO)
    trainer.fit()
    assert rec.events[-1] == ("on_run_end", "success") and rec.logged[1]["filter/trained_groups"] == TRAIN_BS
    with pytest.raises(DataError, match=r"(?s)the rlhooks sampler 'multi_source' \(sampler\) needs the dataset's "
                                        r"data_source column.*remove that component"):
        build({"sampler": {"name": "multi_source"}})
