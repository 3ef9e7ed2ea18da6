"""RewardPipeline: the weighted combination of the reward functions named in ``rewards:``.

Engines call ``score(responses, targets)`` and get the total reward per row plus each
function's component (logged as ``reward_fn/<name>`` columns). A function that raises on one
sample is isolated: that sample's component is the entry's ``error_score`` (default 0.0) and
the failure is counted in ``errors[name]`` (reported as ``rewards/errors/<name>``). A NaN or
infinite score is the same kind of failure (it would turn the advantages of its whole group into
NaN): the row scores ``error_score``, counts in ``errors[name]`` and also in ``nonfinite[name]``
(``rewards/nonfinite_scores/<name>``), and is warned about once per function. A
``score_batch`` that returns the wrong shape, or raises while every row scores fine alone, is
a bug in the function: it is warned about once and the rows are scored one by one.

A call that runs past ``run.reward_timeout_s`` (default 300 s; 0: no bound) is a failure too: its row (every
row, for ``score_batch``) scores ``error_score`` and counts in ``errors[name]``, and a warning names the
function and the bound, so a hung function never stalls a run without a word (``call_bounded``).

``score_batch`` is the batched path (an LLM judge or a reward model scoring a whole generation
batch in one call): it gets every row of the batch at once and may be ``async def`` (its coroutine
is run to completion here, on a private event loop, so the judge can send its requests
concurrently). See docs/how-to/rewards.md, "Batched and asynchronous scoring".
"""

from __future__ import annotations

import asyncio
import inspect
import queue
import signal
import threading
import weakref
from collections.abc import Iterable, Sequence
from typing import Any

import attrs
import numpy as np
import structlog

from rlhooks.core.components import make_reward_function, options_class
from rlhooks.core.errors import RLHooksError

log = structlog.get_logger("rlhooks.rewards")

#: per-function count of NaN/inf scores (they are also in rewards/errors/<name>)
NONFINITE_PREFIX = "rewards/nonfinite_scores/"


def resolve(result: Any) -> Any:
    """``result``, or what it awaits to when ``score_batch`` is ``async def`` (run on a private loop;
    in a worker thread when this thread already runs an event loop)."""
    if not inspect.isawaitable(result):
        return result

    async def wait() -> Any:
        return await result

    try:
        asyncio.get_running_loop()
    except RuntimeError:  # the usual case: the engine's training loop is synchronous
        return asyncio.run(wait())
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="rlhooks-score-batch") as pool:
        return pool.submit(asyncio.run, wait()).result()


class RewardTimeout(Exception):
    """A reward function call ran past its time bound (``run.reward_timeout_s``)."""


def call_bounded(call: Any, timeout_s: float | None) -> Any:
    """``call()``, stopped with ``RewardTimeout`` after ``timeout_s`` seconds (None/0: unbounded).

    In the main thread (the simulator, the legacy trainer) the call is interrupted by a timer signal
    (``interrupt.bounded``), a Ctrl-C still stopping it at once. In another thread (verl's reward-loop workers
    score in a thread pool) the call runs in that thread's helper thread (``_CallHelper``; so a calling thread's
    bounded calls share one thread's state, as its unbounded calls share its own); past the bound it is left to
    finish on its own (Python cannot stop a thread), its row is scored as an error, and the next call gets a new
    helper."""
    if not timeout_s:
        return call()
    from rlhooks.core import interrupt

    if threading.current_thread() is threading.main_thread() and signal.getitimer(signal.ITIMER_REAL)[0] == 0:
        try:
            with interrupt.bounded(timeout_s):
                return call()
        except interrupt.TimeBoundExceeded:
            raise RewardTimeout(f"did not return within {timeout_s:g} s") from None
    helper = getattr(_helpers, "helper", None)
    if helper is None or not helper.thread.is_alive():  # none yet, or one this process lost in a fork
        helper = _helpers.helper = _CallHelper()
        # the thread's locals go when it ends (a thread Python did not start too): so does its helper
        _helpers.owner = owner = _Owner()
        weakref.finalize(owner, helper.calls.put, None)
    box: dict[str, Any] = {}
    done = threading.Event()
    helper.calls.put((call, box, done))
    returned = False
    try:
        returned = done.wait(timeout_s)
    finally:
        if not returned:  # past the bound, or the wait itself interrupted: later calls must not queue behind it
            _helpers.helper = None
            helper.calls.put(None)  # it ends once the late call returns
    if not returned:
        raise RewardTimeout(f"did not return within {timeout_s:g} s (the call is left running in a thread)")
    if "error" in box:
        raise box["error"]
    return box["value"]


#: each calling thread's helper and the object whose collection ends it (``call_bounded``)
_helpers = threading.local()


class _Owner:
    __slots__ = ("__weakref__",)


class _CallHelper:
    """A daemon thread that runs one calling thread's bounded calls, one at a time (a thread started for each call
    cost twice the CPU: ~0.1 ms against ~0.05 on a 2-core AMD EPYC, 2026-11-30; four calls a trajectory in verl's
    reward workers). It ends when told: after a call that ran past its bound, or when its calling thread ends."""

    def __init__(self):
        self.calls: queue.SimpleQueue = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._serve, name="rlhooks-reward-call", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while (job := self.calls.get()) is not None:
            call, box, done = job
            try:
                box["value"] = call()
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                box["error"] = exc
            finally:
                done.set()
                del job, call, box, done  # an idle helper keeps no call, result or traceback alive


def timeout_message(name: str, timeout_s: float, rows: int, error_score: float) -> str:
    return (f"reward function {name!r} did not return within run.reward_timeout_s={timeout_s:g} s "
            f"({rows} row{'s' if rows != 1 else ''}); such rows score error_score={error_score} and count in "
            f"rewards/errors/{name}. Fix the function (a hang, an endless loop, a request without a timeout) "
            f"or raise run.reward_timeout_s")


