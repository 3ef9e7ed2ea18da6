"""The rlhooks state next to verl's checkpoint: ``global_step_N/rlhooks.pt``, as the V1 trainer uses it.

It holds every stateful rlhooks component (sampler, learning state, plugins) and the trainer's own
counters (``extra``). The file format, its atomic write and the clear error on a damaged file are
:mod:`rlhooks.engines.verl.checkpoints`'s (one format for both trainers); this module adds the folder
verl resumed from, found by verl's own rules (:func:`resumed_folder`).
"""

from __future__ import annotations

import os
from typing import Any

from rlhooks.engines.verl import checkpoints

#: file next to verl's data.pt holding every stateful rlhooks component (sampler included)
STATE_FILE = checkpoints.STATE_FILE


def write_state(folder: str, components: dict[str, Any], **extra: Any) -> str:
    """``folder/rlhooks.pt`` with the components' state and the trainer's ``extra`` keys; its path."""
    os.makedirs(folder, exist_ok=True)
    return str(checkpoints.write_state(folder, {"components": components, **extra}))


def read_state(folder: str) -> dict[str, Any] | None:
    """What :func:`write_state` wrote in ``folder``, or None when the checkpoint has no rlhooks state;
    a CheckpointError naming the file when it cannot be read."""
    if not os.path.exists(os.path.join(folder, STATE_FILE)):
        return None
    return checkpoints.read_state(folder)


def resumed_folder(trainer_config: Any, global_steps: int) -> str | None:
    """The checkpoint folder verl's ``_load_checkpoint`` resumed from (same rules, both trainers), or None.

    ``global_steps`` is the step verl set while loading (0: it started from scratch).
    """
    from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path

    if trainer_config.resume_mode == "disable" or global_steps == 0:
        return None
    if trainer_config.resume_mode == "resume_path":
        folder = trainer_config.resume_from_path
    else:
        folder = find_latest_ckpt_path(os.path.abspath(trainer_config.default_local_dir))
    return os.path.abspath(folder) if folder else None
