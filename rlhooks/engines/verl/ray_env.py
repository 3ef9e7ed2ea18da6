"""Ray as both trainers' TaskRunners meet it: the driver's ``RLHOOKS_*`` variables forwarded to every Ray
process, and a warning for relative output paths on a cluster of several nodes."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import ray
import structlog

from rlhooks.engines.verl.config import BLOCK, rlhooks_config

log = structlog.get_logger("rlhooks.verl")


def warn_unshared_paths(config: Any) -> list[str]:
    """In the TaskRunner, on a Ray cluster of several nodes: a warning for each relative directory it
    writes (``rlhooks.run.out_dir``, verl's ``trainer.default_local_dir``, which holds ``rlhooks.pt``).

    Ray places the TaskRunner on any node with a free CPU, so a relative path lands under the directory
    ``ray start`` ran in on that node, not where ``rlhooks train`` was started, and a later run (or a
    resume) placed elsewhere does not find it. Returns the warnings' messages.
    """
    alive = [n for n in ray.nodes() if n.get("Alive")]
    if len(alive) < 2:
        return []
    node = f"{ray.util.get_node_ip_address()} (Ray node {ray.get_runtime_context().get_node_id()[:12]})"
    run = rlhooks_config(config).run
    checkpoints = str(config.trainer.default_local_dir)
    paths = [(f"{BLOCK}.run.out_dir", run.out_dir, os.path.join(run.out_dir, run.name), "the rlhooks run directory"),
             ("trainer.default_local_dir", checkpoints, checkpoints,
              "the checkpoint directory (verl's checkpoints, rlhooks.pt)")]
    messages = []
    for key, value, target, what in paths:
        if os.path.isabs(os.path.expanduser(value)):
            continue
        messages.append(
            f"{key} is relative ({value!r}) on a Ray cluster of {len(alive)} nodes: {what} is "
            f"{os.path.abspath(target)} on {node}, where Ray placed the TaskRunner that writes it, not on the "
            f"machine that ran `rlhooks train`. Set {key} to an absolute path on storage every node can reach "
            f"(e.g. {key}=/shared/...), see docs/how-to/verl.md, 'On a Ray cluster'"
        )
        log.warning(messages[-1])
    return messages


def forward_rlhooks_env(cfg: Any, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """This process's ``RLHOOKS_*`` variables into ``ray_kwargs.ray_init.runtime_env.env_vars`` (a value
    set there already wins), so the TaskRunner and verl's workers see them also on a cluster started with
    ``ray start``, whose processes inherit the environment of ``ray start``, not of ``rlhooks train``.
    Returns what was added."""
    from omegaconf import OmegaConf

    added = {}
    for key, value in environ.items():
        path = f"ray_kwargs.ray_init.runtime_env.env_vars.{key}"
        if key.startswith("RLHOOKS_") and OmegaConf.select(cfg, path, default=None) is None:
            OmegaConf.update(cfg, path, value, force_add=True)
            added[key] = value
    return added
