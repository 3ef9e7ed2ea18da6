"""The two import surfaces: ``rlhooks`` (plugin authors) and ``rlhooks.host`` (hosts and engines).

* importing either, or the pytest plugin, does not import torch or any backend/engine library;
* built-in plugins import only the plugin surface (an AST scan of rlhooks/plugins/**);
* the names ``rlhooks`` exported before the split still work, with a DeprecationWarning;
* ``rlhooks.Sampler`` is still a real torch Sampler that torchdata's StatefulDataLoader (verl's
  dataloader) accepts, state and all.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import rlhooks
import rlhooks.host

HEAVY = ("torch", "wandb", "tensorboard", "matplotlib", "ray", "verl", "pyarrow", "pandas", "transformers", "tokenizers")
PLUGINS_DIR = Path(rlhooks.__file__).parent / "plugins"
#: modules that host other components rather than being one: they may also use rlhooks.host
HOSTING_MODULES = {
    # verl's custom reward function's old path (deprecated): the moved module, which resolves installed reward
    # functions by name through the Registry
    "rewards/verl_adapter.py": "rlhooks.engines.verl.reward_function",
}


def _modules_after_import(module: str) -> list[str]:
    code = f"import sys, json; import {module}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


@pytest.mark.parametrize("module", ["rlhooks", "rlhooks.testing.pytest_plugin", "rlhooks.host"])
def test_import_does_not_load_heavy_libraries(module: str) -> None:
    loaded = _modules_after_import(module)
    assert module in loaded  # the import really happened
    heavy = sorted({m.split(".")[0] for m in loaded} & set(HEAVY))
    assert not heavy, f"'import {module}' imports {heavy}; import them lazily where they are used"


def _rlhooks_imports(path: Path, root: Path = PLUGINS_DIR.parent) -> list[tuple[int, str]]:
    """(line, module) of every rlhooks import in a file under ``root`` (the rlhooks package dir)."""
    package = ".".join(("rlhooks", *path.relative_to(root).parts[:-1]))
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                found.append((node.lineno, f"{base}.{node.module}" if node.module else base))
            else:
                found.append((node.lineno, node.module or ""))
    return [(line, mod) for line, mod in found if mod == "rlhooks" or mod.startswith("rlhooks.")]


def test_builtin_plugins_import_only_the_plugin_surface() -> None:
    files = sorted(PLUGINS_DIR.rglob("*.py"))
    assert len(files) > 10
    offenders = []
    for path in files:
        rel = path.relative_to(PLUGINS_DIR).as_posix()
        allowed_extra = HOSTING_MODULES.get(rel)
        for line, mod in _rlhooks_imports(path):
            if mod in ("rlhooks", allowed_extra) or mod.startswith(("rlhooks.plugins.", "rlhooks.monitoring")):
                continue  # the plugin API; rlhooks.monitoring is a public library below the plugins
            offenders.append(f"rlhooks/plugins/{rel}:{line}: imports {mod}")
    assert not offenders, ("built-in plugins must import only from `rlhooks` (the plugin API) and `rlhooks.monitoring`:\n"
                           + "\n".join(offenders))


def test_scan_sees_internal_imports(tmp_path: Path) -> None:
    # The scan itself: internal imports, absolute or relative, are seen (a fake package tree).
    probe = tmp_path / "plugins" / "filters" / "probe.py"
    probe.parent.mkdir(parents=True)
    probe.write_text("from rlhooks.core.batch import UID\nfrom ...core import errors\nimport rlhooks.core.config\n"
                     "from . import sibling\nimport numpy\n")
    mods = [m for _, m in _rlhooks_imports(probe, root=tmp_path)]
    assert mods == ["rlhooks.core.batch", "rlhooks.core", "rlhooks.core.config", "rlhooks.plugins.filters"]


PLUGIN_API = [
    "hookimpl", "Batch", "BatchError", "GroupIndex", "RowLazy", "factorize", "run_starts", "UID", "INDEX",
    "DATA_SOURCE", "COMPLEXITY", "REWARD", "FINAL_REWARD", "ADVANTAGE", "PROMPT", "RESPONSE", "TARGET",
    "PROMPT_LENGTH", "RESPONSE_LENGTH", "REWARD_FN_PREFIX", "Sampler", "FilterDecision", "RewardFunction",
    "NoOptions", "DatasetColumns", "RunContext", "build_options", "positive", "non_negative", "finite",
    "unit_interval", "DispatchOptions", "RLHooksError", "ConfigError", "ConfigIssue", "DataError",
    "PluginError", "RegistryError", "GenerationLimitError",
    "LearningState", "LEARNING_COLUMN_PREFIX", "UNSEEN_LEARNABILITY", "keyed_uniforms",
    "write_atomic", "claim_output", "open_output",
]


def test_plugin_surface_is_complete() -> None:
    missing = [n for n in PLUGIN_API if not hasattr(rlhooks, n)]
    assert not missing
    assert set(PLUGIN_API) <= set(rlhooks.__all__)
    assert rlhooks.UID == "uid" and rlhooks.REWARD_FN_PREFIX == "reward_fn/"


def test_host_surface() -> None:
    for name in rlhooks.host.__all__:
        assert getattr(rlhooks.host, name) is not None
    assert {"RunManager", "StepDriver", "Rollout", "GroupAccumulator", "Registry", "Config", "load_config",
            "RunContext"} <= set(rlhooks.host.__all__)


@pytest.mark.parametrize("name", sorted(rlhooks._MOVED_TO_HOST))
def test_old_host_names_on_rlhooks_warn_and_work(name: str) -> None:
    with pytest.warns(DeprecationWarning, match=f"rlhooks.{name} moved to rlhooks.host"):
        obj = getattr(rlhooks, name)
    assert obj is getattr(rlhooks.host, name)


def test_old_style_from_import_still_works() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from rlhooks import RunManager, StepDriver  # noqa: F401
    assert caught and {w.category for w in caught} == {DeprecationWarning}
    assert {"rlhooks.RunManager", "rlhooks.StepDriver"} <= {str(w.message).split(" ")[0] for w in caught}
    assert StepDriver is rlhooks.host.StepDriver


def test_unknown_name_is_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Bacth'"):
        rlhooks.Bacth  # noqa: B018


def test_options_helpers_build_like_a_config() -> None:
    from rlhooks.plugins.backends.console import ConsoleBackend

    opts = rlhooks.build_options(ConsoleBackend.Options, {"interval": 5}, path="backends[0]", plugin="console")
    assert opts.interval == 5 and opts.queue_size == rlhooks.DispatchOptions().queue_size
    with pytest.raises(rlhooks.ConfigError) as err:
        rlhooks.build_options(ConsoleBackend.Options, {"intervl": 5, "queue_size": 0}, path="backends[0]", plugin="console")
    text = str(err.value)
    assert "did you mean 'interval'" in text and "backends[0].queue_size" in text and "must be > 0" in text


def test_sampler_is_a_torch_sampler_that_statefuldataloader_accepts() -> None:
    import torch.utils.data
    from torchdata.stateful_dataloader import StatefulDataLoader

    from rlhooks.plugins.samplers.multi_source import MultiSourceSampler

    assert issubclass(rlhooks.Sampler, torch.utils.data.Sampler)
    assert rlhooks.Sampler is rlhooks.core.sampler.Sampler
    data = rlhooks.DatasetColumns.from_arrays(["a"] * 60 + ["b"] * 40)

    def loader(sampler):
        return StatefulDataLoader(list(range(100)), batch_size=8, sampler=sampler, num_workers=0)

    def make():
        return MultiSourceSampler({"source_weights": {"a": 1.0, "b": 1.0}}, data, batch_size=8, seed=3)

    first = loader(make())
    it = iter(first)
    head = [next(it).tolist() for _ in range(3)]
    state = first.state_dict()
    rest = [next(it).tolist() for _ in range(3)]
    assert all(len(b) == 8 for b in head + rest)
    resumed = loader(make())
    resumed.load_state_dict(state)
    assert [b.tolist() for b, _ in zip(resumed, range(3))] == rest
    assert np.all(np.array(head + rest) < 100)
