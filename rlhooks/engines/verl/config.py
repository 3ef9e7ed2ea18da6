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
silent pick.

verl's dynamic-sampling keys (the DAPO recipe's) map onto the rlhooks ``dapo`` filter:
``algorithm.filter_groups.enable=true`` adds a ``dapo`` filter (unless the rlhooks config has one)
with ``metric`` = ``algorithm.filter_groups.metric`` (``reward`` -> ``seq_reward``; null -> ``seq_reward`` on
V1, ``acc`` on the legacy trainer: :data:`FILTER_GROUPS_METRICS`)
and sets ``run.max_num_gen_batches`` from ``algorithm.filter_groups.max_num_gen_batches``
(non-positive = no limit = 0). An rlhooks value that disagrees is an error naming both keys. The verl-style ``data.sampler.class_name`` (+ flat ``data.sampler.*`` options) is
mapped onto the rlhooks ``sampler:`` section.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlhooks.core.config import DAPO_FILTER_NAMES, Config, lift_filter_run_options, load_config, load_yaml
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


#: verl's algorithm.filter_groups.metric -> the rlhooks dapo filter's metric, per trainer, as each reads it.
#: "reward" (verl 0.9's default) is the pre-KL sequence reward (V1's replay buffer: rm_scores summed).
#: null (verl main's default): V1 filters on the sequence reward; the legacy path keeps the DAPO recipe's acc.
FILTER_GROUPS_METRICS = {
    "v1": {"reward": "seq_reward", None: "seq_reward"},
    "legacy": {"reward": "seq_reward", None: "acc"},
}
#: verl's default of trainer.use_v1 (0.9.1), for a verl: section read without verl (simulate, config check);
#: `rlhooks train` reads the composed config, and compat's fingerprints check this default at start-up
VERL_DEFAULT_USE_V1 = True


def trainer_in_use(verl_config: Any) -> str:
    """"v1" or "legacy": the trainer verl's config selects (``trainer.use_v1``, verl's default when unset)."""
    use_v1 = _get(verl_config, "trainer.use_v1")
    return "v1" if (VERL_DEFAULT_USE_V1 if use_v1 is None else bool(use_v1)) else "legacy"


def _filter_groups(verl_config: Any, raw: dict[str, Any], at: str = f"{BLOCK}.", verl_at: str = "") -> list[ConfigIssue]:
    """``algorithm.filter_groups.{enable,metric,max_num_gen_batches}`` -> the dapo filter + run (in place).

    An rlhooks value that disagrees (a dapo filter with another metric, another
    run.max_num_gen_batches) is an issue naming both keys.
    """
    where = f"{at}run.max_num_gen_batches"
    if (raw.get("run") or {}).get("max_num_gen_batches") is None:
        for i, f in enumerate(raw.get("filters") or []):
            if isinstance(f, Mapping) and f.get("name") in DAPO_FILTER_NAMES and "max_num_gen_batches" in f:
                where = f"{at}filters[{i}].max_num_gen_batches"
    issues = lift_filter_run_options(raw)  # the document's grouping: max_num_gen_batches on the filter
    groups = _container(_get(verl_config, "algorithm.filter_groups"))
    if not isinstance(groups, Mapping) or not groups.get("enable"):
        return issues
    metric = groups.get("metric")
    metric = FILTER_GROUPS_METRICS[trainer_in_use(verl_config)].get(metric, metric)
    filters = raw.get("filters") or []
    if isinstance(filters, (str, Mapping)):
        filters = [filters]
    filters = [dict(f) if isinstance(f, Mapping) else {"name": f} if isinstance(f, str) else f for f in filters]
    dapo = [(i, f) for i, f in enumerate(filters) if isinstance(f, dict) and f.get("name") in DAPO_FILTER_NAMES]
    if not dapo:
        filters.append({"name": "dapo", "metric": metric})
    for i, entry in dapo:  # the user's own dapo entry stays (its other options too); the metric must agree
        if entry.get("metric") not in (None, metric):
            issues.append(ConfigIssue(
                f"{at}filters[{i}].metric",
                f"is {entry['metric']!r} but verl's {verl_at}algorithm.filter_groups.metric is {groups.get('metric')!r}; "
                f"they configure the same filter: remove one or make them agree",
            ))
        entry.setdefault("metric", metric)
    raw["filters"] = filters
    limit = max(int(groups.get("max_num_gen_batches") or 0), 0)  # verl: non-positive = no limit, rlhooks: 0
    run = raw.setdefault("run", {})
    if run.get("max_num_gen_batches") is not None and run["max_num_gen_batches"] != limit:
        issues.append(ConfigIssue(
            where,
            f"is {run['max_num_gen_batches']!r} but verl's {verl_at}algorithm.filter_groups.max_num_gen_batches is "
            f"{groups.get('max_num_gen_batches')!r} (0 or less = no limit); with algorithm.filter_groups.enable=true "
            f"verl's value decides: remove the rlhooks one or make the two agree",
        ))
    else:
        run["max_num_gen_batches"] = limit
    return issues


