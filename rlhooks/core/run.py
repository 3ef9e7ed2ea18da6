"""RunContext: what a plugin learns about the run in ``on_run_start``, and its emitters."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rlhooks.core.config import Config, redact_secrets


class RunContext:
    """The run as plugins see it.

    Attributes: ``config`` (the resolved Config), ``run_dir`` (Path, exists), ``name``, ``seed``,
    ``step`` (current step, 0 before the first), ``learning`` (the run's prompt-level
    ``LearningState``, read-only for plugins; None when the engine has no dataset). Emitters queue a table or histogram; the
    manager dispatches them after the step's ``log_metrics`` so backends see metrics first.
    """

    def __init__(self, config: Config, run_dir: Path, emit: Callable[[str, int, str, Any], None]):
        self.config = config
        self.run_dir = Path(run_dir)
        self.name = config.run.name
        self.seed = config.run.seed
        self.step = 0
        self.learning: Any = None  # rlhooks.core.learning.LearningState, set by RunManager.attach_data
        self._emit = emit

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
