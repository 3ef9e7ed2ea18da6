"""Bad-input fuzzing of config loading: any document gives a Config or a ConfigError with a path.

Never another exception type, never a traceback for the user.
"""

from __future__ import annotations

import attrs
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
