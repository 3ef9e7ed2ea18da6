"""Bounded YAML loading (size, alias expansion, depth, duplicate keys) and ``key.path=value`` overrides."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from rlhooks.core.errors import ConfigError, ConfigIssue

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


def _deep_copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _deep_copy(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_deep_copy(v) for v in value]
    return value
