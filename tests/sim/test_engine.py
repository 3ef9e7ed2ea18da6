"""The simulated engine: determinism, GRPO, the learner, every plugin firing, resume."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from rlhooks import Batch, hookimpl
from rlhooks.engines.sim.engine import SimEngine, grpo_advantage, load_sim_config
from rlhooks.engines.sim.learner import LearnerOptions, SimLearner
from rlhooks.plugins.rewards.functions import check_answer, format_exact
from .conftest import make_engine, small_config

CURRICULUM = {"name": "reward_curriculum", "complexity_source": "chain", "initial_complexity_percentile": 20,
              "num_intervals": 4, "reward_threshold": 7.0, "min_batches_per_level": 2, "check_frequency": 1,
              "adaptive_weights": True, "update_frequency": 1}


def _strip_timing(m: dict) -> dict:
    return {k: v for k, v in m.items() if not k.startswith("timing/")}


class Recorder:
    """An extra plugin recording every step's merged metrics and the trained batches."""

    def __init__(self) -> None:
        self.metrics: dict[int, dict] = {}
        self.sampled = 0
        self.trained: list[Batch] = []

    @hookimpl
    def on_batch_sampled(self, step, batch):
        self.sampled += 1

    @hookimpl
    def on_step_end(self, step, batch):
        self.trained.append(batch)

    @hookimpl
    def log_metrics(self, step, metrics):
        self.metrics[step] = _strip_timing(dict(metrics))


def _run(cfg, data, run_dir, steps=None):
    from rlhooks.core.manager import RunManager

    rec = Recorder()
    config = load_sim_config(cfg)
    engine = SimEngine(config, data, manager=RunManager(config, run_dir=run_dir, extra_plugins=[("recorder", rec)]))
    engine.run(steps)
    return engine, rec


def test_grpo_advantage_matches_a_direct_computation():
    reward = np.array([1.0, 0.0, 1.0, 1.0, 2.0, 2.0, 5.0])
    batch = Batch({"uid": np.array([0, 0, 0, 0, 1, 1, 2]), "reward": reward})
    adv = grpo_advantage(reward, batch)
    g0 = reward[:4]
    np.testing.assert_allclose(adv[:4], (g0 - g0.mean()) / (g0.std(ddof=1) + 1e-6))
    np.testing.assert_allclose(adv[4:6], 0.0)  # no spread: no signal
    assert adv[6] == 0.0  # a single response has no group to compare with


def test_learner_probability_falls_with_difficulty_and_rises_with_skill():
    learner = SimLearner(LearnerOptions(), ("a",))
    d = np.linspace(0, 1, 11)
    p = learner.p_correct(np.zeros(11, int), d)
    assert np.all(np.diff(p) < 0)
    learner.skill += 0.2
    assert np.all(learner.p_correct(np.zeros(11, int), d) > p)


def test_unsolvable_items_stay_unsolved_and_are_mostly_hard():
    learner = SimLearner(LearnerOptions(unsolvable=0.1), ("a",))
    d = np.random.default_rng(0).random(20_000)
    offsets = learner.item_offsets(d, seed=3)
    out = np.isinf(offsets)
    assert 0.09 < out.mean() < 0.11  # the configured share, more of it among hard items
    assert out[d > 0.5].mean() > 2.5 * out[d < 0.5].mean()
    learner.skill += 100.0  # whatever is trained
    p = learner.p_correct(np.zeros(len(d), int), d, offsets)
    assert np.all(p[out] == 0) and np.all(p[~out] > 0.99)
    plain = SimLearner(LearnerOptions(unsolvable=0.0), ("a",)).item_offsets(d, seed=3)
    assert np.isfinite(plain).all() and np.array_equal(plain[~out], offsets[~out])  # same hidden offsets


def test_format_slips_become_rare_as_a_source_trains():
    learner = SimLearner(LearnerOptions(), ("a", "b"))
    batch = Batch({"uid": np.repeat(np.arange(4), 2)})
    for _ in range(60):  # 60 steps training only source a
        learner.update(np.zeros(8, int), np.full(8, 0.05), np.tile([1.0, -1.0], 4), batch.groups)
    assert learner.malformed[0] < 0.01 < learner.malformed[1] == LearnerOptions().malformed_rate


