"""RunContext: what a plugin learns about the run in ``on_run_start``, and its emitters."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import structlog

from rlhooks.core.config import Config, redact_secrets

log = structlog.get_logger("rlhooks.run")

#: set on each backend's dispatch thread (core/dispatch.py): a stop requested there names that backend
BACKEND_THREAD = threading.local()

#: a run's end status -> the exit code of the command that ran it (any other status: 1); "stopped" is
#: a plugin's ``run.request_stop(reason)``: a clean end with a checkpoint, told apart from success
STATUS_EXIT_CODES = {"success": 0, "stopped": 3}


def exit_code_of(status: str | None) -> int:
    """The exit code of a run that ended with ``status`` (0 success, 3 stopped, 1 otherwise)."""
    return STATUS_EXIT_CODES.get(status or "", 1)


class RunContext:
    """The run as plugins see it.

    Attributes: ``config`` (the resolved Config), ``run_dir`` (Path, exists), ``name``, ``seed``,
    ``step`` (current step, 0 before the first), ``learning`` (the run's prompt-level
    ``LearningState``, read-only for plugins; None when the engine has no dataset), ``validation``
    (the latest ``on_validation_end`` results as ``{"step", "metrics", "per_source"}``, None before the
    first validation). Emitters queue a table or histogram; the manager dispatches them after the
    step's ``log_metrics`` so backends see metrics first.

    Run control (TRL's ``control.should_training_stop``): ``request_stop(reason)`` asks the engine to
    end the run cleanly after the current step; it then saves a checkpoint and ends with status
    ``"stopped"``, the reason in ``stop_reason`` and in every outcome record.
    """

    def __init__(self, config: Config, run_dir: Path, emit: Callable[[str, int, str, Any], None]):
        self.config = config
        self.run_dir = Path(run_dir)
        self.name = config.run.name
        self.seed = config.run.seed
        self.step = 0
        self.learning: Any = None  # rlhooks.core.learning.LearningState, set by RunManager.attach_data
        self.validation: dict[str, Any] | None = None  # set by RunManager.validation_end
        self._emit = emit
        self._stop_reason: str | None = None
        self._stop_thread: int | None = None
        #: the component whose hook made the first request (set by the RunManager; None: not a hook of a
        #: component, e.g. a thread a plugin started)
        self.stopped_by: str | None = None

    def request_stop(self, reason: str) -> None:
        """Ask the engine to stop the run after the current step (status ``stopped``, a checkpoint saved).

        ``reason`` is one sentence for people (``"reward hacking likely (high confidence): ..."``); it is
        recorded in the JSONL ``run_end`` record, summary.json, the console and the logs. The first
        request wins; later ones are logged and ignored. Safe to call from any hook.
        """
        if not isinstance(reason, str) or not reason.strip():
            raise ValueError(f"request_stop(reason) needs a non-empty sentence saying why, got {reason!r}")
        if self._stop_reason is not None:
            log.info("a later stop request is ignored: the run stops for the first one",
                     reason=reason.strip(), first=self._stop_reason)
            return
        self._stop_thread = threading.get_ident()
        self._stop_reason = reason.strip()
        backend = getattr(BACKEND_THREAD, "backend", None)
        if backend is not None:  # on a backend's dispatch thread; the RunManager names the other callers
            self.stopped_by = backend
            log.warning(f"{backend} requested the run to stop after this step: {self._stop_reason}",
                        reason=self._stop_reason)

    def _stop_asked_here(self) -> bool:
        """Whether the stop was requested on the calling thread (so by the hook that just returned on it)."""
        return self._stop_thread == threading.get_ident()

    @property
    def stop_requested(self) -> bool:
        """Whether a plugin asked to stop the run (``request_stop``)."""
        return self._stop_reason is not None

    @property
    def stop_reason(self) -> str | None:
        """The reason given to the first ``request_stop`` call (None: nobody asked)."""
        return self._stop_reason

    def redacted_config(self) -> dict[str, Any]:
        """The resolved config with secrets replaced, safe to print or upload."""
        return redact_secrets(self.config.resolved(redact=False))

    def log_table(self, name: str, rows: list[Mapping[str, Any]], step: int | None = None) -> None:
        """Queue a table for ``log_table``; dispatched at the end of the current step."""
        self._emit("log_table", self.step if step is None else step, name, [dict(r) for r in rows])

    def log_histogram(self, name: str, values: np.ndarray, step: int | None = None) -> None:
        """Queue a distribution for ``log_histogram`` (non-finite values dropped)."""
        v = np.asarray(values, dtype=np.float64).ravel()
        self._emit("log_histogram", self.step if step is None else step, name, v[np.isfinite(v)])
