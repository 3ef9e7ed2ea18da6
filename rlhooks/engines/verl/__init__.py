"""The verl engine: ``rlhooks train`` on verl's V1 trainer (:mod:`rlhooks.engines.verl.v1`) or another one
listed in :mod:`rlhooks.engines.verl.trainers` (the legacy trainer, :mod:`rlhooks.engines.verl.legacy`), and
what they share (adapter, config, compat, checkpoints).

``from rlhooks.engines.verl import RLHooksRayPPOTrainer`` (or ``RayPPOTrainerWithSampling``, the
dynamic-sampling document's name for it) is the legacy trainer; it imports verl on first use only.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    import importlib

    trainers = importlib.import_module("rlhooks.engines.verl.trainers")  # not a from-import: no recursion here
    for trainer in trainers.REMOVABLE:
        package = trainers.removable(trainer)
        if name in package.TRAINER_NAMES:
            return package.trainer_class(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
