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
3. ``rlhooks.pt`` (:data:`STATE_FILE`), written last, lists every file of the folder (1, 2 and any
   other the save wrote) with its size (:data:`MANIFEST_KEY`), and each file still has that size.
   A folder without ``rlhooks.pt`` was written by verl alone (or by an older rlhooks): 1 and 2
   decide, and it resumes without rlhooks state.

**Save order** (:meth:`CheckpointWriter.save`): an earlier ``rlhooks.pt`` of the same step is removed
first; the workers' files (verl's managers, with verl's rotation off); ``data.pt`` (atomic); any
further files (``before_seal``); the seal ``rlhooks.pt`` (atomic); the tracker (atomic): the commit;
then the rotation, which removes only older checkpoints this process saved, file by file as their seal
lists them, never the one just committed.
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
"""

from __future__ import annotations

import json
import os
import re
import traceback
import zipfile
from collections.abc import Callable, Mapping, Sequence
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
#: what verl's FSDP checkpoint manager reads per content (FSDPCheckpointManager.load_checkpoint)
FSDP_FILES = {"model": "model_world_size_{w}_rank_{r}.pt", "optimizer": "optim_world_size_{w}_rank_{r}.pt",
              "extra": "extra_state_world_size_{w}_rank_{r}.pt"}
FSDP_CONFIG = "fsdp_config.json"
DEFAULT_CONTENTS = ("model", "optimizer", "extra")


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


def write_state(folder: str | Path, state: Mapping[str, Any], manifest: Mapping[str, int] | None = None) -> Path:
    """rlhooks.pt, atomically; ``manifest`` None keeps the one the file already holds (a rewrite after
    on_step_end of a sealed checkpoint)."""
    import torch

    path = Path(folder) / STATE_FILE
    if manifest is None and path.exists():
        manifest = read_state(folder).get(MANIFEST_KEY)
    body = {**state, MANIFEST_KEY: dict(manifest or {})}
    _write_atomic(path, lambda tmp: torch.save(body, tmp))
    return path


def reseal(folder: str | Path) -> Path:
    """rlhooks.pt rewritten with every file the folder holds now: what plugins wrote in
    ``on_save_checkpoint`` (after the seal) is then listed, so it is size-checked and rotated out with
    the checkpoint instead of keeping the folder alive."""
    state = {k: v for k, v in read_state(folder).items() if k != MANIFEST_KEY}
    return write_state(folder, state, manifest_of(Path(folder)))


def write_tracker(root: str | Path, step: int) -> None:
    root = Path(root)
    _write_atomic(root / TRACKER, lambda tmp: Path(tmp).write_text(str(int(step))))
    _fsync_dir(root)


def manifest_of(folder: Path) -> dict[str, int]:
    """{relative path: size} of every file the save wrote into ``folder`` (its temporary files and the
    seal itself aside)."""
    out: dict[str, int] = {}
    for dirpath, _, files in os.walk(folder):
        for name in files:
            p = Path(dirpath) / name
            if name.startswith(".") or p.is_symlink() or p == folder / STATE_FILE:
                continue
            out[str(p.relative_to(folder))] = p.stat().st_size
    return out


def remove_checkpoint(folder: Path) -> list[Path]:
    """Delete what this checkpoint's seal lists (and the seal), then its directories once empty; any
    other file (a user's) stays, with its directories. Returns what was removed."""
    try:
        manifest = read_state(folder).get(MANIFEST_KEY) or {}
    except CheckpointError as exc:
        log.warning("not rotating a checkpoint whose rlhooks.pt cannot be read", folder=str(folder), error=str(exc))
        return []
    removed = []
    for rel in [*manifest, STATE_FILE]:
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
        folder.mkdir(parents=True, exist_ok=True)
        stale = folder / STATE_FILE
        if stale.exists() or stale.is_symlink():  # a seal of an earlier save of this step must not cover new files
            stale.unlink()
        for role, group in workers.items():
            remote = None if self.hdfs_dir is None else os.path.join(self.hdfs_dir, f"{STEP_PREFIX}{step}", role)
            group.save_checkpoint(str(folder / role), remote, step, max_ckpt_to_keep=None)
        _write_atomic(folder / DATA_FILE, lambda tmp: torch.save(dataloader_state, tmp))
        if before_seal is not None:
            before_seal(folder)
        write_state(folder, state, manifest_of(folder))
        _fsync_dir(folder)
        write_tracker(self.root, step)  # the commit
        self._rotate(folder)
        return folder

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


def plan_resume(config: Any, *, use_critic: bool, metrics_file: str | Path) -> ResumePlan:
    """Where a run resumes from (module docstring, "Resume"); a CheckpointError when it must not start."""
    check_settings(config)
    trainer = config.trainer
    roles = roles_of(config, use_critic)
    root = Path(os.path.abspath(str(trainer.default_local_dir)))
    mode = trainer.resume_mode
    if mode == "disable":
        replaced = [s for s, f in step_folders(root) if inspect_checkpoint(f, roles, read_seal=False).complete]
        if replaced:
            log.warning("resume_mode=disable: training from scratch; this run's checkpoints replace the "
                        "earlier ones of the same steps", checkpoint_dir=str(root), earlier_steps=replaced)
        check_fresh_start(metrics_file, "trainer.resume_mode=disable")
        return ResumePlan(None)
    if mode == "resume_path":
        path = trainer.get("resume_from_path", None)
        if not isinstance(path, str) or step_of(path) is None:
            raise CheckpointError(f"trainer.resume_from_path={path!r}: name a checkpoint folder, "
                                  f"e.g. {root / (STEP_PREFIX + '<N>')}")
        return _resume(inspect_checkpoint(os.path.abspath(path), roles), root, roles, f"trainer.resume_from_path={path}")
    if mode != "auto":
        return ResumePlan(None)  # verl refuses other modes itself
    tracked, tracker_problem = read_tracker(root)
    if tracked is not None:
        found = inspect_checkpoint(root / f"{STEP_PREFIX}{tracked}", roles)
        return _resume(found, root, roles, f"{root / TRACKER} names step {tracked}")
    complete = newest_complete(root, roles)
    if tracker_problem is None and complete is None:
        check_fresh_start(metrics_file, f"there is no complete checkpoint in {root}")
        return ResumePlan(None)
    why = tracker_problem or f"{root / TRACKER} is missing while {complete.folder} is a complete checkpoint"
    raise CheckpointError(f"resume_mode=auto will not guess where to resume: {why}. {_way_out(root, roles)}")


def _resume(found: Inspection, root: Path, roles: Mapping[str, Sequence[str]], named_by: str) -> ResumePlan:
    if not found.complete:
        raise CheckpointError(
            f"cannot resume from step {found.step} ({named_by}): {found.folder} is not a complete checkpoint "
            f"({'; '.join(found.problems)}). {_way_out(root, roles, exclude=found.folder)}"
        )
    if not found.sealed:
        log.warning("checkpoint has no rlhooks state; samplers and other components start fresh",
                    folder=str(found.folder))
    later = [s for s, _ in step_folders(root) if s > found.step]
    if later:  # e.g. resume_from_path to an earlier step: said, not silent
        log.warning(f"resuming from step {found.step}: this run's saves replace the later checkpoint folders of "
                    f"the same steps", checkpoint_dir=str(root), later_steps=later)
    return ResumePlan(found.folder, found.step, found.state)


def load_with_plan(trainer: Any, load: Callable[[], Any],
                   restore: Callable[[dict[str, Any]], None] | None = None) -> tuple[ResumePlan, Any]:
    """A trainer's ``_load_checkpoint`` (both trainers): :func:`plan_resume` (a checkpoint that must not be
    resumed is refused before verl touches it), verl's own loader (``load``: the trainer's
    ``super()._load_checkpoint``, whose rules pick ``plan.folder``), its failure as one :func:`load_error`,
    then the rlhooks components from ``rlhooks.pt``, the trainer's own saved state (``restore(state)``, before
    any plugin hears of the resume) and ``on_load_checkpoint``. Returns the plan and what ``load`` returned.

    The trainer provides ``config``, ``use_critic``, ``global_steps`` (set by ``load``) and ``rl`` (its
    RunManager: ``run_dir``, ``load_state_dict``, ``checkpoint_loaded``)."""
    config = trainer.config
    plan = plan_resume(config, use_critic=trainer.use_critic, metrics_file=trainer.rl.run_dir / METRICS_FILE)
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

