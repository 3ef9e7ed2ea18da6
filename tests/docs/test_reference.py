"""The site's reference is the code's: generated pages are current, and a hook, built-in component,
option or CLI flag missing from the reference fails here. The strict site build is a slow test (and a
CI step)."""

from __future__ import annotations

import argparse
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import attrs
import pytest
import yaml

from .pages import DOCS, ROOT, page, section


def _generator():
    spec = importlib.util.spec_from_file_location("docs_gen_reference", DOCS / "gen_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GEN = _generator()
STALE = "is stale: regenerate the reference with `make docs` (python docs/gen_reference.py)"


def test_components_page_is_current() -> None:
    assert page("reference/components.md") == GEN.render_components(), f"docs/reference/components.md {STALE}"


def test_cli_page_is_current() -> None:
    current = page("reference/cli.md")
    assert current == GEN.cli_page(current), f"docs/reference/cli.md {STALE}"


@pytest.mark.slow  # four short simulated runs, ~3 s
def test_metrics_page_is_current(tmp_path: Path) -> None:
    assert page("reference/metrics.md") == GEN.render_metrics(tmp_path), f"docs/reference/metrics.md {STALE}"


def test_every_hook_is_in_the_hook_reference() -> None:
    from rlhooks.core.hookspecs import HOOK_NAMES

    text = page("hooks.md")
    assert [h for h in HOOK_NAMES if f"\n## {h}\n" not in text] == []


def _builtins():
    from rlhooks.core.components import options_class
    from rlhooks.core.registry import BUILTIN_DIST, Registry

    registry = Registry(disabled=[])
    for entry in registry.entries():
        if entry.dist == BUILTIN_DIST:
            yield entry.kind, entry.name, options_class(entry.load())


def components_missing(text: str) -> list[str]:
    """Built-ins (any of their names) and options of theirs that the components page lacks."""
    sections = {m.group(1) for m in re.finditer(r"(?m)^### (\S+)$", text)}
    missing = []
    for kind, name, options in _builtins():
        # a name is a section of its own or an alias listed under one
        home = name if name in sections else next(
            (s for s in sections if re.search(rf"\(also: [^)]*`{re.escape(name)}`", section(text, f"### {s}"))), None)
        if home is None:
            missing.append(f"{kind} {name}")
        elif options is not None:
            body = section(text, f"### {home}")
            missing += [f"{kind} {name}: option {f.name}" for f in attrs.fields(options)
                        if not f.name.startswith("_") and f"| `{f.name}` |" not in body]
    return missing


def test_every_builtin_and_each_option_is_in_the_components_reference() -> None:
    missing = components_missing(page("reference/components.md"))
    assert missing == [], f"missing from docs/reference/components.md ({STALE}): {missing}"


def test_the_run_and_simulate_sections_are_in_the_components_reference() -> None:
    from rlhooks.core.config.schema import RunOptions
    from rlhooks.engines.sim.engine import SimOptions

    text = page("reference/components.md")
    for heading, cls in (("## The `run:` section", RunOptions), ("## The `simulate:` section", SimOptions)):
        body = section(text, heading)
        assert [f.name for f in attrs.fields(cls) if f"| `{f.name}` |" not in body] == [], heading


def _commands(parser: argparse.ArgumentParser, path: str = "rlhooks"):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, f"{path} {name}")


def test_every_command_and_flag_is_in_the_cli_reference() -> None:
    from rlhooks.cli import build_parser

    text = page("reference/cli.md")
    missing = []
    for path, parser in _commands(build_parser()):
        heading = f"### `{path}`"
        if heading + "\n" not in text:
            missing.append(path)
            continue
        body = section(text, heading)
        missing += [f"{path} {o}" for a in parser._actions for o in a.option_strings
                    if o not in ("-h", "--help") and f"`{o}`" not in body]
    assert missing == [], f"missing from docs/reference/cli.md ({STALE}): {missing}"


def test_the_completeness_check_notices_a_missing_option_and_component() -> None:
    text = page("reference/components.md")
    body = section(text, "### dapo")
    without_option = text.replace(body, "\n".join(line for line in body.splitlines() if "| `min_mean` |" not in line))
    assert components_missing(without_option) == ["filter dapo: option min_mean", "filter filter_groups: option min_mean"]
    without_component = text.replace(section(text, "### jsonl"), "")
    assert components_missing(without_component) == ["backend jsonl"]


def _nav_pages(nav) -> list[str]:
    out = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        out += _nav_pages(value) if isinstance(value, list) else [value]
    return out


