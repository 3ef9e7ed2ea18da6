"""Checkpoints a user can trust: what "complete" means, the save order, and the resume decision.

Used by both trainers (``legacy/trainer.py``, ``v1/trainer.py``) and meant for any trainer that saves verl
checkpoints into ``trainer.default_local_dir`` (``global_step_<N>/`` folders and verl's tracker
``latest_checkpointed_iteration.txt``); it imports no trainer class (:func:`load_with_plan` reads the
few attributes both trainers have).

**Complete.** A checkpoint folder ``global_step_<N>`` is complete when

1. each role's folder (``actor/``, and ``critic/`` when the run has a critic) holds what verl's
   checkpoint loader reads: for verl's FSDP manager (``fsdp_config.json`` present, which rank 0
   writes after its shards) the ``model_/optim_/extra_state_world_size_<W>_rank_<r>.pt`` of every rank
   ``r < W`` for the contents in ``checkpoint.load_contents``; for a layout rlhooks does not know
   (Megatron's), a non-empty folder;
2. ``data.pt`` (the dataloader's position) is there;
3. ``rlhooks.pt`` (:data:`STATE_FILE`), written last, lists every file the save wrote into the folder
   (1, 2 and any other) with its size (:data:`MANIFEST_KEY`), and each file still has that size.
   A folder without ``rlhooks.pt`` was written by verl alone (or by an older rlhooks): 1 and 2
   decide, and it resumes without rlhooks state; unless it holds :data:`SAVING_FILE`, which an rlhooks
   save writes first and removes once sealed: then it is a save that did not finish, never complete.

**Save order** (:meth:`CheckpointWriter.save`): first the checks, before anything is written: the
state pickles, and the step folder, its role folders and what is in them are no symbolic link and no
file where a folder must be (a link planted there would have the workers overwrite its target's files
and rotation delete them). Then :data:`SAVING_FILE`; an earlier ``rlhooks.pt`` of the same step is
removed; the workers' files (verl's managers, with verl's rotation off); ``data.pt`` (atomic); any
further files (``before_seal``); the seal ``rlhooks.pt`` (atomic); the tracker (atomic): the commit;
then the rotation, which removes only older checkpoints this process saved, file by file as their seal
lists them, never the one just committed. The seal lists only what the save wrote: a file that was in
the folder before the save and that the save left alone (a user's) is recorded as not the checkpoint's
(:data:`KEPT_KEY`), never size-checked nor rotated away.
A kill at any point leaves the tracker naming a complete checkpoint (or no tracker before the first one).

**Resume** (:func:`plan_resume`, ``resume_mode=auto``): the tracked checkpoint when it is complete; a
new run when there is no complete checkpoint and no tracker. Anything else (the tracked step deleted,
incomplete or unreadable, the tracker garbled or deleted while checkpoints remain) is refused, naming
the newest complete checkpoint and the exact override to resume from it. Why refuse rather than resume
from the newest complete one: with the save order above a kill never produces these states, only a
change made outside the run does (a deleted step, an edited tracker), and then a person should choose;
refusing loses nothing, while a wrong guess overwrites later checkpoints and re-logs their steps. A
run that starts from scratch into a run directory whose ``metrics.jsonl`` already holds metrics is
refused too: two runs would be spliced into one file.

**Whose checkpoint.** ``rlhooks.pt`` names the run that wrote it (:data:`OWNER_KEY`: run name, trainer,
V1 trainer mode). A run resumes only its own: a checkpoint written by another run (another name, the other
trainer, another mode; e.g. two runs sharing one ``trainer.default_local_dir``) is refused naming both,
before verl loads anything (:func:`check_owner`). ``rlhooks train`` runs the whole plan before Ray starts
(:func:`start_problem`), so its refusals take seconds. A seal without the key (an older rlhooks) resumes as before.
"""

from __future__ import annotations

import json
import os
import re
import stat
import traceback
import warnings
import zipfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import structlog

from rlhooks.core.errors import ConfigError, ConfigIssue, RLHooksError
from rlhooks.core.records import METRICS_FILE

log = structlog.get_logger("rlhooks.verl")

#: verl's tracker file (verl.utils.checkpoint.checkpoint_manager.get_checkpoint_tracker_filename)
TRACKER = "latest_checkpointed_iteration.txt"
#: the rlhooks state next to verl's data.pt; written last, it seals the checkpoint
STATE_FILE = "rlhooks.pt"
DATA_FILE = "data.pt"
STEP_PREFIX = "global_step_"
#: the key in rlhooks.pt listing the checkpoint's files: {path relative to the folder: size in bytes}
MANIFEST_KEY = "manifest"
#: the key in rlhooks.pt listing the files found in the folder that the save did not write (a user's):
#: never in the manifest, so never checked nor rotated away, also when ``reseal`` re-lists the folder
KEPT_KEY = "not_saved"
#: written first into the step folder by a save and removed once it is sealed: a folder holding it and no
#: rlhooks.pt is a save that did not finish (killed, or failed), never a checkpoint to resume from
SAVING_FILE = ".rlhooks-saving"
#: what verl's FSDP checkpoint manager reads per content (FSDPCheckpointManager.load_checkpoint)
FSDP_FILES = {"model": "model_world_size_{w}_rank_{r}.pt", "optimizer": "optim_world_size_{w}_rank_{r}.pt",
              "extra": "extra_state_world_size_{w}_rank_{r}.pt"}