def map_verl_keys(verl_config: Any, raw: dict[str, Any], *, steps: int | None = None,
                  at: str = f"{BLOCK}.", verl_at: str = "") -> list[ConfigIssue]:
    """The keys verl decides (the table above) and its dynamic-sampling keys, onto the rlhooks config
    ``raw`` (in place); one meaning for ``rlhooks train`` and for a ``verl:`` section read by the other
    commands. ``at`` / ``verl_at`` prefix the key paths named in issues."""
    issues: list[ConfigIssue] = []
    legacy = legacy_sampler(verl_config)
    if legacy is not None:
        if raw.get("sampler"):
            issues.append(ConfigIssue(
                f"{verl_at}data.sampler",
                f"both verl's data.sampler and {at}sampler are set; keep one ({at}sampler is preferred)",
            ))
        else:
            raw["sampler"] = legacy
    run = dict(raw.get("run") or {})
    verl_key = {
        "train_batch_size": "data.train_batch_size",
        "gen_batch_size": "data.gen_batch_size",
        "n": "actor_rollout_ref.rollout.n",
    }
    for key, dotted in verl_key.items():
        value = _get(verl_config, dotted)
        if key in run and run[key] is not None and value is not None and run[key] != value:
            issues.append(ConfigIssue(
                f"{at}run.{key}",
                f"is {run[key]!r} but verl's {verl_at}{dotted} is {value!r}; verl's value decides, "
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
    return issues + _filter_groups(verl_config, raw, at, verl_at)


def rlhooks_config(verl_config: Any, *, steps: int | None = None, registry: Any = None) -> Config:
    """Validate and resolve the run's rlhooks config against verl's; ConfigError lists every problem."""
    raw = raw_block(verl_config)
    if steps is None:  # before the trainer knows its dataloader's length (--dry-run): verl's explicit steps
        steps = _get(verl_config, "trainer.total_training_steps")
    issues = map_verl_keys(verl_config, raw, steps=steps)
    if issues:
        raise ConfigError(issues, "verl config")
    return load_config(raw, registry=registry, default_plugins=True)


def verl_section_as_mapping(section: Any) -> tuple[dict[str, Any], list[ConfigIssue]]:
    """A ``verl:`` section (nested keys, or a list of ``key=value`` Hydra overrides) as nested keys."""
    import yaml

    if section is None:
        return {}, []
    if isinstance(section, Mapping):
        return dict(section), []
    if not (isinstance(section, list) and all(isinstance(s, str) and "=" in s for s in section)):
        return {}, [ConfigIssue(VERL_SECTION, "expected a mapping of verl settings or a list of 'key=value' overrides")]
    out: dict[str, Any] = {}
    for item in section:
        key, _, value = item.partition("=")
        node = out
        *parents, leaf = key.lstrip("+").split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = yaml.safe_load(value) if value else None
    return out, []


def apply_verl_section(raw: dict[str, Any]) -> list[ConfigIssue]:
    """For commands other than ``rlhooks train`` (``simulate``, ``config check``): a ``verl:`` section's
    keys mean what they mean to ``rlhooks train`` (:func:`map_verl_keys`, plus
    ``trainer.total_training_steps`` -> ``run.steps``); the rest configures verl only."""
    section = raw.get(VERL_SECTION)
    if section is None:
        return []
    verl, issues = verl_section_as_mapping(section)
    if issues:
        return issues
    steps = _get(verl, "trainer.total_training_steps")
    if steps is not None and (raw.get("run") or {}).get("steps") not in (None, steps):
        return [ConfigIssue("run.steps", f"is {raw['run']['steps']!r} but verl's {VERL_SECTION}.trainer."
                                         f"total_training_steps is {steps!r}; remove one or make them agree")]
    return map_verl_keys(verl, raw, steps=steps, at="", verl_at=f"{VERL_SECTION}.")
