"""Drift against verl: the supported range at start-up, and a fingerprint of the verl code the shim relies on."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("verl.trainer.ppo.ray_trainer", reason="needs verl[verl-core]")

from rlhooks.cli import main as rlhooks_main  # noqa: E402
from rlhooks.engines.verl import compat, trainers  # noqa: E402

pytestmark = pytest.mark.verl
SHIM = Path(compat.__file__).parent
#: the reviewed verl the installed one matches ("0.9.1" from PyPI; verl main's label where it is installed from
#: source): the suite runs on each supported verl (docs/how-to/verl.md, "Supported verl versions")
INSTALLED = compat.compare(compat.fingerprints())[1]


def test_installed_verl_matches_its_recorded_fingerprint():
    version = compat.installed_verl_version()
    same_as, _, _ = compat.compare(compat.fingerprints())
    known = compat.recorded().get(same_as[0] if same_as else version)  # a source install's label names its commit
    assert known is not None, (
        f"no fingerprints recorded for the installed verl {version}: review the rlhooks trainers (engines/verl/v1/, legacy/) against "
        f"this verl's RayPPOTrainer.fit() and the members in compat.RELIED_ON, then run `{compat.RECORD_COMMAND}`"
    )
    now = compat.fingerprints()
    # now: every member rlhooks relies on (a deleted trainer's recorded members are no longer compared)
    changed = sorted(n for n in now if now[n] != known.get(n, "not recorded"))
    assert not changed, (
        f"verl {version} code the rlhooks trainer restates or calls changed since it was reviewed: {changed}. "
        f"Diff each against the reviewed version, port the change into the rlhooks trainer relying on it (legacy/trainer.py restates fit() "
        f"restated there step by step), then run `{compat.RECORD_COMMAND}`"
    )
    # absent only where a supported verl lacks it (read with getattr), as recorded
    assert {n for n, v in now.items() if v == "missing"} <= compat.VERSION_DEPENDENT


def test_a_changed_member_is_named_and_refused_unless_opted_in(monkeypatch):
    real = compat.fingerprints()
    name = "verl.trainer.ppo.v1.trainer_base:PPOTrainer.fit"
    monkeypatch.setattr(compat, "fingerprints", lambda trainer=None, source=None: {**real, name: "0" * 16})
    assert compat.compare(compat.fingerprints()) == ([], INSTALLED, [name])
    assert compat.main([]) == 1
    monkeypatch.delenv(compat.ALLOW_ENV, raising=False)
    for version in ("0.9.1", "0.10.0"):  # in the tested range or not: the code decides
        with pytest.raises(compat.UnsupportedVerlError, match=rf"verl {version}: the verl code the rlhooks trainer "
                                                              rf"relies on differs .*changed since verl {re.escape(INSTALLED)}: {name}"):
            compat.check_verl(version)
    monkeypatch.setenv(compat.ALLOW_ENV, "1")
    assert compat.check_verl("0.10.0") == "0.10.0"  # a warning instead


@pytest.mark.parametrize("version", ["0.9.1", "0.9.2", "0.10.0.dev0", "0.10.0", "1.0.0", "not-a-version"])
def test_matching_fingerprints_run_whatever_the_version(version, monkeypatch, capsys):
    monkeypatch.delenv(compat.ALLOW_ENV, raising=False)
    assert compat.check_verl(version) == version
    out = "".join(capsys.readouterr())
    if compat.in_tested_range(version):
        assert "outside the tested range" not in out
    else:
        assert f"verl {version} is outside the tested range >=0.9.1,<0.10" in out and "fingerprints match" in out


def test_the_pin_allows_the_next_minor_that_fingerprints_decide():
    import tomllib

    pyproject = tomllib.loads((SHIM.parents[2] / "pyproject.toml").read_text())
    verl_extra = pyproject["project"]["optional-dependencies"]["verl"]
    assert [r for r in verl_extra if r.startswith("verl")] == ["verl[verl-core]>=0.9.1,<0.11"]
    # the CPU learner's own (verl needs them too): engines/verl/cpu
    assert sorted(r.split(">")[0] for r in verl_extra if not r.startswith("verl")) == ["tokenizers", "transformers"]


def test_rlhooks_train_refuses_changed_verl_code_at_start(monkeypatch, capsys):
    monkeypatch.delenv(compat.ALLOW_ENV, raising=False)
    real = compat.fingerprints()
    name = "verl.protocol:DataProto.select_idxs"
    monkeypatch.setattr(compat, "fingerprints", lambda trainer=None, source=None: {**real, name: "missing"})
    assert rlhooks_main(["train", "--dry-run"]) == 1
    err = capsys.readouterr().err
    assert f"changed since verl {INSTALLED}: {name}" in err
    assert "Traceback" not in err and "AttributeError" not in err
    monkeypatch.setattr(compat, "installed_verl_version", lambda: None)
    assert rlhooks_main(["train", "--dry-run"]) == 1
    assert "verl is not installed" in capsys.readouterr().err


def test_config_defaults_are_fingerprinted_like_code(monkeypatch):
    """verl main's algorithm.filter_groups.metric default is null (0.9.1: reward): a changed default the
    rlhooks mapping relies on is refused at start-up, named like a changed member."""
    monkeypatch.delenv(compat.ALLOW_ENV, raising=False)
    defaults = compat.config_defaults("v1")
    default = {"0.9.1": '"reward"', compat.MAIN_LABEL: "null"}[INSTALLED]
    assert defaults["config:algorithm.filter_groups.metric"] == default
    assert defaults["config:trainer.use_v1"] == "true" and defaults["config:trainer.v1.trainer_mode"] == '"sync"'
    changed = dict(defaults, **{"config:algorithm.filter_groups.metric": '"acc"'})
    monkeypatch.setattr(compat, "_config_defaults", lambda trainer, root: tuple(changed.items()))
    with pytest.raises(compat.UnsupportedVerlError,
                       match=rf"changed since verl {re.escape(INSTALLED)}: config:algorithm\.filter_groups\.metric\."):
        compat.check_verl("0.10.0.dev0", trainer="v1")


def test_every_verl_member_the_v1_trainer_overrides_is_fingerprinted():
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    from rlhooks.engines.verl.v1.replay_buffer import RLHooksReplayBuffer
    from rlhooks.engines.verl.v1.trainer import RLHooksPPOTrainerSync

    for ours, theirs, prefix in ((RLHooksPPOTrainerSync, PPOTrainer, "verl.trainer.ppo.v1.trainer_base:PPOTrainer."),
                                 (RLHooksReplayBuffer, ReplayBuffer, "verl.trainer.ppo.v1.replay_buffer:ReplayBuffer.")):
        overridden = {n for n in vars(ours) if n.startswith("_") and not n.startswith("__") and callable(getattr(theirs, n, None))}
        overridden |= {n for n in ("__init__", "fit", "sample") if n in vars(ours)}
        assert overridden and {prefix + n for n in overridden} <= set(compat.V1_RELIED_ON), overridden


# -- issue 39: fingerprints of the code (not its comments), any verl tree, every member touched ---------------

_FIT = "verl.trainer.ppo.v1.trainer_base:PPOTrainer.fit"


def _tree_with(tmp_path, edit):
    """A verl tree holding the installed verl's trainer_base.py, edited by ``edit`` (text -> text)."""
    installed = compat.SourceTree.installed()
    relative = Path("verl", "trainer", "ppo", "v1", "trainer_base.py")
    (tmp_path / "verl").mkdir(parents=True)
    (tmp_path / "verl" / "__init__.py").write_text("")
    target = tmp_path / relative
    target.parent.mkdir(parents=True)
    target.write_text(edit((installed.root / relative).read_text()))
    return compat.SourceTree(tmp_path)