@attrs.define
class RewardEntry:
    name: str
    fn: Any  # callable(response, target, **info) -> float, maybe with score_batch()
    weight: float = 1.0
    error_score: float = 0.0


@attrs.frozen
class RewardResult:
    total: np.ndarray  # weighted sum per row
    components: dict[str, np.ndarray]  # unweighted score per function
    errors: dict[str, int]  # rows where a function raised or scored NaN/inf (scored error_score)
    nonfinite: dict[str, int] = attrs.field(factory=dict)  # of those, rows scored NaN/inf

    def metrics(self) -> dict[str, float]:
        out = {f"rewards/errors/{k}": float(v) for k, v in self.errors.items()}
        out.update({f"{NONFINITE_PREFIX}{k}": float(v) for k, v in self.nonfinite.items()})
        return out


class RewardPipeline:
    def __init__(self, entries: Sequence[RewardEntry] = (), *, timeout_s: float | None = None):
        self.entries = list(entries)
        self._reported: set[str] = set()
        #: the bound on one call (run.reward_timeout_s; None/0: none)
        self.timeout_s = timeout_s

    @classmethod
    def from_components(cls, comps: Iterable[Any], *, timeout_s: float | None = None) -> RewardPipeline:
        """From ComponentConfigs of reward functions (classes are instantiated with options)."""
        entries = []
        for c in comps:
            try:
                fn = make_reward_function(c.obj, c.options)
            except Exception as exc:
                args = "options" if options_class(c.obj) else ""
                raise RLHooksError(f"reward function {c.name!r} at {c.path}: {c.obj.__qualname__}({args}) raised "
                                   f"{type(exc).__name__}: {exc}; a reward class must build from its Options alone "
                                   f"(or from no arguments)") from exc
            entries.append(RewardEntry(c.name, fn, c.weight, c.error_score))
        return cls(entries, timeout_s=timeout_s)

    @property
    def names(self) -> list[str]:
        return [e.name for e in self.entries]

    def __bool__(self) -> bool:
        return bool(self.entries)

    def score(self, responses: Sequence[str], targets: Sequence[str]) -> RewardResult:
        n = len(responses)
        total = np.zeros(n, dtype=np.float64)
        components: dict[str, np.ndarray] = {}
        errors: dict[str, int] = {}
        nonfinite: dict[str, int] = {}
        for e in self.entries:
            values, failed = self._score_one(e, responses, targets)
            finite = np.isfinite(values)
            bad = len(values) - int(np.count_nonzero(finite))
            if bad:
                values = np.where(finite, values, e.error_score)  # a new array: score_batch's own is not touched
                nonfinite[e.name] = bad
                self._report(f"{e.name}.nonfinite", f"reward function {e.name!r} returned NaN or inf for {bad} of "
                             f"{len(values)} rows; such rows score error_score={e.error_score} and are counted in "
                             f"rewards/errors/{e.name} and {NONFINITE_PREFIX}{e.name}", e.name)
            components[e.name] = values
            if failed or bad:
                errors[e.name] = failed + bad
            total += e.weight * values
        return RewardResult(total, components, errors, nonfinite)

    def _score_one(self, e: RewardEntry, responses: Sequence[str], targets: Sequence[str]) -> tuple[np.ndarray, int]:
        batch_fn = getattr(e.fn, "score_batch", None)
        if batch_fn is not None:
            try:
                values = np.asarray(call_bounded(lambda: resolve(batch_fn(
                    np.asarray(responses, dtype=object), np.asarray(targets, dtype=object))), self.timeout_s), float)
                if values.shape == (len(responses),):
                    return values, 0
                # a wrong-length result would broadcast into the total: score row by row instead
                problem = f"returned shape {values.shape} for {len(responses)} rows"
            except RewardTimeout:  # every row is its error; scoring them one by one would hang as long again
                log.warning(timeout_message(e.name, self.timeout_s or 0, len(responses), e.error_score), plugin=e.name)
                return np.full(len(responses), e.error_score, dtype=np.float64), len(responses)
            except Exception as exc:  # noqa: BLE001 - fall back to per-row isolation below
                problem = f"raised {type(exc).__name__}: {exc}"
        else:
            problem = None
        out = np.empty(len(responses), dtype=np.float64)
        failed = 0
        for i, (r, t) in enumerate(zip(responses, targets)):
            try:
                out[i] = float(call_bounded(lambda: e.fn(r, t), self.timeout_s))  # noqa: B023 - called at once
            except RewardTimeout:
                out[i] = e.error_score
                failed += 1
                log.warning(timeout_message(e.name, self.timeout_s or 0, 1, e.error_score), plugin=e.name)
            except Exception as exc:  # noqa: BLE001 - one bad sample must not stop the batch
                out[i] = e.error_score
                failed += 1
                if e.name not in self._reported:
                    self._reported.add(e.name)
                    log.warning(
                        f"reward function {e.name!r} raised; such samples score error_score={e.error_score}",
                        plugin=e.name, error=f"{type(exc).__name__}: {exc}",
                    )
        if problem is not None and (failed == 0 or problem.startswith("returned")):
            # score_batch itself is broken (a row raising is expected to fail it): say so once
            self._report(f"{e.name}.score_batch", f"reward function {e.name!r}: score_batch() {problem}; "
                         f"rows were scored one by one instead (slower)", e.name)
        return out, failed

    def _report(self, key: str, message: str, plugin: str) -> None:
        if key not in self._reported:
            self._reported.add(key)
            log.warning(message, plugin=plugin)
