"""The CPU learner's shared parts (``trainer.device=cpu``): its tiny policy and prompts, the cpu platform's
reasons, the example config and the documented commands. The learner's runs: test_cpu_v1_learner.py (V1,
verl's default) and legacy/test_legacy_cpu_learner.py.
"""

from __future__ import annotations

import inspect
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("verl.trainer.ppo.ray_trainer", reason="needs verl[verl-core]")
pytest.importorskip("transformers")

from rlhooks.engines.verl.cpu import platform, policy, runner, tasks  # noqa: E402
from rlhooks.plugins.rewards.functions import check_answer  # noqa: E402

pytestmark = pytest.mark.verl


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> tuple[Path, Path]:
    return runner.prepare(tmp_path_factory.mktemp("tiny"))


def test_the_reasons_for_the_cpu_platform_still_hold():
    """If verl fixes one of these, platform.py's replacement should go."""
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.engine.fsdp import transformer_impl

    # a forward-only (reference) FSDP2 engine always offloads with pinned memory
    source = textwrap.dedent(inspect.getsource(transformer_impl.FSDPEngine._build_fsdp_module))
    assert "self.engine_config.forward_only" in source and "CPUOffloadPolicy(pin_memory=True)" in source
    # verl registers its FSDP engine for accelerators only; the cpu key is ours
    registered = inspect.getsource(transformer_impl)
    assert 'backend=["fsdp", "fsdp2"], device=["cuda", "npu"]' in registered
    assert EngineRegistry is not None


def test_the_one_rank_group_starts_while_the_inherited_master_port_is_taken():
    """A process that inherits MASTER_PORT from its parent (a test's pytest subprocess; the parent's group still
    holds that port) starts its own one-rank gloo group: the store binds a port of its own (it was a c10d
    EADDRINUSE in the slow suite)."""
    import socket
    import subprocess
    import sys

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        code = ("from rlhooks.engines.verl.cpu import platform; import torch.distributed as dist; "
                "platform.init_single_process_group(); print(dist.get_world_size())")
        env = {**__import__("os").environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(taken.getsockname()[1])}
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "1", done.stderr[-2000:]


def test_the_tokenizer_round_trips_the_answer_format(assets):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(assets[0])  # as verl loads it (HFModelConfig -> AutoTokenizer)
    text = tasks.response_text("13 + 5 = 18", "18")
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text
    assert check_answer(text, "18") == 3.0
    assert tok.padding_side == "left" and tok.pad_token == "<pad>" and tok.eos_token == "<eos>"


def test_the_warm_start_is_deterministic_and_reused(assets, tmp_path):
    recipe = policy.PolicyRecipe(warm_steps=5)
    a, b = policy.build_policy(tmp_path / "a", recipe), policy.build_policy(tmp_path / "b", recipe)
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()
    stamp = (a / "model.safetensors").stat().st_mtime_ns
    policy.build_policy(tmp_path / "a", recipe)  # same recipe: reused, not rebuilt
    assert (a / "model.safetensors").stat().st_mtime_ns == stamp
    assert policy.build_policy(tmp_path / "a", policy.PolicyRecipe(warm_steps=6)) == tmp_path / "a"
    assert (a / "model.safetensors").stat().st_mtime_ns != stamp  # another recipe: rebuilt


def _example_quick_try() -> list[str]:
    """The quick-try command in examples/configs/verl_cpu_tiny.yaml's comments (after "For a quick try:")."""
    import shlex

    text = (Path(__file__).resolve().parents[2] / "examples" / "configs" / "verl_cpu_tiny.yaml").read_text()
    lines = text.split("For a quick try:\n", 1)[1].splitlines()
    command = ""
    for line in lines:
        part = line.lstrip("# ").split("  #")[0].strip()
        command += " " + part.rstrip("\\").strip()
        if not part.endswith("\\"):
            break
    return shlex.split(command)