def test_a_comment_docstring_or_formatting_change_does_not_count_a_code_change_does(tmp_path):
    """verl main's PPOTrainer.fit differs from 0.9.1's by one comment: the same fingerprint."""
    installed = compat.fingerprint_of(compat.SourceTree.installed().node(_FIT))
    cosmetic = _tree_with(tmp_path / "a", lambda text: text.replace(
        "        self.global_steps += 1\n",
        "        # a comment verl added\n\n        self.global_steps += (\n            1\n        )\n", 1).replace(
        '"""Run the PPO training loop', '"""Reworded docstring. Run the PPO training loop', 1))
    assert cosmetic.module("verl.trainer.ppo.v1.trainer_base") is not None
    assert compat.fingerprint_of(cosmetic.node(_FIT)) == installed
    changed = _tree_with(tmp_path / "b", lambda text: text.replace("self.global_steps += 1",
                                                                    "self.global_steps += 2", 1))
    assert compat.fingerprint_of(changed.node(_FIT)) != installed


def test_both_supported_verls_are_recorded_and_accepted_at_start(monkeypatch):
    """0.9.1 and verl main at the reviewed commit: each one's recorded fingerprints run; main differs from
    0.9.1 in the members docs/how-to/verl.md lists (reviewed there), its checkpoint callback absent."""
    monkeypatch.delenv(compat.ALLOW_ENV, raising=False)
    records = compat.recorded()
    assert set(records) == {"0.9.1", compat.MAIN_LABEL}
    main, released = records[compat.MAIN_LABEL], records["0.9.1"]
    assert set(main) == set(released) == set(compat.fingerprints())  # every member recorded for both
    differ = sorted(n for n in main if main[n] != released[n])
    docs = (SHIM.parents[2] / "docs" / "how-to" / "verl.md").read_text()
    assert differ and all(f"`{n.split(':', 1)[1]}`" in docs for n in differ if not n.startswith("config:")), differ
    assert main["verl.trainer.ppo.checkpoint_callback:build_checkpoint_callback"] == "missing"
    assert released["verl.trainer.ppo.v1.trainer_base:_tq_supports_checkpoint"] == "missing"
    assert main[_FIT] == released[_FIT]  # a comment apart
    for label, record in records.items():
        monkeypatch.setattr(compat, "fingerprints", lambda trainer=None, source=None, r=record: dict(r))
        assert compat.check_verl("0.10.0.dev", trainer="v1") == "0.10.0.dev", label


