"""The house's layout: no import cycle between rlhooks' modules (of any length), the JSONL record
format is core's, and each command comes from its own module."""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

import pytest

import rlhooks

PACKAGE = Path(rlhooks.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """rlhooks modules a file imports anywhere in it (function-level imports included)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # "from pkg import submodule" depends on the submodule; "from pkg import name" on pkg
            subs = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in modules]
            names = subs if len(subs) == len(node.names) else [node.module, *subs]
        else:
            continue
        out.update(n for n in names if n in modules)
    return out


def _import_graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {m: _imports(p, set(files)) - {m} for m, p in files.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles_of_any_length():
    graph = _import_graph()
    assert _cycles(graph) == []
    # the ones this test was written for (lazy, function-level imports count too)
    assert "rlhooks.engines.sim.cli" not in graph["rlhooks.engines.sim.compare"]
    assert "rlhooks.core.manager" not in graph["rlhooks.core.dispatch"]
    assert "rlhooks.engines.verl.cli" not in graph["rlhooks.engines.verl.main"]


def test_the_verl_engine_imports_no_private_name_of_another_module():
    """Issue 39: the V1 modules reached into the shared adapter's and the reward adapter's private helpers
    (``_decoder``, ``_names``, ...); what one module of the verl engine uses of another is that module's public
    name, so a change to a private helper is local to its module."""
    found = []
    for path in sorted((PACKAGE / "engines" / "verl").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("rlhooks")):
                found += [f"{path.relative_to(PACKAGE)}:{node.lineno} {node.module}.{a.name}" for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")]
    assert found == []


def test_the_cycle_finder_finds_long_cycles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e2"}, "e2": set()}
    assert _cycles(graph) == [["a", "b", "c"]]


def test_the_record_format_is_cores_and_its_readers_import_it_from_there():
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    # plugins reach it through the plugin API (rlhooks re-exports core.records), hosts directly
    for reader, via in (("rlhooks.report.reader", "rlhooks.core.records"),
                        ("rlhooks.monitoring.analyzer", "rlhooks"),
                        ("rlhooks.plugins.backends.jsonl", "rlhooks")):
        deps = _imports(files[reader], set(files))
        assert via in deps, reader
        assert "rlhooks.plugins.backends.jsonl" not in deps, reader
    assert rlhooks.read_records is rlhooks.core.records.read_records
    core = [m for m in files if m.startswith("rlhooks.core.")]
    assert not any(d.startswith(("rlhooks.plugins", "rlhooks.engines")) for m in core for d in _imports(files[m], set(files)))


def _commands(*modules) -> set[str]:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    for mod in modules:
        mod.add_parser(sub)
    return set(sub.choices)


def test_report_is_its_own_command_module_not_the_simulators():
    from rlhooks import cli, cli_report
    from rlhooks.engines.sim import cli as sim_cli

    assert _commands(sim_cli) == {"simulate"}
    assert _commands(cli_report) == {"report"}
    assert "rlhooks.cli_report" in cli.COMMAND_MODULES
    assert {"simulate", "report", "plugins", "config"} <= set(cli.build_parser()._subparsers._group_actions[0].choices)


#: private names of pluggy's objects (PluginManager, HookCaller, HookImpl, HookRelay)
_PLUGGY_PRIVATE = {"_name2plugin", "_plugin_distinfo", "_hookexec", "_inner_hookexec", "_hookimpls",
                   "_call_history", "_nonwrapper_impls", "_wrapper_impls", "_verify_hook", "_multicall",
                   "_add_hookimpl", "_plugin2hookcallers", "_traced_hookexec"}


def _private_api_uses(tree: ast.AST) -> set[str]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ("pluggy", "threading"):
            if any(part.startswith("_") for part in node.module.split(".")[1:]):
                found.add(f"from {node.module} import")
            found.update(f"{node.module}.{a.name}" for a in node.names if a.name.startswith("_"))
        elif isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id in ("pluggy", "threading", "atexit") \
                    and node.attr.startswith("_"):
                found.add(f"{node.value.id}.{node.attr}")
            elif node.attr in _PLUGGY_PRIVATE:
                found.add(f"._{node.attr.lstrip('_')}")
    return found


def test_pluggy_and_threading_are_used_through_their_public_api_everywhere():
    uses = {str(p.relative_to(PACKAGE.parent)): _private_api_uses(ast.parse(p.read_text(encoding="utf-8")))
            for p in PACKAGE.rglob("*.py")}
    assert {f: u for f, u in uses.items() if u} == {}
    # the scanner sees what it is for
    bad = ast.parse("import threading, pluggy\nthreading._register_atexit(f)\npm._name2plugin\n"
                    "from pluggy._hooks import HookImpl\n")
    assert _private_api_uses(bad) == {"threading._register_atexit", "._name2plugin", "from pluggy._hooks import"}


DOCS = PACKAGE.parent / "docs"


def test_the_architecture_page_names_every_module_of_the_tree():
    readme = (DOCS / "explanation" / "architecture.md").read_text(encoding="utf-8")
    start = readme.index("# Architecture\n")
    tree = readme[start:readme.index("```", readme.index("```", start) + 3)]
    names = [p.name for p in PACKAGE.glob("*.py")] + [p.name for p in (PACKAGE / "core").glob("*.py")
                                                       if p.name != "__init__.py"]
    names += [f"{p.name}/" for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()]
    names += [f"{p.name}/" for p in (PACKAGE / "engines").iterdir() if (p / "__init__.py").exists()]
    names += [f"{p.name}/" for p in (PACKAGE / "plugins").iterdir() if (p / "__init__.py").exists()]
    for engine in ("sim", "verl"):
        names += [p.name for p in (PACKAGE / "engines" / engine).glob("*.py") if p.name != "__init__.py"]
    missing = sorted(n for n in names if n not in tree)
    assert missing == [], f"docs/explanation/architecture.md does not name {missing}"


def test_the_data_flow_pages_rollout_table_lists_the_protocols_operations():
    import re

    from rlhooks.host import Rollout

    readme = (DOCS / "explanation" / "data-flow.md").read_text(encoding="utf-8")
    table = readme[readme.index("| Rollout op |"):]
    table = table[:table.index("\n\n")]
    documented = set(re.findall(r"`(\w+)\(", table))
    # an optional operation is not on the protocol; the driver looks it up on the engine's Rollout
    optional = set(re.findall(r"^\| `(\w+)\([^`]*\)` \(optional\)", table, flags=re.M))
    ops = {n for n, v in vars(Rollout).items() if callable(v) and not n.startswith("_")}
    assert documented - optional == ops
    driver = (Path(rlhooks.__file__).parent / "core" / "driver.py").read_text(encoding="utf-8")
    assert optional and all(f'"{op}"' in driver for op in optional)


def test_the_plugin_guide_lists_the_host_surface():
    import rlhooks.host

    readme = (DOCS / "how-to" / "write-plugins.md").read_text(encoding="utf-8")
    start = readme.index("Hosts and engines (code that builds and drives runs) import from `rlhooks.host`")
    paragraph = readme[start:readme.index("\n\n", start)]
    missing = [n for n in rlhooks.host.__all__ if f"`{n}`" not in paragraph]
    assert missing == []


#: verl's legacy trainer and all that exists only for it: its code, its tests; and the one entry naming it
LEGACY_FOLDERS = ("rlhooks/engines/verl/legacy", "tests/verl/legacy")
LEGACY_ENTRY = ("rlhooks/engines/verl/trainers.py", '{"legacy": "rlhooks.engines.verl.legacy"}', "{}")
_MODULE_PATH = re.compile(r"^(?:pkg://)?((?:rlhooks|tests)(?:\.\w+)+)(?::\w+)?$")


def _references(root: Path) -> dict[str, set[str]]:
    """Every module of rlhooks/ and tests/ under ``root`` -> the modules it imports (absolute or relative,
    anywhere in it) or names in a string that is a module path (``importlib``, ``pkg://``, Ray hooks)."""
    out: dict[str, set[str]] = {}
    for path in sorted([*(root / "rlhooks").rglob("*.py"), *(root / "tests").rglob("*.py")]):
        parts = path.relative_to(root).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        package = parts[:-1]
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or "" if not node.level else ".".join(
                    [*package[:len(package) - node.level + 1], *([node.module] if node.module else [])])
                names.add(base)
                names.update(f"{base}.{a.name}" for a in node.names)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _MODULE_PATH.match(node.value):
                names.add(_MODULE_PATH.match(node.value).group(1))
        out[module] = names
    return out


def _legacy_reached_from_outside(root: Path) -> dict[str, set[str]]:
    legacy = tuple(f.replace("/", ".") for f in LEGACY_FOLDERS)
    inside = lambda m: any(m == p or m.startswith(p + ".") for p in legacy)  # noqa: E731
    return {m: {d for d in deps if inside(d)} for m, deps in _references(root).items()
            if not inside(m) and m != __name__ and any(inside(d) for d in deps)}  # this test names them


def test_the_legacy_trainer_is_one_folder_of_code_one_of_tests_and_one_entry():
    """Issue 39: verl's legacy trainer, its CPU learner, its adapter and its tests are deleted by deleting
    LEGACY_FOLDERS and the trainers.REMOVABLE entry: nothing else imports or names them, tests included
    (a lazy import, an importlib or pkg:// string counts)."""
    root = PACKAGE.parent
    assert _legacy_reached_from_outside(root) == {"rlhooks.engines.verl.trainers": {"rlhooks.engines.verl.legacy"}}
    entry_file, entry, _ = LEGACY_ENTRY
    assert entry in (root / entry_file).read_text(encoding="utf-8")
    # the scanner sees the ways in: relative, lazy and string imports
    refs = _references(root)
    assert "tests.verl.verl_shim_helpers" in refs["tests.verl.legacy.legacy_helpers"]
    assert "tests.verl.legacy.cluster_standins" in refs["tests.verl.legacy.test_verl_ray_cluster"]
    assert "rlhooks.engines.verl.legacy.cpu_trainer" in refs["rlhooks.engines.verl.legacy.cpu_runner"]


def delete_legacy(root: Path) -> None:
    """What the commit deleting the legacy trainer does (docs/DEVELOPMENT.md, issue 39 layout)."""
    import shutil

    for folder in LEGACY_FOLDERS:
        shutil.rmtree(root / folder)
    entry_file, entry, replacement = LEGACY_ENTRY
    text = (root / entry_file).read_text(encoding="utf-8")
    assert entry in text
    (root / entry_file).write_text(text.replace(entry, replacement), encoding="utf-8")


@pytest.mark.slow  # a copy of the tree, its imports, pytest's collection of every test there (~90 s) and 4 tests
def test_deleting_the_legacy_folders_and_entry_leaves_everything_else_importing_and_collecting(tmp_path):
    import os
    import shutil
    import subprocess
    import sys

    root = PACKAGE.parent
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=root,
                            capture_output=True, check=True).stdout.decode().split("\0")
    copy = tmp_path / "tree"
    for name in filter(None, listed):
        if (root / name).is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / name, copy / name)
    delete_legacy(copy)
    assert _legacy_reached_from_outside(copy) == {}
    assert not any("legacy" in d for m, deps in _references(copy).items() if m != __name__ for d in deps
                   if d.startswith("rlhooks.engines"))
    env = {**os.environ, "PYTHONPATH": str(copy)}
    imports = ("import rlhooks.engines.verl as v, rlhooks.engines.verl.main, rlhooks.engines.verl.compat as c, "
               "rlhooks.engines.verl.cpu.runner, rlhooks.engines.sim, rlhooks.host; "
               "assert v.__file__.startswith(%r) and 'legacy' not in c.TRAINERS; print('ok')" % str(copy))
    done = subprocess.run([sys.executable, "-c", imports], cwd=copy, env=env, capture_output=True, text=True)
    assert done.stdout.strip() == "ok", done.stderr[-3000:]
    # one pytest: it collects every test there (no module may fail to import) and runs, of them, the layout tests
    # but this and the one above (about the folders: the deleting commit deletes them too) and three that name
    # the legacy trainer's absence (one interpreter: collecting and then running in another cost ~20 s more)
    named = ["tests/verl/test_verl_main.py::test_an_rlhooks_without_the_legacy_trainer_refuses_use_v1_false_by_name",
             "tests/verl/test_checkpoints.py::test_a_garbled_rlhooks_state_is_one_error_naming_it",
             "tests/verl/test_verl_compat.py::test_installed_verl_matches_its_recorded_fingerprint"]
    folders = ("test_the_legacy_trainer_is_one_folder", "test_deleting_the_legacy")
    defined = re.findall(r"^def (test_\w+)", Path(__file__).read_text(), re.MULTILINE)
    layout = [f"tests/core/test_layout.py::{name}" for name in defined if not name.startswith(folders)]
    chosen = " or ".join(["(test_layout.py and not legacy_trainer_is_one_folder and not deleting_the_legacy)",
                          *(n.split("::")[1] for n in named)])
    ran = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-k", chosen, "tests"],
                         cwd=copy, env=env, capture_output=True, text=True, timeout=900)
    lines = ran.stdout.strip().splitlines()
    assert ran.returncode == 0 and not [line for line in lines if line.startswith("ERROR")], ran.stdout[-3000:]
    passed = {line.split()[1].split("[")[0] for line in lines if line.startswith("PASSED ")}  # the ids less params
    assert passed == {*layout, *named}, sorted(passed ^ {*layout, *named})  # each ran and passed, nothing else


