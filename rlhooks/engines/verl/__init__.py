"""The verl engine: ``rlhooks train`` and the trainer shim (:mod:`rlhooks.engines.verl.trainer`).

``from rlhooks.engines.verl import RLHooksRayPPOTrainer`` (or ``RayPPOTrainerWithSampling``, the
dynamic-sampling document's name for it) imports verl on first use only.
"""

from __future__ import annotations

from typing import Any

_TRAINER_NAMES = ("RLHooksRayPPOTrainer", "RayPPOTrainerWithSampling")


def __getattr__(name: str) -> Any:
    if name in _TRAINER_NAMES:
        from rlhooks.engines.verl import trainer

        return getattr(trainer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
