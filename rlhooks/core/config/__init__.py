"""YAML config: one file enables components by name, each with its own typed options.

    run: {name: demo, seed: 0, steps: 50, train_batch_size: 32, gen_batch_size: 64, n: 8}
    sampler: {name: multi_source, adaptive_weights: true}     # or verl-style class_name: ...
    filters: [dapo]
    rewards: [{name: check_answer, weight: 2.0}, format_exact, source_metrics, reward_monitor]
    samples: [{name: top_bottom_k, k: 2}]
    backends: [console, {name: jsonl}]
    plugins: [my_plugin]

Validation is two-phase (the outer shape, then each named component's options, structured
into its attrs ``Options`` class by cattrs with unknown keys forbidden) and reports every
problem at once, each with its key path and the component's name.

The jobs live in submodules: ``schema`` (run section, validators, Config), ``secrets``
(redaction), ``structure`` (cattrs structuring and error translation), ``yamlio`` (bounded YAML
and overrides), ``resolve`` (a config entry -> its component). This module loads a config with them.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

# the submodules' names stay importable from here, as before the split (other modules use them)
from rlhooks.core.config.resolve import _component, _resolve  # noqa: F401
from rlhooks.core.config.schema import (
    COMMON_KEYS, LEGACY_SAMPLER_KEYS, LEGACY_SAMPLER_MODULES, LIST_SECTIONS, MAX_BATCH, MAX_N, MAX_SEED, MAX_STEPS,
    MAX_TRAJECTORIES, REWARD_FN_KEYS, SECTIONS, TOP_LEVEL, ComponentConfig, Config, RunOptions,
)
from rlhooks.core.config.secrets import REDACTED, is_secret_name, redact_secrets
from rlhooks.core.config.structure import _converter, _describe, _issues_from, _strict_float, structure_options
from rlhooks.core.config.yamlio import (
    MAX_CHARS, MAX_CONFIG_BYTES, MAX_DEPTH, MAX_VALUES, _deep_copy, apply_overrides, load_yaml, parse_yaml,
)
from rlhooks.core.errors import ConfigError, ConfigIssue
from rlhooks.core.registry import Registry

def load_config(
    source: str | Path | Mapping[str, Any] | None = None,
    *,
    overrides: Iterable[str] = (),
    registry: Registry | None = None,
    extra_sections: Mapping[str, type] | None = None,
    passthrough: Iterable[str] = (),
    default_plugins: bool = False,
    prepare: Callable[[dict[str, Any]], list[ConfigIssue]] | None = None,
) -> Config:
    """Load, validate and resolve a config (a YAML path or an already-parsed mapping).

    ``extra_sections`` maps engine sections (e.g. ``simulate``) to the attrs class that validates
    them; ``passthrough`` names sections kept as they are for an engine to check (e.g. ``verl``).
    ``default_plugins`` (what the engines ask for) adds the plugins a run has unless turned off:
    ``source_metrics`` when ``run.source_metrics`` is true and ``rewards:`` does not list it.
    ``prepare`` edits the raw mapping in place before validation (an engine section mapped onto the
    rlhooks sections, e.g. ``verl:``) and returns its issues.
    Raises ConfigError listing every problem found.
    """
    if source is None:
        raw: dict[str, Any] = {}
        src_name = None
    elif isinstance(source, Mapping):
        raw = _deep_copy(source)
        src_name = None
    else:
        raw = load_yaml(source)
        src_name = str(source)
    raw = apply_overrides(raw, overrides)
    registry = registry if registry is not None else Registry()
    extra_sections = dict(extra_sections or {})
    issues: list[ConfigIssue] = prepare(raw) if prepare is not None else []
    issues += lift_filter_run_options(raw)

    # Phase 1: the outer shape.
    passthrough = tuple(passthrough)
    known = (*TOP_LEVEL, *extra_sections, *passthrough)
    for key in raw:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else f"; known sections: {', '.join(known)}"
            if key in VERL_CONFIG_SECTIONS:
                hint = (f": it is a section of verl's config; nest it under 'verl:' (verl: {{{key}: ...}}), "
                        f"which rlhooks train passes to verl")
            issues.append(ConfigIssue(str(key), f"section {key!r} is not known{hint}"))
    # an empty section (``run:`` with nothing under it) is None; any other non-mapping is an error
    run, run_issues = structure_options(RunOptions, _section(raw, "run"), "run", None)
    issues += run_issues
    extra: dict[str, Any] = {}
    for key, cls in extra_sections.items():
        value, sub = structure_options(cls, _section(raw, key), key, None)
        issues += sub
        extra[key] = value
    for key in passthrough:
        if key in raw:
            extra[key] = raw[key]

    # Phase 2: each named component and its options.
    sections: dict[str, Any] = {}
    for section, (kind, is_list) in SECTIONS.items():
        value = raw.get(section)
        if value is None:
            sections[section] = () if is_list else None
            continue
        if is_list:
            if isinstance(value, (str, Mapping)):
                value = [value]  # a single component where a list is expected
            if not isinstance(value, list):
                issues.append(ConfigIssue(section, f"expected a list of components, got {type(value).__name__}"))
                sections[section] = ()
                continue
            built = []
            for i, item in enumerate(value):
                comp, sub = _component(kind, item, f"{section}[{i}]", registry)
                issues += sub
                if comp is not None:
                    built.append(comp)
            sections[section] = tuple(built)
        else:
            comp, sub = _component(kind, value, section, registry)
            issues += sub
            sections[section] = comp

    if issues:
        raise ConfigError(issues, src_name)
    if default_plugins:
        sections["rewards"] = _with_source_metrics(run, sections["rewards"], registry)
    return Config(run=run, extra=extra, source=src_name, raw=raw, **sections)


#: the plugin ``run.source_metrics`` adds
SOURCE_METRICS = "source_metrics"


def _with_source_metrics(run: RunOptions, rewards: tuple[ComponentConfig, ...], registry: Registry) -> tuple[ComponentConfig, ...]:
    """``rewards`` plus the per-source metrics plugin when run.source_metrics is on and none is listed.

    The added instance skips batches without the source column (it is on by default, so a dataset
    without data_source is not an error); one listed in ``rewards:`` keeps its own options.
    """
    if not run.source_metrics or any(c.name == SOURCE_METRICS for c in rewards):
        return rewards
    comp, sub = _component("reward", {"name": SOURCE_METRICS, "missing_source": "skip"}, "run.source_metrics", registry)
    if comp is None:  # a registry without the built-in plugin (e.g. a test's): nothing to add
        return rewards
    if any(c.obj is comp.obj for c in rewards):  # listed under another name
        return rewards
    return (*rewards, comp)


#: DAPO filter names whose entry may carry run options, as the dynamic-sampling document groups them
DAPO_FILTER_NAMES = ("dapo", "filter_groups", "rlhooks:dapo", "rlhooks:filter_groups")
#: the top-level sections of verl's trainer config (ppo_trainer.yaml): in an rlhooks YAML they belong
#: under ``verl:`` (a test checks the list against verl's composed config)
VERL_CONFIG_SECTIONS = (
    "actor_rollout_ref", "algorithm", "critic", "custom_reward_function", "data", "distillation", "global_profiler",
    "model_engine", "ray_kwargs", "reward", "reward_model", "sandbox_fusion", "skip", "trainer", "transfer_queue",
)

#: run options accepted on a DAPO filter entry (``filters: [{name: dapo, max_num_gen_batches: 10}]``)
FILTER_RUN_KEYS = ("max_num_gen_batches",)


def lift_filter_run_options(raw: dict[str, Any]) -> list[ConfigIssue]:
    """Move run options written on a DAPO filter entry into ``run:`` (in place).

    A value that differs from an explicit ``run.<key>`` (or from another filter entry) is an
    issue naming both keys. Returns the issues; ``raw`` keeps the entries it could not lift.
    """
    filters = raw.get("filters")
    if isinstance(filters, Mapping):
        filters = [filters]
    if not isinstance(filters, list):
        return []
    issues: list[ConfigIssue] = []
    origin: dict[str, str] = {}
    for i, item in enumerate(filters):
        if not isinstance(item, Mapping) or item.get("name") not in DAPO_FILTER_NAMES:
            continue
        for key in FILTER_RUN_KEYS:
            if key not in item:
                continue
            item = dict(item)
            value = item.pop(key)
            here = f"filters[{i}].{key}"
            if isinstance(value, bool) or not isinstance(value, int):
                issues.append(ConfigIssue(here, f"expected an integer (0 or negative = unlimited), got {value!r}"))
                if isinstance(raw["filters"], list):  # reported once, here, not again as an unknown filter option
                    raw["filters"][i] = item
                else:
                    raw["filters"] = item
                continue
            run = raw.get("run")
            if run is None:
                run = raw["run"] = {}
            if not isinstance(run, dict):
                return issues  # phase 1 reports a malformed run: section
            if key in run and run[key] is not None and run[key] != value:
                where = origin.get(key, f"run.{key}")
                issues.append(ConfigIssue(here, f"is {value!r} but {where} is {run[key]!r}; it is one setting "
                                          f"(run.{key}): give it once, or make the two agree"))
                continue
            run[key] = value
            origin[key] = here
            if isinstance(raw["filters"], list):
                raw["filters"][i] = item
            else:
                raw["filters"] = item
    return issues


def _section(raw: Mapping[str, Any], key: str) -> Any:
    value = raw.get(key)
    return {} if value is None else value


__all__ = [
    "Config",
    "ComponentConfig",
    "RunOptions",
    "load_config",
    "load_yaml",
    "apply_overrides",
    "structure_options",
    "redact_secrets",
    "SECTIONS",
]
