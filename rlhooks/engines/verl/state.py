"""The rlhooks state next to verl's checkpoint: ``global_step_N/rlhooks.pt``, shared by both trainers.

It holds every stateful rlhooks component (sampler, learning state, plugins) and the trainer's own
counters (``extra``). Written atomically (a temporary file, then ``os.replace``); read back from the
checkpoint folder verl resumed from, found by verl's own rules (:func:`resumed_folder`).
"""

from __future__ import annotations

import os
from typing import Any

import torch

#: file next to verl's data.pt holding every stateful rlhooks component (sampler included)
STATE_FILE = "rlhooks.pt"


def write_state(folder: str, components: dict[str, Any], **extra: Any) -> str:
    """``folder/rlhooks.pt`` with the components' state and the trainer's ``extra`` keys; its path."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, STATE_FILE)
    tmp = path + ".tmp"
    torch.save({"components": components, **extra}, tmp)
    os.replace(tmp, path)
    return path


def read_state(folder: str) -> dict[str, Any] | None:
    """What :func:`write_state` wrote in ``folder``, or None when the checkpoint has no rlhooks state."""
    path = os.path.join(folder, STATE_FILE)
    if not os.path.exists(path):
        return None
    return torch.load(path, weights_only=False)


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
