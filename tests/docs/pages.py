"""The documentation's pages and their code blocks, for the docs tests."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"

#: ```lang fences at the start of a line (indented fences inside lists too), with the comment above
_FENCE = re.compile(r"^(?P<indent>[ ]*)```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ ]*$", re.S | re.M)
#: <!-- docs-test: ACTION (why) --> right above a block says how the docs tests treat it
_MARK = re.compile(r"<!--\s*docs-test:\s*(?P<action>[\w-]+)\s*(?P<why>.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    lang: str
    code: str
    action: str  # "" (default handling), or the docs-test mark's action
    why: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def pages() -> list[Path]:
    """Every Markdown page of the site (docs/, the maintainers' notes included) and the README."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def page(relative: str) -> str:
    return (DOCS / relative).read_text(encoding="utf-8")


def section(text: str, heading: str) -> str:
    """From a heading line to the next heading of the same or a higher level."""
    start = text.index(heading + "\n")
    level = len(heading) - len(heading.lstrip("#"))
    rest = text[start + len(heading) + 1:]
    m = re.search(rf"(?m)^#{{1,{level}}} ", _mask_fences(rest))
    return text[start:start + len(heading) + 1 + (m.start() if m else len(rest))]


def _mask_fences(text: str) -> str:
    """The text with every fenced block's lines blanked (a '# comment' in a block is no heading)."""
    return _FENCE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def blocks(path: Path) -> list[Block]:
    text = path.read_text(encoding="utf-8")
    out = []
    for m in _FENCE.finditer(text):
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = _MARK.search(before)
        code = "\n".join(line[len(m.group("indent")):] for line in m.group("body").splitlines()) + "\n"
        action, why = (mark.group("action"), mark.group("why")) if mark else ("", "")
        if not mark and path == DOCS / "hooks.md":  # generated from the hook specs: signatures
            action, why = "signature", "a hook's signature (docs/hooks.md is rendered from the hook specs)"
        out.append(Block(path, text[:m.start()].count("\n") + 1, m.group("lang"), code, action, why))
    return out


def all_blocks(*langs: str) -> list[Block]:
    return [b for p in pages() for b in blocks(p) if b.lang in langs]
