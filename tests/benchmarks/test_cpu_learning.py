"""benchmarks/cpu_learning.py (``make bench-learning``) on verl's V1 trainer: the config a V1 run trains with
(what ``rlhooks train`` builds), the figures read back from verl's own file logger, and the legacy-vs-V1
comparison the published table carries. The runs themselves are CI's (``make bench-learning``, one 4-step V1
run; ``make bench-quick`` adds a 2-step V1 smoke run for a developer): minutes on 2 cores."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("verl.trainer.ppo.v1", reason="needs verl[verl-core]")

from benchmarks import cpu_learning as bench  # noqa: E402

SIZES = {"add_small": 100, "add_carry": 270, "mul_small": 64}


def _verl_log(path: Path, monkeypatch, records: list[tuple[int, dict]]) -> Path:
    """A log written by verl's own FileLogger, as a V1 run writes it (``trainer.logger=[file]``)."""
    from verl.utils.tracking import FileLogger

    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
    logger = FileLogger("bench", "dapo-seed0")
    for step, data in records:
        logger.log(data=data, step=step)
    logger.finish()
    return path


def _val(add_small: float, add_carry: float, mul_small: float) -> dict[str, float]:
    return {"val-core/add_small/acc/mean@1": add_small, "val-core/add_carry/acc/mean@1": add_carry,
            "val-core/mul_small/acc/mean@1": mul_small}


def test_a_v1_run_is_read_back_from_verls_file_logger(tmp_path, monkeypatch):
    log = _verl_log(tmp_path / "verl_metrics.jsonl", monkeypatch, [
        (0, _val(0.56, 0.37, 0.25)),  # val_before_train: the start
        # with rlhooks filters: every group the replay buffer scored (dropped and surplus included)
        (1, {"filter/generated_groups": 20.0, "filter/trained_groups": 8.0, "train/num_gen_batches": 4.0,
             "actor/pg_loss": 0.1}),
        (2, {"filter/generated_groups": 16.0, "train/num_gen_batches": 3.0, **_val(0.6, 0.4, 0.25),
             "curriculum/level": 1.0}),
    ])
    run = bench.read_verl_log(log, SIZES, n=8, gen_batch_size=8)
    assert run["generated"] == {1: 160, 2: 128}
    assert sorted(run["accuracy"]) == [0, 2]
    assert run["accuracy"][0] == pytest.approx((0.56 * 100 + 0.37 * 270 + 0.25 * 64) / 434)
    assert run["source_accuracy"][2] == {"add_small": 0.6, "add_carry": 0.4, "mul_small": 0.25}
    assert run["curriculum"] == {2: {"curriculum/level": 1.0}}
    # without filters V1 generates what it dispatched: generation batches x prompts x responses
    plain = _verl_log(tmp_path / "plain.jsonl", monkeypatch, [(0, _val(0.5, 0.5, 0.5)), (1, {"train/num_gen_batches": 1.0})])
    assert bench.read_verl_log(plain, SIZES, n=8, gen_batch_size=8)["generated"] == {1: 64}
    assert bench.generated_to(run, 0.42) == 288  # reached at step 2's validation (0.424)


def test_a_log_that_is_not_verls_names_the_file_and_line(tmp_path, monkeypatch):
    log = _verl_log(tmp_path / "verl_metrics.jsonl", monkeypatch, [(1, {"train/num_gen_batches": 1.0})])
    with log.open("a") as fh:
        fh.write("not json\n")
    with pytest.raises(ValueError, match=r"verl_metrics.jsonl:2: not a verl file-logger record"):
        bench.read_verl_log(log, SIZES, n=8, gen_batch_size=8)
    only_validation = _verl_log(tmp_path / "val.jsonl", monkeypatch, [(0, _val(0.5, 0.5, 0.5))])
    with pytest.raises(ValueError, match="no training step logged"):
        bench.read_verl_log(only_validation, SIZES, n=8, gen_batch_size=8)


def test_a_v1_run_trains_with_what_rlhooks_train_builds(tmp_path):
    """verl's default trainer (nothing sets trainer.use_v1), the rlhooks trainer mode, replay buffer and reward
    adapter (set by build_config, as for a user), the config's own run options joined with the run's place."""
    from omegaconf import OmegaConf

    from rlhooks.engines.verl import v1
    from rlhooks.engines.verl.cpu import ray_learner

    out = tmp_path / "dapo-0"
    cfg = bench.v1_config("dapo", 2, 40, 10, out, (tmp_path / "policy", tmp_path / "train.parquet"))
    assert ray_learner.uses_v1(cfg)
    assert cfg.trainer.v1.trainer_mode == v1.TRAINER_MODE
    assert cfg.trainer.v1.sampler.custom_sampler.name == v1.REPLAY_BUFFER_NAME
    assert list(cfg.reward.custom_reward_function.reward_kwargs.functions) == bench.REWARDS
    run = OmegaConf.to_container(cfg.rlhooks.run)
    assert run["out_dir"] == str(out / "runs") and run["seed"] == 2 and run["max_num_gen_batches"] == 4
    assert cfg.data.seed == 2 and cfg.actor_rollout_ref.rollout.seed == 2  # data order and sampling per seed
    assert list(cfg.trainer.logger) == ["file"] and cfg.trainer.val_before_train  # the start accuracy, logged
    assert cfg.trainer.test_freq == 10 and cfg.trainer.total_training_steps == 40
    assert (out / "rlhooks.yaml").is_file()  # the rlhooks config rlhooks train --config would read


