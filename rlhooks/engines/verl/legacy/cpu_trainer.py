"""The shim's trainer with real workers in this process instead of Ray worker groups.

``init_workers`` builds verl's own ``ActorRolloutRefWorker`` (role ``actor``, and one with role
``ref`` when a reference policy is needed) on the CPU platform (``cpu.platform``): FSDP2 engine,
``ppo_loss``, optimizer, checkpoint manager are verl's. Generation is verl's ``HFRollout`` on the
actor's module behind ``CPURolloutManager`` (see ``legacy.cpu_rollout`` for why). The fit loop is
``RLHooksRayPPOTrainer.fit`` (verl 0.9.1's RayPPOTrainer flow with the rlhooks driver).
"""

from __future__ import annotations

from typing import Any

from rlhooks.engines.verl.cpu import platform
from rlhooks.engines.verl.legacy.cpu_rollout import ColocatedWeights, CPURolloutManager
from rlhooks.engines.verl.legacy.trainer import RLHooksRayPPOTrainer


class LocalWorkerGroup:
    """A one-rank worker group: calls go straight to the worker (a RayWorkerGroup would dispatch them
    to its ranks and collect rank 0's output, which for one rank is the same value)."""

    def __init__(self, worker: Any, mesh: str):
        self.worker = worker
        self.world_size = 1
        self._dispatch_info = {mesh: [0]}  # one data-parallel rank (verl's _get_dp_size reads this)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.worker, name)


class ReferenceGroup(LocalWorkerGroup):
    """The reference policy as a frozen actor-role worker (see CPULearnerTrainer.init_workers)."""

    def __init__(self, worker: Any):
        super().__init__(worker, "ref")

    def compute_ref_log_prob(self, data: Any) -> Any:
        output = self.worker.actor.infer_batch(data)  # ActorRolloutRefWorker.compute_ref_log_prob: self.ref.infer_batch
        return output.cpu() if output is not None else None

    def update_actor(self, data: Any) -> Any:
        raise RuntimeError("the reference policy is never updated")


class CPULearnerTrainer(RLHooksRayPPOTrainer):
    """RLHooksRayPPOTrainer whose workers are real verl workers in this process (no Ray, no GPU)."""

    def init_workers(self) -> None:
        # not verl's: verl's starts Ray worker groups on GPUs; these are verl's workers in this process
        from verl.workers.engine_workers import ActorRolloutRefWorker

        from verl.single_controller.ray.base import ResourcePoolManager

        platform.install()
        platform.init_single_process_group()
        if self.resource_pool_manager is None:  # one process: the throughput metrics divide by 1 "GPU"
            self.resource_pool_manager = ResourcePoolManager(resource_pool_spec={"global_pool": [1]}, mapping={})
        cfg = self.config.actor_rollout_ref
        actor = ActorRolloutRefWorker(cfg, role="actor")
        actor.init_model()
        self.actor_rollout_wg = LocalWorkerGroup(actor, "actor")
        if self.use_reference_policy:
            # verl's role="ref" engine is forward-only, and forward-only FSDP2 always offloads with
            # CPUOffloadPolicy(pin_memory=True), which needs an accelerator. The reference is therefore a
            # second actor-role worker on the same initial weights that is never updated; its
            # compute_ref_log_prob is the actor engine's infer_batch, as the ref role's is.
            ref = ActorRolloutRefWorker(cfg, role="actor")
            ref.init_model()
            self.ref_policy_wg = ReferenceGroup(ref)
        self.async_rollout_mode = True
        self.async_rollout_manager = CPURolloutManager(self.config, self.tokenizer, actor.actor.engine.module,
                                                       seed=int(self.config.data.get("seed") or 0))
        self.checkpoint_manager = ColocatedWeights()

    @property
    def actor_module(self):
        return self.actor_rollout_wg.worker.actor.engine.module