FSDP_CONFIG = "fsdp_config.json"
DEFAULT_CONTENTS = ("model", "optimizer", "extra")
#: the key in rlhooks.pt naming who wrote the checkpoint: {"run": name, "trainer": "v1"|"legacy", "mode": V1's
#: trainer.v1.trainer_mode or None}
OWNER_KEY = "written_by"


class CheckpointError(RLHooksError):
    """A checkpoint cannot be resumed from, or the resume is ambiguous: what, where, and the way out."""


@attrs.frozen
class Inspection:
    """What :func:`inspect_checkpoint` found in one ``global_step_<N>`` folder."""

    folder: Path
    step: int
    #: why it is not complete (empty: complete)
    problems: tuple[str, ...]
    #: rlhooks.pt's content when it was read (None: absent or unreadable)
    state: dict[str, Any] | None = None

    @property
    def complete(self) -> bool:
        return not self.problems

    @property
    def sealed(self) -> bool:
        return self.state is not None


@attrs.frozen
class ResumePlan:
    """The folder to resume from (None: train from scratch) and its rlhooks state (None: none saved)."""

    folder: Path | None
    step: int = 0
    state: dict[str, Any] | None = None


# -- what is on disk -------------------------------------------------------------------------------
def step_of(folder: str | Path) -> int | None:
    m = re.fullmatch(STEP_PREFIX + r"(\d+)", Path(folder).name)
    return int(m.group(1)) if m else None


def step_folders(root: str | Path) -> list[tuple[int, Path]]:
    """``(step, folder)`` of every ``global_step_<N>`` directory under ``root``, by step."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [(step_of(p), p) for p in root.iterdir() if p.is_dir() and not p.is_symlink()]
    return sorted((s, p) for s, p in found if s is not None)


def read_tracker(root: str | Path) -> tuple[int | None, str | None]:
    """``(step, problem)``: the step verl's tracker names, or None with why (None, None: no tracker)."""
    path = Path(root) / TRACKER
    if not path.exists():
        return None, None
    try:
        text = path.read_bytes().decode("ascii").strip()
        return int(text), None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return None, f"{path} is not a step number ({type(exc).__name__}: {exc})"


def read_state(folder: str | Path) -> dict[str, Any]:
    """rlhooks.pt of a checkpoint folder; a CheckpointError naming the file when it cannot be read."""
    import torch

    path = Path(folder) / STATE_FILE
    try:
        state = torch.load(path, weights_only=False)  # rlhooks' own file: components' states are plain objects
    except Exception as exc:  # noqa: BLE001 - any unpickling/zip error means the same: unreadable
        raise CheckpointError(f"{path} cannot be read: {_reason(exc)}") from exc
    if not isinstance(state, dict) or not isinstance(state.get("components"), Mapping):
        raise CheckpointError(f"{path} is not an rlhooks state file (no 'components' mapping)")
    return state