#: what the monitoring library may import: the plugin API (``rlhooks``), core, rlhooks' logging, itself
MONITORING_MAY_IMPORT = ("rlhooks", "rlhooks.core", "rlhooks.logging", "rlhooks.monitoring")
#: the library's old home (issue 39), each a deprecation alias of the moved module
MONITORING_OLD_PATHS = {f"rlhooks.plugins.rewards.{n}": f"rlhooks.monitoring.{n}" for n in ("alerts", "analyzer", "stats")}


def test_the_monitoring_library_is_a_package_below_the_plugins():
    """Issue 39: reward monitoring is its own package, importing nothing above it (plugins, engines, the
    dashboard, reports, the CLI); the reward_monitor plugin and the dashboard use it from there, and
    nothing in rlhooks uses its old path."""
    graph = _import_graph()
    library = [m for m in graph if m == "rlhooks.monitoring" or m.startswith("rlhooks.monitoring.")]
    assert set(library) >= {"rlhooks.monitoring", *MONITORING_OLD_PATHS.values()}
    above = {m: sorted(d for d in graph[m] if not any(d == a or d.startswith(a + ".") for a in MONITORING_MAY_IMPORT[1:])
                       and d != "rlhooks") for m in library}
    assert {m: d for m, d in above.items() if d} == {}
    assert not any(d.startswith("rlhooks.monitoring") for m in graph for d in graph[m]
                   if m.startswith("rlhooks.core.") or m == "rlhooks")
    users = {m for m in graph if m not in library and any(d.startswith("rlhooks.monitoring") for d in graph[m])}
    assert {"rlhooks.plugins.rewards.monitor", "rlhooks.dashboard.app"} <= users
    old_users = {m: graph[m] & set(MONITORING_OLD_PATHS) for m in graph if m not in MONITORING_OLD_PATHS}
    assert {m: d for m, d in old_users.items() if d} == {}
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    for old, new in MONITORING_OLD_PATHS.items():  # an alias: imports its new module and nothing else
        assert graph[old] == {new}, old
        assert "DeprecationWarning" in files[old].read_text(encoding="utf-8"), old
