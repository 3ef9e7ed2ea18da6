"""verl's start-up imports without CPython's cyclic garbage collector.

Importing verl (with torch, tensordict, transformers and Ray) leaves over half a million objects that live as long
as the process. While they are created, the collector runs full collections over the growing heap again and
again: ~15% of the import's CPU on a 2-core machine (docs/DEVELOPMENT.md, "Eleventh session"). So the driver of
``rlhooks train`` and the V1 TaskRunner import with the collector off (:func:`collector_off`), and every Ray
process of the CPU learner freezes what it imported once torch and Ray are in (:func:`freeze_imported`, from
``cpu.ray_process``). Frozen objects (``gc.freeze``) are left out of later collections, which then cost less for
the rest of the run too.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

#: whether a phase of this process has frozen its heap: a later phase (a second `rlhooks train` in one process,
#: as tests run it) freezes nothing more, so objects alive then are not pinned for good
_frozen = False


@contextlib.contextmanager
def collector_off() -> Iterator[None]:
    """A start-up phase with the collector off. When it ends normally, the collector is back as it was, the
    phase's garbage is collected (all of it is in the youngest generation: nothing was collected, so nothing was
    promoted) and, the first time in a process, what is alive is frozen. After an error only the collector
    comes back. Nested phases leave it off until the outermost ends."""
    global _frozen
    enabled = gc.isenabled()
    try:
        gc.disable()
        yield
    finally:
        if enabled:
            gc.enable()
    if enabled:
        gc.collect(0)
        if not _frozen:
            _frozen = True
            gc.freeze()


def freeze_imported() -> None:
    """Freeze what a process has imported so far: for a module imported in the middle of verl's own import
    (``cpu.ray_process``), where no phase can be wrapped."""
    gc.freeze()