def test_the_example_config_is_a_valid_cpu_run(capsys, monkeypatch, tmp_path):
    """examples/configs/verl_cpu_tiny.yaml's quick try (2 steps, validation on 32 prompts: data.val_max_samples)
    passes `rlhooks train ... --dry-run` (verl's validate_config and rlhooks's start checks), and trainer.device
    stays cpu (verl's auto_set_device would make it cuda without the cpu platform)."""
    from rlhooks.cli import main as rlhooks_main

    command = _example_quick_try()
    assert command[:4] == ["rlhooks", "train", "--config", "examples/configs/verl_cpu_tiny.yaml"], command
    assert "data.val_max_samples=32" in command
    root = Path(__file__).resolve().parents[2]
    # the docs' order: `prepare runs/tiny` first (the dry run checks the CPU learner's files, as the start does)
    (tmp_path / "examples" / "configs").mkdir(parents=True)
    (tmp_path / "examples" / "configs" / "verl_cpu_tiny.yaml").write_bytes(
        (root / "examples" / "configs" / "verl_cpu_tiny.yaml").read_bytes())
    runner.prepare(tmp_path / "runs" / "tiny")
    monkeypatch.chdir(tmp_path)
    with platform.installed():
        assert rlhooks_main([*command[1:], "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "device: cpu" in out and "path: runs/tiny/policy" in out and "val_max_samples: 32" in out
    assert "total_training_steps: 2" in out and "default_local_dir: runs/verl-cpu-tiny/checkpoints" in out
    assert "name: dapo" in out.split("# rlhooks (resolved)")[1]


def test_a_missing_policy_is_a_config_error_that_says_how_to_make_it(tmp_path, capsys, monkeypatch):
    from rlhooks.cli import main as rlhooks_main

    config = Path(__file__).resolve().parents[2] / "examples" / "configs" / "verl_cpu_tiny.yaml"
    monkeypatch.chdir(tmp_path)  # no runs/tiny here
    for dry_run in ([], ["--dry-run"]):  # the dry run refuses it as the start does (issue 38 item 9), before Ray
        with platform.installed():
            assert rlhooks_main(["train", "--config", str(config), *dry_run]) == 1
        err = capsys.readouterr().err
        assert "verl.actor_rollout_ref.model.path: no model at runs/tiny/policy" in err, dry_run
        assert "verl.data.train_files: no file runs/tiny/train.parquet" in err
        assert "python -m rlhooks.engines.verl.cpu prepare runs/tiny" in err and "Traceback" not in err


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "configs" / "verl_cpu_tiny.yaml"
TRACKER = "latest_checkpointed_iteration.txt"
#: ``rlhooks train`` of the example config checkpointing every step, keeping one (each later start adds its own)
TRAIN = ("rlhooks.cli", "train", "--config", str(EXAMPLE), "trainer.test_freq=-1", "trainer.save_freq=1",
         "trainer.max_actor_ckpt_to_keep=1")


def _run_module(cwd: Path, *args: str):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def documented_run(tmp_path_factory) -> Path:
    """docs/how-to/cpu-learner.md's commands: prepare, then the example config's quick try (2 steps validated on 32
    prompts, as its comments write it) with a checkpoint every step, one kept, which the refusal test below damages
    (``rlhooks report`` reads no checkpoint: the two tests pass in either order).
    One V1 run for both (CI time: a V1 start costs ~1.5-4 min of a slow-suite worker)."""
    cwd = tmp_path_factory.mktemp("documented")
    prep = _run_module(cwd, "rlhooks.engines.verl.cpu", "prepare", "runs/tiny")
    assert prep.returncode == 0, prep.stderr[-3000:]
    quick_try = _example_quick_try()  # rlhooks train --config examples/configs/verl_cpu_tiny.yaml <overrides>
    assert quick_try[:4] == ["rlhooks", "train", "--config", "examples/configs/verl_cpu_tiny.yaml"], quick_try
    train = _run_module(cwd, "rlhooks.cli", "train", "--config", str(EXAMPLE), *quick_try[4:],
                        "trainer.save_freq=1", "trainer.max_actor_ckpt_to_keep=1")
    assert train.returncode == 0, (train.stdout + train.stderr)[-5000:]
    return cwd


@pytest.mark.slow  # the documented commands, each its own process (~1.5-4 min with the V1 run)
def test_the_documented_commands_train_for_real_and_report_the_validation_curve(documented_run):
    """docs/how-to/cpu-learner.md: prepare -> rlhooks train on the example config -> rlhooks report."""
    import json

    run_dir = documented_run / "runs" / "verl-cpu-tiny"
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    val = [r for r in records if r.get("kind") == "metrics" and any(k.startswith("val-core/") for k in r["metrics"])]
    assert val and all(0.0 <= v <= 1.0 for r in val for k, v in r["metrics"].items() if k.endswith("/acc/mean@1"))
    assert records[-1]["kind"] == "run_end" and records[-1]["status"] == "success"
    report = _run_module(documented_run, "rlhooks.cli", "report", str(run_dir))
    assert report.returncode == 0, report.stderr[-3000:]
    assert (run_dir / "report" / "overview.png").stat().st_size > 0


@pytest.mark.slow  # the documented run's checkpoints; four starts refused before Ray, in this process (~2 s each)
def test_rlhooks_train_refuses_a_damaged_or_deleted_checkpoint_before_ray(documented_run, capfd, monkeypatch):
    """The documented run kept one checkpoint (max_actor_ckpt_to_keep=1); then another run sharing the checkpoints,
    a truncated actor file (also with --dry-run) and the tracked step deleted: each later start exits 1 before Ray
    starts, with one error naming the file and the way out, no traceback (issue 38). The starts are
    ``rlhooks.cli.main`` in this process, the CLI's own code from its arguments on: each was a fresh interpreter
    importing verl (~15 s of CI time apiece, issue 36)."""
    import shutil

    from rlhooks.cli import main as rlhooks_main
    from rlhooks.engines.verl import main as verl_main

    ckpt = documented_run / "runs" / "verl-cpu-tiny" / "checkpoints"
    assert sorted(p.name for p in ckpt.iterdir()) == ["global_step_2", TRACKER]  # rotated after the commit
    monkeypatch.chdir(documented_run)  # the example config's paths are relative, as the documented commands run
    # a start that got past the checks would train here, on this process's Ray: it fails the test at once instead
    monkeypatch.setattr(verl_main, "run", lambda *a, **k: pytest.fail("rlhooks train started the run"))

    def start(*args: str) -> tuple[int, str]:
        with platform.installed():  # `trainer.device=cpu` installs the CPU platform: this process's verl gets it back
            code = rlhooks_main(list(TRAIN[1:] + args))
        shown = capfd.readouterr()
        return code, shown.out + shown.err

    # another run sharing the directory is refused before Ray (issue 38: it resumed step 2 and trained nothing)
    code, err = start("rlhooks.run.name=other", f"trainer.default_local_dir={ckpt}", "trainer.total_training_steps=3")
    assert code == 1 and "Traceback" not in err, err[-3000:]
    assert ("was written by run 'verl-cpu-tiny' on the V1 trainer in mode rlhooks_sync, and this is run 'other' on "
            "the V1 trainer in mode rlhooks_sync") in err, err[-3000:]
    assert not (documented_run / "runs" / "other" / "metrics.jsonl").exists()  # no run started

    model = ckpt / "global_step_2" / "actor" / "model_world_size_1_rank_0.pt"

    def refusal(*extra):  # the start refuses before Ray (checks.start_issues): one error, one problem line
        code, err = start("trainer.total_training_steps=3", *extra)
        assert code == 1 and "Traceback" not in err, err[-3000:]
        assert "rlhooks train: verl's output" not in err  # Ray never started
        assert [line for line in err.splitlines() if line.startswith("error:")] == [
            f"error: invalid verl config (from {EXAMPLE} and the command line): 1 problem"], err[-3000:]
        return next(line for line in err.splitlines() if line.startswith("  - trainer.default_local_dir: "))

    model.write_bytes(model.read_bytes()[:100])
    for extra in [(), ("--dry-run",)]:  # the dry run refuses what the start refuses
        problem = refusal(*extra)
        assert "cannot resume from step 2" in problem and "trainer.resume_mode=disable" in problem
        assert "model_world_size_1_rank_0.pt is 100 bytes" in problem

    shutil.rmtree(ckpt / "global_step_2")
    problem = refusal()
    assert "names step 2" in problem and "the folder does not exist" in problem
    metrics = (documented_run / "runs" / "verl-cpu-tiny" / "metrics.jsonl").read_text()
    assert metrics.count('"kind": "run_start"') == 1  # no second run appended
