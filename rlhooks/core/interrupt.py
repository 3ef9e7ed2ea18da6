"""SIGTERM behaves like Ctrl-C: the run ends "interrupted", flushed, with every run-end file.

SLURM, Kubernetes and Ray stop a job with SIGTERM (then SIGKILL after a grace period). Python's
default for SIGTERM is to die at once: no ``on_run_end``, no flushed backends, no summary. While
``signals_interrupt()`` is active (the ``rlhooks`` command wraps every subcommand in it), SIGTERM
and SIGINT raise ``Interrupted``, a ``KeyboardInterrupt``, in the main thread, so every
``finally`` runs: ``RunManager.running()`` ends the run with status "interrupted" and drains
each backend (bounded by its ``flush_timeout_s``), and the engine writes its run-end files.
The command then exits 128 + the signal number (130 for SIGINT, 143 for SIGTERM) without a
Python traceback.

A signal that arrives inside ``deferred()`` (recording a run's outcome: flushing backends,
``run_end``, summary.json, the marker) is held until the block is done, then raised; inside
``held()`` it is held and noted instead (the caller skips the work that is left). A second
signal is honoured at once: the process exits 128 + its number, saying what was not written
(a scheduler's second SIGTERM, or a user's second Ctrl-C, means "stop now").

After the outcome is recorded, derived work (the report) runs under ``bounded()``: a signal
stops it at once (``Interrupted``, within ``END_GRACE_S`` in practice) and a time bound stops it
with ``TimeBoundExceeded``; the caller turns either into a warning, never into another status.
``outcome_recorded`` says whether a run's outcome was recorded in this process, so a signal
during start-up is not reported as a run that ended.
"""

from __future__ import annotations

import atexit
import contextlib
import math
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

HANDLED = (signal.SIGINT, signal.SIGTERM)
#: the documented bound on how long the run's end keeps going after a signal during derived work
#: (the report): the work is stopped at its next Python instruction; see docs/explanation/guarantees.md
END_GRACE_S = 5.0

#: the last run outcome recorded in this process (None: no run was recorded)
outcome_recorded: dict[str, str | None] = {"status": None}


def note_outcome(status: str) -> None:
    """Called where a run's outcome is recorded (RunDirectory, RunManager)."""
    outcome_recorded["status"] = status


class TimeBoundExceeded(BaseException):
    """Derived work ran past its time bound (``bounded``); a BaseException, so that the work's
    own ``except Exception`` (one chart failing) does not swallow it."""


class Interrupted(KeyboardInterrupt):
    """Raised in the main thread by SIGINT or SIGTERM while ``signals_interrupt()`` is active."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def exit_code(exc: KeyboardInterrupt) -> int:
    """The shell's code for an interrupt: 128 + signal (a plain KeyboardInterrupt is SIGINT: 130)."""
    return exc.exit_code if isinstance(exc, Interrupted) else 128 + signal.SIGINT


_defer: dict[str, Any] = {"depth": 0, "pending": None, "what": None}


class Held:
    """What ``held()`` saw: the signal that arrived inside it (None if none)."""

    signum: int | None = None

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name if self.signum else ""


@contextlib.contextmanager
def deferred(what: str | None = None) -> Iterator[None]:
    """Hold SIGINT/SIGTERM (under ``signals_interrupt``) until the block ends, then raise them.
    ``what``: what the block finishes, for the message (default: the run's outcome is recorded)."""
    _defer["depth"] += 1
    outer, _defer["what"] = _defer["what"], _defer["what"] or what
    try:
        yield
    finally:
        _defer["depth"] -= 1
        _defer["what"] = outer
        pending = _defer["pending"]
        if _defer["depth"] == 0 and pending is not None:
            _defer["pending"] = None
            if sys.exc_info()[0] is None:
                raise Interrupted(pending)


@contextlib.contextmanager
def held() -> Iterator[Held]:
    """Hold SIGINT/SIGTERM for the block and note it (not raised): the caller skips what is left."""
    out = Held()
    _defer["depth"] += 1
    try:
        yield out
    finally:
        _defer["depth"] -= 1
        out.signum = _defer["pending"]
        if _defer["depth"] == 0:
            _defer["pending"] = None


