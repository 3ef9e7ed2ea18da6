"""YAML config: one file enables components by name, each with its own typed options.

    run: {name: demo, seed: 0, steps: 50, train_batch_size: 32, gen_batch_size: 64, n: 8}
    sampler: {name: multi_source, adaptive_weights: true}     # or verl-style class_name: ...
    filters: [dapo]
    rewards: [{name: check_answer, weight: 2.0}, format_exact, source_metrics, reward_monitor]
    samples: [{name: top_bottom_k, k: 2}]
    backends: [console, {name: jsonl}]
    plugins: [my_plugin]

Validation is two-phase (the outer shape, then each named component's options, structured
into its attrs ``Options`` class by cattrs with unknown keys forbidden) and reports every
problem at once, each with its key path and the component's name.
"""

from __future__ import annotations

import difflib
import math
import importlib
import re
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import attrs
import cattrs
import yaml
from cattrs.errors import ClassValidationError, ForbiddenExtraKeysError, IterableValidationError

from rlhooks.core.components import (
    DEFAULT_ON_ERROR,
    ON_ERROR_CHOICES,
    NoOptions,
    is_reward_function,
    options_class,
)
from rlhooks.core.errors import ConfigError, ConfigIssue, RegistryError
from rlhooks.core.registry import Registry
from rlhooks.core.rundir import check_run_name

# -- the run section ------------------------------------------------------------------------


def _positive(_inst: Any, attr: attrs.Attribute, value: Any) -> None:
    if value is not None and value <= 0:
        raise ValueError(f"must be > 0, got {value!r}")


def _unit_interval(_inst: Any, attr: attrs.Attribute, value: float) -> None:
    if not 0 < value <= 1:
        raise ValueError(f"must be in (0, 1], got {value!r}")


def _in_range(lo: int, hi: int) -> Any:
    """Sane bounds: a size or seed past them ends in a memory error or a library's crash later."""

    def check(_inst: Any, attr: attrs.Attribute, value: Any) -> None:
        if value is not None and not lo <= value <= hi:
            raise ValueError(f"must be between {lo:,} and {hi:,}, got {value!r}")

    return check


#: bounds of the run section (far beyond any real run; they stop typos like an extra 000 early)
MAX_SEED = 2**32 - 1
MAX_STEPS = 10**9
MAX_BATCH = 10**7
MAX_N = 65_536
MAX_TRAJECTORIES = 10**7


def _run_name(_inst: Any, attr: attrs.Attribute, value: Any) -> None:
    problem = check_run_name(value)
    if problem:
        raise ValueError(problem)


@attrs.frozen(kw_only=True)
class RunOptions:
    """The ``run:`` section: what every engine needs to drive a run."""

    #: the run directory's name under out_dir: one plain directory name (see core/rundir.py)
    name: str = attrs.field(default="rlhooks-run", validator=_run_name)
    seed: int = attrs.field(default=0, validator=_in_range(0, MAX_SEED))
    steps: int = attrs.field(default=100, validator=[_positive, _in_range(1, MAX_STEPS)])
    out_dir: str = "runs"
    #: prompts per training step (groups that survive the filters)
    train_batch_size: int = attrs.field(default=32, validator=[_positive, _in_range(1, MAX_BATCH)])
    #: prompts per generation batch; defaults to train_batch_size
    gen_batch_size: int | None = attrs.field(default=None, validator=[_positive, _in_range(1, MAX_BATCH)])
    #: responses per prompt (group size)
    n: int = attrs.field(default=8, validator=[_positive, _in_range(1, MAX_N)])
    #: generation batches allowed per step before giving up (0 or negative = unlimited, stored as 0,
    #: as the dynamic-sampling document and verl's filter_groups have it)
    max_num_gen_batches: int = attrs.field(default=10, converter=lambda v: max(v, 0) if isinstance(v, int) else v)
    #: at the limit: "raise" (the DAPO recipe's error) or "continue" with the groups kept so far
    on_gen_limit: Literal["raise", "continue"] = "raise"
    #: per-source metrics (source/<name>/...) whenever batches carry data_source: the engines add
    #: the ``source_metrics`` plugin unless ``rewards:`` lists it already; false turns it off
    source_metrics: bool = True
    #: import every installed plugin at start and fail on any broken one
    strict_plugins: bool = False
    #: log every hook call with its plugin and duration
    trace_hooks: bool = False
    #: the learning state's per-response metric: "auto" = acc when the batch has it, else reward
    learning_metric: str = "auto"
    #: a response passes (for the learning state's pass rate) when its metric is >= this
    learning_pass_threshold: float = 0.5
    #: weight of the newest group in the learning state's pass-rate EMA
    learning_ema_alpha: float = attrs.field(default=0.3, validator=_unit_interval)
    #: pre-generation stage: sampler batches drawn at most per generation batch to fill it with
    #: prompts the prompt filters keep (the rest is filled with skipped prompts)
    max_prompt_draws: int = attrs.field(default=8, validator=_positive)
    #: size of a step's 2nd, 3rd... generation batch: "fixed" = gen_batch_size; "adaptive" = the
    #: prompts still needed / the step's kept ratio so far * 1.25, at least gen_batch_size / 6 (GRESO's rule)
    gen_batch_sizing: Literal["fixed", "adaptive"] = "fixed"

    def __attrs_post_init__(self) -> None:
        rows = self.effective_gen_batch_size * self.n
        if rows > MAX_TRAJECTORIES:
            raise ValueError(
                f"gen_batch_size x n = {rows:,} trajectories per generation batch is more than {MAX_TRAJECTORIES:,}; "
                f"lower run.gen_batch_size or run.n"
            )

    @property
    def effective_gen_batch_size(self) -> int:
        return self.gen_batch_size or self.train_batch_size