def test_learner_learns_only_from_groups_with_signal():
    learner = SimLearner(LearnerOptions(), ("a", "b"))
    before = learner.skill.copy()
    batch = Batch({"uid": np.repeat([0, 1], 4)})
    source = np.array([0] * 4 + [1] * 4)
    diff = np.full(8, 0.05)
    adv = np.array([1.0, -1.0, 1.0, -1.0, 0.0, 0.0, 0.0, 0.0])  # group of source b: all the same
    learner.update(source, diff, adv, batch.groups)
    assert np.all(learner.skill[0] >= before[0]) and learner.skill[0, 0] > before[0, 0]
    np.testing.assert_array_equal(learner.skill[1], before[1])


def test_responses_are_real_text_scored_by_the_reward_functions(small_data, tmp_path):
    engine, rec = _run(small_config(tmp_path, run={"steps": 2}), small_data, tmp_path / "r")
    gen = engine.driver.generation(3, engine).trajectories  # scored by core's driver, not the engine
    resp, target = gen["response"], gen["target"]
    # components are what the functions give on the text, and the total is their sum
    np.testing.assert_allclose(gen["reward_fn/format_exact"], [format_exact(r, t) for r, t in zip(resp, target)])
    np.testing.assert_allclose(gen["reward_fn/check_answer"], [check_answer(r, t) for r, t in zip(resp, target)])
    total = sum(gen[f"reward_fn/{k}"] for k in gen.meta["reward_functions"])
    np.testing.assert_allclose(gen["reward"], total)
    # right and wrong, well formed and malformed responses all occur; acc agrees with check_answer
    assert 0 < gen["acc"].mean() < 1
    assert np.any(gen["reward_fn/format_exact"] == 0) and np.any(gen["reward_fn/format_exact"] == 3)
    np.testing.assert_array_equal(gen["acc"] == 1, gen["reward_fn/check_answer"] == 3.0)
    assert gen.meta["reward_extra_keys"] == ["acc"]
    # uids are unique per group across generation batches
    assert len(np.unique(gen["uid"])) == len(gen) // engine.n


def test_same_seed_same_metrics_other_seed_differs(small_data, tmp_path):
    cfg = small_config(tmp_path, sampler=CURRICULUM, filters=["dapo"])
    _, a = _run(cfg, small_data, tmp_path / "a")
    _, b = _run(cfg, small_data, tmp_path / "b")
    assert a.metrics == b.metrics and len(a.metrics) == 6
    cfg2 = small_config(tmp_path, sampler=CURRICULUM, filters=["dapo"], run={"seed": 1})
    _, c = _run(cfg2, small_data, tmp_path / "c")
    assert c.metrics != a.metrics


def test_engine_metrics_and_trained_batches(small_data, tmp_path):
    engine, rec = _run(small_config(tmp_path, filters=["dapo"]), small_data, tmp_path / "r")
    last = rec.metrics[6]
    for name in small_data.source_names:
        assert 0 < last[f"sim/accuracy/{name}"] < 1 and 0 < last[f"sim/skill/{name}"] < 1
    assert last["actor/ppo_kl"] > 0 and last["actor/entropy"] > 0
    for batch in rec.trained:  # DAPO + trim: exactly train_batch_size groups, each with reward spread
        assert batch.groups.n_groups == 16 and len(batch) == 64
        assert np.all(batch.groups.std(batch["acc"]) > 0)
        np.testing.assert_allclose(batch.groups.mean(batch["advantage"]), 0, atol=1e-9)
    assert last["sim/trained_trajectories"] == 6 * 64
    assert last["sim/generated_trajectories"] == engine.generated_trajectories >= 6 * 24 * 4


