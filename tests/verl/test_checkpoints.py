"""Checkpoints a user can trust (issue 29, items 3, 4, 6): the trainer's save and resume against real
checkpoint folders that verl's FSDP checkpoint manager writes and reads.

The actor is verl's ``FSDPCheckpointManager`` over the CPU learner's tiny policy (FSDP2, one gloo rank),
whose ``save_checkpoint``/``load_checkpoint`` have the worker group's signatures, so the trainer's own
``_save_checkpoint``/``_load_checkpoint`` run on it unchanged. The trainer is built without its
``__init__`` (which needs workers, datasets and a run): the attributes these two methods read are set.
Each test runs on V1's trainer (``v1/trainer.py``) and on every other trainer of ``trainers.REMOVABLE`` (the
legacy one, ``legacy/trainer.py``).
"""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path

import pytest
import torch

pytest.importorskip("verl.trainer.ppo.ray_trainer", reason="needs verl[verl-core]")
pytest.importorskip("transformers")

from omegaconf import OmegaConf  # noqa: E402

from rlhooks.core.errors import RLHooksError  # noqa: E402
from rlhooks.engines.verl.cpu import platform, policy  # noqa: E402
from rlhooks.engines.verl.main import compose_verl_config  # noqa: E402
from rlhooks.engines.verl import trainers  # noqa: E402
from rlhooks.engines.verl.v1.replay_buffer import RLHooksReplayBuffer  # noqa: E402
from rlhooks.engines.verl.v1.trainer import RLHooksPPOTrainerSync  # noqa: E402
from .verl_shim_helpers import set_verls_checkpoint_callback  # noqa: E402

pytestmark = pytest.mark.verl
TRACKER = "latest_checkpointed_iteration.txt"


class Killed(BaseException):
    """A kill at a file operation: nothing after it runs (BaseException: no ``except Exception`` sees it)."""


class RunState:
    """The run's component state (what RunManager.state_dict/load_state_dict carry) and its directory."""

    def __init__(self, run_dir: Path, value: int = 0):
        self.run_dir, self.value, self.loaded = run_dir, value, None

    def state_dict(self):
        return {"sampler": {"value": self.value}}

    def load_state_dict(self, state):
        self.loaded = state

    def checkpoint_loaded(self, step, checkpoint_dir):  # RunManager's: on_load_checkpoint after the state
        self.loaded_from = (step, checkpoint_dir)


@pytest.fixture(scope="module")
def actor():
    """verl's FSDP checkpoint manager over the tiny policy: the files a real actor worker saves and loads."""
    from torch.distributed.fsdp import fully_shard
    from transformers import AutoModelForCausalLM

    with platform.installed():
        platform.init_single_process_group()
        from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager

        model = AutoModelForCausalLM.from_pretrained(policy.SHIPPED)
        fully_shard(model)
        optim = torch.optim.AdamW(model.parameters(), lr=1e-3)
        contents = OmegaConf.create({"save_contents": ["model", "optimizer", "extra"],
                                     "load_contents": ["model", "optimizer", "extra"]})
        yield FSDPCheckpointManager(model, optim, lr_scheduler=None, processing_class=None, checkpoint_config=contents)


def set_weights(actor, step: int) -> None:
    with torch.no_grad():
        for p in actor.model.parameters():
            p.fill_(float(step))


def weights_step(actor) -> float:
    p = next(actor.model.parameters())
    return float((p.full_tensor() if hasattr(p, "full_tensor") else p).flatten()[0])


_BASE: dict = {}
_TRAINER = {"kind": "v1"}


@pytest.fixture(autouse=True, params=[*trainers.REMOVABLE, "v1"])
def trainer_kind(request):
    """Every test on verl's V1 trainer and the legacy one (the same checkpoints.py rules)."""
    _TRAINER["kind"] = request.param
    yield request.param
    _TRAINER["kind"] = "v1"