#: the longest time bound ``bounded`` takes (about 31 years); the OS timer overflows a little above 9e9 s
MAX_BOUND_S = 1e9
#: what ``check_time_bound`` takes, in words
TIME_BOUND_RULE = f"must be a finite number of seconds from 0 to {MAX_BOUND_S:g} (0: no bound)"


def check_time_bound(seconds: Any) -> str | None:
    """Why ``seconds`` is not a time bound for ``bounded``, or None. A bound is a finite number of
    seconds from 0 (or None: no bound) to ``MAX_BOUND_S``; inf, NaN and negative values are refused,
    not read as "no bound" or "no time at all"."""
    if seconds is None:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        return f"must be a number of seconds, got {seconds!r}"
    if math.isnan(seconds) or math.isinf(seconds) or not 0 <= seconds <= MAX_BOUND_S:
        return f"{TIME_BOUND_RULE}, got {seconds!r}"
    return None


@contextlib.contextmanager
def bounded(seconds: float | None) -> Iterator[None]:
    """Stop the block with ``TimeBoundExceeded`` after ``seconds`` (main thread; None/0: unbounded).
    A bound that ``check_time_bound`` refuses raises ValueError."""
    problem = check_time_bound(seconds)
    if problem:
        raise ValueError(f"time bound {problem}")
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return

    fired: list[bool] = []

    def on_alarm(_signum: int, _frame: Any) -> None:
        fired.append(True)
        raise TimeBoundExceeded(f"did not finish within {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    if fired:  # the handler ran where its exception is swallowed (a __del__, a GC callback): the bound still holds
        raise TimeBoundExceeded(f"did not finish within {seconds:g} s")


def exit_on_signal(code: int) -> None:
    """After the command decided its exit status: a signal (e.g. a scheduler's SIGTERM while the
    interpreter joins library threads) exits at once with that status instead of being killed."""
    if threading.current_thread() is not threading.main_thread():
        return

    def handler(signum: int, _frame: Any) -> None:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os.write(2, f"rlhooks: {signal.Signals(signum).name} while exiting; exit status {code} stands\n".encode())
        os._exit(code)

    for sig in HANDLED:
        signal.signal(sig, handler)
    # the interpreter drops Python-level handlers as it finalizes (a signal then kills the process,
    # contradicting the recorded outcome); from atexit on, the few milliseconds left ignore signals
    atexit.register(lambda: [signal.signal(sig, signal.SIG_IGN) for sig in HANDLED])


@contextlib.contextmanager
def signals_interrupt() -> Iterator[None]:
    """Turn SIGINT/SIGTERM into ``Interrupted`` for the block (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    seen: list[int] = []

    def handler(signum: int, _frame: Any) -> None:
        seen.append(signum)
        if len(seen) == 1:
            if _defer["depth"]:  # recording a run's outcome: finish that first
                _defer["pending"] = signum
                what = (_defer["what"] or "the run's outcome is recorded").encode()
                os.write(2, b"rlhooks: stopping once " + what + b" (a second signal stops at once)\n")
                return
            raise Interrupted(signum)
        name = signal.Signals(signum).name.encode()
        recorded = outcome_recorded["status"]
        code = 128 + signum
        if _defer["depth"]:
            what = b"the run's outcome may not be fully recorded (run_end, summary.json, the run marker)"
        elif recorded is not None:  # derived work only: the recorded outcome stays the exit status
            what = b"the run's outcome (" + recorded.encode() + b") is recorded; derived files (the report) not written"
            code = {"success": 0, "stopped": 3, "interrupted": code}.get(recorded, 1)  # core.run.STATUS_EXIT_CODES
        else:
            what = b"backends not flushed and the run's end not recorded"
        os.write(2, b"\nrlhooks: second " + name + b": exiting now; " + what + b"\n")
        os._exit(code)

    previous = {}
    try:
        for sig in HANDLED:
            previous[sig] = signal.signal(sig, handler)
    except ValueError:  # not the main interpreter thread after all
        pass
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


__all__ = ["Interrupted", "signals_interrupt", "deferred", "held", "bounded", "exit_code", "TimeBoundExceeded",
           "note_outcome", "outcome_recorded", "END_GRACE_S", "exit_on_signal"]
