"""Real learning on one CPU process: a tiny warm-started policy trained through verl's own code.

Which verl parts run for real here, and the narrow replacements (each follows the replaced class's
contract; tests/verl/test_cpu_learner.py checks them against verl's source):

real      RayPPOTrainer's flow (through the rlhooks shim), DataProto, RLHFDataset + StatefulDataLoader,
          core_algos (GRPO advantages, PPO policy loss, KL), ActorRolloutRefWorker / TrainingWorker
          with the FSDP2 engine (log-probs, actor update, checkpoints), verl's NaiveRewardManager
          through load_reward_manager, HFRollout's generation.
platform  ``platform.py``: verl's platform registry gets a ``cpu`` platform, and verl's FSDP engine class
          is registered for device ``cpu`` (verl registers it for cuda/npu only).
replaced  ``rollout.CPURolloutManager`` for AgentLoopManager (needs a vLLM/SGLang server);
          ``rollout.ColocatedWeights`` for CheckpointEngineManager (the rollout reads the actor's module);
          ``trainer.ReferenceGroup``: the reference is a frozen actor-role worker (verl's forward-only ref
          engine pins memory for CPU offload, which needs an accelerator);
          ``trainer.LocalWorkerGroup`` for RayWorkerGroup (one rank, no Ray).
"""
