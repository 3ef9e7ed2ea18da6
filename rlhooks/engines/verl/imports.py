"""verl's start-up imports without CPython's cyclic garbage collector.

Importing verl (with torch, tensordict, transformers and Ray) creates millions of objects that live as long
as the process. While they are created the collector runs full collections over the growing heap again and
again: ~15% of the import's CPU on a 2-core machine (docs/DEVELOPMENT.md, "Eleventh session"). Each process
of a verl run imports them once, so rlhooks imports them with the collector off, then freezes what exists
(``gc.freeze``: later collections skip it, so they cost less for the rest of the run too). A cycle that became
garbage during the import stays in memory: a few kilobytes once, not per step.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_off() -> Iterator[None]:
    """A start-up phase with the collector off; after it, the collector is back as it was and every object
    alive is frozen. Nested phases leave the collector off until the outermost ends."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
        gc.freeze()


def freeze_imported() -> None:
    """Freeze what a process has imported so far (its later full collections skip those objects). For a module
    imported in the middle of verl's import (``cpu.ray_process``), where no phase can be wrapped."""
    gc.freeze()
