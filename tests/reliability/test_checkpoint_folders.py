"""Issue 37, items 1-3: what a verl checkpoint save may write, seal and rotate, with the real
``CheckpointWriter`` on real folders (no verl run: each test takes milliseconds).

The worker group writes what verl's FSDP checkpoint manager writes into its role folder
(``fsdp_config.json``, ``model_/optim_/extra_state_world_size_1_rank_0.pt``) with plain ``open``, which
follows a link as ``torch.save`` to a path does. tests/verl/test_checkpoints.py runs the same writer
through both trainers with verl's own FSDP manager.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from rlhooks.core.errors import RLHooksError
from rlhooks.engines.verl import checkpoints
from rlhooks.engines.verl.checkpoints import (
    KEPT_KEY,
    MANIFEST_KEY,
    SAVING_FILE,
    TRACKER,
    CheckpointError,
    CheckpointWriter,
)

FSDP_FILES = ["fsdp_config.json", "model_world_size_1_rank_0.pt", "optim_world_size_1_rank_0.pt",
              "extra_state_world_size_1_rank_0.pt"]
ROLES = {"actor": checkpoints.DEFAULT_CONTENTS}


class ActorFiles:
    """A worker group's ``save_checkpoint``: verl's FSDP file names in the role folder, opened as verl does."""

    def save_checkpoint(self, local_path, hdfs_path, global_step, max_ckpt_to_keep=None):
        os.makedirs(local_path, exist_ok=True)
        with open(os.path.join(local_path, "fsdp_config.json"), "w") as fh:
            json.dump({"world_size": 1}, fh)
        for name in FSDP_FILES[1:]:
            with open(os.path.join(local_path, name), "wb") as fh:
                fh.write(b"weights of step %d" % global_step)


WORKERS = {"actor": ActorFiles()}


def _save(writer: CheckpointWriter, step: int, state=None, before_seal=None) -> Path:
    return writer.save(step, WORKERS, {"dataloader": step}, state or {"components": {"sampler": {"i": step}}},
                       before_seal=before_seal)


def _tree(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def _config(root: Path, mode: str = "auto"):
    """The few keys of verl's trainer config that plan_resume reads."""
    return OmegaConf.create({"trainer": {"default_local_dir": str(root), "resume_mode": mode},
                             "actor_rollout_ref": {"actor": {"checkpoint": {"async_save": False}}}})


# -- item 1: links planted among the checkpoint folders ---------------------------------------------
@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A user's folder that looks like a checkpoint (what a link may point to)."""
    d = tmp_path / "victim"
    (d / "actor").mkdir(parents=True)
    (d / "data.pt").write_bytes(b"my data")
    (d / "notes.txt").write_text("my notes")
    (d / "actor" / "model_world_size_1_rank_0.pt").write_bytes(b"my model")
    return d


@pytest.mark.parametrize("where", ["global_step_4", "global_step_4/actor", "global_step_4/actor/model_world_size_1_rank_0.pt"])
def test_a_link_planted_in_a_step_folder_is_refused_before_anything_is_written(tmp_path: Path, victim: Path,
                                                                               where: str) -> None:
    """The issue's case: `ln -s ~/victim <checkpoints>/global_step_4` had the save write verl's files, data.pt and
    rlhooks.pt into ~/victim and seal the user's notes.txt, which the next save's rotation (keep=1) deleted."""
    root = tmp_path / "ckpt"
    writer = CheckpointWriter(root, keep=1)
    _save(writer, 3)
    link = root / where
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(victim if where != "global_step_4/actor/model_world_size_1_rank_0.pt"
                    else victim / "actor" / "model_world_size_1_rank_0.pt")
    before = _tree(victim)
    with pytest.raises(CheckpointError) as err:
        _save(writer, 4)
    message = str(err.value)
    assert f"cannot save the checkpoint of step 4: {link} is a symbolic link to {os.readlink(link)}" in message
    assert "rlhooks never writes a checkpoint through a link" in message and "remove the link" in message
    assert "the tracker still names step 3" in message and "\n" not in message
    assert _tree(victim) == before  # nothing written through the link
    assert (root / TRACKER).read_text() == "3" and checkpoints.inspect_checkpoint(root / "global_step_3", ROLES).complete
    _save(writer, 5)  # rotation (keep=1) removes step 3, never the link's target
    assert _tree(victim) == before and link.is_symlink()
    assert not (root / "global_step_3").exists()


