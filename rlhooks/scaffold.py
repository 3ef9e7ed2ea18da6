"""``rlhooks new-plugin NAME --kind ...``: write a plugin package that installs and passes its contract tests.

The package (after datasette's and llm's plugin templates): a ``pyproject.toml`` with one entry
point per kind, one module per kind under ``src/<module>/``, ``tests/test_contracts.py``
subclassing the contract kit, and a README. Each module is a small working component to edit,
not a stub: the generated tests pass unchanged (tests/core/test_scaffold.py installs one and
runs them). The writer refuses an existing directory: it never overwrites what it did not create.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import keyword
import re
from collections.abc import Iterable
from pathlib import Path
from string import Template

from rlhooks.core.errors import RLHooksError

#: kind -> (entry-point group, module file, the class name's suffix)
KINDS: dict[str, tuple[str, str, str]] = {
    "sampler": ("rlhooks.samplers", "sampler", "Sampler"),
    "filter": ("rlhooks.filters", "group_filter", "Filter"),
    "backend": ("rlhooks.backends", "backend", "Backend"),
    "reward": ("rlhooks.rewards", "reward", "Reward"),
    "hook": ("rlhooks.plugins", "hooks", "Plugin"),
}
_DIST_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")


class ScaffoldError(RLHooksError):
    pass


def parse_kinds(text: str | Iterable[str]) -> list[str]:
    """``"sampler,filter"`` (or a list) -> known kinds in the order given; an unknown kind is an error."""
    items = text.split(",") if isinstance(text, str) else list(text)
    kinds = [k.strip() for k in items if k.strip()]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or not kinds:
        raise ScaffoldError(f"--kind: {', '.join(map(repr, unknown)) or 'nothing given'}; "
                            f"choose from {','.join(KINDS)} (comma-separated)")
    return list(dict.fromkeys(kinds))


def names_for(dist: str) -> dict[str, str]:
    """Distribution ``my-rlhooks-thing`` -> module ``my_rlhooks_thing``, entry-point stem ``thing``, class stem."""
    if not _DIST_NAME.fullmatch(dist):
        raise ScaffoldError(f"{dist!r} is not a valid distribution name: letters, digits, '-', '_' and '.', "
                            f"starting and ending with a letter or digit (e.g. rlhooks-my-plugins)")
    _refuse_taken_name(dist)
    module = re.sub(r"[^A-Za-z0-9]+", "_", dist).lower()
    if module[0].isdigit() or keyword.iskeyword(module):
        module = f"plugin_{module}"
    stem = module.removeprefix("rlhooks_") or module
    cls = "".join(part.capitalize() for part in stem.split("_") if part)
    if not cls.isidentifier():  # rlhooks-1x: the stem starts with a digit; a class name cannot
        cls = f"Rlhooks{cls}"
    return {"dist": dist, "module": module, "stem": stem, "Cls": cls}


def _normalized(dist: str) -> str:
    """A distribution name as pip compares it (PEP 503): case, '-', '_' and '.' do not matter."""
    return re.sub(r"[-_.]+", "-", dist).lower()


def _refuse_taken_name(dist: str) -> None:
    """A package named like rlhooks or an installed distribution (or shadowing an importable
    module) would replace it on ``pip install -e .``, or be shadowed by it."""
    wanted = _normalized(dist)
    hint = "choose a name of its own, e.g. rlhooks-<what it does>; nothing was written"
    if wanted == "rlhooks":
        raise ScaffoldError(f"{dist!r} is rlhooks' own distribution name: installing the plugin would replace "
                            f"rlhooks; {hint}")
    for installed in importlib.metadata.distributions():
        name = installed.metadata["Name"] or ""
        if _normalized(name) == wanted:
            raise ScaffoldError(f"{dist!r} is the name of an installed distribution ({name} {installed.version}): "
                                f"installing the plugin would replace it; {hint}")
    module = re.sub(r"[^A-Za-z0-9]+", "_", dist).lower()
    if module.isidentifier() and importlib.util.find_spec(module) is not None:
        raise ScaffoldError(f"{dist!r} would make a module {module!r}, the name of a module already importable "
                            f"here: one would shadow the other; {hint}")


def entry_name(names: dict[str, str], kind: str) -> str:
    return names["stem"] if kind == "hook" else f"{names['stem']}_{kind}"


def write_plugin(dist: str, kinds: Iterable[str], parent: Path) -> Path:
    """Write the package into ``parent / dist``; returns that directory."""
    names = names_for(dist)
    kinds = parse_kinds(kinds)
    root = Path(parent) / dist
    if root.exists():
        raise ScaffoldError(f"{root} already exists; choose another name or directory (--dir), "
                            f"nothing was written")
    files = {
        "pyproject.toml": _pyproject(names, kinds),
        "README.md": _readme(names, kinds),
        f"src/{names['module']}/__init__.py": _init(names, kinds),
        "tests/test_contracts.py": _tests(names, kinds),
    }
    for kind in kinds:
        files[f"src/{names['module']}/{KINDS[kind][1]}.py"] = _fill(_MODULES[kind], names, kind)
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def _fill(template: str, names: dict[str, str], kind: str | None = None) -> str:
    extra = {"entry": entry_name(names, kind)} if kind else {}
    return Template(template).substitute(names, **extra)


def _class(names: dict[str, str], kind: str) -> str:
    return names["Cls"] + KINDS[kind][2]


def _pyproject(names: dict[str, str], kinds: list[str]) -> str:
    eps = "".join(
        f'\n[project.entry-points."{KINDS[k][0]}"]\n'
        f'{entry_name(names, k)} = "{names["module"]}.{KINDS[k][1]}:{_class(names, k)}"\n'
        for k in kinds
    )
    return _fill(_PYPROJECT, names) + eps + _PYTEST_OPTIONS


def _init(names: dict[str, str], kinds: list[str]) -> str:
    # the sampler module imports torch: it is not imported here, so importing the package stays light
    lines = [f'"""{names["dist"]}: rlhooks components ({", ".join(kinds)})."""\n']
    lines += [f"from {names['module']}.{KINDS[k][1]} import {_class(names, k)}" for k in kinds if k != "sampler"]
    return "\n".join(lines) + "\n"


def _tests(names: dict[str, str], kinds: list[str]) -> str:
    parts = [_fill(_TESTS_HEAD, names)]
    imports = sorted({_TEST_CONTRACT[k] for k in kinds} | ({"ReadBack"} if "backend" in kinds else set()))
    parts.append(f"from rlhooks.testing import {', '.join(imports)}\n")
    for kind in kinds:
        extra = ", read_back_metrics" if kind == "backend" else ""
        parts.append(f"from {names['module']}.{KINDS[kind][1]} import {_class(names, kind)}{extra}\n")
    for kind in kinds:
        parts.append(Template(_TESTS[kind]).substitute(
            names, entry=entry_name(names, kind), cls=_class(names, kind), file=KINDS[kind][1]))
    return "".join(parts)


def _readme(names: dict[str, str], kinds: list[str]) -> str:
    rows = "\n".join(f"| {k} | `{entry_name(names, k)}` (qualified: `{names['dist']}:{entry_name(names, k)}`) | "
                     f"`{KINDS[k][0]}` | `src/{names['module']}/{KINDS[k][1]}.py` |" for k in kinds)
    return Template(_README).substitute(names, rows=rows)


_TEST_CONTRACT = {"sampler": "SamplerContract", "filter": "FilterContract", "backend": "BackendContract",
                  "reward": "RewardFunctionContract", "hook": "HookPluginContract"}

_PYPROJECT = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "$dist"
version = "0.1.0"
description = "rlhooks plugins"
readme = "README.md"
requires-python = ">=3.10"
dependencies = ["rlhooks>=0.1"]   # satisfied by an rlhooks installed from its clone

[project.optional-dependencies]
test = ["rlhooks[test]"]

[tool.setuptools.packages.find]
where = ["src"]

# rlhooks finds each component by name through its entry-point group
"""

