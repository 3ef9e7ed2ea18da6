"""Component resolution: one config entry (a name or a mapping) -> the installed component and its options.

Which entry point a name means is the registry's rule (core/registry.py); this module turns a
config entry into a ComponentConfig, with every problem as a ConfigIssue at its key path.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from rlhooks.core.components import (
    DEFAULT_ON_ERROR,
    ON_ERROR_CHOICES,
    NoOptions,
    is_reward_function,
    options_class,
    reward_component_problem,
)
from rlhooks.core.config.schema import LEGACY_SAMPLER_MODULES, REWARD_FN_KEYS, ComponentConfig
from rlhooks.core.config.structure import _strict_float, structure_options
from rlhooks.core.errors import ConfigIssue, RegistryError
from rlhooks.core.registry import EntryInfo, Registry

def _component(kind: str, item: Any, path: str, registry: Registry) -> tuple[ComponentConfig | None, list[ConfigIssue]]:
    if isinstance(item, str):
        item = {"name": item}
    if not isinstance(item, Mapping):
        return None, [ConfigIssue(path, f"a component is a name or a mapping with 'name:', got {type(item).__name__}")]
    item = dict(item)
    class_path = None
    if kind == "sampler" and ("class_name" in item or "class_path" in item):
        if "name" in item and "class_name" in item:
            return None, [ConfigIssue(path, "give either 'name' or 'class_name', not both")]
        if "class_name" not in item:
            return None, [ConfigIssue(path, "'class_path' needs a 'class_name' too")]
        item["name"] = item.pop("class_name")
        class_path = item.pop("class_path", None)
    name = item.pop("name", None)
    if not isinstance(name, str) or not name:
        return None, [ConfigIssue(path, "component has no 'name' (a string naming an installed component)")]
    try:
        obj, dist, entry = _resolve(kind, name, class_path, registry)
    except RegistryError as exc:
        return None, [ConfigIssue(path, str(exc), name)]
    issues: list[ConfigIssue] = []
    on_error = item.pop("on_error", DEFAULT_ON_ERROR[kind])
    if on_error not in ON_ERROR_CHOICES:
        issues.append(ConfigIssue(f"{path}.on_error", f"must be one of {', '.join(ON_ERROR_CHOICES)}, got {on_error!r}", name))
    weight, error_score = 1.0, 0.0
    if kind == "reward" and (problem := reward_component_problem(obj)) is not None:
        where = getattr(obj, "__qualname__", repr(obj))
        issues.append(ConfigIssue(path, f"{where} ({dist}) is in rlhooks.rewards but {problem}", name))
    reward_fn = kind == "reward" and is_reward_function(obj)
    if reward_fn:
        for key in REWARD_FN_KEYS:
            if key in item:
                try:
                    val = _strict_float(item.pop(key), float)
                except ValueError as exc:
                    issues.append(ConfigIssue(f"{path}.{key}", str(exc), name))
                    continue
                if key == "weight":
                    weight = val
                else:
                    error_score = val
    opts_cls = options_class(obj)
    if opts_cls is None:
        if item:
            known = ", ".join(REWARD_FN_KEYS) if reward_fn else "(none)"
            for key in item:
                issues.append(ConfigIssue(path, f"option {key!r} is not known; this {kind} takes no options (known: {known})", name))
        options: Any = NoOptions()
    else:
        options, sub = structure_options(opts_cls, item, path, name)
        issues += sub
    if issues:
        return None, issues
    return ComponentConfig(
        kind=kind, name=entry.name if entry else name, path=path, options=options, on_error=on_error, obj=obj,
        distribution=dist, qualified_name=entry.qualified if entry else "", written_name=name,
        weight=weight, error_score=error_score, raw=dict(item),
    ), []


def _resolve(kind: str, name: str, class_path: str | None, registry: Registry) -> tuple[Any, str, EntryInfo | None]:
    """(object, "distribution version", its entry point): the registry's lookup of a bare or qualified
    name; a verl-style ``class_path`` imports the class directly instead (no entry point)."""
    if class_path:
        module = class_path.removeprefix("pkg://").removesuffix(".py").replace("/", ".")
        if module not in LEGACY_SAMPLER_MODULES:
            try:
                mod = importlib.import_module(module)
            except ImportError as exc:
                raise RegistryError(f"class_path {class_path!r}: cannot import {module!r}: {exc}") from None
            try:
                return getattr(mod, name), f"{module} (class_path)", None
            except AttributeError:
                raise RegistryError(f"class_path {class_path!r}: module {module!r} has no {name!r}") from None
        # the old verl_extensions location maps onto the built-ins of the same name
    info = registry.info(kind, name)
    obj = info.load()
    deprecated = getattr(obj, "deprecated_names", {})
    if info.name in deprecated:
        import structlog

        structlog.get_logger("rlhooks.config").warning(
            f"{kind} name {name!r} is deprecated; use {deprecated[info.name]!r}", plugin=info.name
        )
    return obj, f"{info.dist} {info.version}", info