def test_a_step_folder_that_is_a_file_is_one_clear_error(tmp_path: Path) -> None:
    """A step folder that is a link to a file ended in a raw FileExistsError after the step trained."""
    root = tmp_path / "ckpt"
    root.mkdir()
    (tmp_path / "some-file").write_text("mine")
    (root / "global_step_2").symlink_to(tmp_path / "some-file")
    (root / "global_step_3").write_text("a file")
    writer = CheckpointWriter(root)
    with pytest.raises(CheckpointError, match=r"global_step_2 is a symbolic link to .*some-file; rlhooks never"):
        _save(writer, 2)
    with pytest.raises(CheckpointError, match=r"global_step_3 is a file; the checkpoint of that step must be a folder. "
                                              r"Nothing of this checkpoint was written \(no checkpoint of this run "
                                              r"is tracked yet\): move .*global_step_3 out of"):
        _save(writer, 3)
    (root / "global_step_4" / "actor").mkdir(parents=True)
    (root / "global_step_4" / "data.pt").mkdir()
    with pytest.raises(CheckpointError, match=r"global_step_4/data.pt is a directory; the checkpoint's data.pt must be a file"):
        _save(writer, 4)
    assert (tmp_path / "some-file").read_text() == "mine" and (root / "global_step_3").read_text() == "a file"
    assert not (root / TRACKER).exists()


def test_a_run_starting_with_a_link_at_a_step_it_will_save_is_refused_at_start(tmp_path: Path, victim: Path) -> None:
    """Refused before training rather than after the step trained; a link at an older step than the one
    resumed from is left alone (the run does not save there)."""
    root = tmp_path / "ckpt"
    writer = CheckpointWriter(root)
    _save(writer, 2)
    _save(writer, 3)
    old = root / "global_step_1"
    old.symlink_to(victim)
    plan = checkpoints.plan_resume(_config(root), use_critic=False, metrics_file=tmp_path / "run" / "metrics.jsonl")
    assert plan.step == 3
    (root / "global_step_4").symlink_to(victim)
    with pytest.raises(CheckpointError, match=r"global_step_4 is a symbolic link to .*victim: this run would save its "
                                              r"checkpoint of step 4 there.*Nothing was written"):
        checkpoints.plan_resume(_config(root), use_critic=False, metrics_file=tmp_path / "run" / "metrics.jsonl")


# -- item 2: a user's file in a step folder ----------------------------------------------------------
def test_a_users_file_in_a_step_folder_before_the_save_is_neither_sealed_nor_rotated(tmp_path: Path) -> None:
    """The issue's case: CheckpointWriter(root, keep=1), global_step_2/MY_NOTES.txt, then saves 2 and 3: the
    notes were listed in step 2's seal and deleted by step 3's rotation (guarantees.md: a file of yours in a
    step folder stays with its folder). Also a re-save over an earlier save's files (a resume from an older
    step) lists those files again, and plugins' files written after the seal (reseal) join it."""
    root = tmp_path / "ckpt"
    notes = root / "global_step_2" / "MY_NOTES.txt"
    notes.parent.mkdir(parents=True)
    notes.write_text("mine")
    (root / "global_step_2" / "actor").mkdir()
    (root / "global_step_2" / "actor" / "README").write_text("also mine")
    writer = CheckpointWriter(root, keep=1)
    folder = _save(writer, 2)
    (folder / "plugin_state.json").write_text("{}")  # a plugin's on_save_checkpoint, after the seal
    checkpoints.reseal(folder)
    state = checkpoints.read_state(folder)
    assert "MY_NOTES.txt" not in state[MANIFEST_KEY] and "actor/README" not in state[MANIFEST_KEY]
    assert {"data.pt", "plugin_state.json", "actor/model_world_size_1_rank_0.pt"} <= set(state[MANIFEST_KEY])
    assert state[KEPT_KEY] == ["MY_NOTES.txt", "actor/README"]
    assert checkpoints.inspect_checkpoint(folder, ROLES).complete
    notes.write_text("mine, edited")  # not the checkpoint's: its size is not checked
    assert checkpoints.inspect_checkpoint(folder, ROLES).complete
    _save(writer, 3)  # rotates step 2 out
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) == ["MY_NOTES.txt", "actor", "actor/README"]
    assert notes.read_text() == "mine, edited"

    # a later run resumed from an older step saves step 3 again: the earlier save's files are the run's (its seal
    # lists them), a file added to the folder after that seal is not
    (root / "global_step_3" / "MORE_NOTES.txt").write_text("mine")
    folder3 = _save(CheckpointWriter(root, keep=1), 3)
    assert "actor/optim_world_size_1_rank_0.pt" in checkpoints.read_state(folder3)[MANIFEST_KEY]
    assert checkpoints.read_state(folder3)[KEPT_KEY] == ["MORE_NOTES.txt"]


