"""The verl engine: ``rlhooks train`` on verl's V1 trainer (:mod:`rlhooks.engines.verl.v1`) or its legacy
trainer (:mod:`rlhooks.engines.verl.legacy`), and what both share (adapter, config, compat, state).

``from rlhooks.engines.verl import RLHooksRayPPOTrainer`` (or ``RayPPOTrainerWithSampling``, the
dynamic-sampling document's name for it) is the legacy trainer; it imports verl on first use only.
"""

from __future__ import annotations

from typing import Any

_LEGACY_TRAINER_NAMES = ("RLHooksRayPPOTrainer", "RayPPOTrainerWithSampling")


def __getattr__(name: str) -> Any:
    if name in _LEGACY_TRAINER_NAMES:
        from rlhooks.engines.verl.legacy import trainer

        return getattr(trainer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