def verl_config(root: Path, *overrides: str):
    """verl's composed config (composed once per trainer: Hydra takes seconds here) with the overrides merged."""
    kind = _TRAINER["kind"]
    if kind not in _BASE:
        _BASE[kind] = compose_verl_config([f"trainer.use_v1={str(kind == 'v1').lower()}"])
    return OmegaConf.merge(_BASE[kind], OmegaConf.from_dotlist([f"trainer.default_local_dir={root}", *overrides]))


def make_trainer(actor, root: Path, run_dir: Path, *overrides: str):
    from torchdata.stateful_dataloader import StatefulDataLoader

    actor.previous_saved_paths = []  # verl's rotation list is per process; here per test
    cfg = verl_config(root, *overrides)
    if _TRAINER["kind"] == "v1":
        trainer = object.__new__(RLHooksPPOTrainerSync)
        set_verls_checkpoint_callback(trainer, cfg)  # as verl's V1 __init__ builds it
        trainer._saved_folder, trainer._checkpoint_writer = None, None
        trainer._prompts_drawn = 0
        trainer.replay_buffer = RLHooksReplayBuffer(trainer_mode="sync", trainer_config={}, max_off_policy_threshold=8,
                                                    max_off_policy_strategy="drop", sampler_kwargs={})
    else:
        package = trainers.removable(_TRAINER["kind"])
        trainer = object.__new__(package.trainer_class(package.TRAINER_NAMES[0]))
    trainer.config, trainer.global_steps, trainer._epoch = cfg, 0, 0
    trainer.actor_rollout_wg, trainer.use_critic = actor, False
    trainer.train_dataloader = StatefulDataLoader(list(range(40)), batch_size=4)
    trainer.rl = RunState(run_dir)
    return trainer


def save(trainer, step: int) -> None:
    set_weights(trainer.actor_rollout_wg, step)
    trainer.rl.value = step
    trainer.global_steps = step
    trainer._save_checkpoint()


def resume(actor, root: Path, run_dir: Path, *overrides: str):
    """A new trainer on the same folders, loaded as fit() loads: (trainer, the step it resumes at)."""
    set_weights(actor, -1)
    trainer = make_trainer(actor, root, run_dir, *overrides)
    trainer._load_checkpoint()
    return trainer, trainer.global_steps


def write_metrics(run_dir: Path, steps) -> Path:
    import json

    run_dir.mkdir(parents=True, exist_ok=True)
    lines = [{"kind": "run_start", "time": 0.0, "name": "x", "run_dir": str(run_dir), "config": {}}]
    lines += [{"kind": "metrics", "step": s, "time": 0.0, "metrics": {"a": 1.0}} for s in steps]
    path = run_dir / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    return path


# -- item 4: a kill at any point of a save ----------------------------------------------------------
def _file_operations(monkeypatch, kill_at: int | None) -> list[str]:
    """Counts the save's file operations (torch.save, rename, unlink, rmdir, rmtree); raises Killed at
    operation ``kill_at``, leaving a torch.save target torn (half written), as a kill mid-write does."""
    seen: list[str] = []
    real = {"save": torch.save, "replace": os.replace, "unlink": Path.unlink, "rmdir": os.rmdir,
            "rmtree": shutil.rmtree}

    def op(name, target, run):
        seen.append(f"{name} {target}")
        if kill_at is not None and len(seen) - 1 == kill_at:
            raise Killed(seen[-1])
        return run()

    def save(obj, f, *a, **kw):
        if kill_at is not None and len(seen) == kill_at and isinstance(f, (str, os.PathLike)):
            buf = io.BytesIO()
            real["save"](obj, buf)
            Path(f).write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
        return op("save", f, lambda: real["save"](obj, f, *a, **kw))

    monkeypatch.setattr(torch, "save", save)
    monkeypatch.setattr(os, "replace", lambda a, b, **kw: op("replace", b, lambda: real["replace"](a, b, **kw)))
    monkeypatch.setattr(Path, "unlink", lambda self, *a, **kw: op("unlink", self, lambda: real["unlink"](self, *a, **kw)))
    monkeypatch.setattr(os, "rmdir", lambda p, *a, **kw: op("rmdir", p, lambda: real["rmdir"](p, *a, **kw)))
    monkeypatch.setattr(shutil, "rmtree", lambda p, *a, **kw: op("rmtree", p, lambda: real["rmtree"](p, *a, **kw)))
    return seen