_PYTEST_OPTIONS = """
[tool.pytest.ini_options]
testpaths = ["tests"]
# pytest-asyncio (installed beside rlhooks in many environments) warns when this is unset; without
# pytest-asyncio the option is unknown to pytest, and that warning is ignored below
asyncio_default_fixture_loop_scope = "function"
filterwarnings = ["ignore:Unknown config option. asyncio_default_fixture_loop_scope:pytest.PytestConfigWarning"]
"""

_README = """\
# $dist

rlhooks plugins, generated by `rlhooks new-plugin`. Each module is a small working component:
edit it, keep its contract tests passing.

| kind | name in a config | entry-point group | module |
|---|---|---|---|
$rows

```bash
pip install -e '.[test]'     # this package, with rlhooks' test extras
rlhooks plugins list         # shows the components above with this distribution
pytest                       # the rlhooks contract kit against every component
```

Enable them in an rlhooks config by name, or by qualified name (`<distribution>:<name>`) when
another installed package uses the same name. See rlhooks' documentation site (docs/ in its
repository, `make docs`), how-to guides *Write each kind of plugin*, *Package a plugin* and *Run the
contract tests*.
"""

_TESTS_HEAD = '''\
"""The rlhooks contract kit against this package's components.

``rlhooks.testing`` is a pytest plugin installed with rlhooks: nothing to configure. The entry
points are named by their qualified names (``<distribution>:<name>``): the tests check the
installed package, not another one that registers the same name.
"""

import pytest

'''

