"""What each component kind is, and the small base classes plugins may (not must) use.

| kind    | group              | an entry point names                                           |
|---------|--------------------|----------------------------------------------------------------|
| sampler | rlhooks.samplers   | a ``Sampler`` subclass (torch ``Sampler[int]`` with state)      |
| filter  | rlhooks.filters    | a class with ``select(batch) -> keep mask | FilterDecision``    |
| prompt_filter | rlhooks.prompt_filters | the same ``select`` over sampled prompts (with ``learning/*`` |
|         |                    | columns), before generation (core/pregen.py)                    |
| reward  | rlhooks.rewards    | a reward function (callable or ``RewardFunction`` subclass), or |
|         |                    | a reward observer (a class implementing hooks)                 |
| backend | rlhooks.backends   | a class implementing log_metrics / log_table / ...             |
| plugin  | rlhooks.plugins    | a class or module implementing hooks                            |

Options: a component class declares ``Options``, an attrs class; the config's keys for that
component are structured into it by cattrs (unknown keys are an error). The instance receives
it as ``options``. Every component also accepts ``on_error`` (raise | warn | disable).

``Sampler`` (the one base class that needs torch) is defined in ``rlhooks.core.sampler``, which
imports this module (never the reverse), so importing this module does not import torch.
"""

from __future__ import annotations

import abc
import inspect
from collections.abc import Mapping
from typing import Any, ClassVar, Protocol, runtime_checkable

import attrs
import numpy as np

from rlhooks.core.batch import Batch

ON_ERROR_CHOICES = ("raise", "warn", "disable")
#: default on_error per kind: steering components raise, observers warn
DEFAULT_ON_ERROR = {"sampler": "raise", "filter": "raise", "prompt_filter": "raise", "reward": "warn", "backend": "warn", "plugin": "warn"}


@attrs.frozen
class NoOptions:
    """Options of a component that takes none."""


def options_class(obj: Any) -> type | None:
    """The attrs Options class a component declares, or None for plain callables/modules."""
    opts = getattr(obj, "Options", None)
    return opts if isinstance(opts, type) and attrs.has(opts) else None


def instantiate(obj: Any, options: Any) -> Any:
    """Build a component from its entry-point object: a class gets its options, else used as is."""
    if inspect.isclass(obj):
        if options_class(obj) is not None:
            return obj(options)
        return obj()
    return obj


@attrs.frozen
class FilterDecision:
    """A filter's verdict on one generation batch.

    keep: bool per row, the same for every row of a group.
    metrics: additive counts (summed over a step's generation batches), e.g.
        ``filter/dropped_all_max``.
    """

    keep: np.ndarray
    metrics: Mapping[str, float] = attrs.field(factory=dict)


@runtime_checkable
class Filter(Protocol):
    def select(self, batch: Batch) -> np.ndarray | FilterDecision: ...


class RewardFunction(abc.ABC):
    """Base of configurable reward functions: ``__call__(response, target, **info) -> float``.

    Plain functions with the same signature work too (they take no options beyond the
    common ``weight`` and ``error_score``). ``score_batch`` may be overridden with a faster
    whole-batch implementation.
    """

    Options: ClassVar[type] = NoOptions
    name: ClassVar[str] = ""

    def __init__(self, options: Any = None) -> None:
        self.options = options if options is not None else self.Options()

    @abc.abstractmethod
    def __call__(self, response: str, target: str, **info: Any) -> float:
        """Score one response against its target."""

    def score_batch(self, responses: np.ndarray, targets: np.ndarray) -> np.ndarray:
        return np.fromiter((self(r, t) for r, t in zip(responses, targets)), float, len(responses))


def _defines_call(cls: type) -> bool:
    return any("__call__" in vars(base) for base in cls.__mro__ if base is not object)


def _implements_hooks(obj: Any) -> bool:
    # methods marked by rlhooks.hookimpl (pluggy's marker attribute), read without importing the
    # hook specs (they import the config, which imports this module)
    return any(getattr(getattr(obj, name, None), "rlhooks_impl", None) is not None
               for name in dir(obj) if not name.startswith("__"))