def test_uniform_sampling_without_a_sampler_covers_every_source(small_data, tmp_path):
    engine, rec = _run(small_config(tmp_path), small_data, tmp_path / "u")
    assert engine.sampler is None
    seen = np.concatenate([b["data_source"] for b in rec.trained])
    assert set(seen) == set(small_data.source_names)


def test_uniform_sampling_shuffles_once_per_epoch_and_drops_the_last_partial_batch(tiny_data, tmp_path):
    """Without a sampler the engine draws as verl's dataloader does (RandomSampler, drop_last=True):
    each epoch is a new order, no prompt twice within an epoch, and a resume continues the epoch."""
    cfg = small_config(tmp_path, run={"gen_batch_size": 36})  # 240 rows: 6 batches an epoch, 24 rows dropped
    engine = make_engine(cfg, tiny_data, tmp_path / "e")
    draws = [engine.sample(1)[0]["index"] for _ in range(13)]
    assert all(len(d) == 36 for d in draws)
    for epoch in (draws[:6], draws[6:12]):
        rows = np.concatenate(epoch)
        assert len(np.unique(rows)) == 216  # without replacement within the epoch
    assert not np.array_equal(np.concatenate(draws[:6]), np.concatenate(draws[6:12]))  # reshuffled
    assert engine.uniform_epoch == 2
    resumed = make_engine(cfg, tiny_data, tmp_path / "r")
    replay = make_engine(cfg, tiny_data, tmp_path / "p")
    for _ in range(4):
        replay.sample(1)
    resumed.load_state_dict(json.loads(json.dumps(replay.state_dict())))
    for d in draws[4:13]:  # across the epoch boundary
        assert np.array_equal(resumed.sample(1)[0]["index"], d)


def test_every_builtin_plugin_fires(small_data, tmp_path):
    """The embedded default config's plugins all leave their mark in metrics.jsonl and on disk."""
    from rlhooks.engines.sim.cli import default_config_path
    import yaml

    cfg = yaml.safe_load(default_config_path().read_text())
    cfg["run"].update(steps=12, train_batch_size=16, gen_batch_size=24, n=4, out_dir=str(tmp_path), name="all")
    cfg["samples"] = [{"name": "top_bottom_k", "k": 2}, {"name": "random_samples", "k": 2},
                      {"name": "per_source_samples", "k": 1}]
    cfg["backends"][0]["interval"] = 100  # console: quiet, but on
    cfg["rewards"][-1]["alerts"].append({"metric": "rewards/mean", "condition": "greater", "threshold": -100})
    engine = make_engine(cfg, small_data, tmp_path / "all")
    engine.run()
    lines = [json.loads(x) for x in (tmp_path / "all" / "metrics.jsonl").read_text().splitlines()]
    kinds = [r["kind"] for r in lines]
    assert kinds[0] == "run_start" and kinds[-1] == "run_end" and lines[-1]["status"] == "success"
    metrics = [r for r in lines if r["kind"] == "metrics"]
    assert [r["step"] for r in metrics] == list(range(1, 13))
    keys = set().union(*(r["metrics"] for r in metrics))
    expected = {
        "sampler (reward_curriculum)": ["sampler/weight/chain", "curriculum/level", "curriculum/percentile"],
        "filter (dapo)": ["filter/kept_ratio", "train/num_gen_batches", "filter/dropped_all_max"],
        "source_metrics": ["source/chain/count", "source/chain/reward", "source/chain/acc", "source/chain/generated_count"],
        "reward_monitor": ["rewards/mean", "rewards/signal_to_noise", "rewards/functions/check_answer", "alerts/total"],
        "engine": ["sim/accuracy/chain", "actor/ppo_kl", "actor/kl_loss", "actor/entropy", "timing/step_s"],
    }
    for plugin, names in expected.items():
        missing = [n for n in names if n not in keys]
        assert not missing, f"{plugin}: missing {missing}"
    assert metrics[-1]["metrics"]["alerts/total"] >= 12  # the always-true alert fired each step
    tables = {r["name"] for r in lines if r["kind"] == "table"}
    assert {"samples/top_bottom_k", "samples/random", "samples/per_source", "alerts"} <= tables
    top = next(r for r in lines if r["kind"] == "table" and r["name"] == "samples/top_bottom_k")
    assert any("<answer>" in str(row.get("response", "")) for row in top["rows"])
    events = list((tmp_path / "all" / "tensorboard").rglob("events.out.tfevents.*"))
    assert events and events[0].stat().st_size > 0
    assert (tmp_path / "all" / "reward_monitor.json").exists()


