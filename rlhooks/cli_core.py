"""Core CLI commands: ``rlhooks plugins list``, ``rlhooks hooks``, ``rlhooks config check``, ``rlhooks new-plugin``."""

from __future__ import annotations

import argparse
import inspect
import json
import sys
from typing import Any

from rlhooks.core.components import is_reward_function, reward_component_problem
from rlhooks.core.hookspecs import HOOK_NAMES
from rlhooks.core.registry import GROUPS, Registry, is_builtin, qualified_name


def add_parsers(sub: argparse._SubParsersAction) -> None:
    plugins = sub.add_parser("plugins", help="installed plugins")
    psub = plugins.add_subparsers(dest="plugins_command", metavar="SUBCOMMAND")
    lst = psub.add_parser("list", help="list installed components of every kind, with their status")
    lst.add_argument("--json", action="store_true", help="machine-readable output")
    lst.add_argument("--kind", choices=sorted(GROUPS), help="only this kind")
    lst.set_defaults(func=cmd_plugins_list)
    plugins.set_defaults(func=lambda args: (plugins.print_help(), 2)[1])

    new = sub.add_parser("new-plugin", help="write a plugin package (entry points, modules, contract tests, README)")
    new.add_argument("name", help="the distribution name, e.g. rlhooks-my-plugins")
    new.add_argument("--kind", default="hook", metavar="KINDS",
                     help="comma-separated: sampler,filter,backend,reward,hook (default: hook)")
    new.add_argument("--dir", default=".", help="where to create the package's directory (default: here)")
    new.set_defaults(func=cmd_new_plugin)

    hooks = sub.add_parser("hooks", help="print the hook reference (Markdown; docs/hooks.md is this output)")
    hooks.set_defaults(func=cmd_hooks)

    config = sub.add_parser("config", help="config files")
    csub = config.add_subparsers(dest="config_command", metavar="SUBCOMMAND")
    chk = csub.add_parser("check", help="validate a config and print it resolved with defaults (secrets redacted)")
    chk.add_argument("file")
    chk.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    chk.set_defaults(func=cmd_config_check)
    config.set_defaults(func=lambda args: (config.print_help(), 2)[1])


def cmd_new_plugin(args: argparse.Namespace) -> int:
    from rlhooks.scaffold import write_plugin

    root = write_plugin(args.name, args.kind, args.dir)
    print(f"wrote {root}\n  cd {root} && pip install -e '.[test]' && pytest")
    return 0


def cmd_hooks(args: argparse.Namespace) -> int:
    from rlhooks.core.hookdocs import render_markdown

    sys.stdout.write(render_markdown())
    return 0


def hooks_of(obj: Any) -> list[str]:
    """Hook names an entry-point object implements (class, instance or module)."""
    found = []
    for name in HOOK_NAMES:
        attr = getattr(obj, name, None)
        if attr is not None and getattr(attr, "rlhooks_impl", None) is not None:
            found.append(name)
    return found


def describe(obj: Any) -> str:
    doc = inspect.getdoc(obj) or ""
    return doc.splitlines()[0] if doc else ""


def canonical_name(names: list[str], deprecated: dict[str, str]) -> str:
    """The name a component is listed under: not deprecated, snake_case before CamelCase, shortest."""
    return min(names, key=lambda n: (n in deprecated, n != n.lower(), len(n), n))


