"""Ray in these tests is hermetic from the first import of Ray in the test process: token
authentication with this process's own token (``ray_cluster.hermetic_env``), set before Ray reads its
config, so neither ``~/.ray/auth_token`` nor a token setting of the machine reaches the tests' clusters."""

import os

from .ray_cluster import hermetic_env

for _key in [k for k in os.environ if k.startswith("RAY_AUTH_")]:
    del os.environ[_key]
os.environ.update(hermetic_env())
