"""Bad-input fuzzing of config loading: any document gives a Config or a ConfigError with a path.

Never another exception type, never a traceback for the user.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import tracemalloc
from pathlib import Path

import attrs
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlhooks import ConfigError
from rlhooks.host import Config, load_config
from rlhooks.core.components import options_class
from rlhooks.core.config import SECTIONS
from rlhooks.core.registry import Registry

REGISTRY = Registry()
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12), st.sampled_from(["nan", "inf", "1e-3", "-1", "", "true", "acc", "reward"]),
)
values = st.recursive(
    scalars,
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(st.text(max_size=8), children, max_size=4)),
    max_leaves=12,
)
names = st.sampled_from(sorted({n for kind in ("sampler", "filter", "reward", "backend", "plugin") for n in REGISTRY.names(kind)} | {"nope", ""}))


def option_names(kind: str, name: str) -> list[str]:
    try:
        cls = options_class(REGISTRY.resolve(kind, name))
    except Exception:  # noqa: BLE001 - broken or unknown: no options to fuzz
        return []
    return [a.name for a in attrs.fields(cls)] if cls else []


@st.composite
def components(draw, kind: str):
    name = draw(names)
    opts = option_names(kind, name)
    keys = st.sampled_from(opts + ["bogus_option"]) if opts else st.just("bogus_option")
    body = draw(st.dictionaries(keys, values, max_size=4))
    return draw(st.sampled_from([name, {"name": name, **body}, body, [name], 3]))


@st.composite
def documents(draw):
    doc = {}
    for section, (kind, is_list) in SECTIONS.items():
        if draw(st.booleans()):
            comp = components(kind)
            doc[section] = draw(st.lists(comp, max_size=3)) if is_list and draw(st.booleans()) else draw(comp)
    if draw(st.booleans()):
        doc["run"] = draw(st.one_of(values, st.dictionaries(
            st.sampled_from(["steps", "seed", "n", "train_batch_size", "gen_batch_size", "on_gen_limit", "name", "stepz"]),
            values, max_size=4)))
    if draw(st.booleans()):
        doc[draw(st.text(max_size=8))] = draw(values)
    return doc


def load_outcome(source) -> Config | ConfigError:
    """The Config, or the ConfigError after checking every issue says where it is."""
    try:
        return load_config(source, registry=REGISTRY)
    except ConfigError as exc:
        assert exc.issues, "a ConfigError must list its issues"
        for issue in exc.issues:
            assert issue.message, issue
            # where: a key path, or (for a file that is not a mapping / not YAML) the file itself;
            # an unknown top-level key named "" has an empty path, and the message quotes it
            assert issue.path or exc.source or issue.message.startswith("section '' is not known"), (
                f"issue without a key path or a file: {issue}"
            )
        if not isinstance(source, dict):
            assert str(source) in str(exc), "a file's errors name the file"
        assert "Traceback" not in str(exc)
        return exc


@pytest.mark.slow  # make test's 5-minute budget (CI runs slow tests)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents())
def test_random_documents_give_config_or_config_error(doc):
    assert isinstance(load_outcome(doc), (Config, ConfigError))


@settings(max_examples=150, deadline=None)
@given(value=values)
def test_random_yaml_values_as_whole_document(value, tmp_path_factory):
    path = tmp_path_factory.mktemp("fuzz") / "c.yaml"
    path.write_text(yaml.safe_dump(value))
    assert isinstance(load_outcome(path), (Config, ConfigError))


@settings(max_examples=150, deadline=None)
@given(text=st.text(max_size=200))
def test_random_text_files(text, tmp_path_factory):
    path = tmp_path_factory.mktemp("fuzz") / "c.yaml"
    path.write_text(text, encoding="utf-8")
    assert isinstance(load_outcome(path), (Config, ConfigError))


# -- hostile documents: alias bombs, recursion, depth, encodings, duplicates, absurd values -------------

MEMORY_BUDGET = 64 << 20  # bytes Python may allocate while loading one hostile config


def _bounded_outcome(path) -> Config | ConfigError:
    """load_outcome, asserting the load allocated less than MEMORY_BUDGET at its peak."""
    tracemalloc.start()
    try:
        result = load_outcome(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < MEMORY_BUDGET, f"loading allocated {peak / 2**20:.0f} MiB"
    return result


def alias_bomb(fan: int, levels: int, under: str) -> str:
    """``levels`` anchors, each a list using the previous one ``fan`` times (fan**levels values)."""
    rows = ["  l0: &l0 [lol, lol, lol]"]
    rows += [f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * fan)}]" for i in range(1, levels)]
    return f"{under}:\n" + "\n".join(rows) + "\n"


RUN_KEYS = ["seed", "steps", "out_dir", "train_batch_size", "gen_batch_size", "n", "max_num_gen_batches",
            "on_gen_limit", "strict_plugins", "trace_hooks"]


def known_key_bomb(fan: int = 9) -> str:
    """An alias bomb whose every level is the value of a known key of ``run:`` (so an error message
    would format it): ``run.name`` expands to 3 * fan**9 values."""
    rows = [f"  {RUN_KEYS[0]}: &l0 [lol, lol, lol]"]
    rows += [f"  {key}: &l{i} [{', '.join([f'*l{i - 1}'] * fan)}]" for i, key in enumerate(RUN_KEYS[1:], 1)]
    return "run:\n" + "\n".join(rows) + "\n  name: *l9\n"


@settings(max_examples=25, deadline=None)
@given(fan=st.integers(1, 12), levels=st.integers(1, 12), under=st.sampled_from(["run", "sampler", "bogus", "simulate"]))
def test_alias_expansion_is_bounded(fan, levels, under, tmp_path_factory):
    path = tmp_path_factory.mktemp("bomb") / "c.yaml"
    path.write_text(alias_bomb(fan, levels, under))
    out = _bounded_outcome(path)
    assert isinstance(out, ConfigError)  # unknown keys at best; never a traceback or gigabytes
    if (fan ** (levels - 1)) * 3 > 200_000:
        assert any("expands to more than" in i.message and i.path.startswith(under) for i in out.issues)


HOSTILE = {
    "recursive alias": ("run: &r\n  name: x\n  me: *r\n", "run.me", "recursive alias"),
    "recursive list": ("filters: &f [dapo, *f]\n", "filters[1]", "recursive alias"),
    "deep nesting": ("run: " + "[" * 5000 + "]" * 5000 + "\n", "line 1, column 69", "nested deeper than"),
    "deep mapping": ("run:\n" + "".join(" " * i + f"k{i}:\n" for i in range(1, 200)), "line ", "nested deeper than"),
    "duplicate keys": ("run:\n  seed: 1\n  seed: 2\n", "run.seed", "duplicate key 'seed' (lines 2 and 3)"),
    "duplicate sections": ("filters: [dapo]\nrun: {}\nfilters: []\n", "filters", "duplicate key 'filters'"),
    "NaN weight": ("rewards: [{name: format_exact, weight: .nan}]\n", "rewards[0].weight", "finite"),
    "inf error score": ("rewards: [{name: check_answer, error_score: -.inf}]\n", "rewards[0].error_score", "finite"),
    "NaN timeout": ("backends: [{name: jsonl, flush_timeout_s: .nan}]\n", "backends[0].flush_timeout_s", "finite"),
    "inf put timeout": ("backends: [{name: console, put_timeout_s: .inf}]\n", "backends[0].put_timeout_s", "finite"),
    "huge float": ("backends: [{name: jsonl, max_wait_s: 1e400}]\n", "backends[0].max_wait_s", "finite"),
    "huge int float": (f"rewards: [{{name: format_exact, weight: {10**400}}}]\n", "rewards[0].weight", "float range"),
    "negative seed": ("run: {seed: -1}\n", "run.seed", "between 0 and"),
    "absurd queue": ("backends: [{name: jsonl, queue_size: 1000000000000}]\n", "backends[0].queue_size",
                     "at most 1,000,000"),
    "absurd n": ("run: {n: 1000000000}\n", "run.n", "between 1 and"),
    "absurd batch": ("run: {gen_batch_size: 100000, n: 1000}\n", "run", "trajectories per generation batch"),
    "empty name": ("run: {name: ''}\n", "run.name", "must not be empty"),
    "dot-dot name": ("run: {name: '..'}\n", "run.name", "must not be '..'"),
}


def test_alias_bomb_under_known_keys_is_an_error_at_its_key(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(known_key_bomb())
    out = _bounded_outcome(path)
    assert isinstance(out, ConfigError)
    assert any(i.path.startswith("run.") and "expands to more than" in i.message for i in out.issues), str(out)


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_documents_give_a_located_error(case: str, tmp_path: Path) -> None:
    text, key, words = HOSTILE[case]
    path = tmp_path / "c.yaml"
    path.write_text(text)
    out = _bounded_outcome(path)
    assert isinstance(out, ConfigError), f"{case}: accepted"
    assert any(i.path.startswith(key) and words in i.message for i in out.issues), str(out)


ENCODED = {
    "utf-16 with BOM": ("run:\n  name: ü\n".encode("utf-16"), None),
    "utf-8 with BOM": ("run:\n  name: ü\n".encode("utf-8-sig"), None),
    "utf-16 without BOM": ("run:\n  name: x\n".encode("utf-16-le"), "NUL bytes"),
    "latin-1": ("run:\n  name: caf\xe9\n".encode("latin-1"), "byte 0xe9 at line 2, column 12"),
    "binary": (bytes(range(256)) * 4, "not UTF-8"),
}


@pytest.mark.parametrize("case", sorted(ENCODED))
def test_file_encodings(case: str, tmp_path: Path) -> None:
    data, error = ENCODED[case]
    path = tmp_path / "c.yaml"
    path.write_bytes(data)
    out = _bounded_outcome(path)
    if error is None:
        assert isinstance(out, Config) and out.run.name == "ü"
    else:
        assert isinstance(out, ConfigError) and error in str(out) and "save it as UTF-8" in str(out)


@settings(max_examples=100, deadline=None)
@given(data=st.binary(max_size=300))
def test_random_bytes_files(data, tmp_path_factory):
    path = tmp_path_factory.mktemp("fuzz") / "c.yaml"
    path.write_bytes(data)
    assert isinstance(_bounded_outcome(path), (Config, ConfigError))


@pytest.mark.parametrize("case", ["billion laughs", "deep nesting"])
def test_cli_on_hostile_files_under_a_memory_cap(case: str, tmp_path: Path) -> None:
    """The real command, in a process that may not allocate more than 1 GiB of data."""
    path = tmp_path / "c.yaml"
    if case == "billion laughs":
        path.write_text(known_key_bomb())
    elif case == "latin-1":
        path.write_bytes(ENCODED["latin-1"][0])
    else:
        path.write_text(HOSTILE[case][0])
    commands = [["config", "check", str(path)], ["simulate", str(path), "--no-report", "--no-progress"]]
    for command in commands[: 2 if case == "billion laughs" else 1]:
        proc = subprocess.run(
            [sys.executable, "-m", "rlhooks.cli", *command], capture_output=True, text=True, timeout=120,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_DATA, (1 << 30, 1 << 30)), cwd=tmp_path,
        )
        assert proc.returncode == 1, proc.stderr
        assert "Traceback" not in proc.stderr and "MemoryError" not in proc.stderr
        assert proc.stderr.startswith(f"error: invalid rlhooks config {path}"), proc.stderr
