"""Every built-in plugin, found through the project's own entry points, with the contract it must pass.

Entry points of the ``rlhooks`` distribution are grouped by the object they name (aliases such
as ``multi_source`` / ``MultiSourceSampler`` are one plugin) and classified:

* samplers -> SamplerContract; filters -> FilterContract; prompt filters -> PromptFilterContract;
* rewards: reward functions -> RewardFunctionContract, reward observers -> HookPluginContract;
* backends implementing ``log_metrics`` -> BackendContract, sample tables -> HookPluginContract;
* plugins -> HookPluginContract.

Options and output readers some built-ins need for the contracts live here too.
"""

from __future__ import annotations

import importlib.metadata as md
from collections.abc import Callable
from typing import Any

import attrs

from rlhooks.core.components import is_reward_function
from rlhooks.core.registry import GROUPS, Registry

DIST = "rlhooks"


@attrs.frozen
class Builtin:
    kind: str
    names: tuple[str, ...]  # every entry-point name of this object
    value: str  # "module:attr"
    obj: Any = attrs.field(eq=False, repr=False)
    error: str | None  # import error, when the entry point does not load
    contract: str  # sampler | filter | reward_function | hook_plugin | backend

    @property
    def id(self) -> str:
        """The canonical (snake_case) name, used as the test id."""
        snake = [n for n in self.names if n == n.lower()]
        return (snake or list(self.names))[0]


def _implements(obj: Any, hook: str) -> bool:
    return hasattr(getattr(obj, hook, None), "rlhooks_impl")


def classify(kind: str, obj: Any) -> str:
    if kind in ("sampler", "filter", "prompt_filter"):
        return kind
    if kind == "reward":
        return "reward_function" if is_reward_function(obj) else "hook_plugin"
    if kind == "backend":
        return "backend" if _implements(obj, "log_metrics") else "hook_plugin"
    return "hook_plugin"


def entry_points_of_dist() -> list[tuple[str, str, str]]:
    """(kind, name, value) of every rlhooks-group entry point the rlhooks distribution declares."""
    dist = md.distribution(DIST)
    by_group = {g: k for k, g in GROUPS.items()}
    return sorted((by_group[ep.group], ep.name, ep.value) for ep in dist.entry_points if ep.group in by_group)


def catalog() -> list[Builtin]:
    registry = Registry(disabled=[])
    grouped: dict[tuple[str, str], list[Any]] = {}
    for info in registry.entries():
        if info.dist.lower() == DIST:
            grouped.setdefault((info.kind, info.value), []).append(info)
    out = []
    for (kind, value), infos in sorted(grouped.items()):
        obj, error = None, None
        try:
            obj = infos[0].load()
        except Exception as exc:  # noqa: BLE001 - reported by a meta-test
            error = str(exc)
        contract = classify(kind, obj) if obj is not None else "broken"
        out.append(Builtin(kind, tuple(sorted(i.name for i in infos)), value, obj, error, contract))
    return out


CATALOG: list[Builtin] = catalog()


def of_contract(contract: str) -> list[Builtin]:
    return [b for b in CATALOG if b.contract == contract]


#: options a built-in needs to run its contracts (keyed by canonical id)
OPTIONS: dict[str, dict[str, Any]] = {
    # adaptive weights updated every feedback batch, so state round trips cover learned weights
    "multi_source": {"adaptive_weights": True, "update_frequency": 1},
    # curricula over a source of the kit's dataset, moving within the few steps a contract runs
    "time_curriculum": {"complexity_source": "math", "complexity_warmup_steps": 3},
    "reward_curriculum": {"complexity_source": "math", "reward_threshold": 0.3, "min_batches_per_level": 1,
                          "check_frequency": 1, "num_intervals": 4},
    "wandb": {"mode": "offline", "settings": {"console": "off"}},
    "console": {"max_keys": 0, "digits": 17, "max_text": 0},
}


def options_for(b: Builtin) -> dict[str, Any]:
    return dict(OPTIONS.get(b.id, {}))


Reader = Callable[[Any, Any, Any], Any]  # (plugin, run_dir, test instance) -> ReadBack
