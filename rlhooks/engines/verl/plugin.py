"""The ``verl.plugins`` entry point of rlhooks.

``import verl`` loads this module in every process that imports verl: the driver, the Ray
TaskRunner actor that runs the rlhooks trainer, and every rollout / reward / training worker.
So it stays cheap (no verl, torch or rlhooks import at module level) and does one thing: a
process started by Ray logs rlhooks messages the way ``rlhooks train --log-json / -v`` asked
on the driver (the CLI sets RLHOOKS_LOG_JSON / RLHOOKS_VERBOSE, which ``main.run`` passes to Ray's
processes through ``runtime_env``). The trainer itself does not need a plugin: verl's TaskRunner is replaced by
``rlhooks.engines.verl.main``; the hooks run in the TaskRunner only.
"""

from __future__ import annotations

import os

LOG_JSON_ENV = "RLHOOKS_LOG_JSON"
VERBOSE_ENV = "RLHOOKS_VERBOSE"


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


def configure_worker_logging() -> bool:
    """Configure structlog from the environment; True when the environment asked for it."""
    if not (_flag(LOG_JSON_ENV) or _flag(VERBOSE_ENV)):
        return False
    from rlhooks.logging import configure_logging

    configure_logging(json=_flag(LOG_JSON_ENV), verbose=_flag(VERBOSE_ENV))
    return True


configure_worker_logging()