def plugin_rows(registry: Registry, kind: str | None = None) -> list[dict[str, Any]]:
    """One row per component: entry points of one distribution naming the same object are aliases."""
    components: dict[tuple[str, str, str], list[Any]] = {}
    for info in registry.entries(kind):
        # a disabled or broken entry is its own row: what it names is unknown or unwanted
        key = (info.kind, info.dist, info.value) if not info.disabled else (info.kind, info.dist, "#" + info.name)
        components.setdefault(key, []).append(info)
    rows = []
    for (kind_, _dist, _value), infos in components.items():
        first = infos[0]
        row: dict[str, Any] = {
            "name": first.name, "aliases": [], "deprecated_aliases": {}, "kind": kind_, "distribution": first.dist,
            "version": first.version, "value": first.value, "hooks": [], "description": "",
            "status": "disabled" if first.disabled else "ok", "error": None,
            "role": None,  # rewards only: "reward function" or "observer"
        }
        names = [i.name for i in infos]
        if not first.disabled:
            try:
                obj = first.load()
                row["hooks"] = hooks_of(obj)
                if kind_ == "reward":  # a reward entry scores, observes (hooks), or cannot be used
                    problem = reward_component_problem(obj)
                    if problem:
                        row["status"], row["error"] = "unusable", problem
                    else:
                        row["role"] = "reward function" if is_reward_function(obj) else "observer"
                row["description"] = describe(obj)
                deprecated = dict(getattr(obj, "deprecated_names", {}) or {})
                row["deprecated_aliases"] = {n: deprecated[n] for n in names if n in deprecated}
            except Exception:  # noqa: BLE001 - recorded on the entry
                row["status"] = "broken"
                row["error"] = first.error
        row["name"] = canonical_name(names, row["deprecated_aliases"])
        row["aliases"] = sorted((n for n in names if n != row["name"]), key=lambda n: (n in row["deprecated_aliases"], n.lower()))
        row["qualified_name"] = qualified_name(first.dist, row["name"])
        others = [i for i in registry.entries(kind_) if i.name in names and i.dist != first.dist and not i.disabled]
        if others and not first.disabled:
            row["status"] = _shared_name_status(first, others)
        rows.append(row)
    rows.sort(key=lambda r: (list(GROUPS).index(r["kind"]), r["name"].lower()))
    return rows


def _shared_name_status(first: Any, others: list[Any]) -> str:
    """How names other distributions register too resolve (the registry's rule, see core/registry.py)."""
    parts = []
    for name in dict.fromkeys(o.name for o in others):
        clash = [o for o in others if o.name == name]
        third = [i for i in (first, *clash) if not is_builtin(i.dist)]
        if len(third) == 1 and third[0] is not first:
            parts.append(f"shadowed by {qualified_name(third[0].dist, name)}: name it {qualified_name(first.dist, name)}")
        elif len(third) == 1:
            parts.append("shadows " + " and ".join(o.qualified for o in clash))
        else:
            parts.append("duplicate: " + " and ".join(f"{i.dist} {i.version}" for i in (first, *clash))
                         + "; name one: " + " or ".join(qualified_name(i.dist, name) for i in third))
    return "; ".join(parts)


def cmd_plugins_list(args: argparse.Namespace) -> int:
    rows = plugin_rows(Registry(disabled=None, strict=False), args.kind)
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        print()
        return 0
    widths = {k: max([len(k)] + [len(str(r[k])) for r in rows])
              for k in ("kind", "name", "qualified_name", "distribution", "version")}
    for kind in GROUPS:
        sel = [r for r in rows if r["kind"] == kind]
        if not sel:
            continue
        print(f"{kind}s ({GROUPS[kind]}):")
        for r in sel:
            hooks = ", ".join(r["hooks"]) or "-"
            if r.get("role") == "reward function":
                hooks = "- (scores as a reward function)"
            status = "" if r["status"] == "ok" else f"  [{r['status']}]"
            aliases = ", ".join(
                f"{a} (deprecated)" if a in r["deprecated_aliases"] else a for a in r["aliases"]
            )
            print(
                f"  {r['name']:<{widths['name']}}  {r['qualified_name']:<{widths['qualified_name']}}"
                f"  {r['distribution']} {r['version']:<{widths['version']}}"
                f"  hooks: {hooks}{status}" + (f"  aliases: {aliases}" if aliases else "")
            )
            if r["error"]:
                print(f"      error: {r['error']}")
    return 0


def engine_sections() -> dict[str, Any]:
    """Sections the engines add to a config, read as ``rlhooks simulate`` reads them (one verdict):
    ``simulate:`` (validated here) and ``verl:`` (its keys that rlhooks takes from verl mapped the way
    ``rlhooks train`` maps them; the whole section is checked against verl by ``rlhooks train --dry-run``)."""
    from rlhooks.engines.sim.engine import SIM_SECTIONS

    return dict(SIM_SECTIONS)


def cmd_config_check(args: argparse.Namespace) -> int:
    from rlhooks.core.config import load_config

    cfg = load_config(args.file, overrides=args.overrides, **engine_sections())
    print(f"# {args.file}: valid; resolved with defaults (secrets redacted)")
    print(cfg.to_yaml(redact=True), end="")
    return 0
