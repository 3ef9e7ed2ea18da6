"""The V1 TaskRunner: verl's own ``TaskRunnerV1``, in a process where the rlhooks trainer is registered.

verl's ``TaskRunnerV1.run`` picks the trainer with ``get_trainer_cls(trainer.v1.trainer_mode)`` and loads
the replay buffer from ``trainer.v1.sampler.custom_sampler``; importing :mod:`.trainer` registers
``rlhooks_sync`` in this Ray actor's process, so nothing of verl's set-up is replaced.
"""

from __future__ import annotations

from typing import Any

import ray
from verl.trainer.main_ppo import TaskRunnerV1

from rlhooks.engines.verl.driver import in_task_runner
from rlhooks.engines.verl.ray_env import warn_unshared_paths

_VerlTaskRunnerV1 = TaskRunnerV1.__ray_metadata__.modified_class


class _TaskRunnerV1(_VerlTaskRunnerV1):
    """verl's TaskRunnerV1, with the rlhooks trainer and replay buffer importable by name."""

    def run(self, config: Any, driver_link: dict[str, Any] | None = None) -> str | None:
        """verl's run; under ``rlhooks train`` (``driver_link``) with the driver's lock adopted and its stop
        requests honoured (driver.in_task_runner). Returns the outcome recorded here (None: none)."""
        from rlhooks.engines.verl.imports import collector_off

        with collector_off():  # verl's trainer modules: a start-up phase (engines/verl/imports.py)
            import rlhooks.engines.verl.v1.trainer  # noqa: F401 - register_trainer("rlhooks_sync")
            import rlhooks.engines.verl.v1.async_trainers  # noqa: F401 - rlhooks_colocate_async, rlhooks_separate_async

        with in_task_runner(driver_link) as outcome:
            warn_unshared_paths(config)
            super().run(config)
        return outcome["status"]


RLHooksTaskRunnerV1 = ray.remote(num_cpus=1)(_TaskRunnerV1)
