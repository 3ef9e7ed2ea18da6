"""Ray in these tests is hermetic from the first import of Ray in the test process: token
authentication with this process's own token (``ray_cluster.hermetic_env``), set before Ray reads its
config, so neither ``~/.ray/auth_token`` nor a token setting of the machine reaches the tests' clusters.
Their Rays (and the ``rlhooks train`` processes they start, which inherit it) start no idle workers ahead
of need (``ray_cluster.lean_env``)."""

import os

import pytest

from .ray_cluster import hermetic_env, lean_env

for _key in [k for k in os.environ if k.startswith("RAY_AUTH_")]:
    del os.environ[_key]
os.environ.update({**hermetic_env(), **lean_env()})


@pytest.fixture(scope="session")
def cpu_v1_ray():
    """One hermetic local Ray for the session's CPU-learner V1 runs (starting Ray costs 20-60 s on 2 cores),
    with what the CPU learner's ``ray.init`` gets (``ray_learner.ray_init_kwargs``)."""
    from rlhooks.engines.verl.cpu import ray_learner, runner
    from rlhooks.engines.verl.main import compose_verl_config

    from .ray_cluster import local_ray

    # with separate_async's settings: Ray then also has the logical GPU of its standalone rollout pool
    cfg = compose_verl_config(runner.verl_overrides("policy", "train.parquet") + runner.separate_async_overrides(8))
    with local_ray(ray_learner.ray_init_kwargs(cfg)) as root:
        yield root