def test_the_compat_command_checks_a_verl_source_tree_by_member(tmp_path, capsys):
    """``--verl-source PATH``: what differs from the reviewed verls, one member a line (here a tree whose
    trainer_base.py changed fit and lacks the rest of verl)."""
    tree = _tree_with(tmp_path, lambda text: text.replace("self.global_steps += 1", "self.global_steps += 2", 1))
    (tmp_path / "verl" / "version").mkdir()
    (tmp_path / "verl" / "version" / "version").write_text("0.11.0.dev\n")
    assert tree.version() == "0.11.0.dev"
    assert compat.main(["--verl-source", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert f"verl 0.11.0.dev ({tmp_path})" in out and "differ from the nearest reviewed verl" in out
    assert f"  {_FIT}: changed\n" in out
    assert "  verl.protocol:DataProto.select_idxs: missing in this verl\n" in out
    assert f"--verl-source {tmp_path}" in out  # how to record it once reviewed
    assert compat.main(["--verl-source", str(tmp_path / "nowhere")]) == 1
    assert "holds no verl source tree" in capsys.readouterr().err
    assert compat.main([]) == 0 and f"matches reviewed verl {INSTALLED}" in capsys.readouterr().out


def _imported_verl_names(path: Path) -> set[str]:
    """``module:Name`` (and ``module:Name.attr`` for each attribute used on it) for each verl name a module imports."""
    import ast

    tree = ast.parse(path.read_text())
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "verl":
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}:{alias.name}"
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in names:
            used.add(f"{names[node.value.id]}.{node.attr}")
        elif isinstance(node, ast.Name) and node.id in names:
            used.add(names[node.id])
    return used


#: verl names rlhooks imports that are not verl code it relies on beyond what is fingerprinted
_IMPORTED_NOT_FINGERPRINTED = {
    "verl.protocol:DataProto": "a class: the methods used are fingerprinted (verl.protocol:DataProto.*)",
    "verl.trainer.ppo.utils:Role.Critic": "a member of the fingerprinted enum Role",
    "verl.trainer.main_ppo:TaskRunnerV1.__ray_metadata__": "Ray's (pinned with Ray): the class verl decorated; "
                                                          "TaskRunnerV1.run is fingerprinted",
    "verl.trainer.main_ppo:TaskRunnerV1.__ray_metadata__.modified_class": "as above",
    "verl.trainer.ppo.v1.trainer_base:get_metric_data_with_optional_routed_experts": (
        "read with getattr and wrapped only around verl's fingerprinted _compute_metrics, to keep what it returns: "
        "a verl without it, or one returning another length, leaves the per-token fields to be read (trainer.py)"),
}


def _as_member(name: str, source) -> str | None:
    """``module:sub.rest`` where ``module.sub`` is a module -> ``module.sub:rest``; None for a module itself."""
    module, _, dotted = name.partition(":")
    while dotted and source.module(f"{module}.{dotted.split('.')[0]}") is not None:
        head, _, dotted = dotted.partition(".")
        module = f"{module}.{head}"
    return f"{module}:{dotted}" if dotted else None


def test_every_verl_name_the_v1_path_imports_is_fingerprinted():
    """Every verl function, class member or constant the V1 path and main.py import (legacy/ has its own test)
    is fingerprinted (a class counts when it or the members used are), and every private verl name the CPU
    learner imports or edits (its registries, the current platform)."""
    relied, source = set(compat.RELIED_ON), compat.SourceTree.installed()
    uncovered = {}
    for path in sorted(SHIM.rglob("*.py")):
        if "legacy" in path.parts:
            continue
        for imported in _imported_verl_names(path):
            name = _as_member(imported.replace("verl:DataProto", "verl.protocol:DataProto"), source)  # re-exported
            if name is None or name in relied or name in _IMPORTED_NOT_FINGERPRINTED:
                continue  # a module, or fingerprinted
            if any(q.startswith(name + ".") for q in relied) or any(name.startswith(q + ".") for q in relied):
                continue  # a class whose used members are fingerprinted, or a member of a fingerprinted class
            if path.parent.name == "cpu" and not any(part.startswith("_") for part in name.split(":")[1].split(".")):
                continue  # the CPU learner: its private edits (CPU_LEARNER_RELIED_ON); its own tests check the rest
            uncovered.setdefault(name, []).append(path.name)
    assert not uncovered, f"fingerprint these in compat (or say why not in _IMPORTED_NOT_FINGERPRINTED): {uncovered}"


def _verl_members_touched(ours: type) -> tuple[set[str], set[str]]:
    """(verl methods ``ours`` overrides, re-binds or calls, as ``owner:Class.member``; verl instance attributes
    it reads or sets, as ``Class.attr`` of the verl class that sets them)."""
    import ast
    import inspect
    import sys
    import textwrap

    verl = [c for c in ours.__mro__ if c.__module__.startswith("verl.")]
    node = ast.parse(textwrap.dedent(inspect.getsource(ours))).body[0]
    names = {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    names |= {t.id for n in node.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    for n in ast.walk(node):
        if isinstance(n, ast.Attribute) and (
                (isinstance(n.value, ast.Name) and n.value.id == "self")
                or (isinstance(n.value, ast.Call) and getattr(n.value.func, "id", "") == "super")):
            names.add(n.attr)
    methods, attributes = set(), set()
    namespace = vars(sys.modules[ours.__module__])
    for n in node.body:  # re-binds: ``on_init_end = PPOTrainerSeparateAsync.on_init_end``
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Attribute) and isinstance(n.value.value, ast.Name):
            cls = namespace.get(n.value.value.id)
            owner = next((c for c in getattr(cls, "__mro__", ()) if n.value.attr in vars(c)), None)
            if owner is not None and owner.__module__.startswith("verl."):
                methods.add(f"{owner.__module__}:{owner.__qualname__}.{n.value.attr}")
    sources = {c: inspect.getsource(c) for c in verl}
    for name in names:
        owner = next((c for c in verl if name in vars(c)), None)
        if owner is not None and name not in ("__doc__", "__module__", "__qualname__"):
            methods.add(f"{owner.__module__}:{owner.__qualname__}.{name}")
            continue
        setter = next((c for c in verl if re.search(rf"self\.{re.escape(name)}\s*(:[^=\n]*)?=[^=]", sources[c])), None)
        if setter is not None:
            attributes.add(f"{setter.__qualname__}.{name}")
    return methods, attributes


def test_every_verl_member_the_v1_classes_touch_is_fingerprinted_async_included():
    """Each verl method the V1 trainers and replay buffers (sync and both async modes) override, re-bind
    (on_init_end = PPOTrainerSeparateAsync.on_init_end) or call, and each verl attribute they read or edit
    (the buffer's key-status sets, _dapo_classification_cache, ...) is covered: the member itself or its
    whole class fingerprinted; an attribute through the fingerprinted member that sets it (compat.ATTRIBUTES)."""
    import ast

    from rlhooks.engines.verl.v1.async_trainers import (RLHooksPPOTrainerColocateAsync, RLHooksPPOTrainerSeparateAsync,
                                                        RLHooksReplayBufferAsync)
    from rlhooks.engines.verl.v1.replay_buffer import RLHooksReplayBuffer
    from rlhooks.engines.verl.v1.trainer import RLHooksPPOTrainerSync

    relied, source = set(compat.V1_RELIED_ON), compat.SourceTree.installed()
    missing, unmapped = set(), set()
    for ours in (RLHooksPPOTrainerSync, RLHooksPPOTrainerColocateAsync, RLHooksPPOTrainerSeparateAsync,
                 RLHooksReplayBuffer, RLHooksReplayBufferAsync):
        methods, attributes = _verl_members_touched(ours)
        missing |= {m for m in methods if m not in relied and m.rsplit(".", 1)[0] not in relied}
        unmapped |= attributes - set(compat.ATTRIBUTES)
    assert not missing, f"fingerprint these in compat.V1_RELIED_ON: {sorted(missing)}"
    assert not unmapped, f"map these to the member that sets them in compat.ATTRIBUTES: {sorted(unmapped)}"
    for attribute, member in compat.ATTRIBUTES.items():
        assert member in relied, member
        assigns = [n for n in ast.walk(source.node(member)) if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign))]
        sets = {t.attr for n in assigns for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                if isinstance(t, ast.Attribute)}
        assert attribute.split(".")[1] in sets or attribute in compat.VERSION_DEPENDENT_ATTRIBUTES, (
            f"{member} no longer sets {attribute}")
    # what issue 39 found uncovered
    for name in ("verl.trainer.ppo.v1.trainer_separate_async:PPOTrainerSeparateAsync",
                 "verl.trainer.ppo.v1.replay_buffer:ReplayBuffer._validate_mode_config"):
        assert name in relied
    assert compat.ATTRIBUTES["ReplayBuffer._dapo_classification_cache"] == compat._BUFFER + "__init__"