_TESTS = {
    "sampler": '''

class Test${cls}(SamplerContract):
    plugin_class = ${cls}

    @pytest.fixture
    def entry_point_name(self):
        return "${dist}:${entry}"
''',
    "filter": '''

class Test${cls}(FilterContract):
    plugin_class = ${cls}

    @pytest.fixture
    def component_options(self):
        return {"min_spread": 0.1}

    @pytest.fixture
    def entry_point_name(self):
        return "${dist}:${entry}"
''',
    "backend": '''

class Test${cls}(BackendContract):
    plugin_class = ${cls}

    @pytest.fixture
    def entry_point_name(self):
        return "${dist}:${entry}"

    def read_back(self, plugin, run_dir):
        return ReadBack(metrics=read_back_metrics(run_dir / plugin.options.file))
''',
    "reward": '''

class Test${cls}(RewardFunctionContract):
    plugin_class = ${cls}

    @pytest.fixture
    def component_options(self):
        return {"case_sensitive": True}

    @pytest.fixture
    def entry_point_name(self):
        return "${dist}:${entry}"


def test_${stem}_reward_scores_within_its_declared_range():
    fn = ${cls}(${cls}.Options())
    low, high = ${cls}.reward_range
    assert (fn(" 42 ", "42"), fn("41", "42")) == (high, low)
''',
    "hook": '''

class Test${cls}(HookPluginContract):
    plugin_class = ${cls}

    @pytest.fixture
    def plugin(self):
        return ${cls}(${cls}.Options())

    @pytest.fixture
    def entry_point_name(self):
        return "${dist}:${entry}"


def test_${stem}_stops_the_run_when_responses_stay_long(tmp_path):
    from rlhooks.testing import make_run_context, make_trajectory_batch

    plugin = ${cls}(${cls}.Options(threshold=0, stop_fraction=0.5, stop_after=2))
    run = make_run_context(tmp_path / "run")
    plugin.on_run_start(run)
    plugin.on_rewards_computed(1, make_trajectory_batch(4, 4, seed=1))
    assert not run.stop_requested
    plugin.on_rewards_computed(2, make_trajectory_batch(4, 4, seed=2))
    assert run.stop_requested and "2 batches in a row" in run.stop_reason
''',
}

