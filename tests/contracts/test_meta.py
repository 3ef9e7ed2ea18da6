"""Meta-tests: every hook spec has a contract class, a complete docstring and a row in the hook table."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from rlhooks.core import hookspecs
from rlhooks.core.hookspecs import HOOK_NAMES
from rlhooks.core.registry import GROUPS
from rlhooks.testing import COMPONENT_CONTRACTS, HOOK_CONTRACTS, HookPluginContract
from rlhooks.testing.checks import spec_argnames

ROOT = Path(__file__).resolve().parents[2]
SPEC_METHODS = sorted(
    n for n, f in vars(hookspecs.RLHookSpecs).items() if callable(f) and hasattr(f, "rlhooks_spec")
)


def test_hook_names_match_the_spec_class() -> None:
    assert sorted(HOOK_NAMES) == SPEC_METHODS, "HOOK_NAMES and the @hookspec methods of RLHookSpecs differ"


@pytest.mark.parametrize("hook", SPEC_METHODS)
def test_every_hook_spec_has_a_contract(hook: str) -> None:
    contract = HOOK_CONTRACTS.get(hook)
    assert contract is not None, f"hook {hook!r} has no contract class in rlhooks.testing (HOOK_CONTRACTS)"
    checks = [n for n in vars(contract) if n.startswith(f"test_{hook}_")]
    assert len(checks) >= 2, f"{contract.__name__} has {len(checks)} checks named test_{hook}_*; it needs real checks"
    assert issubclass(HookPluginContract, contract), f"HookPluginContract does not include {contract.__name__}"


def test_every_component_kind_has_a_contract() -> None:
    assert set(COMPONENT_CONTRACTS) == set(GROUPS), (
        f"component kinds {sorted(GROUPS)} vs contracts {sorted(COMPONENT_CONTRACTS)}"
    )


@pytest.mark.parametrize("hook", SPEC_METHODS)
def test_every_hook_spec_docstring_is_complete(hook: str) -> None:
    """Fires (when), Arguments (each one, with a type), Returns, Must not mutate."""
    doc = inspect.getdoc(getattr(hookspecs.RLHookSpecs, hook)) or ""
    assert doc.startswith("Fires "), f"{hook}: the docstring must start by saying when it fires ('Fires ...')"
    args = spec_argnames()[hook]
    if args:
        assert "Arguments:" in doc, f"{hook}: no 'Arguments:' section"
        for arg in args:
            assert re.search(rf"^\s*{arg} \([^)]+\):", doc, re.M), f"{hook}: argument {arg!r} is not documented as '{arg} (type): ...'"
    assert re.search(r"^Returns: \S", doc, re.M), f"{hook}: no 'Returns:' line"
    assert re.search(r"^Must not mutate: \S", doc, re.M), f"{hook}: no 'Must not mutate:' line"


def _hook_table(text: str) -> dict[str, str] | None:
    """Rows of the first markdown table whose header's first cell is 'hook': {hook name: row}."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        cells = [c.strip().lower() for c in line.strip().strip("|").split("|")]
        if line.lstrip().startswith("|") and cells and cells[0] == "hook":
            rows = {}
            for row in lines[i + 2:]:
                if not row.lstrip().startswith("|"):
                    break
                first = row.strip().strip("|").split("|")[0].strip().strip("`")
                rows[first] = row
            return rows
    return None


def hook_table_source() -> tuple[Path, dict[str, str]]:
    """The hook table of the plugin-writing guide (docs/how-to/write-plugins.md)."""
    path = ROOT / "docs" / "how-to" / "write-plugins.md"
    table = _hook_table(path.read_text(encoding="utf-8"))
    if table is None:
        pytest.fail(f"no hook table ('| hook | ...') in {path.relative_to(ROOT)}")
    return path, table


@pytest.mark.parametrize("hook", SPEC_METHODS)
def test_every_hook_is_in_the_readme_hook_table(hook: str) -> None:
    path, table = hook_table_source()
    assert hook in table, f"hook {hook!r} has no row in the hook table of {path.relative_to(ROOT)}"
    for arg in spec_argnames()[hook]:
        assert re.search(rf"\b{arg}\b", table[hook]), f"{path.name}: the {hook} row does not mention argument {arg!r}"


def test_hook_table_lists_no_unknown_hooks() -> None:
    path, table = hook_table_source()
    unknown = set(table) - set(HOOK_NAMES)
    assert not unknown, f"{path.name} documents hooks that do not exist: {sorted(unknown)}"


# -- dependency direction (DESIGN.md): plugins -> core, engines -> core; hookimpl from rlhooks only ----------


def _imports(path: Path) -> set[str]:
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def _offenders(files: list[Path], banned: tuple[str, ...]) -> list[str]:
    return sorted(
        f"{p.relative_to(ROOT)}: {m}" for p in files for m in _imports(p)
        if any(m == b or m.startswith(b + ".") for b in banned)
    )


def test_core_imports_no_plugin_engine_or_logging_service() -> None:
    core = sorted((ROOT / "rlhooks" / "core").glob("*.py"))
    assert core
    bad = _offenders(core, ("rlhooks.plugins", "rlhooks.engines", "rlhooks.report", "verl", "wandb", "tensorboard"))
    assert not bad, "core must find plugins through entry points and import no engine or service:\n  " + "\n  ".join(bad)


def test_only_the_verl_engine_imports_verl() -> None:
    files = [p for p in (ROOT / "rlhooks").rglob("*.py") if "engines/verl" not in p.as_posix()]
    bad = _offenders(files, ("verl",))
    assert not bad, "only rlhooks/engines/verl may import verl:\n  " + "\n  ".join(bad)


def test_plugins_do_not_import_pluggy() -> None:
    files = [*(ROOT / "rlhooks" / "plugins").rglob("*.py"), *(ROOT / "examples").rglob("*.py")]
    assert files
    bad = _offenders(files, ("pluggy",))
    assert not bad, "plugins import hookimpl from rlhooks, never from pluggy:\n  " + "\n  ".join(bad)
