"""SIGTERM behaves like Ctrl-C: the run ends "interrupted", flushed, with every run-end file.

SLURM, Kubernetes and Ray stop a job with SIGTERM (then SIGKILL after a grace period). Python's
default for SIGTERM is to die at once: no ``on_run_end``, no flushed backends, no summary. While
``signals_interrupt()`` is active (the ``rlhooks`` command wraps every subcommand in it), SIGTERM
and SIGINT raise ``Interrupted``, a ``KeyboardInterrupt``, in the main thread, so every
``finally`` runs: ``RunManager.running()`` ends the run with status "interrupted" and drains
each backend (bounded by its ``flush_timeout_s``), and the engine writes its run-end files.
The command then exits 128 + the signal number (130 for SIGINT, 143 for SIGTERM) without a
Python traceback.

A second signal while the run is being closed does not cut the cleanup short: a second SIGTERM
is ignored (with a note), a second Ctrl-C exits at once (130) for a user who does not want to wait.
A signal that arrives inside ``deferred()`` (ending a run: flushing backends, writing run-end
files) is held until the block is done, then raised.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

HANDLED = (signal.SIGINT, signal.SIGTERM)


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


_defer = {"depth": 0, "pending": None}


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM (under ``signals_interrupt``) until the block ends, then raise them."""
    _defer["depth"] += 1
    try:
        yield
    finally:
        _defer["depth"] -= 1
        pending = _defer["pending"]
        if _defer["depth"] == 0 and pending is not None:
            _defer["pending"] = None
            if sys.exc_info()[0] is None:
                raise Interrupted(pending)


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
            if _defer["depth"]:  # ending a run: finish that first
                _defer["pending"] = signum
                os.write(2, b"rlhooks: stopping once the run's end is written\n")
                return
            raise Interrupted(signum)
        if signum == signal.SIGINT:
            os.write(2, b"\nrlhooks: second Ctrl-C: exiting now, without waiting for the backends\n")
            os._exit(128 + signal.SIGINT)
        os.write(2, b"rlhooks: already stopping: flushing the backends and writing the run-end files\n")

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


__all__ = ["Interrupted", "signals_interrupt", "deferred", "exit_code"]