_MODULES = {
    "sampler": '''\
"""${Cls}Sampler: every row once per epoch, in a seeded random order; resumes mid-epoch.

Built by the engine as ``${Cls}Sampler(options, data, batch_size=..., seed=...)``; ``data`` is a
``rlhooks.DatasetColumns`` (``len(data)`` rows, ``data.source_names``, ``data.source_codes``).
Replace ``_order`` (and add an ``on_rewards_computed`` hook) to sample adaptively; keep every
input of the order in ``state_dict()`` so a resumed run draws what an uninterrupted one would.
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np

from rlhooks import Sampler


class ${Cls}Sampler(Sampler):
    """Every row once per epoch, shuffled with the run's seed (or in order)."""

    @attrs.frozen(kw_only=True)
    class Options:
        #: false: rows in dataset order
        shuffle: bool = True

    def __init__(self, options: Any, data: Any, *, batch_size: int, seed: int = 0) -> None:
        super().__init__(options, data, batch_size=batch_size, seed=seed)
        self._epoch = 0
        self._position = 0  # indices of this epoch already drawn

    def _order(self, epoch: int) -> np.ndarray:
        if not self.options.shuffle:
            return np.arange(len(self.data))
        return np.random.default_rng([self.seed, epoch]).permutation(len(self.data))

    def __iter__(self):
        if self._position >= len(self.data):  # the last epoch was drawn to its end
            self._epoch, self._position = self._epoch + 1, 0
        order = self._order(self._epoch)
        while self._position < len(order):
            index = int(order[self._position])
            self._position += 1
            yield index

    def __len__(self) -> int:
        return len(self.data)

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self._epoch, "position": self._position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._epoch, self._position = int(state["epoch"]), int(state["position"])
''',
    "filter": '''\
"""${Cls}Filter: drops groups whose rewards are (nearly) all the same: they carry no learning signal.

``select(batch)`` sees one generation batch (read-only) and returns which rows to keep, the same
for every row of a group (``batch.groups`` has vectorized per-group reductions), as a bool mask
or as a ``FilterDecision`` with metrics. Filter metrics are counts: rlhooks sums them over a
step's generation batches.
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np

from rlhooks import REWARD, FilterDecision, non_negative


class ${Cls}Filter:
    """Keeps groups whose reward spread (max - min) is above ``min_spread``."""

    @attrs.frozen(kw_only=True)
    class Options:
        #: groups with max - min reward at or below this are dropped
        min_spread: float = attrs.field(default=0.0, validator=non_negative)

    def __init__(self, options: Any) -> None:
        self.options = options

    def select(self, batch: Any) -> FilterDecision:
        groups = batch.groups
        reward = batch[REWARD]
        keep_group = (groups.max(reward) - groups.min(reward)) > self.options.min_spread
        return FilterDecision(
            keep=groups.broadcast(keep_group).astype(bool) if len(batch) else np.zeros(0, dtype=bool),
            metrics={"${stem}/dropped_groups": float(np.count_nonzero(~keep_group))},
        )
''',
    "backend": '''\
"""${Cls}Backend: metrics into an SQLite database in the run directory.

rlhooks calls a backend on its own thread (the training loop never waits for it), and
``on_run_start`` runs on that same thread: a thread-bound handle such as an sqlite3 connection
is opened there, never in ``__init__``. A file a plugin creates in the run directory is claimed
first (``rlhooks.claim_output``; ``rlhooks.open_output`` opens a file claimed): a rerun of the
same run name replaces only what its run claimed, and refuses otherwise.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import attrs

from rlhooks import DispatchOptions, claim_output, hookimpl


class ${Cls}Backend:
    """Every logged metric as a row (step, name, value) of a table ``metrics``."""

    @attrs.frozen(kw_only=True)
    class Options(DispatchOptions):
        #: the database file, relative to the run directory
        file: str = "metrics.sqlite"

    def __init__(self, options: Any) -> None:
        self.options = options
        self.db: sqlite3.Connection | None = None

    @hookimpl
    def on_run_start(self, run: Any) -> None:
        path = Path(run.run_dir) / self.options.file
        claim_output(path)  # before creating it: a rerun of the same run name may then replace it
        self.db = sqlite3.connect(path)
        self.db.execute("CREATE TABLE IF NOT EXISTS metrics (step INTEGER, name TEXT, value TEXT)")

    @hookimpl
    def log_metrics(self, step: int, metrics: dict[str, Any]) -> None:
        # values as JSON text: NaN and infinities survive (a REAL column would store NaN as NULL)
        self.db.executemany("INSERT INTO metrics VALUES (?, ?, ?)",
                            [(int(step), name, json.dumps(float(value))) for name, value in metrics.items()])

    @hookimpl
    def on_run_end(self) -> None:
        if self.db is not None:
            self.db.commit()
            self.db.close()
            self.db = None


def read_back_metrics(path: Path) -> dict[int, dict[str, float]]:
    """{step: {name: value}} from a database the backend wrote."""
    out: dict[int, dict[str, float]] = {}
    with sqlite3.connect(path) as db:
        for step, name, value in db.execute("SELECT step, name, value FROM metrics"):
            out.setdefault(step, {})[name] = float(json.loads(value))
    return out
''',
    "reward": '''\
"""${Cls}Reward: 1.0 when the response, stripped, equals the target, else 0.0.

A reward function scores one response: ``fn(response, target, **info) -> float``; its options
come from the config entry (``rewards: [{name: ${entry}, case_sensitive: false, weight: 2}]``).
``reward_range`` declares the scores it can give: the reward monitor's coverage uses it.
"""

from __future__ import annotations

from typing import Any

import attrs

from rlhooks import RewardFunction


class ${Cls}Reward(RewardFunction):
    """Exact match of the stripped response with the target."""

    name = "${entry}"
    reward_range = (0.0, 1.0)

    @attrs.frozen(kw_only=True)
    class Options:
        #: false: compare case-folded
        case_sensitive: bool = True

    def __call__(self, response: str, target: str, **info: Any) -> float:
        response, target = response.strip(), target.strip()
        if not self.options.case_sensitive:
            response, target = response.casefold(), target.casefold()
        return 1.0 if response == target else 0.0
''',
    "hook": '''\
"""${Cls}Plugin: a hook-only plugin; the fraction of responses longer than a threshold, per generation batch.

Hooks are methods decorated with ``rlhooks.hookimpl`` and named after a hook (the reference:
``rlhooks hooks``); a hook may take any subset of its arguments, and may return metrics. Shown too:
held-out results (``on_validation_end``), a clean stop (``run.request_stop``) and state a resumed
run restores (``state_dict``/``load_state_dict``, saved with each checkpoint).
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np

from rlhooks import RESPONSE_LENGTH, hookimpl, non_negative, positive


class ${Cls}Plugin:
    """``${stem}/long_fraction``: responses longer than ``threshold`` tokens; stops the run after
    ``stop_after`` batches in a row with a fraction above ``stop_fraction`` (1.0: never)."""

    @attrs.frozen(kw_only=True)
    class Options:
        threshold: int = attrs.field(default=512, validator=non_negative)
        stop_fraction: float = attrs.field(default=1.0, validator=[attrs.validators.ge(0), attrs.validators.le(1)])
        stop_after: int = attrs.field(default=3, validator=positive)

    def __init__(self, options: Any) -> None:
        self.options = options
        self.run: Any = None
        self.long_batches = 0  # batches in a row above stop_fraction; kept across a resume

    @hookimpl
    def on_run_start(self, run: Any) -> None:
        self.run = run

    @hookimpl
    def on_rewards_computed(self, step: int, batch: Any) -> dict[str, float]:
        if len(batch) == 0 or RESPONSE_LENGTH not in batch:
            return {}
        fraction = float(np.mean(batch[RESPONSE_LENGTH] > self.options.threshold))
        self.long_batches = self.long_batches + 1 if fraction > self.options.stop_fraction else 0
        if self.long_batches >= self.options.stop_after and self.run is not None:
            # the run ends after this step: checkpoint saved, status "stopped", this reason recorded
            self.run.request_stop(f"${stem}: {self.long_batches} batches in a row with long_fraction > "
                                  f"{self.options.stop_fraction}")
        return {"${stem}/long_fraction": fraction}

    @hookimpl
    def on_validation_end(self, step: int, per_source: Any) -> dict[str, float] | None:
        scores = [m["score"] for m in per_source.values() if "score" in m]
        return {"${stem}/worst_validation_score": min(scores)} if scores else None

    def state_dict(self) -> dict[str, Any]:
        return {"long_batches": self.long_batches}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.long_batches = int(state["long_batches"])
''',
}
