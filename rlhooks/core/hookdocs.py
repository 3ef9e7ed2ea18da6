"""The hook reference (docs/hooks.md), rendered from the hook specs' docstrings.

``rlhooks hooks`` prints it; ``rlhooks hooks > docs/hooks.md`` regenerates the file
(tests/core/test_hookdocs.py fails when the file is stale).
"""

from __future__ import annotations

import inspect
import re

from rlhooks.core import hookspecs

_ITEM = re.compile(r"^(\w+) \(([^)]*)\):\s*(.*)$")
_SECTION = re.compile(r"^(Arguments|Returns|Must not mutate):\s*(.*)$")


def _markdown(text: str) -> str:
    """reST inline markup of the docstrings as Markdown: ``code`` -> `code`, :class:`X` -> `X`."""
    return re.sub(r":\w+:`([^`]+)`", r"`\1`", text.replace("``", "`"))


def _signature(name: str) -> str:
    sig = inspect.signature(getattr(hookspecs.RLHookSpecs, name))
    params = [p for p in sig.parameters.values() if p.name != "self"]
    args = ", ".join(f"{p.name}: {p.annotation}" for p in params)
    return f"{name}({args}) -> {sig.return_annotation}"


def _hook_markdown(name: str) -> list[str]:
    doc = _markdown(inspect.getdoc(getattr(hookspecs.RLHookSpecs, name)) or "")
    out = [f"## {name}", "", "```python", _signature(name), "```", ""]
    section = None
    for line in doc.splitlines():
        m = _SECTION.match(line)
        if m:
            section = m.group(1)
            if out[-1]:
                out.append("")
            out.append(f"**{section}:**" + (f" {m.group(2)}" if m.group(2) else ""))
            if section == "Arguments":
                out.append("")
            continue
        stripped = line.strip()
        if section == "Arguments" and stripped:
            item = _ITEM.match(stripped)
            if item and line.startswith("    ") and not line.startswith("        "):
                out.append(f"- `{item.group(1)}` ({item.group(2)}): {item.group(3)}")
            else:
                out[-1] += " " + stripped
            continue
        if section and stripped and out[-1]:
            out[-1] += " " + stripped  # a wrapped line of Returns / Must not mutate
            continue
        out.append(stripped)
    while out and not out[-1]:
        out.pop()
    return out + [""]


def render_markdown() -> str:
    """docs/hooks.md: the shared rules, then every hook in firing order."""
    lines = [
        "# Hook reference",
        "",
        "<!-- Generated from rlhooks/core/hookspecs.py by `rlhooks hooks > docs/hooks.md`;",
        "     do not edit by hand (tests/core/test_hookdocs.py fails when this file is stale). -->",
        "",
        "Implement any subset of these hooks with `@rlhooks.hookimpl`; an implementation may take any",
        "subset of its hook's arguments, by name. Hooks are listed in the order they fire in a run.",
        "",
        *(f"- [`{name}`](#{name})" for name in hookspecs.HOOK_NAMES),
        "",
        "## Rules for every hook",
        "",
    ]
    module_doc = inspect.getdoc(hookspecs) or ""
    rules = _markdown(module_doc.split("Shared rules for every hook:", 1)[-1].strip())
    lines += [*rules.splitlines(), ""]
    for name in hookspecs.HOOK_NAMES:
        lines += _hook_markdown(name)
    return "\n".join(lines).rstrip() + "\n"
