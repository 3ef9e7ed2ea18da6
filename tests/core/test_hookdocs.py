"""docs/hooks.md is generated from the hook specs and must not go stale."""

from __future__ import annotations

from pathlib import Path

from rlhooks.cli import main
from rlhooks.core.hookdocs import render_markdown
from rlhooks.core.hookspecs import HOOK_NAMES, RLHookSpecs

DOC = Path(__file__).resolve().parents[2] / "docs" / "hooks.md"


def test_docs_hooks_md_is_up_to_date() -> None:
    assert DOC.read_text(encoding="utf-8") == render_markdown(), (
        "docs/hooks.md is stale: regenerate it with `rlhooks hooks > docs/hooks.md`"
    )


def test_reference_has_every_hook_with_signature_arguments_returns_and_mutation_rules() -> None:
    text = render_markdown()
    for name in HOOK_NAMES:
        section = text.split(f"## {name}\n", 1)[1].split("\n## ", 1)[0]
        assert f"{name}(" in section and "**Returns:**" in section and "**Must not mutate:**" in section, name
        spec = getattr(RLHookSpecs, name)
        for arg in spec.__code__.co_varnames[1:spec.__code__.co_argcount]:
            assert f"- `{arg}` (" in section, f"{name}: argument {arg} is not documented"
    assert "``" not in text.replace("```", "")  # reST markup converted


def test_cli_prints_the_reference(capsys) -> None:
    assert main(["hooks"]) == 0
    assert capsys.readouterr().out == render_markdown()
