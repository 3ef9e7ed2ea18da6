"""The reward functions as verl's ``reward.custom_reward_function`` (a compute_score), without verl: what verl's
reward loop (V1) or reward manager (legacy) calls for each sample.

verl config::

    reward:
      custom_reward_function:
        path: pkg://rlhooks.engines.verl.reward_function   # or the installed module's file
        name: compute_score
        reward_kwargs:                      # optional; passed to compute_score as keyword arguments
          functions: [check_answer, format_exact]
          weights: {check_answer: 2.0}
          options: {length_penalty: {max_chars: 1500}}   # a function's Options, as under rewards: in YAML

``compute_score`` returns ``{"score": weighted total, "<function>": unweighted score, ...,
"acc": 1.0 | 0.0, "reward_errors": n, "reward_errors/<function>": 1.0 | 0.0, ...}``; verl logs every key but ``score`` as a reward extra,
so the components reach the batch (and the DAPO filter's default ``acc`` metric exists).

* functions: names of reward functions (built-ins or any installed ``rlhooks.rewards`` function);
  a list or a comma-separated string. Default: all four built-ins.
* weights: ``{name: weight}`` or a list in ``functions`` order. Default 1.0 each.
* options: ``{name: {option: value}}`` for reward functions that declare ``Options`` (a
  ``RewardFunction`` subclass); validated as the YAML config validates them, each problem with its
  key path ``reward_kwargs.options.<name>.<option>``. A function without Options takes none.
* error_score: the score of a function that raises on a sample (default 0.0), or ``{name: score}``
  per function (as ``error_score`` on a ``rewards:`` entry; unnamed ones 0.0); such failures are
  counted in ``reward_errors`` for that sample, like ``rewards/errors/<name>`` in rlhooks runs.
* timeout_s: the bound on one function's call for one sample (``run.reward_timeout_s``, default 300 s; 0: no
  bound): past it the sample scores the function's error_score, counts in ``reward_errors``, and a warning
  names the function (the call is left to finish in a thread).
* acc: 1.0 when ``check_answer`` gives 1.5 or more (exact or normalized match), else 0.0.

Its old path, ``rlhooks.plugins.rewards.verl_adapter`` (``pkg://`` or the file), still works with a
DeprecationWarning (moved in issue 39: the verl path in one folder).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import structlog

from rlhooks.host import DEFAULT_REWARD_TIMEOUT_S, RewardTimeout, call_bounded, timeout_message
from rlhooks.plugins.rewards.functions import BUILTIN_FUNCTIONS, check_answer

log = structlog.get_logger("rlhooks.rewards.verl")

DEFAULT_FUNCTIONS = tuple(BUILTIN_FUNCTIONS)
ACC_MIN_SCORE = 1.5  # check_answer's normalized match or better counts as correct
#: ``reward_errors/<function>``: 1.0 on a sample the function raised on (or scored NaN/inf), else 0.0
ERROR_PREFIX = "reward_errors/"


OPTIONS_PATH = "reward_kwargs.options"


def _plain(value: Any) -> Any:
    """Plain dicts and lists (verl hands reward_kwargs over as OmegaConf containers)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _options_key(names: tuple[str, ...], options: Mapping[str, Any] | None) -> str:
    """The per-function options as a hashable key (compute_score runs once per sample: built once)."""
    if options is None:
        return "{}"
    if not isinstance(options, Mapping):
        raise ValueError(f"compute_score: {OPTIONS_PATH} must be a mapping {{function name: {{option: value}}}}, "
                         f"got {type(options).__name__}")
    unknown = sorted(set(map(str, options)) - set(names))
    if unknown:
        raise ValueError(f"compute_score: {OPTIONS_PATH} names {unknown} but functions are {list(names)}; "
                         f"add them to functions or remove their options")
    return json.dumps(_plain(options), sort_keys=True)


@functools.lru_cache(maxsize=32)
def _resolve(names: tuple[str, ...], options_key: str = "{}") -> tuple[tuple[str, Callable[..., float]], ...]:
    from rlhooks import build_options
    from rlhooks.host import options_class

    options = json.loads(options_key)
    out = []
    registry = None
    for name in names:
        fn = BUILTIN_FUNCTIONS.get(name)
        if fn is None:  # a third-party function registered in rlhooks.rewards
            from rlhooks.host import Registry, is_reward_function

            registry = registry or Registry()
            obj = registry.resolve("reward", name)  # unknown names: error with did-you-mean
            if not is_reward_function(obj):
                raise ValueError(f"rlhooks reward {name!r} is an observer plugin, not a reward function")
            fn = obj
        if isinstance(fn, type) and options_class(fn) is not None:  # a RewardFunction or another class with Options
            # the same validation as a YAML config: every problem with its key path
            fn = fn(build_options(fn.Options, options.get(name), path=f"{OPTIONS_PATH}.{name}", plugin=name))
        elif name in options:
            raise ValueError(f"compute_score: {OPTIONS_PATH}.{name}: reward function {name!r} takes no options "
                             f"(only a reward class with an Options class does)")
        elif isinstance(fn, type):  # a callable class without options: built as a run builds it
            fn = fn()
        out.append((name, fn))
    return tuple(out)


