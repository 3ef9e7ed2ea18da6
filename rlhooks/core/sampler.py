"""The ``Sampler`` base class: a real ``torch.utils.data.Sampler[int]`` with resumable state.

It lives in its own module because it is the only part of rlhooks' plugin API that needs torch
(about 1.3 s to import). ``rlhooks.Sampler`` resolves to
this class lazily (module ``__getattr__``), so ``import rlhooks`` and the pytest plugin do not
import torch; a sampler plugin that subclasses it does, when it is imported. Samplers stay real
torch Samplers because verl hands them to its (torchdata) ``StatefulDataLoader`` and users check
``isinstance(s, torch.utils.data.Sampler)``.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import torch.utils.data

from rlhooks.core.components import NoOptions
from rlhooks.core.data import DatasetColumns


class Sampler(torch.utils.data.Sampler[int], abc.ABC):
    """Base of rlhooks samplers: a torch Sampler yielding dataset indices, with resumable state.

    Subclasses are constructed by the engine with the dataset's columns, because only the
    engine has the data: ``cls(options, data, batch_size=..., seed=...)``. ``data`` is a
    ``rlhooks.DatasetColumns`` (``len(data)`` rows; ``data.source_names``: tuple of source
    names; ``data.source_codes``: each row's source as a small int into ``source_names``;
    ``data.complexity``: float32 per row, NaN where absent, or None; ``data.source_counts()``; the
    declared ``columns`` as ``data.column(name)``). They usually also
    implement ``on_rewards_computed`` (as ``@hookimpl``) to adapt to rewards.
    """

    Options: ClassVar[type] = NoOptions
    #: dataset columns the sampler reads beyond data_source and complexity, e.g.
    #: ``("extra_info.difficulty", "prompt_chars")``: read once when the engine builds the sampler, as
    #: float32 per row (NaN where absent), in ``data.extra`` / ``data.column(name)`` (rlhooks.core.data)
    columns: ClassVar[tuple[str, ...]] = ()

    def __init__(self, options: Any, data: DatasetColumns, *, batch_size: int, seed: int = 0) -> None:
        self.options = options
        self.data = data
        self.batch_size = batch_size
        self.seed = seed

    @abc.abstractmethod
    def __iter__(self) -> Iterator[int]:
        """Dataset indices, batch after batch of ``batch_size``; resumes from the loaded state."""

    @abc.abstractmethod
    def __len__(self) -> int:
        """Indices per epoch."""

    @abc.abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly: RNG, EMAs, curriculum level, position."""

    @abc.abstractmethod
    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what ``state_dict`` returned; the next index is the one an uninterrupted run draws."""