def _save_killed_at(actor, tmp: Path, kill_at: int | None):
    """Steps 1 and 2 saved whole with max_actor_ckpt_to_keep=1, then step 3's save killed at ``kill_at``."""
    root, run_dir = tmp / "ckpt", tmp / "run"
    trainer = make_trainer(actor, root, run_dir, "trainer.max_actor_ckpt_to_keep=1")
    save(trainer, 1)
    save(trainer, 2)
    with pytest.MonkeyPatch.context() as mp:
        seen = _file_operations(mp, kill_at)
        try:
            save(trainer, 3)
        except Killed:
            pass
    return root, run_dir, seen


def _assert_resumable(actor, root: Path, run_dir: Path, where: str) -> int:
    tracked = int((root / TRACKER).read_text())
    assert tracked in (2, 3), where
    trainer, step = resume(actor, root, run_dir)  # verl's own loader reads the actor files
    assert step == tracked, where
    assert weights_step(actor) == tracked, where  # the tracked step's weights, not a mix
    assert trainer.rl.loaded == {"sampler": {"value": tracked}}, where
    if tracked == 2:
        assert (root / "global_step_2" / "actor" / "model_world_size_1_rank_0.pt").is_file(), where
    return tracked


def test_a_kill_during_a_save_that_rotates_leaves_the_previous_checkpoint_tracked_and_whole(actor, tmp_path):
    """The issue's case: verl 0.9.1's rotation (max_actor_ckpt_to_keep=1) deletes step 2's actor files as
    soon as step 3's are written, before data.pt and the tracker; a kill there left the tracker on step 2
    with no weights. Killed here at the same point: the data.pt write."""
    _, _, ops = _save_killed_at(actor, tmp_path / "dry", None)
    kill_at = next(i for i, o in enumerate(ops) if "data.pt" in o)
    root, run_dir, _ = _save_killed_at(actor, tmp_path / "killed", kill_at)
    assert _assert_resumable(actor, root, run_dir, ops[kill_at]) == 2


@pytest.mark.slow  # one save and one load per file operation of a save (~20 here)
def test_a_kill_at_every_file_operation_of_a_save_leaves_a_tracked_complete_checkpoint(actor, tmp_path):
    _, _, ops = _save_killed_at(actor, tmp_path / "dry", None)
    assert any("optim_world_size_1_rank_0.pt" in o for o in ops) and any(o.startswith("unlink") for o in ops)
    outcomes = {}
    for k in range(len(ops)):
        root, run_dir, _ = _save_killed_at(actor, tmp_path / str(k), k)
        outcomes[ops[k]] = _assert_resumable(actor, root, run_dir, f"killed at {ops[k]}")
    assert set(outcomes.values()) == {2, 3}  # before the commit step 2, after it step 3


def test_rotation_removes_older_checkpoints_file_by_file_and_keeps_what_it_did_not_write(actor, tmp_path):
    """Also issue 37 items 1-2 with verl's own FSDP files: a user's file in a step folder before its save is
    not sealed nor rotated away, and a link planted at a step folder is refused before anything is written."""
    root, run_dir = tmp_path / "ckpt", tmp_path / "run"
    trainer = make_trainer(actor, root, run_dir, "trainer.max_actor_ckpt_to_keep=2")
    save(trainer, 1)
    (root / "global_step_1" / "NOTES.md").write_text("mine")
    (root / "global_step_2" / "actor").mkdir(parents=True)
    (root / "global_step_2" / "actor" / "MY_NOTES.txt").write_text("mine too")  # there before step 2's save
    for step in (2, 3, 4):
        save(trainer, step)
    assert sorted(p.name for p in root.iterdir()) == ["global_step_1", "global_step_2", "global_step_3",
                                                      "global_step_4", TRACKER]
    assert [p.name for p in (root / "global_step_1").iterdir()] == ["NOTES.md"]  # the user's file, nothing of ours
    assert [str(p.relative_to(root)) for p in sorted((root / "global_step_2").rglob("*"))] == \
        ["global_step_2/actor", "global_step_2/actor/MY_NOTES.txt"]
    victim = tmp_path / "victim"
    shutil.copytree(root / "global_step_4", victim)
    before = {p: p.read_bytes() for p in victim.rglob("*") if p.is_file()}
    (root / "global_step_5").symlink_to(victim)
    with pytest.raises(RLHooksError, match=r"cannot save the checkpoint of step 5: .*global_step_5 is a symbolic link"):
        save(trainer, 5)
    assert {p: p.read_bytes() for p in victim.rglob("*") if p.is_file()} == before
    assert int((root / TRACKER).read_text()) == 4
    (root / "global_step_5").unlink()
    assert resume(actor, root, run_dir)[1] == 4 and weights_step(actor) == 4