def function_names(functions: str | Sequence[str] | None) -> tuple[str, ...]:
    if functions is None:
        return DEFAULT_FUNCTIONS
    if isinstance(functions, str):
        functions = [f.strip() for f in functions.split(",") if f.strip()]
    names = tuple(str(f) for f in functions)
    if not names:
        raise ValueError("compute_score: 'functions' is empty; name at least one reward function")
    return names


def _weights(names: tuple[str, ...], weights: Mapping[str, float] | Sequence[float] | None) -> list[float]:
    if weights is None:
        return [1.0] * len(names)
    if isinstance(weights, Mapping):
        unknown = set(weights) - set(names)
        if unknown:
            raise ValueError(f"compute_score: weights for {sorted(unknown)} but functions are {list(names)}")
        return [float(weights.get(n, 1.0)) for n in names]
    w = [float(x) for x in weights]
    if len(w) != len(names):
        raise ValueError(f"compute_score: {len(w)} weights for {len(names)} functions {list(names)}")
    return w


def _error_scores(names: tuple[str, ...], error_score: float | Mapping[str, float]) -> dict[str, float]:
    if isinstance(error_score, Mapping):
        unknown = set(map(str, error_score)) - set(names)
        if unknown:
            raise ValueError(f"compute_score: error_score for {sorted(unknown)} but functions are {list(names)}")
        return {n: float(error_score.get(n, 0.0)) for n in names}
    return dict.fromkeys(names, float(error_score))


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: Mapping[str, Any] | None = None,
    *,
    functions: str | Sequence[str] | None = None,
    weights: Mapping[str, float] | Sequence[float] | None = None,
    error_score: float | Mapping[str, float] = 0.0,
    options: Mapping[str, Mapping[str, Any]] | None = None,
    timeout_s: float | None = DEFAULT_REWARD_TIMEOUT_S,
    **kwargs: Any,
) -> dict[str, float]:
    """verl custom reward function: weighted total in ``score``, each function's score by name."""
    names = function_names(functions)
    fns = _resolve(names, _options_key(names, options))
    ws = _weights(names, weights)
    error_scores = _error_scores(names, error_score)
    info = dict(extra_info or {})
    info.setdefault("data_source", data_source)
    target = ground_truth if isinstance(ground_truth, str) else str(ground_truth)
    out: dict[str, float] = {}
    failed: dict[str, float] = {}
    total = 0.0
    for (name, fn), w in zip(fns, ws):
        failed[name] = 0.0
        error_score = error_scores[name]
        try:
            value = float(call_bounded(lambda: fn(solution_str, target, **info), timeout_s))  # noqa: B023 - called at once
        except RewardTimeout:  # verl's reward loop would wait for it forever: the sample is this function's error
            value = float(error_score)
            failed[name] = 1.0
            log.warning(timeout_message(name, float(timeout_s or 0), 1, error_score), plugin=name)
        except Exception as exc:  # noqa: BLE001 - one bad sample must not stop verl's reward loop
            value = float(error_score)
            failed[name] = 1.0
            log.warning("reward function raised; sample scored error_score", plugin=name,
                        error=f"{type(exc).__name__}: {exc}", error_score=error_score)
        else:
            if not math.isfinite(value):  # NaN/inf: the same policy as a raise (it would poison the advantages)
                failed[name] = 1.0
                log.warning("reward function returned a non-finite score; sample scored error_score", plugin=name,
                            score=value, error_score=error_score)
                value = float(error_score)
        out[name] = value
        total += w * value
    answer = out["check_answer"] if "check_answer" in out else _safe_check(solution_str, target)
    out["acc"] = 1.0 if answer >= ACC_MIN_SCORE else 0.0
    out["reward_errors"] = float(sum(failed.values()))
    # per function, so the rlhooks V1 trainer reports rewards/errors/<name> as on the legacy path
    out.update({f"{ERROR_PREFIX}{name}": flag for name, flag in failed.items()})
    return {"score": total, **out}


def _safe_check(solution_str: str, target: str) -> float:
    try:
        return check_answer(solution_str, target)
    except Exception:  # noqa: BLE001
        return 0.0