# -- one component ------------------------------------------------------------------------

#: config section -> (component kind, is a list)
SECTIONS: dict[str, tuple[str, bool]] = {
    "sampler": ("sampler", False),
    "filters": ("filter", True),
    "prompt_filters": ("prompt_filter", True),
    "rewards": ("reward", True),
    "samples": ("backend", True),
    "backends": ("backend", True),
    "plugins": ("plugin", True),
}
TOP_LEVEL = ("run", *SECTIONS)
#: the list sections, in the order components are built and registered
LIST_SECTIONS = ("filters", "prompt_filters", "rewards", "samples", "backends", "plugins")
COMMON_KEYS = ("name", "on_error")
REWARD_FN_KEYS = ("weight", "error_score")
#: the verl_extensions sampler format: class_name / class_path instead of name
LEGACY_SAMPLER_KEYS = ("class_name", "class_path")
LEGACY_SAMPLER_MODULES = ("verl_extensions.multi_source_sampler", "verl_extensions")


@attrs.frozen
class ComponentConfig:
    """One enabled component: which, where in the file, and its structured options."""

    kind: str
    name: str
    path: str  # key path in the config, e.g. "backends[1]"
    options: Any  # an instance of the component's Options class
    on_error: str
    obj: Any = attrs.field(eq=False, repr=False)  # the loaded entry-point object (class/function)
    distribution: str = "?"
    weight: float = 1.0  # reward functions only
    error_score: float = 0.0  # reward functions only
    raw: Mapping[str, Any] = attrs.field(factory=dict, eq=False, repr=False)

    @property
    def is_reward_function(self) -> bool:
        return self.kind == "reward" and is_reward_function(self.obj)

    def resolved(self) -> dict[str, Any]:
        """Name plus every option with its default filled in (for printing)."""
        out: dict[str, Any] = {"name": self.name}
        if not isinstance(self.options, NoOptions):
            out.update(_converter.unstructure(self.options))
        if self.is_reward_function:
            out.update(weight=self.weight, error_score=self.error_score)
        out["on_error"] = self.on_error
        return out


@attrs.frozen
class Config:
    run: RunOptions
    sampler: ComponentConfig | None = None
    filters: tuple[ComponentConfig, ...] = ()
    #: filters of the pre-generation stage: they drop sampled prompts before generation
    prompt_filters: tuple[ComponentConfig, ...] = ()
    rewards: tuple[ComponentConfig, ...] = ()
    samples: tuple[ComponentConfig, ...] = ()
    backends: tuple[ComponentConfig, ...] = ()
    plugins: tuple[ComponentConfig, ...] = ()
    #: engine-specific sections (e.g. ``simulate:``), structured by the engine's own class
    extra: Mapping[str, Any] = attrs.field(factory=dict)
    source: str | None = None
    raw: Mapping[str, Any] = attrs.field(factory=dict, eq=False, repr=False)

    def components(self) -> Iterator[ComponentConfig]:
        """Every component in config order (sampler, filters, rewards, samples, backends, plugins)."""
        if self.sampler is not None:
            yield self.sampler
        for section in LIST_SECTIONS:
            yield from getattr(self, section)

    def resolved(self, redact: bool = True) -> dict[str, Any]:
        """The whole config with defaults filled in; secrets redacted unless asked otherwise."""
        out: dict[str, Any] = {"run": _converter.unstructure(self.run)}
        out["sampler"] = self.sampler.resolved() if self.sampler else None
        for section in LIST_SECTIONS:
            out[section] = [c.resolved() for c in getattr(self, section)]
        for key, value in self.extra.items():
            out[key] = _converter.unstructure(value) if attrs.has(type(value)) else value
        return redact_secrets(out) if redact else out

    def to_yaml(self, redact: bool = True) -> str:
        return yaml.safe_dump(self.resolved(redact), sort_keys=False, allow_unicode=True)


