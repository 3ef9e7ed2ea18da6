"""User-facing errors. Each says what was wrong, where (file, key path, plugin) and what to do."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs


class RLHooksError(Exception):
    """Base class of every error rlhooks raises on purpose."""


@attrs.frozen
class ConfigIssue:
    """One problem in a config: where it is and what is wrong."""

    path: str  # key path such as "backends[1]" or "run.seed"
    message: str
    plugin: str | None = None  # component name, when the issue is inside a component's options

    def __str__(self) -> str:
        where = f"{self.path} ({self.plugin})" if self.plugin else self.path
        return f"{where}: {self.message}" if where else self.message


class ConfigError(RLHooksError):
    """A config is invalid. ``issues`` lists every problem found, not only the first."""

    def __init__(self, issues: Iterable[ConfigIssue], source: str | None = None, *, kind: str = "rlhooks config"):
        self.issues = list(issues)
        self.source = source
        head = f"invalid {kind} {source}" if source else f"invalid {kind}"
        n = len(self.issues)
        lines = [f"{head}: {n} problem{'s' if n != 1 else ''}"]
        # continuation lines of a multi-line issue stay under their bullet
        lines += [f"  - {issue}".replace("\n", "\n    ") for issue in self.issues]
        super().__init__("\n".join(lines))


class RegistryError(RLHooksError):
    """A component name could not be resolved to a working plugin."""


class UnknownComponentError(RegistryError):
    pass


class DuplicateComponentError(RegistryError):
    pass


class BrokenPluginError(RegistryError):
    pass


#: the hint of a failing component whose run could go on without it (an observer under raise)
WARN_HINT = "set on_error: warn for this component to log and continue instead"


class PluginError(RLHooksError):
    """A plugin raised while steering training (sampler, filter) or under ``on_error: raise``.

    ``frames`` are "file:line in function: source" lines of the plugin's own code (innermost
    last); ``hint`` says what to do, or is None where no setting would help.
    """

    def __init__(
        self,
        plugin: str,
        hook: str,
        error: BaseException,
        distribution: str | None = None,
        *,
        frames: Sequence[str] = (),
        hint: str | None = WARN_HINT,
    ):
        self.plugin, self.hook, self.error, self.distribution = plugin, hook, error, distribution
        self.frames, self.hint = list(frames), hint
        dist = f" from {distribution}" if distribution else ""
        lines = [f"plugin {plugin!r}{dist} failed in {hook}: {type(error).__name__}: {error}"]
        if self.frames:
            lines.append("  in the plugin's code (innermost last):")
            lines += [f"    {f}" for f in self.frames]
        if hint:
            lines.append(f"  ({hint})")
        super().__init__("\n".join(lines))


class GenerationLimitError(RLHooksError, ValueError):
    """Dynamic sampling hit max_num_gen_batches before enough groups survived the filters.

    A ValueError too: what the DAPO recipe and the dynamic-sampling document raise, so code written
    for them (``except ValueError``) catches it."""