def is_reward_function(obj: Any) -> bool:
    """Reward functions are RewardFunction subclasses, plain callables, and classes that define
    ``__call__(response, target, **info)`` and no hook (built like ``RewardFunction`` subclasses:
    with their ``Options`` when they declare one). Other classes are reward observers (hooks)."""
    if inspect.isclass(obj):
        return issubclass(obj, RewardFunction) or (_defines_call(obj) and not _implements_hooks(obj))
    return callable(obj) and not inspect.ismodule(obj)


def reward_component_problem(obj: Any) -> str | None:
    """Why an entry of the ``rlhooks.rewards`` group would neither score nor observe, or None.

    Anything named in ``rewards:`` must score or implement hooks; a class that does both without
    the base class (or neither) would otherwise be taken as a hook plugin and never score."""
    if not inspect.isclass(obj) or issubclass(obj, RewardFunction):
        return None
    call, hooks = _defines_call(obj), _implements_hooks(obj)
    if call and hooks:
        return ("defines __call__ (a reward function) and hook methods (a reward observer), so rlhooks cannot "
                "tell whether it scores; to score, subclass rlhooks.RewardFunction (and move the hooks to a plugin "
                "under rlhooks.plugins); to observe only, rename __call__")
    if not call and not hooks:
        return ("neither scores (no __call__(self, response, target, **info)) nor implements a hook; to score, "
                "subclass rlhooks.RewardFunction and define __call__; to observe, decorate its hook methods with "
                "@rlhooks.hookimpl")
    return None


def make_reward_function(obj: Any, options: Any = None) -> Any:
    """The scoring callable of a reward function entry: a class is built (with its options when it
    declares ``Options``), a plain function is used as is."""
    if not inspect.isclass(obj):
        return obj
    if options_class(obj) is not None:
        return obj(options if options is not None else obj.Options())
    return obj()



#: hooks whose ``batch`` holds scored trajectories (an engine reads them from its data store)
SCORED_BATCH_HOOKS = ("on_rewards_computed", "on_step_end")


def batch_columns(component: Any) -> frozenset[str] | None:
    """The columns of scored batches a component reads for every row, or None for every column.

    A component (class or instance) may declare them in ``batch_columns``: column names such as
    ``reward``, ``data_source``, a reward extra (``acc``), ``reward_fn/*`` or ``@extras`` (every reward
    extra). Undeclared: a filter or a component with a batch-taking ``on_rewards_computed`` /
    ``on_step_end`` gets every column (what every component got before the declaration existed);
    one that takes no scored batch (a logging backend) reads none. An engine that reads its batches from
    a store (verl V1: TransferQueue) reads the union up front, decided once at start; a column read for a
    few rows only (a sample table's shown columns, after ``batch.select``) need not be declared: any
    other column is still there, read from the store when a plugin reads it, for the rows it reads.
    """
    names = getattr(component, "batch_columns", None)
    if names is not None:
        if isinstance(names, str) or not all(isinstance(n, str) and n for n in names):
            raise TypeError(f"{getattr(component, '__name__', type(component).__name__)}.batch_columns must be a tuple "
                            f"of column names such as ('reward', 'data_source'), got {names!r}")
        return frozenset(names)
    if callable(getattr(component, "select", None)):
        return None
    for hook in SCORED_BATCH_HOOKS:
        method = getattr(component, hook, None)
        if method is None or getattr(method, "rlhooks_impl", None) is None:
            continue
        try:
            params = inspect.signature(method).parameters
        except (TypeError, ValueError):
            return None
        if "batch" in params:
            return None
    return frozenset()


def union_batch_columns(components: Any) -> frozenset[str] | None:
    """The columns any of ``components`` reads (None: every column, as soon as one reads every column)."""
    out: set[str] = set()
    for component in components:
        names = batch_columns(component)
        if names is None:
            return None
        out |= names
    return frozenset(out)