# -- item 3: a missing tracked checkpoint -------------------------------------------------------------
@pytest.fixture
def two_checkpoints(actor, tmp_path):
    root, run_dir = tmp_path / "ckpt", tmp_path / "run"
    trainer = make_trainer(actor, root, run_dir)
    for step in (1, 2, 3):
        save(trainer, step)
    write_metrics(run_dir, [1, 2, 3])
    return root, run_dir


def test_a_deleted_tracked_checkpoint_is_refused_naming_the_newest_complete_one(actor, two_checkpoints):
    """verl printed 'Checkpoint does not exist', trained from step 1 over global_step_1/2 and appended a
    second run to metrics.jsonl; now: refused, naming step 2 and the override that resumes from it."""
    root, run_dir = two_checkpoints
    shutil.rmtree(root / "global_step_3")  # what a user does after a 'checkpoint is corrupted' error
    before = {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}
    with pytest.raises(RLHooksError) as err:
        resume(actor, root, run_dir)
    message = str(err.value)
    assert f"{root / TRACKER} names step 3" in message and "the folder does not exist" in message
    assert f"trainer.resume_mode=resume_path trainer.resume_from_path={root / 'global_step_2'}" in message
    assert {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()} == before  # nothing written
    # the override it names resumes from step 2
    override = ["trainer.resume_mode=resume_path", f"trainer.resume_from_path={root / 'global_step_2'}"]
    assert resume(actor, root, run_dir, *override)[1] == 2 and weights_step(actor) == 2


@pytest.mark.parametrize("tracker", ["garbled", "deleted"])
def test_a_garbled_or_deleted_tracker_with_checkpoints_left_is_refused(actor, two_checkpoints, tracker):
    root, run_dir = two_checkpoints
    if tracker == "garbled":
        (root / TRACKER).write_bytes(b"3\x00\xff")
    else:
        (root / TRACKER).unlink()
    with pytest.raises(RLHooksError, match="resume_mode=auto will not guess where to resume") as err:
        resume(actor, root, run_dir)
    assert f"trainer.resume_from_path={root / 'global_step_3'}" in str(err.value)


def test_training_from_scratch_into_a_run_directory_with_metrics_is_refused(actor, tmp_path):
    root, run_dir = tmp_path / "ckpt", tmp_path / "run"
    metrics = write_metrics(run_dir, [1, 2])  # an earlier run, killed before its first checkpoint
    with pytest.raises(RLHooksError, match=r"already holds the metrics of an earlier run \(from step 1\)") as err:
        resume(actor, root, run_dir)
    assert str(metrics) in str(err.value) and "rlhooks.run.name=" in str(err.value)
    with pytest.raises(RLHooksError, match="spliced"):
        resume(actor, root, run_dir, "trainer.resume_mode=disable")
    assert resume(actor, root, tmp_path / "new-run")[1] == 0  # a new run directory: from scratch


def test_a_run_stopped_after_its_step_0_validation_starts_again(actor, tmp_path):
    """Issue 38: verl's validation before training is logged as step 0; a run stopped before step 1 trained
    nothing, so its rerun from scratch is not refused (and logs the same step 0 again)."""
    root, run_dir = tmp_path / "ckpt", tmp_path / "run"
    write_metrics(run_dir, [0])
    assert resume(actor, root, run_dir)[1] == 0
    write_metrics(run_dir, [0, 1])
    with pytest.raises(RLHooksError, match=r"already holds the metrics of an earlier run \(from step 1\)"):
        resume(actor, root, run_dir)