# -- item 3: a save that fails ---------------------------------------------------------------------------
def test_a_state_that_cannot_be_pickled_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    """The issue's case: a state_dict holding a lock crashed the first save with `TypeError: cannot pickle
    '_thread.lock'` after actor/ and data.pt were written, no plugin named."""
    root = tmp_path / "ckpt"
    state = {"components": {"plugins[0]": {"lock": threading.Lock()}, "__names__": {"plugins[0]": "locky"}}}
    with pytest.raises(CheckpointError) as err:
        _save(CheckpointWriter(root), 1, state)
    message = str(err.value)
    assert "cannot save the checkpoint of step 1" in message and "the state of 'locky' at plugins[0]" in message
    assert "cannot pickle '_thread.lock'" in message and "nothing of this checkpoint was written" in message
    assert not root.exists()


def test_a_plugin_state_that_cannot_be_pickled_is_an_error_naming_the_plugin_when_produced(tmp_path: Path) -> None:
    """Where a state is produced (RunManager.state_dict: both trainers' rlhooks.pt and the simulator's checkpoint)."""
    import rlhooks.host

    class Locky:
        def __init__(self):
            self.lock = threading.Lock()

        @rlhooks.hookimpl
        def on_step_end(self, step, metrics):
            pass

        def state_dict(self):
            return {"lock": self.lock}

        def load_state_dict(self, state):
            pass

    cfg = rlhooks.host.load_config({"run": {"name": "r", "out_dir": str(tmp_path)}, "backends": []})
    manager = rlhooks.host.RunManager(cfg, extra_plugins=[("locky", Locky())])
    with pytest.raises(RLHooksError) as err:
        manager.state_dict()
    message = str(err.value)
    assert "'locky'" in message and "its state_dict() returned a value that cannot be pickled" in message
    assert "TypeError: cannot pickle '_thread.lock' object" in message and "\n" not in message


def test_a_save_that_failed_halfway_is_never_offered_as_a_resume_point(tmp_path: Path) -> None:
    """The issue's case: the failed first save left global_step_1 with actor/ and data.pt, no rlhooks.pt, no
    tracker, and the next start recommended trainer.resume_from_path=.../global_step_1. A save that did not
    finish (killed or failed before its seal) is not complete: neither tracked, recommended nor resumed."""
    root, metrics = tmp_path / "ckpt", tmp_path / "run" / "metrics.jsonl"
    writer = CheckpointWriter(root)

    def fail(folder: Path) -> None:
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        _save(writer, 1, before_seal=fail)
    folder = root / "global_step_1"
    assert (folder / "data.pt").is_file() and (folder / "actor" / FSDP_FILES[1]).is_file()
    found = checkpoints.inspect_checkpoint(folder, ROLES)
    assert not found.complete and any(SAVING_FILE in p for p in found.problems)
    assert checkpoints.newest_complete(root, ROLES) is None
    assert checkpoints.plan_resume(_config(root), use_critic=False, metrics_file=metrics).folder is None  # a new run
    with pytest.raises(CheckpointError) as err:  # named by hand: refused, naming why
        checkpoints.plan_resume(OmegaConf.merge(_config(root, "resume_path"), {"trainer": {"resume_from_path": str(folder)}}),
                                use_critic=False, metrics_file=metrics)
    assert "its save did not finish" in str(err.value)

    _save(writer, 1)  # the same step saved whole: complete, and the marker gone
    assert checkpoints.inspect_checkpoint(folder, ROLES).complete and not (folder / SAVING_FILE).exists()
    with pytest.raises(OSError):
        _save(writer, 2, before_seal=fail)
    (root / TRACKER).unlink()  # with complete step 1 and torn step 2, the way out names step 1, never step 2
    with pytest.raises(CheckpointError, match=r"resume_from_path=\S*global_step_1\b") as err:
        checkpoints.plan_resume(_config(root), use_critic=False, metrics_file=metrics)
    assert "global_step_2" not in str(err.value)
