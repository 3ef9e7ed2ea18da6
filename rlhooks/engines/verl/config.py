"""The rlhooks config of a verl run: the ``rlhooks:`` block of verl's Hydra config.

The block holds the rlhooks sections inline (``run``, ``sampler``, ``filters``, ``rewards``,
``samples``, ``backends``, ``plugins``) and/or ``config: path/to/rlhooks.yaml`` (inline keys
override the file's). verl's config decides what both sides must agree on:

================================= ===========================
rlhooks ``run.``                  verl
================================= ===========================
train_batch_size                  data.train_batch_size
gen_batch_size                    data.gen_batch_size
n                                 actor_rollout_ref.rollout.n
steps                             trainer.total_training_steps, else dataloader length x total_epochs
seed (when unset)                 data.seed
name (when unset)                 trainer.experiment_name
================================= ===========================

Setting one of the first four in the rlhooks config to a different value is an error, not a
silent pick. The verl-style ``data.sampler.class_name`` (+ flat ``data.sampler.*`` options) is
mapped onto the rlhooks ``sampler:`` section.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlhooks.core.config import Config, load_config, load_yaml
from rlhooks.core.errors import ConfigError, ConfigIssue
from rlhooks.core.rundir import safe_run_name

#: the key of the rlhooks block in verl's config
BLOCK = "rlhooks"
#: rlhooks.yaml may carry verl Hydra overrides in a ``verl:`` section (consumed by the CLI)
VERL_SECTION = "verl"


def _container(node: Any) -> Any:
    if node is None:
        return None
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(node, (DictConfig, ListConfig)):
            return OmegaConf.to_container(node, resolve=True)
    except ImportError:  # pragma: no cover - omegaconf comes with verl
        pass
    return node


def _get(cfg: Any, dotted: str, default: Any = None) -> Any:
    node = cfg
    for part in dotted.split("."):
        if node is None:
            return default
        node = node.get(part) if hasattr(node, "get") else getattr(node, part, None)
    return default if node is None else node


def deep_merge(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in top.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), dict) else v
    return out


def raw_block(verl_config: Any) -> dict[str, Any]:
    """The rlhooks block as a plain dict, with ``config:`` (a YAML path) merged in."""
    block = _container(_get(verl_config, BLOCK)) or {}
    if not isinstance(block, Mapping):
        raise ConfigError([ConfigIssue(BLOCK, f"expected a mapping, got {type(block).__name__}")], "verl config")
    block = dict(block)
    path = block.pop("config", None)
    if path:
        block = deep_merge(load_yaml(Path(path)), block)
    block.pop(VERL_SECTION, None)
    return block


def legacy_sampler(verl_config: Any) -> dict[str, Any] | None:
    """``data.sampler`` in the removed verl curriculum format, if the config has one."""
    sampler = _container(_get(verl_config, "data.sampler"))
    if not isinstance(sampler, Mapping) or not (sampler.get("class_name") or sampler.get("class_path")):
        return None
    return {k: v for k, v in sampler.items() if v is not None}


def rlhooks_config(verl_config: Any, *, steps: int | None = None, registry: Any = None) -> Config:
    """Validate and resolve the run's rlhooks config against verl's; ConfigError lists every problem."""
    raw = raw_block(verl_config)
    issues: list[ConfigIssue] = []
    legacy = legacy_sampler(verl_config)
    if legacy is not None:
        if raw.get("sampler"):
            issues.append(ConfigIssue(
                "data.sampler",
                "both verl's data.sampler and rlhooks.sampler are set; keep one (rlhooks.sampler is preferred)",
            ))
        else:
            raw["sampler"] = legacy
    run = dict(raw.get("run") or {})
    rollout_n = _get(verl_config, "actor_rollout_ref.rollout.n")
    derived = {
        "train_batch_size": _get(verl_config, "data.train_batch_size"),
        "gen_batch_size": _get(verl_config, "data.gen_batch_size"),
        "n": rollout_n,
    }
    verl_key = {
        "train_batch_size": "data.train_batch_size",
        "gen_batch_size": "data.gen_batch_size",
        "n": "actor_rollout_ref.rollout.n",
    }
    for key, value in derived.items():
        if key in run and run[key] is not None and value is not None and run[key] != value:
            issues.append(ConfigIssue(
                f"{BLOCK}.run.{key}",
                f"is {run[key]!r} but verl's {verl_key[key]} is {value!r}; verl's value decides, "
                f"so remove run.{key} or make the two agree",
            ))
        elif value is not None:
            run[key] = value
    if steps is not None:
        run["steps"] = steps
    if run.get("seed") is None and _get(verl_config, "data.seed") is not None:
        run["seed"] = _get(verl_config, "data.seed")
    if "name" not in run and _get(verl_config, "trainer.experiment_name"):
        run["name"] = safe_run_name(str(_get(verl_config, "trainer.experiment_name")))  # 'a/b' -> 'a-b'
    raw["run"] = run
    if issues:
        raise ConfigError(issues, "verl config")
    return load_config(raw, registry=registry)
