"""The CPU stand-ins inside verl's TaskRunner on a Ray cluster (test_verl_ray_cluster.py).

``install`` is a Ray ``runtime_env`` ``worker_process_setup_hook``: Ray calls it in each worker process
of the job before it runs anything, so in the TaskRunner actor the shim's ``init_workers`` attaches the
stand-ins of verl_shim_helpers (generation, log-probs, actor update, checkpoint files) instead of
starting GPU workers. Everything else is the real path: ``rlhooks train`` -> verl's ``run_ppo`` ->
``ray.init`` -> the rlhooks TaskRunner -> verl's ``TaskRunner.run`` (tokenizer, datasets, validation,
resource pool spec) -> the rlhooks trainer's ``fit()``.

``init_workers`` also writes a probe (JSON at ``$CLUSTER_PROBE``): the node, process and working
directory of the TaskRunner and the ``RLHOOKS_*`` variables it sees.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

PROBE_ENV = "CLUSTER_PROBE"


def _init_workers_with_standins(self) -> None:
    import ray

    from .legacy_helpers import CPUTrainer

    CPUTrainer.attach_standins(self)
    context = ray.get_runtime_context()
    node_id = context.get_node_id()
    (node,) = [n for n in ray.nodes() if n["NodeID"] == node_id]
    Path(os.environ[PROBE_ENV]).write_text(json.dumps({
        "node_id": node_id, "head": "node:__internal_head__" in node["Resources"],
        "pid": os.getpid(), "ip": ray.util.get_node_ip_address(),
        "actor_id": context.get_actor_id(), "cwd": os.getcwd(),
        "trainer": type(self).__name__,
        "env": {k: v for k, v in os.environ.items() if k.startswith("RLHOOKS_")},
    }))


def install() -> None:
    from rlhooks.engines.verl.legacy.trainer import RLHooksRayPPOTrainer

    RLHooksRayPPOTrainer.init_workers = _init_workers_with_standins
