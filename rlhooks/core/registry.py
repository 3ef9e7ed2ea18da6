"""Entry-point registries: find components by name, across every installed distribution.

Each component kind has one entry-point group. The project's own built-ins are registered
through its own pyproject entry points, exactly like a third-party package's.

Names (this module is their one home: the config, ``plugins list``, the contract kit and the
errors all resolve through ``Registry.info``):
* ``<distribution>:<name>`` (a qualified name) always means exactly one entry point;
* a bare name registered by rlhooks itself and by one third-party distribution means the third
  party's (installed on purpose; its users' configs predate the built-in), with one warning
  naming the built-in's qualified name; so a new built-in never breaks an installed plugin;
* a bare name registered by two third-party distributions -> error listing the qualified names.

Policy:
* unknown name -> error listing the installed names of that kind, with a did-you-mean;
* a plugin that fails to import -> recorded as broken with entry point, distribution and error;
  a run that asks for it fails, other runs get a warning (``strict`` turns it into an error);
* ``RLHOOKS_DISABLE_PLUGINS=name,...`` (entry-point, qualified or distribution names) skips plugins.
"""

from __future__ import annotations

import difflib
import importlib.metadata as md
import os
import traceback
from collections.abc import Iterable
from typing import Any

import attrs
import structlog

from rlhooks.core.errors import BrokenPluginError, DuplicateComponentError, UnknownComponentError

log = structlog.get_logger("rlhooks.registry")

#: component kind -> entry-point group
GROUPS: dict[str, str] = {
    "sampler": "rlhooks.samplers",
    "filter": "rlhooks.filters",
    "prompt_filter": "rlhooks.prompt_filters",
    "reward": "rlhooks.rewards",
    "backend": "rlhooks.backends",
    "plugin": "rlhooks.plugins",
}
DISABLE_ENV = "RLHOOKS_DISABLE_PLUGINS"
STRICT_ENV = "RLHOOKS_STRICT_PLUGINS"
#: the distribution of the built-ins: a third-party entry point of the same name shadows them
BUILTIN_DIST = "rlhooks"
#: separates the distribution from the entry-point name in a qualified name
QUALIFIER = ":"

#: (kind, name, shadowing distribution) already warned about in this process: the warning is said once
_warned_shadows: set[tuple[str, str, str]] = set()


def _norm(name: str) -> str:
    return name.lower().replace("-", "_").replace(".", "_")


def qualified_name(dist: str, name: str) -> str:
    """``<distribution>:<name>``: the name that always means one entry point."""
    return f"{dist}{QUALIFIER}{name}"


def split_qualified(name: str) -> tuple[str | None, str]:
    """(distribution or None, entry-point name) of a possibly qualified name."""
    dist, sep, bare = name.partition(QUALIFIER)
    return (dist, bare) if sep and dist and bare else (None, name)


def is_builtin(dist: str) -> bool:
    return _norm(dist) == BUILTIN_DIST


@attrs.define
class EntryInfo:
    """One entry point of one distribution, loaded on demand."""

    name: str
    kind: str
    value: str  # "module:attr"
    dist: str
    version: str
    ep: Any = attrs.field(repr=False, default=None)
    obj: Any = attrs.field(repr=False, default=None)
    error: str | None = None  # "ImportError: ..." when loading failed
    error_detail: str | None = attrs.field(repr=False, default=None)
    disabled: bool = False

    @property
    def status(self) -> str:
        if self.disabled:
            return "disabled"
        if self.error:
            return "broken"
        return "loaded" if self.obj is not None else "found"

    @property
    def qualified(self) -> str:
        return qualified_name(self.dist, self.name)

    @property
    def where(self) -> str:
        return f"entry point {self.name!r} = {self.value!r} in group {GROUPS[self.kind]!r} of {self.dist} {self.version}"

    def load(self) -> Any:
        if self.obj is None and self.error is None:
            try:
                self.obj = self.ep.load()
            except BaseException as exc:  # noqa: BLE001 - a plugin's import may raise anything
                if isinstance(exc, KeyboardInterrupt):
                    raise
                self.error = f"{type(exc).__name__}: {exc}"
                self.error_detail = traceback.format_exc()
        if self.error is not None:
            raise BrokenPluginError(
                f"{self.kind} {self.name!r} could not be loaded: {self.where} failed to import:\n"
                f"  {self.error}\n"
                f"  Fix or reinstall {self.dist}, or skip it with {DISABLE_ENV}={self.name}."
            )
        return self.obj