# -- issue 39 item 3: no restated verl method ---------------------------------------------------------------

#: rlhooks methods that override a verl method without calling it, each saying why in a ``# not verl's:``
#: comment (docs/DEVELOPMENT.md, "Issue 39, restated methods and the step entry"); a trainers.REMOVABLE
#: package's are listed with its tests (tests/verl/legacy/test_legacy_compat.py)
NOT_CALLING_VERL = {
    "v1.trainer:RLHooksPPOTrainerSync._save_checkpoint",  # checkpoints.CheckpointWriter's order (issue 37)
    "v1.replay_buffer:RLHooksReplayBuffer._dapo_filtered_keys",  # verl's is DAPO's rule: the filters replace it
    "cpu.rollout_server:CPURolloutReplica.rollout_worker_use_gpu",  # another answer, nothing to call
}


def _verl_stub(fn) -> bool:
    """An abstract or empty verl method (``pass``, ``...``, ``raise NotImplementedError``): nothing to call."""
    import ast
    import inspect
    import textwrap

    if getattr(fn, "__isabstractmethod__", False):
        return True
    body = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0].body
    body = [s for s in body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    return len(body) == 1 and (isinstance(body[0], ast.Pass) or isinstance(body[0], ast.Expr)
                               or (isinstance(body[0], ast.Raise) and "NotImplementedError" in ast.unparse(body[0])))


def _calls_verl_always(fn, name: str) -> bool:
    """Whether ``fn`` reaches ``super().<name>`` (or ``<Class>.<name>``) on every path: in a statement of its
    body, or of a ``with``/``try`` in it, not under an ``if`` or a loop."""
    import ast
    import inspect
    import textwrap

    def statements(body):
        for stmt in body:
            if isinstance(stmt, (ast.With, ast.AsyncWith)):
                yield from statements(stmt.body)
            elif isinstance(stmt, ast.Try):
                yield from statements(stmt.body + stmt.finalbody)
            elif not isinstance(stmt, (ast.If, ast.For, ast.While, ast.FunctionDef, ast.ClassDef)):
                yield stmt

    node = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0]
    for stmt in statements(node.body):
        for sub in ast.walk(stmt):
            if isinstance(sub, ast.Attribute) and sub.attr == name and (
                    isinstance(sub.value, ast.Name) or (isinstance(sub.value, ast.Call)
                                                        and getattr(sub.value.func, "id", None) == "super")):
                return True
    return False