# -- secrets --------------------------------------------------------------------------------

_SECRET_NAME = re.compile(r"key|token|secret|password|passwd", re.IGNORECASE)
#: option names that look secret but select things (e.g. top_bottom_k's sort key)
_NOT_SECRET = {"key", "keys", "sort_key", "metric_key"}
REDACTED = "***"


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(name)) and name.lower() not in _NOT_SECRET


def redact_secrets(value: Any) -> Any:
    """Copy of a nested structure with string values under secret-looking keys replaced."""
    if isinstance(value, Mapping):
        return {
            k: (REDACTED if isinstance(k, str) and is_secret_name(k) and isinstance(v, str) and v
                else redact_secrets(v))
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [redact_secrets(v) for v in value]
    return value


# -- a strict cattrs converter ----------------------------------------------------------------


def _strict_bool(v: Any, _t: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, int) and v in (0, 1):
        return bool(v)
    if isinstance(v, str) and v.lower() in ("true", "false", "yes", "no", "on", "off"):
        return v.lower() in ("true", "yes", "on")
    raise ValueError(f"expected true or false, got {v!r}")


def _strict_int(v: Any, _t: Any) -> int:
    if isinstance(v, bool):
        raise ValueError(f"expected an integer, got {v!r}")
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str) and re.fullmatch(r"[+-]?\d+", v.strip()):
        return int(v)
    raise ValueError(f"expected an integer, got {v!r}")


def _strict_float(v: Any, _t: Any) -> float:
    if isinstance(v, bool):
        raise ValueError(f"expected a number, got {v!r}")
    out: float | None = None
    if isinstance(v, (int, float)):
        try:
            out = float(v)
        except OverflowError:
            raise ValueError(f"expected a number within the float range, got {v!r}") from None
    elif isinstance(v, str):  # YAML 1.1 reads 1e-3 as a string
        try:
            out = float(v)
        except ValueError:
            pass
    if out is None:
        raise ValueError(f"expected a number, got {v!r}")
    if not math.isfinite(out):  # a NaN weight, timeout or interval passes every comparison, then breaks the run
        raise ValueError(f"must be a finite number, got {v!r}")
    return out


def _strict_str(v: Any, _t: Any) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return str(v)
    raise ValueError(f"expected a string, got {v!r}")


def _make_converter() -> cattrs.Converter:
    conv = cattrs.Converter(forbid_extra_keys=True)
    conv.register_structure_hook(bool, _strict_bool)
    conv.register_structure_hook(int, _strict_int)
    conv.register_structure_hook(float, _strict_float)
    conv.register_structure_hook(str, _strict_str)
    return conv


_converter = _make_converter()


def structure_options(cls: type, data: Mapping[str, Any], path: str, plugin: str | None) -> tuple[Any, list[ConfigIssue]]:
    """Structure ``data`` into attrs ``cls``; on failure return every issue with its key path.

    Field by field, so that an unknown key, a wrong type and a failed validator in the same
    mapping are all reported together.
    """
    if not isinstance(data, Mapping):
        return None, [ConfigIssue(path, f"expected a mapping of options, got {type(data).__name__}", plugin)]
    attrs.resolve_types(cls)
    fields = {(a.alias or a.name): a for a in attrs.fields(cls)}
    issues: list[ConfigIssue] = []
    for key in data:
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else f"; known options: {', '.join(fields) or '(none)'}"
            issues.append(ConfigIssue(path, f"option {key!r} is not known{hint}", plugin))
    values: dict[str, Any] = {}
    for key, field in fields.items():
        sub = f"{path}.{key}" if path else key
        if key not in data:
            if field.default is attrs.NOTHING:
                issues.append(ConfigIssue(path, f"required option {key!r} is missing", plugin))
            continue
        value = data[key]
        nested, nested_issues = _structure_nested(field.type, value, sub, plugin)
        if nested_issues is not None:  # an attrs class (or a list of them): recurse for exact paths
            issues += nested_issues
            if not nested_issues:
                values[key] = nested
            continue
        choices = _literal_choices(field.type)
        try:
            if choices is not None:
                if value not in choices:
                    raise ValueError(f"must be one of {', '.join(repr(c) for c in choices)}; got {value!r}")
            else:
                value = _converter.structure(value, field.type)
            if field.validator is not None:
                field.validator(None, field, value)
        except Exception as exc:  # noqa: BLE001 - translated into issues
            issues.extend(_issues_from(exc, field.type, sub, plugin))
            continue
        values[key] = value
    if issues:
        return None, issues
    try:
        return cls(**values), []
    except Exception as exc:  # noqa: BLE001 - cross-field checks in __attrs_post_init__
        return None, [ConfigIssue(path, _describe(exc), plugin)]