def test_quick_is_a_short_v1_smoke_test_and_the_legacy_path_stays():
    quick = bench.parse_args(["--quick"])
    assert (quick.trainer, quick.configs, quick.seeds, quick.steps, quick.val_max_samples) == ("v1", ["selective"], [0], 2, 32)
    full = bench.parse_args([])
    assert (full.trainer, full.configs, full.seeds, full.steps, full.test_freq) == (
        "v1", ["dapo", "uniform"], [0, 1, 2], 40, 10)  # the published table: three seeds, as the legacy one
    legacy = bench.parse_args(["--trainer", "legacy"])  # how the legacy table was measured
    assert (legacy.configs, legacy.seeds, legacy.test_freq) == (bench.COMPARE_CONFIGS, [0, 1, 2], 4)


def _runs(trainer: str, config: str, finals: list[float]) -> list[dict]:
    return [{"config": config, "seed": seed, "trainer": trainer, "wall_s": 60.0, "date": "2026-11-26",
             "generated": {1: 64, 2: 64}, "accuracy": {0: 0.4, 2: final}}
            for seed, final in enumerate(finals)]


def test_the_comparison_says_whether_v1_is_within_the_legacy_seed_spread():
    legacy = _runs("legacy", "dapo", [0.484, 0.477, 0.463]) + _runs("legacy", "uniform", [0.463, 0.456, 0.449])
    v1 = _runs("v1", "dapo", [0.47, 0.48]) + _runs("v1", "uniform", [0.40, 0.41])
    rows = {line.split(" | ")[0].strip("| "): line for line in bench.compare_trainers(v1, legacy).splitlines()[2:]}
    assert rows["dapo"].endswith("| +0.000 | yes |")  # 0.475 inside [0.463, 0.484]
    assert "0.475 [0.463-0.484] (3)" in rows["dapo"] and "0.475 [0.470-0.480] (2)" in rows["dapo"]
    assert rows["uniform"].endswith("| -0.051 | no |")


def test_the_published_page_labels_the_legacy_table_and_says_when_v1_is_partial(tmp_path, monkeypatch):
    files = {"v1": tmp_path / "v1.json", "legacy": tmp_path / "legacy.json"}
    monkeypatch.setattr(bench, "RUNS_FILE", files)
    files["legacy"].write_text(json.dumps(_runs("legacy", "dapo", [0.484, 0.477, 0.463])))
    files["v1"].write_text(json.dumps(_runs("v1", "dapo", [0.47, 0.48])))  # seeds 0 and 1 of dapo, no uniform
    page = bench.markdown()
    assert "## Legacy trainer (`--trainer legacy`" in page and "## V1 (verl's default trainer" in page
    assert "**Partial**: 2 of 6 runs" in page and "not run: uniform seed 0, uniform seed 1, dapo seed 2, uniform seed 2." in page
    assert "## V1 vs legacy" in page and "| dapo |" in page.split("## V1 vs legacy")[1]


def test_a_validation_of_a_few_prompts_counts_the_sources_it_had(tmp_path, monkeypatch):
    """--quick validates 32 prompts, which may all come from one source: the accuracy is over those."""
    log = _verl_log(tmp_path / "verl_metrics.jsonl", monkeypatch, [
        (0, {"val-core/add_small/acc/mean@1": 0.5}), (1, {"train/num_gen_batches": 1.0}),
        (2, {"val-core/add_small/acc/mean@1": 0.25, "val-core/mul_small/acc/mean@1": 1.0, "train/num_gen_batches": 1.0}),
    ])
    run = bench.read_verl_log(log, SIZES, n=8, gen_batch_size=8)
    assert run["accuracy"][0] == 0.5
    assert run["accuracy"][2] == pytest.approx((0.25 * 100 + 1.0 * 64) / 164)


def test_a_shorter_v1_run_is_not_compared_with_the_legacy_finals(tmp_path, monkeypatch, capsys):
    """CI's short run (fewer steps than the published legacy runs) prints its table, not a V1-vs-legacy verdict."""
    files = {"v1": tmp_path / "v1.json", "legacy": tmp_path / "legacy.json"}
    monkeypatch.setattr(bench, "RUNS_FILE", files)
    legacy = _runs("legacy", "dapo", [0.484, 0.477, 0.463])  # validated up to step 2
    files["legacy"].write_text(json.dumps(legacy))
    v1 = [{**r, "trainer": "v1", "accuracy": {0: 0.4, 1: 0.45}} for r in _runs("v1", "dapo", [0.0])]
    args = bench.parse_args(["--configs", "dapo", "--seeds", "0", "--no-write", "--steps", "1"])
    assert bench._report(args, v1, 1.0) == 0
    out = capsys.readouterr().out
    assert "not compared with the published legacy seeds: 1 steps, theirs [2]" in out and "V1 against" not in out
    args = bench.parse_args(["--configs", "dapo", "--seeds", "0", "--no-write", "--steps", "2"])
    bench._report(args, _runs("v1", "dapo", [0.47]), 1.0)
    assert "V1 against the published legacy seeds" in capsys.readouterr().out