def _verl_overrides():
    """``(module:Class.method, function, verl's function)`` for each method an rlhooks engine class (mixins
    included) defines over a verl one, re-bound verl functions left out."""
    import importlib
    import inspect
    import pkgutil

    import rlhooks.engines.verl as package

    found = {}
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        module = importlib.import_module(info.name)
        for cls in vars(module).values():
            if not inspect.isclass(cls) or cls.__module__ != module.__name__:
                continue
            mro = cls.__mro__
            for ours in (c for c in mro if c.__module__.startswith("rlhooks.")):
                for name, value in vars(ours).items():
                    fn = value.fget if isinstance(value, property) else value
                    if not inspect.isfunction(fn) or name in ("__init_subclass__",):
                        continue
                    theirs = next((vars(c)[name] for c in mro[mro.index(ours) + 1:]
                                   if c.__module__.startswith("verl.") and name in vars(c)), None)
                    if not inspect.isfunction(theirs) or fn.__module__.startswith("verl."):
                        continue
                    key = f"{ours.__module__.removeprefix(package.__name__ + '.')}:{ours.__qualname__}.{name}"
                    found[key] = (fn, theirs)
    return found


#: the modules of trainers.REMOVABLE's packages, as _verl_overrides names them
_REMOVABLE = tuple(p.removeprefix("rlhooks.engines.verl.") + "." for p in trainers.REMOVABLE.values())


def not_calling_verl(overrides) -> set[str]:
    """The overrides that do not always call the verl method they override (a verl stub needs no call)."""
    return {key for key, (fn, theirs) in overrides.items()
            if not _verl_stub(theirs) and not _calls_verl_always(fn, key.rsplit(".", 1)[1])}


def test_each_override_of_a_verl_method_calls_it_or_says_why_not():
    import inspect

    overrides = _verl_overrides()
    assert {"v1.trainer:RLHooksPPOTrainerSync._init_dataloader", "v1.async_trainers:_AsyncHooks.on_step_begin",
            "v1.async_trainers:RLHooksReplayBufferAsync._stale_terminal_keys"} <= set(overrides)
    not_calling = {key for key in not_calling_verl(overrides) if not key.startswith(_REMOVABLE)}
    assert not_calling == set(NOT_CALLING_VERL), "call verl's method and adjust its result, or say why not"
    for key in not_calling:
        assert "# not verl's:" in inspect.getsource(overrides[key][0]), f"{key}: say why it does not call verl's"
