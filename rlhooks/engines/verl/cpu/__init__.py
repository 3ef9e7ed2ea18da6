"""Real learning on the host CPU: a tiny warm-started policy trained through verl's own code.

The CPU learner runs the trainer verl's config selects (``runner.run``):

V1 (``trainer.use_v1=true``, verl's default; ``ray_learner``)
          verl's ``run_ppo`` with ``TaskRunnerV1`` on a local Ray: all of V1's code runs (PPOTrainer.fit/step,
          replay buffer, TransferQueue, AgentLoopManagerTQ, reward loop, naive checkpoint engine, the workers).
          Through verl's extension points: ``ray_process`` (imported in every Ray process through
          ``VERL_USE_EXTERNAL_MODULES``): the ``cpu`` platform, the CPU engine, the workers' gloo group;
          ``rollout_server``: ``rollout.name=cpu``, a rollout replica, server and worker-side rollout obeying
          the vLLM ones' contract (tests/verl/test_cpu_rollout_contract.py reads it from verl's source).

legacy (``trainer.use_v1=false``; ``trainer``, ``rollout``): one process, no Ray. Which verl parts run for
real there, and the narrow replacements (each follows the replaced class's contract;
tests/verl/test_cpu_learner.py checks them against verl's source):

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