def _structure_nested(tp: Any, value: Any, path: str, plugin: str | None) -> tuple[Any, list[ConfigIssue] | None]:
    """Nested attrs options (or lists of them), structured with key paths down to the leaf."""
    if attrs.has(tp) and isinstance(value, Mapping):
        return structure_options(tp, value, path, plugin)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (list, tuple) and args and attrs.has(args[0]) and isinstance(value, list):
        out, issues = [], []
        for i, item in enumerate(value):
            obj, sub = structure_options(args[0], item, f"{path}[{i}]", plugin)
            issues += sub
            out.append(obj)
        return (origin(out) if not issues else None), issues
    return None, None


def _literal_choices(tp: Any) -> tuple[Any, ...] | None:
    if typing.get_origin(tp) is Literal:
        return typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType):  # Literal[...] | None
        args = typing.get_args(tp)
        lits = [a for a in args if typing.get_origin(a) is Literal]
        if lits and all(a is type(None) or typing.get_origin(a) is Literal for a in args):
            return tuple(c for a in lits for c in typing.get_args(a)) + ((None,) if type(None) in args else ())
    return None


def _issues_from(exc: BaseException, cls: Any, path: str, plugin: str | None) -> Iterator[ConfigIssue]:
    if isinstance(exc, ForbiddenExtraKeysError):
        fields = [a.name for a in attrs.fields(exc.cl)] if attrs.has(exc.cl) else []
        for key in sorted(exc.extra_fields):
            close = difflib.get_close_matches(key, fields, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else f"; known options: {', '.join(fields) or '(none)'}"
            yield ConfigIssue(path, f"option {key!r} is not known{hint}", plugin)
        return
    if isinstance(exc, (ClassValidationError, IterableValidationError)):
        for sub in exc.exceptions:
            sub_path = path
            for note in getattr(sub, "__notes__", []):
                name = getattr(note, "name", None)
                index = getattr(note, "index", None)
                if name is not None:
                    sub_path = f"{path}.{name}" if path else name
                elif index is not None:
                    sub_path = f"{path}[{index!r}]"
            sub_cls = _field_type(cls, sub_path[len(path) + 1:]) if sub_path != path else cls
            if isinstance(sub, (ClassValidationError, IterableValidationError, ForbiddenExtraKeysError)):
                yield from _issues_from(sub, sub_cls, sub_path, plugin)
            else:
                yield ConfigIssue(sub_path, _describe(sub), plugin)
        return
    if isinstance(exc, KeyError):  # a required option is missing
        yield ConfigIssue(path, f"required option {exc.args[0]!r} is missing", plugin)
        return
    yield ConfigIssue(path, _describe(exc), plugin)


def _field_type(cls: Any, name: str) -> Any:
    if attrs.has(cls):
        for a in attrs.fields(cls):
            if a.name == name:
                return a.type
    return None


def _describe(exc: BaseException) -> str:
    if isinstance(exc, KeyError):
        return f"required option {exc.args[0]!r} is missing"
    msg = str(exc)
    m = re.search(r"(\S+) not in literal (?:typing\.Literal\[(.+)\]|(.+))", msg)
    if m:
        return f"must be one of {m.group(2) or m.group(3)}; got {m.group(1)!r}"
    if isinstance(exc, TypeError) and "required" in msg:
        m = re.search(r"missing \d+ required keyword-only argument[s]?: (.+)", msg)
        if m:
            return f"required option {m.group(1)} is missing"
    return msg


# -- loading -------------------------------------------------------------------------------


#: a config file larger than this is refused before it is parsed
MAX_CONFIG_BYTES = 1 << 20
#: values a document may expand to (counting every alias use), and their characters: bounds
#: "billion laughs" documents before anything is constructed, formatted, redacted or copied
MAX_VALUES = 100_000
MAX_CHARS = 4_000_000
#: nesting depth of mappings and lists
MAX_DEPTH = 64

_BOMS = (
    (b"\xef\xbb\xbf", "utf-8-sig"), (b"\xff\xfe\x00\x00", "utf-32"), (b"\x00\x00\xfe\xff", "utf-32"),
    (b"\xff\xfe", "utf-16"), (b"\xfe\xff", "utf-16"),
)


class _YamlBoundError(Exception):
    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path
        self.message = message


def _decode(data: bytes) -> str:
    """UTF-8 (a byte-order mark allowed), or UTF-16/32 with a byte-order mark."""
    for bom, codec in _BOMS:
        if data.startswith(bom):
            return data.decode(codec)
    text = data.decode("utf-8")
    if "\x00" in text:
        raise UnicodeError("it contains NUL bytes (UTF-16 without a byte-order mark?)")
    return text


def _check_node(node: yaml.Node, path: str, depth: int, memo: dict[int, tuple[int, int]], active: set[int],
                issues: list[ConfigIssue]) -> tuple[int, int]:
    """(values, characters) ``node`` expands to; refuses cycles, depth, size; collects duplicate keys."""
    key = id(node)
    if key in memo:
        return memo[key]
    if key in active:
        raise _YamlBoundError(path, "a recursive alias (a value that contains itself); write the value out")
    if depth > MAX_DEPTH:
        shown = path if len(path) <= 80 else path[:80] + "..."
        raise _YamlBoundError(shown, f"nested deeper than {MAX_DEPTH} levels")
    active.add(key)
    values, chars = 1, 0
    if isinstance(node, yaml.ScalarNode):
        chars = len(node.value)
    elif isinstance(node, yaml.SequenceNode):
        for i, child in enumerate(node.value):
            v, c = _check_node(child, f"{path}[{i}]", depth + 1, memo, active, issues)
            values, chars = values + v, chars + c
    elif isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for k_node, v_node in node.value:
            name = k_node.value if isinstance(k_node, yaml.ScalarNode) else "?"
            sub = f"{path}.{name}" if path else str(name)
            if isinstance(k_node, yaml.ScalarNode) and k_node.tag != "tag:yaml.org,2002:merge":
                if name in seen:
                    issues.append(ConfigIssue(sub, f"duplicate key {name!r} (lines {seen[name]} and "
                                              f"{k_node.start_mark.line + 1}); keep one"))
                else:
                    seen[name] = k_node.start_mark.line + 1
            for child, child_path in ((k_node, path), (v_node, sub)):
                v, c = _check_node(child, child_path, depth + 1, memo, active, issues)
                values, chars = values + v, chars + c
    active.discard(key)
    if values > MAX_VALUES or chars > MAX_CHARS:
        raise _YamlBoundError(
            path, f"expands to more than {MAX_VALUES:,} values or {MAX_CHARS:,} characters (aliases such as "
            f"*name repeat a value each time they are used); a config is never that large",
        )
    memo[key] = (values, chars)
    return values, chars


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that stops composing past MAX_DEPTH nested nodes (before Python's recursion limit)."""

    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise _YamlBoundError(f"line {mark.line + 1}, column {mark.column + 1}",
                                      f"nested deeper than {MAX_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def parse_yaml(text: str, where: str = "") -> Any:
    """``yaml.safe_load`` with bounds: alias expansion, size, depth, no recursive aliases, no duplicate keys.

    Raises ConfigError (key path in each issue) or yaml.YAMLError.
    """
    loader = _BoundedLoader(text)
    try:
        issues: list[ConfigIssue] = []
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            _check_node(node, where, 0, {}, set(), issues)
        except _YamlBoundError as exc:
            raise ConfigError([ConfigIssue(exc.path, exc.message)]) from None
        if issues:
            raise ConfigError(issues)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Safe-load a YAML mapping (bounded: see parse_yaml), with the file named in every error."""
    path = Path(path)
    try:
        with path.open("rb") as fh:
            data = fh.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError([ConfigIssue("", f"cannot read the file: {exc.strerror or exc}")], str(path)) from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError([ConfigIssue("", f"larger than {MAX_CONFIG_BYTES:,} bytes; is this a config file?")], str(path))
    try:
        text = _decode(data)
    except UnicodeError as exc:
        at = ""
        if isinstance(exc, UnicodeDecodeError):
            line = data[: exc.start].count(b"\n") + 1
            col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
            at = f" (byte 0x{data[exc.start]:02x} at line {line}, column {col})"
            exc = "it is not UTF-8 text"  # type: ignore[assignment]
        raise ConfigError([ConfigIssue("", f"cannot decode the file: {exc}{at}; save it as UTF-8")], str(path)) from None
    try:
        data = parse_yaml(text)
    except ConfigError as exc:
        raise ConfigError(exc.issues, str(path)) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError([ConfigIssue(where, f"not valid YAML: {problem}")], str(path)) from None
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError([ConfigIssue("", f"the top level must be a mapping, got {type(data).__name__}")], str(path))
    return dict(data)


def apply_overrides(raw: dict[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """``key.path=value`` overrides (value parsed as YAML); ``backends[1].log_dir=x`` indexes lists."""
    issues = []
    for item in overrides:
        if "=" not in item:
            issues.append(ConfigIssue(item, "an override must look like key.path=value"))
            continue
        key, _, text = item.partition("=")
        try:
            value = parse_yaml(text, key.strip()) if text.strip() else ""
        except ConfigError as exc:
            issues.extend(exc.issues)
            continue
        except yaml.YAMLError:
            value = text
        parts = [p for p in re.split(r"\.|\[(\d+)\]", key.strip()) if p]
        node: Any = raw
        try:
            for i, part in enumerate(parts[:-1]):
                nxt = parts[i + 1]
                if isinstance(node, list):
                    node = node[int(part)]
                elif node.get(part) is None or isinstance(node.get(part), str):
                    if isinstance(node.get(part), str):  # bare component name -> mapping
                        node[part] = {"name": node[part]}
                    else:
                        node[part] = [] if nxt.isdigit() else {}
                    node = node[part]
                else:
                    node = node[part]
                if isinstance(node, list) and nxt.isdigit() and isinstance(node[int(nxt)], str):
                    node[int(nxt)] = {"name": node[int(nxt)]}
            last = parts[-1]
            if isinstance(node, list):
                node[int(last)] = value
            else:
                node[last] = value
        except (IndexError, KeyError, TypeError, AttributeError, ValueError) as exc:
            issues.append(ConfigIssue(key, f"cannot apply override: {exc}"))
    if issues:
        raise ConfigError(issues, "(overrides)")
    return raw


def load_config(
    source: str | Path | Mapping[str, Any] | None = None,
    *,
    overrides: Iterable[str] = (),
    registry: Registry | None = None,
    extra_sections: Mapping[str, type] | None = None,
    passthrough: Iterable[str] = (),
    default_plugins: bool = False,
    prepare: Callable[[dict[str, Any]], list[ConfigIssue]] | None = None,
) -> Config:
    """Load, validate and resolve a config (a YAML path or an already-parsed mapping).

    ``extra_sections`` maps engine sections (e.g. ``simulate``) to the attrs class that validates
    them; ``passthrough`` names sections kept as they are for an engine to check (e.g. ``verl``).
    ``default_plugins`` (what the engines ask for) adds the plugins a run has unless turned off:
    ``source_metrics`` when ``run.source_metrics`` is true and ``rewards:`` does not list it.
    ``prepare`` edits the raw mapping in place before validation (an engine section mapped onto the
    rlhooks sections, e.g. ``verl:``) and returns its issues.
    Raises ConfigError listing every problem found.
    """
    if source is None:
        raw: dict[str, Any] = {}
        src_name = None
    elif isinstance(source, Mapping):
        raw = _deep_copy(source)
        src_name = None
    else:
        raw = load_yaml(source)
        src_name = str(source)
    raw = apply_overrides(raw, overrides)
    registry = registry if registry is not None else Registry()
    extra_sections = dict(extra_sections or {})
    issues: list[ConfigIssue] = prepare(raw) if prepare is not None else []
    issues += lift_filter_run_options(raw)

    # Phase 1: the outer shape.
    passthrough = tuple(passthrough)
    known = (*TOP_LEVEL, *extra_sections, *passthrough)
    for key in raw:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else f"; known sections: {', '.join(known)}"
            if key in VERL_CONFIG_SECTIONS:
                hint = (f": it is a section of verl's config; nest it under 'verl:' (verl: {{{key}: ...}}), "
                        f"which rlhooks train passes to verl")
            issues.append(ConfigIssue(str(key), f"section {key!r} is not known{hint}"))
    # an empty section (``run:`` with nothing under it) is None; any other non-mapping is an error
    run, run_issues = structure_options(RunOptions, _section(raw, "run"), "run", None)
    issues += run_issues
    extra: dict[str, Any] = {}
    for key, cls in extra_sections.items():
        value, sub = structure_options(cls, _section(raw, key), key, None)
        issues += sub
        extra[key] = value
    for key in passthrough:
        if key in raw:
            extra[key] = raw[key]

    # Phase 2: each named component and its options.
    sections: dict[str, Any] = {}
    for section, (kind, is_list) in SECTIONS.items():
        value = raw.get(section)
        if value is None:
            sections[section] = () if is_list else None
            continue
        if is_list:
            if isinstance(value, (str, Mapping)):
                value = [value]  # a single component where a list is expected
            if not isinstance(value, list):
                issues.append(ConfigIssue(section, f"expected a list of components, got {type(value).__name__}"))
                sections[section] = ()
                continue
            built = []
            for i, item in enumerate(value):
                comp, sub = _component(kind, item, f"{section}[{i}]", registry)
                issues += sub
                if comp is not None:
                    built.append(comp)
            sections[section] = tuple(built)
        else:
            comp, sub = _component(kind, value, section, registry)
            issues += sub
            sections[section] = comp

    if issues:
        raise ConfigError(issues, src_name)
    if default_plugins:
        sections["rewards"] = _with_source_metrics(run, sections["rewards"], registry)
    return Config(run=run, extra=extra, source=src_name, raw=raw, **sections)


#: the plugin ``run.source_metrics`` adds
SOURCE_METRICS = "source_metrics"


def _with_source_metrics(run: RunOptions, rewards: tuple[ComponentConfig, ...], registry: Registry) -> tuple[ComponentConfig, ...]:
    """``rewards`` plus the per-source metrics plugin when run.source_metrics is on and none is listed.

    The added instance skips batches without the source column (it is on by default, so a dataset
    without data_source is not an error); one listed in ``rewards:`` keeps its own options.
    """
    if not run.source_metrics or any(c.name == SOURCE_METRICS for c in rewards):
        return rewards
    comp, sub = _component("reward", {"name": SOURCE_METRICS, "missing_source": "skip"}, "run.source_metrics", registry)
    if comp is None:  # a registry without the built-in plugin (e.g. a test's): nothing to add
        return rewards
    if any(c.obj is comp.obj for c in rewards):  # listed under another name
        return rewards
    return (*rewards, comp)


#: DAPO filter names whose entry may carry run options, as the dynamic-sampling document groups them
DAPO_FILTER_NAMES = ("dapo", "filter_groups")
#: the top-level sections of verl's trainer config (ppo_trainer.yaml): in an rlhooks YAML they belong
#: under ``verl:`` (a test checks the list against verl's composed config)
VERL_CONFIG_SECTIONS = (
    "actor_rollout_ref", "algorithm", "critic", "custom_reward_function", "data", "distillation", "global_profiler",
    "model_engine", "ray_kwargs", "reward", "reward_model", "sandbox_fusion", "skip", "trainer", "transfer_queue",
)

#: run options accepted on a DAPO filter entry (``filters: [{name: dapo, max_num_gen_batches: 10}]``)
FILTER_RUN_KEYS = ("max_num_gen_batches",)


def lift_filter_run_options(raw: dict[str, Any]) -> list[ConfigIssue]:
    """Move run options written on a DAPO filter entry into ``run:`` (in place).

    A value that differs from an explicit ``run.<key>`` (or from another filter entry) is an
    issue naming both keys. Returns the issues; ``raw`` keeps the entries it could not lift.
    """
    filters = raw.get("filters")
    if isinstance(filters, Mapping):
        filters = [filters]
    if not isinstance(filters, list):
        return []
    issues: list[ConfigIssue] = []
    origin: dict[str, str] = {}
    for i, item in enumerate(filters):
        if not isinstance(item, Mapping) or item.get("name") not in DAPO_FILTER_NAMES:
            continue
        for key in FILTER_RUN_KEYS:
            if key not in item:
                continue
            item = dict(item)
            value = item.pop(key)
            here = f"filters[{i}].{key}"
            if isinstance(value, bool) or not isinstance(value, int):
                issues.append(ConfigIssue(here, f"expected an integer (0 or negative = unlimited), got {value!r}"))
                if isinstance(raw["filters"], list):  # reported once, here, not again as an unknown filter option
                    raw["filters"][i] = item
                else:
                    raw["filters"] = item
                continue
            run = raw.get("run")
            if run is None:
                run = raw["run"] = {}
            if not isinstance(run, dict):
                return issues  # phase 1 reports a malformed run: section
            if key in run and run[key] is not None and run[key] != value:
                where = origin.get(key, f"run.{key}")
                issues.append(ConfigIssue(here, f"is {value!r} but {where} is {run[key]!r}; it is one setting "
                                          f"(run.{key}): give it once, or make the two agree"))
                continue
            run[key] = value
            origin[key] = here
            if isinstance(raw["filters"], list):
                raw["filters"][i] = item
            else:
                raw["filters"] = item
    return issues


def _section(raw: Mapping[str, Any], key: str) -> Any:
    value = raw.get(key)
    return {} if value is None else value


def _component(kind: str, item: Any, path: str, registry: Registry) -> tuple[ComponentConfig | None, list[ConfigIssue]]:
    if isinstance(item, str):
        item = {"name": item}
    if not isinstance(item, Mapping):
        return None, [ConfigIssue(path, f"a component is a name or a mapping with 'name:', got {type(item).__name__}")]
    item = dict(item)
    class_path = None
    if kind == "sampler" and ("class_name" in item or "class_path" in item):
        if "name" in item and "class_name" in item:
            return None, [ConfigIssue(path, "give either 'name' or 'class_name', not both")]
        if "class_name" not in item:
            return None, [ConfigIssue(path, "'class_path' needs a 'class_name' too")]
        item["name"] = item.pop("class_name")
        class_path = item.pop("class_path", None)
    name = item.pop("name", None)
    if not isinstance(name, str) or not name:
        return None, [ConfigIssue(path, "component has no 'name' (a string naming an installed component)")]
    try:
        obj, dist = _resolve(kind, name, class_path, registry)
    except RegistryError as exc:
        return None, [ConfigIssue(path, str(exc), name)]
    issues: list[ConfigIssue] = []
    on_error = item.pop("on_error", DEFAULT_ON_ERROR[kind])
    if on_error not in ON_ERROR_CHOICES:
        issues.append(ConfigIssue(f"{path}.on_error", f"must be one of {', '.join(ON_ERROR_CHOICES)}, got {on_error!r}", name))
    weight, error_score = 1.0, 0.0
    reward_fn = kind == "reward" and is_reward_function(obj)
    if reward_fn:
        for key in REWARD_FN_KEYS:
            if key in item:
                try:
                    val = _strict_float(item.pop(key), float)
                except ValueError as exc:
                    issues.append(ConfigIssue(f"{path}.{key}", str(exc), name))
                    continue
                if key == "weight":
                    weight = val
                else:
                    error_score = val
    opts_cls = options_class(obj)
    if opts_cls is None:
        if item:
            known = ", ".join(REWARD_FN_KEYS) if reward_fn else "(none)"
            for key in item:
                issues.append(ConfigIssue(path, f"option {key!r} is not known; this {kind} takes no options (known: {known})", name))
        options: Any = NoOptions()
    else:
        options, sub = structure_options(opts_cls, item, path, name)
        issues += sub
    if issues:
        return None, issues
    return ComponentConfig(
        kind=kind, name=name, path=path, options=options, on_error=on_error, obj=obj, distribution=dist,
        weight=weight, error_score=error_score, raw=dict(item),
    ), []


def _resolve(kind: str, name: str, class_path: str | None, registry: Registry) -> tuple[Any, str]:
    """Entry-point lookup; a verl-style ``class_path`` imports the class directly instead."""
    if class_path:
        module = class_path.removeprefix("pkg://").removesuffix(".py").replace("/", ".")
        if module not in LEGACY_SAMPLER_MODULES:
            try:
                mod = importlib.import_module(module)
            except ImportError as exc:
                raise RegistryError(f"class_path {class_path!r}: cannot import {module!r}: {exc}") from None
            try:
                return getattr(mod, name), f"{module} (class_path)"
            except AttributeError:
                raise RegistryError(f"class_path {class_path!r}: module {module!r} has no {name!r}") from None
        # the old verl_extensions location maps onto the built-ins of the same name
    info = registry.info(kind, name)
    obj = info.load()
    deprecated = getattr(obj, "deprecated_names", {})
    if name in deprecated:
        import structlog

        structlog.get_logger("rlhooks.config").warning(
            f"{kind} name {name!r} is deprecated; use {deprecated[name]!r}", plugin=name
        )
    return obj, f"{info.dist} {info.version}"


def _deep_copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _deep_copy(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_deep_copy(v) for v in value]
    return value


__all__ = [
    "Config",
    "ComponentConfig",
    "RunOptions",
    "load_config",
    "load_yaml",
    "apply_overrides",
    "structure_options",
    "redact_secrets",
    "SECTIONS",
]
