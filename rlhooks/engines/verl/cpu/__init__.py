"""Real learning on the host CPU: a tiny warm-started policy trained through verl's own code.

The CPU learner runs the trainer verl's config selects (``runner.run``):

V1 (``trainer.use_v1=true``, verl's default; ``ray_learner``)
          verl's ``run_ppo`` with ``TaskRunnerV1`` on a local Ray: all of V1's code runs (PPOTrainer.fit/step,
          replay buffer, TransferQueue, AgentLoopManagerTQ, reward loop, naive checkpoint engine, the workers).
          Through verl's extension points: ``ray_process`` (imported in every Ray process through
          ``VERL_USE_EXTERNAL_MODULES``): the ``cpu`` platform, the CPU engine, the workers' gloo group;
          ``rollout_server``: ``rollout.name=cpu``, a rollout replica, server and worker-side rollout obeying
          the vLLM ones' contract (tests/verl/test_cpu_rollout_contract.py reads it from verl's source).

legacy (``trainer.use_v1=false``): one process, no Ray; its parts are the legacy trainer's
          (``legacy/cpu_runner.py``, ``cpu_trainer.py``, ``cpu_rollout.py``), deleted with it. Shared: ``platform.py``
          (verl's platform registry gets a ``cpu`` platform, and verl's FSDP engine class is registered for
          device ``cpu``: verl registers it for cuda/npu only), ``policy.py``, ``tasks.py``, ``runner.py``.
"""
