"""Structuring options into attrs classes with a strict cattrs converter, and translating its errors.

Every problem becomes a ConfigIssue with its key path and the component's name.
"""

from __future__ import annotations

import difflib
import math
import re
import types
import typing
from collections.abc import Iterator, Mapping
from typing import Any, Literal

import attrs
import cattrs
from cattrs.errors import ClassValidationError, ForbiddenExtraKeysError, IterableValidationError

from rlhooks.core.errors import ConfigIssue

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