def test_resume_equals_uninterrupted(small_data, tmp_path):
    cfg = small_config(tmp_path, sampler=CURRICULUM, filters=["dapo"],
                       rewards=["format_exact", "format_approx", "check_answer", "check_numbers", "source_metrics"],
                       run={"steps": 8})
    _, full = _run(cfg, small_data, tmp_path / "full")
    first, part1 = _run(cfg, small_data, tmp_path / "p1", steps=4)
    state = json.loads(json.dumps(first.state_dict()))  # the state survives a JSON round trip
    from rlhooks.core.manager import RunManager

    rec = Recorder()
    config = load_sim_config(cfg)
    resumed = SimEngine(config, small_data, manager=RunManager(config, run_dir=tmp_path / "p2", extra_plugins=[("r", rec)]))
    resumed.load_state_dict(state)
    resumed.run()
    assert resumed.step == 8
    combined = {**part1.metrics, **rec.metrics}
    assert combined.keys() == full.metrics.keys()
    for step in full.metrics:
        assert combined[step] == full.metrics[step], f"step {step} differs after resume"


def test_bad_state_is_refused(small_data, tmp_path):
    engine = make_engine(small_config(tmp_path), small_data, tmp_path / "x")
    state = engine.state_dict()
    with pytest.raises(Exception, match="version"):
        engine.load_state_dict({**state, "version": 99})
    with pytest.raises(ValueError, match="sources"):
        engine.load_state_dict({**state, "learner": {**state["learner"], "sources": ["other"]}})


def test_simulate_options_are_validated_with_paths(tmp_path):
    from rlhooks import ConfigError

    with pytest.raises(ConfigError) as err:
        load_sim_config({"simulate": {"sources": ["nope"], "learner": {"learning_rat": 1}}})
    msg = str(err.value)
    assert "simulate.sources" in msg and "nope" in msg
    assert "learning_rat" in msg and "learning_rate" in msg
    assert math.isclose(load_sim_config({"simulate": {"learner": {"sharpness": "5"}}}).extra["simulate"].learner.sharpness, 5.0)


@pytest.mark.parametrize("sampler, marks", [
    ({"name": "multi_source", "source_weights": {"chain": 2.0}, "adaptive_weights": True, "update_frequency": 1},
     ["sampler/weight/chain", "sampler/reward_ema/chain"]),
    ({"name": "time_curriculum", "complexity_source": "chain", "complexity_warmup_steps": 3},
     ["curriculum/level", "curriculum/percentile", "curriculum/num_items"]),
])
def test_the_other_builtin_samplers_fire(small_data, tmp_path, sampler, marks):
    """The built-ins the default config does not use: the other two samplers."""
    _, rec = _run(small_config(tmp_path, sampler=sampler, filters=["dapo"]), small_data, tmp_path / sampler["name"])
    for step, metrics in rec.metrics.items():
        missing = [m for m in marks if m not in metrics]
        assert not missing, f"step {step}: {sampler['name']} left no {missing}"
    if sampler["name"] == "time_curriculum":  # the pool grows with the steps
        assert rec.metrics[6]["curriculum/num_items"] > rec.metrics[1]["curriculum/num_items"]


