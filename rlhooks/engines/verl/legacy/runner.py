"""The legacy TaskRunner: verl's ``main_ppo_v0.TaskRunner`` building the rlhooks trainer."""

from __future__ import annotations

from typing import Any

import ray
from verl.trainer.main_ppo_v0 import BaseTaskRunner

from rlhooks.core.errors import RLHooksError
from rlhooks.engines.verl.driver import in_task_runner
from rlhooks.engines.verl.ray_env import warn_unshared_paths


class _TaskRunner(BaseTaskRunner):
    """verl's legacy TaskRunner, building RLHooksRayPPOTrainer instead of RayPPOTrainer."""

    def run(self, config: Any, driver_link: dict[str, Any] | None = None) -> str | None:
        import verl.trainer.main_ppo_v0 as v0

        from rlhooks.engines.verl.legacy.trainer import RLHooksRayPPOTrainer

        original = getattr(v0.TaskRunner, "__ray_metadata__", None)
        run = getattr(getattr(original, "modified_class", None), "run", None)
        if run is None:
            raise RLHooksError(
                "cannot find verl's TaskRunner.run (verl.trainer.main_ppo_v0); this verl/ray version is not "
                "supported by rlhooks train: use verl 0.9.x"
            )
        warn_unshared_paths(config)
        # This Ray actor process runs only this job, so swapping the name verl's TaskRunner.run
        # constructs is contained; the rest of the set-up (workers, datasets, reward) stays verl's.
        v0.RayPPOTrainer = RLHooksRayPPOTrainer
        with in_task_runner(driver_link) as outcome:  # rlhooks train's lock and stop requests (driver.py)
            run(self, config)
        return outcome["status"]


RLHooksTaskRunner = ray.remote(num_cpus=1)(_TaskRunner)