def _name_and_version(dist: Any) -> tuple[str, str]:
    """A distribution's name and version; "<unknown>" and "?" for one half-written by pip (or left so by an
    interrupted install): no METADATA, which Python 3.10-3.13 read as empty, 3.14 as None and 3.15 raises."""
    try:
        meta = dist.metadata if dist is not None else None
    except FileNotFoundError:
        meta = None
    if meta is None:
        return "<unknown>", "?"
    return meta.get("Name") or "<unknown>", meta.get("Version") or "?"


class Registry:
    """All rlhooks entry points installed in this environment, by kind and name."""

    def __init__(self, disabled: Iterable[str] | None = None, strict: bool | None = None) -> None:
        if disabled is None:
            disabled = [s.strip() for s in os.environ.get(DISABLE_ENV, "").split(",") if s.strip()]
        self.disabled = {_norm(d) for d in disabled}
        self.strict = bool(int(os.environ.get(STRICT_ENV, "0") or 0)) if strict is None else strict
        # kind -> name -> list of EntryInfo (more than one distinct distribution = duplicate)
        self._entries: dict[str, dict[str, list[EntryInfo]]] = {k: {} for k in GROUPS}
        self._discover()

    def _discover(self) -> None:
        # One scan of the installed distributions for every group (each entry_points() call reads every
        # distribution's entry_points.txt and METADATA), and each distribution's name and version read once
        # (each .metadata access parses its METADATA again): a registry is built per run and per CLI command.
        everything = md.entry_points()
        dists: dict[Any, tuple[str, str]] = {}
        for kind, group in GROUPS.items():
            seen: set[tuple[str, str, str]] = set()
            for ep in everything.select(group=group):
                dist = getattr(ep, "dist", None)
                if dist not in dists:
                    dists[dist] = _name_and_version(dist)
                dname, dver = dists[dist]
                key = (_norm(dname), ep.name, ep.value)
                if key in seen:  # the same distribution seen twice on sys.path
                    continue
                seen.add(key)
                info = EntryInfo(ep.name, kind, ep.value, dname, dver, ep=ep)
                info.disabled = bool({_norm(ep.name), _norm(dname), _norm(info.qualified)} & self.disabled)
                self._entries[kind].setdefault(ep.name, []).append(info)

    # -- queries ------------------------------------------------------------------------
    def names(self, kind: str) -> list[str]:
        return sorted(self._entries[kind])

    def entries(self, kind: str | None = None) -> list[EntryInfo]:
        kinds = [kind] if kind else list(GROUPS)
        return [e for k in kinds for infos in self._entries[k].values() for e in infos]

    def find_kind(self, name: str) -> list[str]:
        """Kinds that have an entry named ``name`` (to hint at a misplaced config section)."""
        return [k for k in GROUPS if name in self._entries[k]]

    def suggest(self, kind: str, name: str) -> list[str]:
        names = self.names(kind)
        lower = {n.lower(): n for n in names}
        if name.lower() in lower:
            return [lower[name.lower()]]
        return difflib.get_close_matches(name, names, n=3, cutoff=0.6)

    def info(self, kind: str, name: str) -> EntryInfo:
        """The single entry ``name`` means (see the module's rule), or a clear error (unknown, ambiguous, disabled)."""
        dist, bare = split_qualified(name)
        if dist is not None and name not in self._entries[kind]:  # qualified: that distribution's only
            infos = [i for i in self._entries[kind].get(bare, ()) if _norm(i.dist) == _norm(dist)]
            if not infos:
                raise UnknownComponentError(self._unknown_qualified(kind, dist, bare))
        else:
            infos = self._entries[kind].get(name)
        if not infos:
            installed = ", ".join(self.names(kind)) or "(none installed)"
            close = self.suggest(kind, name)
            hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            others = [k for k in self.find_kind(name) if k != kind]
            if others:
                hint += f" ({name!r} is a {others[0]}: put it in the {others[0]}s section.)"
            raise UnknownComponentError(
                f"unknown {kind} {name!r}.{hint}\n  Installed {kind}s: {installed}\n"
                f"  A plugin package registers {kind}s in the entry-point group {GROUPS[kind]!r}."
            )
        enabled = [i for i in infos if not i.disabled]
        if len(enabled) > 1:
            enabled = [self._shadowing(kind, name, enabled)]
        info = enabled[0] if enabled else infos[0]
        if info.disabled:
            raise BrokenPluginError(
                f"{kind} {name!r} ({info.dist} {info.version}) is disabled by {DISABLE_ENV}; "
                f"remove it from {DISABLE_ENV} or from the config."
            )
        return info

    def _shadowing(self, kind: str, name: str, enabled: list[EntryInfo]) -> EntryInfo:
        """The one third-party entry among built-ins, with a warning; else the ambiguity is an error."""
        third = [i for i in enabled if not is_builtin(i.dist)]
        if len(third) == 1:
            chosen, builtins = third[0], [i for i in enabled if is_builtin(i.dist)]
            key = (kind, name, chosen.dist)
            if key not in _warned_shadows:
                _warned_shadows.add(key)
                log.warning(
                    f"{kind} name {name!r} is registered by rlhooks and by {chosen.dist} {chosen.version}: "
                    f"using {chosen.dist}'s ({chosen.qualified}); name the built-in "
                    f"{' or '.join(b.qualified for b in builtins)} to use it",
                    plugin=name, distribution=chosen.dist,
                )
            return chosen
        choices = " or ".join(repr(i.qualified) for i in enabled)
        both = " and ".join(f"{i.dist} {i.version} ({i.value})" for i in enabled)
        raise DuplicateComponentError(
            f"{kind} name {name!r} is registered by more than one distribution: {both}.\n"
            f"  Name the one you mean with its qualified name: {choices}\n"
            f"  (or uninstall one, or disable one with {DISABLE_ENV}=<distribution name>)."
        )

    def _unknown_qualified(self, kind: str, dist: str, bare: str) -> str:
        same_name = [i.qualified for i in self._entries[kind].get(bare, [])]
        of_dist = sorted(i.qualified for i in self.entries(kind) if _norm(i.dist) == _norm(dist))
        if same_name:
            hint = f"{bare!r} is registered by: {', '.join(same_name)}"
        elif of_dist:
            close = difflib.get_close_matches(qualified_name(dist, bare), of_dist, n=1, cutoff=0.6)
            hint = (f"did you mean {close[0]!r}? " if close else "") + f"{dist}'s {kind}s: {', '.join(of_dist)}"
        else:
            hint = f"no installed distribution named {dist!r} registers {kind}s"
        return (f"unknown {kind} {qualified_name(dist, bare)!r}: {hint}.\n"
                f"  A qualified name is <distribution>:<name>, as `rlhooks plugins list` shows it.")

    def resolve(self, kind: str, name: str) -> Any:
        """The loaded object for a name (class, function or module)."""
        return self.info(kind, name).load()

    def load_all(self) -> list[EntryInfo]:
        """Import every enabled entry point; returns the broken ones (errors recorded on them)."""
        broken = []
        for info in self.entries():
            if info.disabled:
                continue
            try:
                info.load()
            except BrokenPluginError:
                broken.append(info)
        return broken

    def check_unrequested(self, requested: set[tuple[str, str]], strict: bool | None = None) -> list[str]:
        """Warn about (or, in strict mode, fail on) broken plugins a run did not ask for.

        ``strict=True`` (a run's ``strict_plugins``) turns strict mode on for this check even when
        the registry itself is not strict.
        """
        strict = self.strict or bool(strict)
        problems = []
        for info in self.load_all():
            if (info.kind, info.name) in requested:
                continue  # the run itself fails on it with the full error
            msg = f"installed plugin is broken and will not be available: {info.where}: {info.error}"
            problems.append(msg)
            if not strict:
                log.warning(msg, plugin=info.name, distribution=info.dist)
        if problems and strict:
            raise BrokenPluginError(
                "strict plugin mode: installed plugins failed to import:\n  "
                + "\n  ".join(problems)
                + f"\n  Fix them, disable them with {DISABLE_ENV}, or turn strict mode off."
            )
        return problems

    def aliases(self, kind: str) -> dict[str, list[str]]:
        """Names of one kind that point to the same object value, grouped."""
        by_value: dict[str, list[str]] = {}
        for name, infos in self._entries[kind].items():
            by_value.setdefault(infos[0].value, []).append(name)
        return by_value