def test_console_and_wandb_backends_fire(small_data, tmp_path, capsys, monkeypatch):
    """The two backends the default-config test does not read back: console (stdout) and W&B (offline)."""
    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = small_config(tmp_path, run={"steps": 3}, samples=[{"name": "top_bottom_k", "k": 1}], backends=[
        {"name": "console", "keys": ["sim/accuracy/mean"], "max_text": 40},
        {"name": "wandb", "mode": "offline", "project": "rlhooks-sim-test", "settings": {"console": "off"}},
    ])
    make_engine(cfg, small_data, tmp_path / "wb").run()
    out = capsys.readouterr().out
    for step in (1, 2, 3):
        assert f"step {step} | sim/accuracy/mean " in out
    assert out.count("── samples/top_bottom_k · step ") == 3 and "run ended: success" in out
    (run_file,) = (tmp_path / "wb" / "wandb").glob("offline-run-*/run-*.wandb")
    assert run_file.stat().st_size > 0
    # one incremental W&B table increment per step, each with the step's top and bottom row
    tables = sorted((tmp_path / "wb" / "wandb").glob("offline-run-*/files/media/table/samples/top_bottom_k_*.table.json"))
    assert len(tables) == 3
    for t in tables:
        data = json.loads(t.read_text())
        assert [row[data["columns"].index("selection")] for row in data["data"]] == ["top", "bottom"]


def test_run_n_runs_until_step_n_not_n_more(small_data, tmp_path):
    cfg = small_config(tmp_path, run={"steps": 8})
    first = make_engine(cfg, small_data, tmp_path / "a")
    first.run(2)
    assert first.step == 2
    resumed = make_engine(cfg, small_data, tmp_path / "b")
    resumed.load_state_dict(json.loads(json.dumps(first.state_dict())))
    resumed.run(3)  # from step 2: one more step, up to step 3
    assert resumed.step == 3


def test_reward_curriculum_gates_on_the_named_column_through_a_run(small_data, tmp_path):
    """The same 7.0 threshold: passed by the summed reward of four functions, never by acc (0..1)."""
    ema = {}
    for gate in ("reward", "acc", "reward_fn/check_answer"):
        _, rec = _run(small_config(tmp_path, sampler={**CURRICULUM, "gate_metric": gate}, run={"steps": 3}), small_data,
                      tmp_path / gate.replace("/", "_"))
        ema[gate] = [m["curriculum/reward_ema"] for m in rec.metrics.values()]
        levels = [m["curriculum/level"] for m in rec.metrics.values()]
        assert (max(levels) > 0) == (gate == "reward"), gate
    assert max(ema["reward"]) > 7.0
    assert all(0.0 <= e <= 1.0 for e in ema["acc"]) and max(ema["acc"]) > 0
    assert all(-1.0 <= e <= 3.0 for e in ema["reward_fn/check_answer"])


def test_progress_bar_is_off_when_stderr_is_not_a_terminal(tiny_data, tmp_path, capsys):
    """`rlhooks simulate 2>&1 | tee log`: no bar frames in the piped stream (tqdm's disable=None)."""
    engine = make_engine(small_config(tmp_path, run={"steps": 1}), tiny_data, tmp_path / "run")
    engine.run(progress=True)
    err = capsys.readouterr().err
    assert "step/s" not in err and "|" not in err and "1/1" not in err, err[-500:]


def test_reward_curriculum_gates_on_validation_accuracy_through_a_run(small_data, tmp_path):
    """gate_metric validation/score: the simulator's held-out accuracy of the curriculum source, every
    test_freq steps, moves the levels, one at most per validation and only at a validated step."""
    gate = {**CURRICULUM, "gate_metric": "validation/score", "reward_threshold": 0.05, "min_batches_per_level": 1}
    cfg = small_config(tmp_path, sampler=gate, run={"steps": 6}, simulate={"test_freq": 2})
    _, rec = _run(cfg, small_data, tmp_path / "val")
    levels = {step: m["curriculum/level"] for step, m in rec.metrics.items()}
    assert levels == {1: 0, 2: 1, 3: 1, 4: 2, 5: 2, 6: 3}, levels
    for step in (2, 4, 6):
        m = rec.metrics[step]
        assert m["curriculum/validation_step"] == step
        assert m["curriculum/validation_value"] == m["sim/accuracy/chain"] >= 0.05
    assert "curriculum/reward_ema" not in rec.metrics[6]
