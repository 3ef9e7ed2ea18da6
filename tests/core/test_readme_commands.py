"""The README's and the documentation site's command lines are true: every option they show exists on
that (sub)command, and no install instruction names a package index rlhooks is not on."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from rlhooks.cli import build_parser

from ..docs.pages import pages

ROOT = Path(__file__).resolve().parents[2]
#: the README and every page of the site (docs/), each with its path
DOCS = [(str(p.relative_to(ROOT)), p.read_text(encoding="utf-8")) for p in pages()]


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {o for action in parser._actions for o in action.option_strings}


def readme_option_problems(text: str) -> tuple[int, list[str]]:
    """(options checked, problems) over every `rlhooks ...` command line in ``text``."""
    root = build_parser()
    checked, problems = 0, []
    for m in re.finditer(r"(?m)(?:^|`|\$ )rlhooks((?: [^`\n#|]*)?)", text):
        parser, path = root, ["rlhooks"]
        for tok in (t.strip("[]().,;") for t in m.group(1).split()):
            subs = _subcommands(parser)
            if tok in subs:
                parser = subs[tok]
                path.append(tok)
            elif tok.startswith("-") and len(tok) > 1:
                checked += 1
                if tok.split("=")[0] not in _options(parser):
                    problems.append(f"`{' '.join(path)}` has no option {tok.split('=')[0]} ({m.group(0).strip()})")
    return checked, problems


def test_every_option_the_docs_show_exists() -> None:
    checked, problems = 0, []
    for name, text in DOCS:
        n, found = readme_option_problems(text)
        checked += n
        problems += [f"{name}: {p}" for p in found]
    assert checked >= 40  # the scan sees the pages' command lines
    assert not problems, "\n".join(problems)


def test_the_scan_catches_a_misplaced_flag() -> None:
    # `-v` belongs to `rlhooks` itself, before the command (issue: the README said `simulate -v`)
    assert readme_option_problems("`rlhooks -v simulate --steps 3`") == (2, [])
    _, problems = readme_option_problems("`rlhooks simulate -v`\n`rlhooks plugins list --jsn`")
    assert len(problems) == 2 and "`rlhooks simulate` has no option -v" in problems[0]


def test_no_install_instruction_names_a_package_index() -> None:
    # rlhooks is on no index: `pip install 'rlhooks[x]'` fails; the clone's `pip install -e '.[x]'` works
    pattern = re.compile(r"pip install ['\"]?rlhooks\b")
    places = DOCS + [(str(p.relative_to(ROOT)), p.read_text(encoding="utf-8"))
                                        for p in sorted((ROOT / "rlhooks").rglob("*.py"))]
    found = [f"{name}:{text[:m.start()].count(chr(10)) + 1}" for name, text in places for m in pattern.finditer(text)
             if "does not work" not in text[m.start() - 80:m.end() + 40]]
    assert not found, found
