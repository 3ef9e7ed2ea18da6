"""The legacy CPU learner (``trainer.use_v1=false``): verl's legacy TaskRunner.run, in this process, with
CPULearnerTrainer.

verl's TaskRunner (a Ray actor) builds the tokenizer from the model config, the datasets and the
sampler, then the trainer, its workers, and calls fit(). This does the same steps with verl's own
functions (``HFModelConfig``, ``create_rl_dataset``, ``create_rl_sampler``, ``validate_config``);
only the worker groups differ (see ``cpu_trainer``). No Ray is started.

Which verl parts run for real there, and the narrow replacements (each follows the replaced class's contract;
tests/verl/legacy/test_legacy_cpu_learner.py checks them against verl's source):

real      RayPPOTrainer's flow (through the rlhooks shim), DataProto, RLHFDataset + StatefulDataLoader,
          core_algos (GRPO advantages, PPO policy loss, KL), ActorRolloutRefWorker / TrainingWorker
          with the FSDP2 engine (log-probs, actor update, checkpoints), verl's NaiveRewardManager
          through load_reward_manager, HFRollout's generation.
platform  ``platform.py``: verl's platform registry gets a ``cpu`` platform, and verl's FSDP engine class
          is registered for device ``cpu`` (verl registers it for cuda/npu only).
replaced  ``cpu_rollout.CPURolloutManager`` for AgentLoopManager (needs a vLLM/SGLang server);
          ``cpu_rollout.ColocatedWeights`` for CheckpointEngineManager (the rollout reads the actor's module);
          ``cpu_trainer.ReferenceGroup``: the reference is a frozen actor-role worker (verl's forward-only ref
          engine pins memory for CPU offload, which needs an accelerator);
          ``cpu_trainer.LocalWorkerGroup`` for RayWorkerGroup (one rank, no Ray).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rlhooks.engines.verl.cpu import platform
from rlhooks.engines.verl.cpu.runner import check_local_files, use_portable_attention


def build_trainer(cfg: Any, *, rlhooks_plugins: Iterable[tuple[str, Any]] = ()):
    """The legacy CPU learner (``trainer.use_v1=false``) for a composed verl config (with its ``rlhooks:``
    block), workers initialized."""
    from rlhooks.engines.verl.cpu import ray_learner

    if ray_learner.uses_v1(cfg):
        raise ValueError("build_trainer builds the CPU learner on verl's legacy trainer, and this config selects "
                         "V1 (trainer.use_v1 is true, verl's default): set trainer.use_v1=false, or train with "
                         "cpu.runner.run, which runs the trainer the config selects")
    check_local_files(cfg)
    platform.install()  # before anything asks verl for its platform
    from verl.trainer.ppo.utils import Role, create_rl_dataset, create_rl_sampler, need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config
    from verl.utils.dataset.rl_dataset import collate_fn

    from rlhooks.engines.verl.legacy.cpu_trainer import CPULearnerTrainer

    if need_critic(cfg):
        raise ValueError("the CPU learner trains without a critic: use a critic-free advantage estimator "
                         "(algorithm.adv_estimator=grpo, rloo, ...)")
    use_portable_attention(cfg)
    validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=False)
    model_config = omega_conf_to_dataclass(cfg.actor_rollout_ref.model)
    tokenizer, processor = model_config.tokenizer, model_config.processor
    train = create_rl_dataset(cfg.data.train_files, cfg.data, tokenizer, processor, is_train=True,
                              max_samples=cfg.data.get("train_max_samples", -1))
    val = create_rl_dataset(cfg.data.val_files, cfg.data, tokenizer, processor, is_train=False,
                            max_samples=cfg.data.get("val_max_samples", -1))
    roles = {Role.ActorRollout: object}
    if need_reference_policy(cfg):
        roles[Role.RefPolicy] = object
    trainer = CPULearnerTrainer(
        config=cfg, tokenizer=tokenizer, processor=processor, role_worker_mapping=roles,
        resource_pool_manager=None, train_dataset=train, val_dataset=val, collate_fn=collate_fn,
        train_sampler=create_rl_sampler(cfg.data, train), rlhooks_plugins=rlhooks_plugins,
    )
    trainer.init_workers()
    return trainer


def run(cfg: Any) -> None:
    """Train on the legacy CPU learner (``cpu.runner.run`` checked the local files)."""
    build_trainer(cfg).fit()