def _role_problems(folder: Path, role: str, contents: Sequence[str]) -> list[str]:
    role_dir = folder / role
    if not role_dir.is_dir():
        return [f"no {role}/ folder"]
    config = role_dir / FSDP_CONFIG
    if not config.exists():  # a layout rlhooks does not know (e.g. Megatron's): its seal decides
        return [] if any(role_dir.iterdir()) else [f"{role}/ is empty"]
    try:
        world = int(json.loads(config.read_text())["world_size"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return [f"{role}/{FSDP_CONFIG} is unreadable ({_reason(exc)})"]
    missing = [f"{role}/{FSDP_FILES[c].format(w=world, r=r)}" for c in contents if c in FSDP_FILES
               for r in range(world) if not (role_dir / FSDP_FILES[c].format(w=world, r=r)).is_file()]
    return [f"missing {', '.join(missing)}"] if missing else []


def inspect_checkpoint(folder: str | Path, roles: Mapping[str, Sequence[str]], *, read_seal: bool = True) -> Inspection:
    """Whether ``folder`` is a complete checkpoint (module docstring) for ``roles`` ({role: load_contents})."""
    folder = Path(folder)
    step = step_of(folder) or 0
    if not folder.is_dir():
        return Inspection(folder, step, ("the folder does not exist",))
    problems = [p for role, contents in roles.items() for p in _role_problems(folder, role, contents)]
    if not (folder / DATA_FILE).is_file():
        problems.append(f"no {DATA_FILE}")
    if os.path.lexists(folder / SAVING_FILE) and not (folder / STATE_FILE).exists():
        problems.append(f"its save did not finish ({SAVING_FILE} is there, {STATE_FILE} is not)")
    state = None
    if read_seal and (folder / STATE_FILE).exists():
        try:
            state = read_state(folder)
        except CheckpointError as exc:
            return Inspection(folder, step, (*problems, str(exc)))
        for rel, size in (state.get(MANIFEST_KEY) or {}).items():
            path = folder / rel
            actual = path.stat().st_size if path.is_file() else None
            if actual != size:
                problems.append(f"{rel} is {'missing' if actual is None else f'{actual} bytes'}, "
                                f"{size} bytes when it was saved")
    return Inspection(folder, step, tuple(problems), state)


def newest_complete(root: str | Path, roles: Mapping[str, Sequence[str]]) -> Inspection | None:
    for _, folder in reversed(step_folders(root)):
        found = inspect_checkpoint(folder, roles)
        if found.complete:
            return found
    return None


# -- saving ----------------------------------------------------------------------------------------
def _write_atomic(path: Path, write: Any) -> None:
    """``write(tmp_path)`` then fsync and rename over ``path``: whole or absent, never torn; the rename
    replaces a link planted at ``path`` instead of writing through it."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        write(tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_state(folder: str | Path, state: Mapping[str, Any], manifest: Mapping[str, int] | None = None,
                kept: Sequence[str] | None = None) -> Path:
    """rlhooks.pt, atomically; ``manifest`` (and ``kept``) None keeps what the file already holds (a
    rewrite after on_step_end of a sealed checkpoint)."""
    import torch

    path = Path(folder) / STATE_FILE
    if manifest is None and path.exists():
        earlier = read_state(folder)
        manifest = earlier.get(MANIFEST_KEY)
        kept = earlier.get(KEPT_KEY) if kept is None else kept
    body = {**state, MANIFEST_KEY: dict(manifest or {}), KEPT_KEY: sorted(kept or ())}
    _write_atomic(path, lambda tmp: torch.save(body, tmp))
    return path


def reseal(folder: str | Path) -> Path:
    """rlhooks.pt rewritten with every file the folder holds now but the ones the save found there and
    left alone (:data:`KEPT_KEY`): what plugins wrote in ``on_save_checkpoint`` (after the seal) is then
    listed, so it is size-checked and rotated out with the checkpoint instead of keeping the folder alive."""
    earlier = read_state(folder)
    kept = [rel for rel in earlier.get(KEPT_KEY) or () if isinstance(rel, str)]
    state = {k: v for k, v in earlier.items() if k not in (MANIFEST_KEY, KEPT_KEY)}
    manifest = {rel: size for rel, size in manifest_of(Path(folder)).items() if rel not in set(kept)}
    return write_state(folder, state, manifest, kept)


def write_tracker(root: str | Path, step: int) -> None:
    root = Path(root)
    _write_atomic(root / TRACKER, lambda tmp: Path(tmp).write_text(str(int(step))))
    _fsync_dir(root)


def manifest_of(folder: Path) -> dict[str, int]:
    """{relative path: size} of every file in ``folder`` (temporary and hidden files, links and the seal
    itself aside)."""
    return {rel: st.st_size for rel, st in _files_in(folder).items()}


def _files_in(folder: Path) -> dict[str, os.stat_result]:
    """{relative path: lstat} of the regular files under ``folder`` (names starting with '.', such as
    temporary files, links and the seal aside); never follows a link."""
    out: dict[str, os.stat_result] = {}
    for dirpath, _, files in os.walk(folder):
        for name in files:
            p = Path(dirpath) / name
            if name.startswith(".") or p == folder / STATE_FILE:
                continue
            try:
                st = os.lstat(p)
            except FileNotFoundError:
                continue
            if stat.S_ISREG(st.st_mode):
                out[str(p.relative_to(folder))] = st
    return out


def _same_file(a: os.stat_result, b: os.stat_result) -> bool:
    """Whether a file is unchanged between two lstats (the same inode, size and times)."""
    return (a.st_ino, a.st_dev, a.st_size, a.st_mtime_ns, a.st_ctime_ns) == \
        (b.st_ino, b.st_dev, b.st_size, b.st_mtime_ns, b.st_ctime_ns)


def _kind(path: Path) -> str:
    """What ``path`` is, for an error message."""
    if path.is_symlink():
        return f"a symbolic link to {os.readlink(path)}"
    return "a file" if path.exists() and not path.is_dir() else "a directory" if path.is_dir() else "missing"


def check_state(state: Mapping[str, Any], where: str) -> None:
    """A CheckpointError naming the entry of ``state`` that cannot be pickled (rlhooks.pt is a pickle)."""
    import pickle

    def fails(value: Any) -> str | None:
        try:
            pickle.dump(value, _Discard(), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # noqa: BLE001 - pickling runs the objects' own code: any error means the same
            return _reason(exc)
        return None

    if fails(state) is None:
        return
    components = state.get("components")
    names = components.get("__names__", {}) if isinstance(components, Mapping) else {}
    entries = [*(("components", k, v) for k, v in components.items())] if isinstance(components, Mapping) else []
    entries += [(None, k, v) for k, v in state.items() if k != "components"]
    for section, key, value in entries:
        reason = fails(value)
        if reason is not None:
            who = f"the state of {names.get(key, key)!r} at {key}" if section else f"the trainer's {key!r}"
            raise CheckpointError(f"{where}: {who} cannot be pickled ({reason}); nothing of this checkpoint was "
                                  f"written. Make its state_dict() return plain data (numbers, strings, lists, "
                                  f"dicts, numpy arrays, tensors)")
    raise CheckpointError(f"{where}: the rlhooks state cannot be pickled ({fails(state)}); nothing was written")


class _Discard:
    """A file that drops what is written: pickling into it checks a state without keeping a copy."""

    def write(self, data: bytes) -> int:
        return len(data)


def remove_checkpoint(folder: Path) -> list[Path]:
    """Delete what this checkpoint's seal lists (and the seal), then its directories once empty; any
    other file (a user's) stays, with its directories. Returns what was removed."""
    try:
        manifest = read_state(folder).get(MANIFEST_KEY) or {}
    except CheckpointError as exc:
        log.warning("not rotating a checkpoint whose rlhooks.pt cannot be read", folder=str(folder), error=str(exc))
        return []
    removed = []
    for rel in [*manifest, STATE_FILE, SAVING_FILE]:
        path = folder / rel
        if path.is_file() or path.is_symlink():
            path.unlink()
            removed.append(path)
    for dirpath, _, _ in sorted(os.walk(folder), key=lambda t: -len(t[0])):  # deepest first
        try:
            os.rmdir(dirpath)
        except OSError:
            pass  # not empty: something rlhooks did not write
    return removed


def keep_count(trainer_cfg: Any, use_critic: bool) -> int | None:
    """How many of its checkpoints a run keeps (verl's ``max_actor_ckpt_to_keep``, the smaller of it and
    ``max_critic_ckpt_to_keep`` with a critic; ``remove_previous_ckpt_in_save`` means 1); None: all."""
    if trainer_cfg.get("remove_previous_ckpt_in_save", False):
        return 1
    keeps = [trainer_cfg.get("max_actor_ckpt_to_keep", None)]
    if use_critic:
        keeps.append(trainer_cfg.get("max_critic_ckpt_to_keep", None))
    keeps = [int(k) for k in keeps if isinstance(k, int) and k > 0]
    return min(keeps) if keeps else None


class CheckpointWriter:
    """Saves checkpoints in the order that keeps one complete checkpoint tracked at every instant."""

    def __init__(self, root: str | Path, *, keep: int | None = None, hdfs_dir: str | None = None):
        self.root = Path(os.path.abspath(root))
        self.keep = keep
        self.hdfs_dir = hdfs_dir
        #: the checkpoints this process committed, oldest first (rotation covers these only, as verl's)
        self.saved: list[Path] = []

    @classmethod
    def from_config(cls, trainer_cfg: Any, *, use_critic: bool) -> CheckpointWriter:
        return cls(trainer_cfg.default_local_dir, keep=keep_count(trainer_cfg, use_critic),
                   hdfs_dir=trainer_cfg.get("default_hdfs_dir", None))

    def save(self, step: int, workers: Mapping[str, Any], dataloader_state: Any, state: Mapping[str, Any],
             before_seal: Callable[[Path], None] | None = None) -> Path:
        """The checkpoint of ``step``: ``workers`` is {role folder: worker group} (verl's
        ``save_checkpoint(local_path, hdfs_path, global_step, max_ckpt_to_keep)``); ``before_seal`` writes
        any further files into the folder (e.g. a V1 trainer's transfer-queue state), which the seal then
        lists. Restates the order of verl 0.9.1's ``RayPPOTrainer._save_checkpoint`` with the tracker moved
        after the seal and verl's rotation (which deletes the previous checkpoint before the new one is
        tracked) replaced."""
        import torch

        folder = self.root / f"{STEP_PREFIX}{step}"
        check_state(state, f"cannot save the checkpoint of step {step} ({folder})")
        self.check_folder(step, workers)
        folder.mkdir(parents=True, exist_ok=True)
        found = _files_in(folder)  # a user's files among them stay theirs unless this save rewrites them
        earlier = self._earlier_files(folder)
        _write_atomic(folder / SAVING_FILE, lambda tmp: Path(tmp).write_text(f"step {step}, pid {os.getpid()}\n"))
        stale = folder / STATE_FILE
        if stale.exists() or stale.is_symlink():  # a seal of an earlier save of this step must not cover new files
            stale.unlink()
        for role, group in workers.items():
            remote = None if self.hdfs_dir is None else os.path.join(self.hdfs_dir, f"{STEP_PREFIX}{step}", role)
            group.save_checkpoint(str(folder / role), remote, step, max_ckpt_to_keep=None)
        _write_atomic(folder / DATA_FILE, lambda tmp: torch.save(dataloader_state, tmp))
        if before_seal is not None:
            before_seal(folder)
        now = _files_in(folder)
        written = {rel: st.st_size for rel, st in now.items()
                   if rel not in found or rel in earlier or not _same_file(found[rel], st)}
        write_state(folder, state, written, kept=[rel for rel in now if rel not in written])
        (folder / SAVING_FILE).unlink()
        _fsync_dir(folder)
        write_tracker(self.root, step)  # the commit
        self._rotate(folder)
        return folder

    def check_folder(self, step: int, workers: Iterable[str]) -> None:
        """Refuse, before anything is written, a step folder the save would write through: a symbolic link
        (the step folder, a role folder such as ``actor``, or anything in them), or a file where a folder
        must be. A CheckpointError saying what, where, and what to do; nothing is followed."""
        folder = self.root / f"{STEP_PREFIX}{step}"
        tracked, _ = read_tracker(self.root)
        resumable, again = ((f"the tracker still names step {tracked}", "resume the run") if tracked is not None
                            else ("no checkpoint of this run is tracked yet", "start the run again"))

        def refuse(path: Path, why: str, fix: str) -> CheckpointError:
            return CheckpointError(f"cannot save the checkpoint of step {step}: {path} is {_kind(path)}; {why}. "
                                   f"Nothing of this checkpoint was written ({resumable}): {fix}, then {again}")

        link_why = ("rlhooks never writes a checkpoint through a link (verl's workers would overwrite the files where "
                    "it points, and rotation would later delete them)")
        if self.root.exists() and not self.root.is_dir():
            raise refuse(self.root, "trainer.default_local_dir must be a directory", "move that file away or set "
                         "trainer.default_local_dir to a directory")
        if folder.is_symlink():
            raise refuse(folder, link_why, f"remove the link (rm {folder}; its target is not touched)")
        if os.path.lexists(folder) and not folder.is_dir():
            raise refuse(folder, "the checkpoint of that step must be a folder",
                         f"move {folder} out of {self.root}")
        for name in (*workers, DATA_FILE, STATE_FILE):
            path = folder / name
            must_be_dir = name not in (DATA_FILE, STATE_FILE)
            if not path.is_symlink() and os.path.lexists(path) and path.is_dir() != must_be_dir:
                raise refuse(path, f"the checkpoint's {name} must be a {'folder' if must_be_dir else 'file'}",
                             f"move {path} out of {folder}")
        if not folder.is_dir():
            return
        for dirpath, dirs, files in os.walk(folder):  # never descends into a linked directory: it is refused here
            for name in sorted((*dirs, *files)):
                path = Path(dirpath) / name
                if path.is_symlink():
                    raise refuse(path, link_why, f"remove the link or move it out of {folder} (its target is "
                                 f"not touched)")

    def _earlier_files(self, folder: Path) -> set[str]:
        """The files an earlier save of this step sealed (the run's own: this save may list them again)."""
        if not (folder / STATE_FILE).is_file():
            return set()
        try:
            return {rel for rel in read_state(folder).get(MANIFEST_KEY) or {} if isinstance(rel, str)}
        except CheckpointError:
            return set()

    def _rotate(self, committed: Path) -> None:
        self.saved = [p for p in self.saved if p != committed] + [committed]
        if self.keep is None or len(self.saved) <= self.keep:
            return
        old, self.saved = self.saved[: -self.keep], self.saved[-self.keep:]
        for folder in old:
            removed = remove_checkpoint(folder)
            log.info("rotated out an older checkpoint", folder=str(folder), files=len(removed), keep=self.keep)


# -- resuming --------------------------------------------------------------------------------------
def roles_of(config: Any, use_critic: bool) -> dict[str, tuple[str, ...]]:
    """{role folder: load_contents} of a verl config."""
    def contents(section: Any) -> tuple[str, ...]:
        ckpt = section.get("checkpoint", None) if section is not None else None
        value = ckpt.get("load_contents", None) if ckpt is not None else None
        return tuple(value) if value else DEFAULT_CONTENTS

    roles = {"actor": contents(config.actor_rollout_ref.actor)}
    if use_critic:
        roles["critic"] = contents(config.get("critic", None))
    return roles


def check_settings(config: Any) -> None:
    """Checkpoint settings the save order cannot honour: a ConfigError before training."""
    ckpt = config.actor_rollout_ref.actor.get("checkpoint", None)
    if ckpt is not None and ckpt.get("async_save", False):
        raise ConfigError([ConfigIssue(
            "actor_rollout_ref.actor.checkpoint.async_save",
            "the rlhooks trainer seals a checkpoint once its files are written, which an asynchronous save "
            "does not tell it (and verl's Megatron manager then writes the tracker itself): set it to false",
        )], kind="verl config")


def _override(folder: Path) -> str:
    return f"trainer.resume_mode=resume_path trainer.resume_from_path={folder}"


def _way_out(root: Path, roles: Mapping[str, Sequence[str]], *, exclude: Path | None = None) -> str:
    """What the user can do: resume from the newest complete checkpoint (other than ``exclude``), or start over."""
    fresh = ("train from scratch instead with trainer.resume_mode=disable, a new run name (rlhooks.run.name=...) "
             "and a new trainer.default_local_dir")
    for _, folder in reversed(step_folders(root)):
        if exclude is not None and folder == exclude:
            continue
        found = inspect_checkpoint(folder, roles)
        if found.complete:
            return (f"To resume from the newest complete checkpoint (step {found.step}), add {_override(folder)}; "
                    f"or {fresh}")
    return f"There is no other complete checkpoint in {root}: {fresh}"


def _first_metrics_step(metrics_file: Path) -> int | None:
    """The step of the first metrics record of a trained step (1 or later) in a run's metrics.jsonl (None: none),
    read line by line up to it, so a long run's file is not read whole. Step 0 is verl's validation before
    training (val_before_train): a run stopped before its first step trained nothing, and its rerun logs
    the same step 0 again."""
    if not metrics_file.is_file():
        return None
    with metrics_file.open("rb") as fh:
        for line in fh:
            if b'"metrics"' not in line or not line.endswith(b"\n"):
                continue
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if (isinstance(record, dict) and record.get("kind") == "metrics" and isinstance(record.get("step"), int)
                    and record["step"] >= 1):
                return record["step"]
    return None


def check_fresh_start(metrics_file: str | Path, why: str) -> None:
    """Training from step 1 must not append a second run to a run directory's metrics."""
    metrics_file = Path(metrics_file)
    first = _first_metrics_step(metrics_file)
    if first is None:
        return
    raise CheckpointError(
        f"{why}, so this run would train from step 1, but {metrics_file} already holds the metrics of an earlier "
        f"run (from step {first}): the two would be spliced into one file. To start a new run, give it its own "
        f"run name (rlhooks.run.name=... or trainer.experiment_name=...) and trainer.default_local_dir, or move "
        f"{metrics_file.parent} away"
    )


def plan_resume(config: Any, *, use_critic: bool, metrics_file: str | Path, quiet: bool = False) -> ResumePlan:
    """Where a run resumes from (module docstring, "Resume"); a CheckpointError when it must not start,
    also when a step folder this run may save is a link or a file (refused at start, not after a step).
    ``quiet``: no warnings (the check before Ray, :func:`start_problem`; the trainer says them)."""
    warn = (lambda *a, **k: None) if quiet else log.warning
    plan = _plan_resume(config, use_critic=use_critic, metrics_file=metrics_file, warn=warn)
    root = Path(os.path.abspath(str(config.trainer.default_local_dir)))
    if root.is_dir():
        for entry in sorted(root.iterdir()):
            step = step_of(entry)
            if step is not None and step > plan.step and (entry.is_symlink() or not entry.is_dir()):
                raise CheckpointError(
                    f"{entry} is {_kind(entry)}: this run would save its checkpoint of step {step} there, and "
                    f"rlhooks never writes a checkpoint through a link or over a file (verl's workers would "
                    f"overwrite the files where a link points, and rotation would later delete them). Nothing "
                    f"was written: remove it or move it out of {root} (a link's target is not touched), then "
                    f"start again")
    return plan


def _plan_resume(config: Any, *, use_critic: bool, metrics_file: str | Path,
                 warn: Callable[..., Any]) -> ResumePlan:
    check_settings(config)
    trainer = config.trainer
    roles = roles_of(config, use_critic)
    root = Path(os.path.abspath(str(trainer.default_local_dir)))
    mode = trainer.resume_mode
    if mode == "disable":
        replaced = [s for s, f in step_folders(root) if inspect_checkpoint(f, roles, read_seal=False).complete]
        if replaced:
            warn("resume_mode=disable: training from scratch; this run's checkpoints replace the "
                        "earlier ones of the same steps", checkpoint_dir=str(root), earlier_steps=replaced)
        check_fresh_start(metrics_file, "trainer.resume_mode=disable")
        return ResumePlan(None)
    if mode == "resume_path":
        path = trainer.get("resume_from_path", None)
        if not isinstance(path, str) or step_of(path) is None:
            raise CheckpointError(f"trainer.resume_from_path={path!r}: name a checkpoint folder, "
                                  f"e.g. {root / (STEP_PREFIX + '<N>')}")
        return _resume(inspect_checkpoint(os.path.abspath(path), roles), root, roles, f"trainer.resume_from_path={path}",
                       warn)
    if mode != "auto":
        return ResumePlan(None)  # verl refuses other modes itself
    tracked, tracker_problem = read_tracker(root)
    if tracked is not None:
        found = inspect_checkpoint(root / f"{STEP_PREFIX}{tracked}", roles)
        return _resume(found, root, roles, f"{root / TRACKER} names step {tracked}", warn)
    complete = newest_complete(root, roles)
    if tracker_problem is None and complete is None:
        check_fresh_start(metrics_file, f"there is no complete checkpoint in {root}")
        return ResumePlan(None)
    why = tracker_problem or f"{root / TRACKER} is missing while {complete.folder} is a complete checkpoint"
    raise CheckpointError(f"resume_mode=auto will not guess where to resume: {why}. {_way_out(root, roles)}")


def _resume(found: Inspection, root: Path, roles: Mapping[str, Sequence[str]], named_by: str,
            warn: Callable[..., Any]) -> ResumePlan:
    if not found.complete:
        raise CheckpointError(
            f"cannot resume from step {found.step} ({named_by}): {found.folder} is not a complete checkpoint "
            f"({'; '.join(found.problems)}). {_way_out(root, roles, exclude=found.folder)}"
        )
    if not found.sealed:
        warn("checkpoint has no rlhooks state; samplers and other components start fresh",
                    folder=str(found.folder))
    later = [s for s, _ in step_folders(root) if s > found.step]
    if later:  # e.g. resume_from_path to an earlier step: said, not silent
        warn(f"resuming from step {found.step}: this run's saves replace the later checkpoint folders of "
                    f"the same steps", checkpoint_dir=str(root), later_steps=later)
    return ResumePlan(found.folder, found.step, found.state)


# -- whose checkpoint -------------------------------------------------------------------------------
def owner_of(config: Any, run_name: str) -> dict[str, Any]:
    """Who writes (or would resume) checkpoints with this verl config, in the run named ``run_name``."""
    from rlhooks.engines.verl.config import trainer_in_use

    trainer = trainer_in_use(config)
    mode = config.trainer.v1.get("trainer_mode", None) if trainer == "v1" else None
    return {"run": str(run_name), "trainer": trainer, "mode": None if mode is None else str(mode)}


def _who(owner: Mapping[str, Any]) -> str:
    trainer = "V1" if owner.get("trainer") == "v1" else "legacy"
    mode = f" in mode {owner['mode']}" if owner.get("mode") else ""
    return f"run {owner.get('run')!r} on the {trainer} trainer{mode}"


def _as_owner(owner: Mapping[str, Any]) -> str:
    """The overrides that make a run the checkpoint's owner."""
    out = [f"rlhooks.run.name={owner.get('run')}"]
    if owner.get("trainer") == "v1":
        out += ["trainer.use_v1=true"] + ([f"trainer.v1.trainer_mode={owner['mode']}"] if owner.get("mode") else [])
    else:
        out.append("trainer.use_v1=false")
    return " ".join(out)


def owner_problem(state: Mapping[str, Any] | None, folder: str | Path, current: Mapping[str, Any]) -> str | None:
    """Why this run (``current``, :func:`owner_of`) must not resume the checkpoint ``folder`` whose rlhooks.pt
    is ``state``; None when it may (its own, or a seal that names no owner)."""
    written = (state or {}).get(OWNER_KEY)
    if not isinstance(written, Mapping) or {k: written.get(k) for k in current} == dict(current):
        return None
    return (f"{folder} was written by {_who(written)}, and this is {_who(current)}: a run resumes only its own "
            f"checkpoints. To continue that run, start it as it was ({_as_owner(written)}); to start this run "
            f"afresh, give it its own trainer.default_local_dir (rlhooks train puts a run's checkpoints in its run "
            f"directory, <run.out_dir>/<run.name>/checkpoints, unless that key is set)")


def check_owner(plan: ResumePlan, current: Mapping[str, Any]) -> None:
    """A CheckpointError when ``plan`` resumes a checkpoint another run wrote (:func:`owner_problem`)."""
    problem = owner_problem(plan.state, plan.folder or "", current) if plan.folder is not None else None
    if problem:
        raise CheckpointError(f"cannot resume from step {plan.step}: {problem}")


def start_problem(config: Any, run_dir: str | Path) -> str | None:
    """Before Ray: what the trainer's :func:`plan_resume` and :func:`check_owner` will refuse (a damaged or
    deleted tracked checkpoint, another run's checkpoint, a link in a step folder's place, metrics a fresh
    start would splice), said by ``rlhooks train`` and its ``--dry-run`` in seconds instead of after Ray
    started. Judged only when the checkpoint folder is on this machine; None when the start may go on."""
    from verl.trainer.ppo.utils import need_critic

    if not Path(os.path.abspath(str(config.trainer.default_local_dir))).is_dir():
        return None  # nothing saved yet here (or saved on another node: the trainer judges it there)
    with warnings.catch_warnings():  # its "Disabled critic" warning: validate_config says it once already
        warnings.simplefilter("ignore")
        use_critic = need_critic(config)
    try:
        plan = plan_resume(config, use_critic=use_critic, metrics_file=Path(run_dir) / METRICS_FILE, quiet=True)
        check_owner(plan, owner_of(config, Path(run_dir).name))
    except CheckpointError as exc:
        return str(exc)
    return None


def load_with_plan(trainer: Any, load: Callable[[], Any],
                   restore: Callable[[dict[str, Any]], None] | None = None) -> tuple[ResumePlan, Any]:
    """A trainer's ``_load_checkpoint`` (both trainers): :func:`plan_resume` and :func:`check_owner` (a
    checkpoint that must not be resumed is refused before verl touches it), verl's own loader (``load``: the trainer's
    ``super()._load_checkpoint``, whose rules pick ``plan.folder``), its failure as one :func:`load_error`,
    then the rlhooks components from ``rlhooks.pt``, the trainer's own saved state (``restore(state)``, before
    any plugin hears of the resume) and ``on_load_checkpoint``. Returns the plan and what ``load`` returned.

    The trainer provides ``config``, ``use_critic``, ``global_steps`` (set by ``load``) and ``rl`` (its
    RunManager: ``run_dir``, ``load_state_dict``, ``checkpoint_loaded``)."""
    config = trainer.config
    plan = plan_resume(config, use_critic=trainer.use_critic, metrics_file=trainer.rl.run_dir / METRICS_FILE)
    check_owner(plan, owner_of(config, Path(trainer.rl.run_dir).name))  # before verl loads another run's files
    try:
        out = load()
    except Exception as exc:
        if plan.folder is None:
            raise
        raise load_error(plan, exc, config.trainer.default_local_dir, roles_of(config, trainer.use_critic)) from exc
    if plan.folder is None or plan.state is None:
        return plan, out
    trainer.rl.load_state_dict(plan.state["components"])
    if restore is not None:
        restore(plan.state)
    log.info("restored rlhooks state", folder=str(plan.folder), components=list(plan.state["components"]))
    trainer.rl.checkpoint_loaded(trainer.global_steps, str(plan.folder))
    return plan, out


def load_error(plan: ResumePlan, exc: BaseException, root: str | Path, roles: Mapping[str, Sequence[str]]) -> CheckpointError:
    """verl's loader failed on a checkpoint that looked complete: one error naming the file, the step
    and the way out (instead of a long traceback from inside torch)."""
    folder = plan.folder
    assert folder is not None
    path = _file_being_loaded(exc) or _first_unreadable(folder)
    what = f"{path} cannot be loaded" if path else f"verl could not load {folder}"
    return CheckpointError(
        f"cannot resume from checkpoint step {plan.step} ({folder}): {what}: {_reason(exc)}. "
        f"{_way_out(Path(os.path.abspath(root)), roles, exclude=folder)}"
    )


def _file_being_loaded(exc: BaseException) -> str | None:
    """The path torch.load was reading when ``exc`` was raised (from its frame), if any."""
    for frame, _ in traceback.walk_tb(exc.__traceback__):
        if frame.f_code.co_name == "load" and frame.f_code.co_filename.endswith(os.path.join("torch", "serialization.py")):
            f = frame.f_locals.get("f")
            if isinstance(f, (str, os.PathLike)):
                return os.fspath(f)
    return None


def _first_unreadable(folder: Path) -> Path | None:
    """The first ``.pt`` file under ``folder`` that is not a whole torch archive (torch.save writes zip files)."""
    for path in sorted(folder.rglob("*.pt")):
        try:
            with zipfile.ZipFile(path) as zf:
                zf.namelist()
        except (OSError, zipfile.BadZipFile):
            return path
    return None


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    text = text if len(text) <= 300 else text[:300] + "..."
    return f"{type(exc).__name__}: {text}"