def test_every_page_is_in_the_navigation_and_every_nav_entry_exists() -> None:
    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=yaml.BaseLoader)
    nav = set(_nav_pages(config["nav"]))
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert nav == pages


@pytest.mark.slow
def test_the_site_builds_strictly_and_a_broken_link_fails_it(tmp_path: Path) -> None:
    """`mkdocs build --strict` (the CI step): no warning, so no broken link, anchor or API reference."""
    pytest.importorskip("mkdocs", reason="the [docs] extra is not installed: pip install -e '.[docs]'")
    build = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")]
    res = subprocess.run(build + ["-f", str(ROOT / "mkdocs.yml")], capture_output=True, text=True,
                         env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "site" / "reference" / "components" / "index.html").exists()
    api = (tmp_path / "site" / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    assert "RunManager" in api and "hookimpl" in api  # mkdocstrings rendered the API
    # the same build over a copy with one broken anchor must fail
    copy = tmp_path / "copy"
    shutil.copytree(DOCS, copy / "docs")
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    tutorial = copy / "docs" / "tutorial.md"
    tutorial.write_text(tutorial.read_text(encoding="utf-8") + "\nSee [nowhere](how-to/dapo.md#no-such-section).\n")
    res = subprocess.run(build[:-2] + ["--site-dir", str(tmp_path / "site2"), "-f", str(copy / "mkdocs.yml")],
                         capture_output=True, text=True, cwd=ROOT, env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"})
    assert res.returncode != 0 and "no-such-section" in res.stderr


def _github_slug(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def readme_link_problems(text: str) -> list[str]:
    """Relative links of the README whose file or heading anchor does not exist."""
    problems = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if target.startswith(("http:", "https:", "#")):
            continue
        path, _, anchor = target.partition("#")
        file = ROOT / path
        if not file.exists():
            problems.append(f"{target}: no file {path}")
        elif anchor and file.suffix == ".md":
            headings = re.findall(r"(?m)^#+ (.+)$", file.read_text(encoding="utf-8"))
            if anchor not in {_github_slug(h) for h in headings}:
                problems.append(f"{target}: no heading #{anchor} in {path}")
    return problems


def test_the_readme_is_a_door_whose_links_lead_into_the_site() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300, "the README is the door: move details into a page of docs/"
    assert readme_link_problems(text) == []
    assert "docs/reference/components.md" in text  # any built-in's options, one click away
    assert readme_link_problems("[x](docs/tutorial.md#no-such-heading) [y](docs/nope.md)") == [
        "docs/tutorial.md#no-such-heading: no heading #no-such-heading in docs/tutorial.md",
        "docs/nope.md: no file docs/nope.md"]


def test_every_error_class_of_the_plugin_api_is_on_the_errors_page() -> None:
    import rlhooks

    errors = {n for n in rlhooks.__all__ if isinstance(getattr(rlhooks, n), type)
              and issubclass(getattr(rlhooks, n), Exception)} | {"ConfigIssue"}
    text = page("reference/errors.md")
    rendered = set(re.findall(r"(?m)^        - (\w+)$", text)) | {m.split(".")[-1] for m in re.findall(r"(?m)^::: ([\w.]+)$", text)}
    assert errors - rendered == set()


def plugin_api_snapshot() -> str:
    """The documented plugin API in one text: what the changelog page says it is current with."""
    import inspect

    import rlhooks
    import rlhooks.host
    import rlhooks.testing
    from rlhooks.core.hookspecs import HOOK_NAMES, RLHookSpecs
    from rlhooks.core.registry import GROUPS

    hooks = [f"{h}({', '.join(p for p in inspect.signature(getattr(RLHookSpecs, h)).parameters if p != 'self')})"
             for h in HOOK_NAMES]
    return "\n".join([
        "hooks: " + "; ".join(hooks),
        "entry-point groups: " + ", ".join(f"{k}={v}" for k, v in GROUPS.items()),
        "rlhooks: " + ", ".join(sorted(rlhooks.__all__)),
        "rlhooks.host: " + ", ".join(sorted(rlhooks.host.__all__)),
        "rlhooks.testing: " + ", ".join(sorted(rlhooks.testing.__all__)),
    ]) + "\n"


def test_the_changelog_is_current_with_the_plugin_api() -> None:
    text = page("changelog.md")
    block = section(text, "## The API this page is current with")
    recorded = block[block.index("```text\n") + 8:block.rindex("```")]
    assert recorded == plugin_api_snapshot(), (
        "the plugin API changed: add an entry to docs/changelog.md saying what changed and how a plugin "
        "migrates, then replace the block under 'The API this page is current with' with:\n"
        + plugin_api_snapshot())