def test_a_save_killed_before_the_first_commit_starts_a_new_run(actor, tmp_path):
    root, run_dir = tmp_path / "ckpt", tmp_path / "run"
    trainer = make_trainer(actor, root, run_dir)
    set_weights(actor, 1)
    trainer.global_steps = 1
    actor.save_checkpoint(str(root / "global_step_1" / "actor"), None, 1)  # actor files only: no data.pt, no tracker
    assert resume(actor, root, run_dir)[1] == 0


# -- item 6: corrupted checkpoint files -----------------------------------------------------------------
def test_a_truncated_actor_file_is_one_error_naming_file_step_and_the_way_out(actor, two_checkpoints):
    root, run_dir = two_checkpoints
    model = root / "global_step_3" / "actor" / "model_world_size_1_rank_0.pt"
    model.write_bytes(model.read_bytes()[:1000])
    with pytest.raises(RLHooksError) as err:
        resume(actor, root, run_dir)
    message = str(err.value)
    assert "cannot resume from step 3" in message and "actor/model_world_size_1_rank_0.pt is 1000 bytes" in message
    assert f"trainer.resume_from_path={root / 'global_step_2'}" in message and "trainer.resume_mode=disable" in message
    assert "\n" not in message
    from structlog.testing import capture_logs

    with capture_logs() as logs:  # the way out it names works, and says that step 3 will be replaced
        override = ["trainer.resume_mode=resume_path", f"trainer.resume_from_path={root / 'global_step_2'}"]
        assert resume(actor, root, run_dir, *override)[1] == 2 and weights_step(actor) == 2
    assert [e["later_steps"] for e in logs if "later_steps" in e] == [[3]]


def test_a_garbled_actor_file_of_the_right_size_is_one_error_naming_it(actor, two_checkpoints):
    """The seal's sizes match, so verl's loader runs and fails inside torch; the error names the file it read."""
    root, run_dir = two_checkpoints
    optim = root / "global_step_3" / "actor" / "optim_world_size_1_rank_0.pt"
    data = bytearray(optim.read_bytes())
    data[-200:] = b"\x00" * 200  # the zip's central directory: same size, unreadable
    optim.write_bytes(bytes(data))
    with pytest.raises(RLHooksError) as err:
        resume(actor, root, run_dir)
    message = str(err.value)
    assert f"cannot resume from checkpoint step 3 ({root / 'global_step_3'}): {optim} cannot be loaded" in message
    assert f"trainer.resume_from_path={root / 'global_step_2'}" in message and "\n" not in message


def test_a_garbled_rlhooks_state_is_one_error_naming_it(actor, two_checkpoints):
    root, run_dir = two_checkpoints
    (root / "global_step_3" / "rlhooks.pt").write_bytes(b"not a torch file")
    with pytest.raises(RLHooksError) as err:
        resume(actor, root, run_dir)
    message = str(err.value)
    assert "cannot resume from step 3" in message and f"{root / 'global_step_3' / 'rlhooks.pt'} cannot be read" in message
    assert f"trainer.resume_from_path={root / 'global_step_2'}" in message and "\n" not in message


def test_async_save_is_refused_before_training(actor, tmp_path):
    with pytest.raises(RLHooksError, match="async_save"):
        resume(actor, tmp_path / "ckpt", tmp_path / "run", "actor_rollout_ref.actor.checkpoint.async_save=true")


def test_a_checkpoint_verl_wrote_alone_still_resumes(actor, tmp_path):
    """No rlhooks.pt (a plain verl run, or an older rlhooks): verl's files decide; components start fresh."""
    root, run_dir = tmp_path / "ckpt", tmp_path / "run"
    trainer = make_trainer(actor, root, run_dir)
    save(trainer, 2)
    (root / "global_step_2" / "rlhooks.pt").unlink()
    resumed, step = resume(actor, root, run_dir)
    assert step == 2 and weights_step(actor) == 2 and resumed.rl.loaded is None


def test_a_checkpoint_another_run_wrote_is_refused_naming_both(actor, tmp_path, trainer_kind):
    """rlhooks.pt names the run that wrote it (name, trainer, V1 mode): a run under another name, on the other
    trainer or in another mode refuses it before verl loads a file, naming both; the run itself resumes
    (issue 38, item 13: a second run silently resumed the first one's checkpoint and trained nothing)."""
    root = tmp_path / "ckpt"
    save(make_trainer(actor, root, tmp_path / "first"), 2)
    with pytest.raises(RLHooksError) as err:
        resume(actor, root, tmp_path / "second")
    trainer = "the V1 trainer in mode sync" if trainer_kind == "v1" else "the legacy trainer"
    assert (f"cannot resume from step 2: {root / 'global_step_2'} was written by run 'first' on {trainer}, and this "
            f"is run 'second' on {trainer}: a run resumes only its own checkpoints") in str(err.value)
    assert weights_step(actor) == -1  # refused before verl loaded the actor
    for other in [k for k in (*trainers.REMOVABLE, "v1") if k != trainer_kind]:  # each other trainer
        _TRAINER["kind"] = other
        with pytest.raises(RLHooksError, match=f"written by run 'first' on {trainer}, and this is run 'first' on the "
                                               f"{'V1' if other == 'v1' else other} trainer"):
            resume(actor, root, tmp_path / "first")
    _TRAINER["kind"] = trainer_kind
    if trainer_kind == "v1":
        with pytest.raises(RLHooksError, match="this is run 'first' on the V1 trainer in mode rlhooks_colocate_async"):
            resume(actor, root, tmp_path / "first", "trainer.v1.trainer_mode=rlhooks_colocate_async")
    resumed, step = resume(actor, root, tmp_path / "first")
    assert step == 2 and weights_step(actor) == 2 and resumed.rl.loaded == {"sampler": {"value": 2}}

@pytest.mark.parametrize("trainer_kind", ["v1"], indirect=True)  # V1 only
def test_v1_saves_with_verls_checkpoint_callback_and_without_one_as_on_verl_main(actor, tmp_path):
    """verl 0.9.1's V1 trainer has a checkpoint callback (called with the folder after the save); verl main's
    has none (issue 39: the first save raised AttributeError there): the save completes and resumes."""
    root, run_dir = tmp_path / "ckpt", tmp_path / "run"
    trainer = make_trainer(actor, root, run_dir)
    calls = []
    if hasattr(trainer, "checkpoint_callback"):  # verl 0.9.1 (on verl main: the second save alone)
        trainer.checkpoint_callback.on_save = lambda **kw: calls.append(kw)
        save(trainer, 1)
        assert calls == [{"trainer": trainer, "global_step": 1, "checkpoint_dir": str(root / "global_step_1"),
                          "async_save": False}]
        del trainer.checkpoint_callback  # verl main's PPOTrainer.__init__ builds none
    else:
        save(trainer, 1)
    save(trainer, 2)
    assert resume(actor, root, run_dir)[1] == 2


@pytest.mark.parametrize("trainer_kind", ["v1"], indirect=True)  # V1 only: the legacy trainer has no replay buffer
def test_v1_resumes_its_prompt_count_and_the_verdicts_on_groups_still_buffered(actor, tmp_path):
    """V1's uids count the prompts drawn, and groups judged before a checkpoint come back with verl's async
    TransferQueue checkpoint: both are in rlhooks.pt, so uids continue and no group is judged twice."""
    root, run_dir = tmp_path / "ckpt", tmp_path / "run"
    trainer = make_trainer(actor, root, run_dir)
    trainer._prompts_drawn = 37
    trainer.replay_buffer._dapo_classification_cache["train"].update({"kept": None, "dropped": 0.0})
    save(trainer, 2)
    resumed, step = resume(actor, root, run_dir)
    assert step == 2 and resumed._prompts_drawn == 37
    assert resumed.replay_buffer.judged_groups() == {"kept": None, "dropped": 0.0}
    assert resumed.rl.loaded == {"sampler": {"value": 2}} and resumed.rl.loaded_from == (2, str(root / "global_step_2"))
