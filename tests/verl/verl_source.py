"""Reading verl's source in tests: the AST of a function, the keys it assigns, writes or passes, its parameters."""

from __future__ import annotations

import ast
import inspect
import textwrap


def _tree(func) -> ast.AST:
    return ast.parse(textwrap.dedent(inspect.getsource(inspect.unwrap(func))))


def _dict_keys(node: ast.AST) -> set[str]:
    return {k.value for k in getattr(node, "keys", []) if isinstance(k, ast.Constant) and isinstance(k.value, str)}


def assigned_literal(func, name: str) -> set[str]:
    """String keys / items of the dict or set literals assigned to ``name`` in ``func``."""
    out: set[str] = set()
    for node in ast.walk(_tree(func)):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            if isinstance(node.value, ast.Dict):
                out |= _dict_keys(node.value)
            elif isinstance(node.value, ast.Set):
                out |= {e.value for e in node.value.elts if isinstance(e, ast.Constant)}
    return out


def subscript_stores(func, name: str) -> set[str]:
    """Keys written as ``name["key"] = ...`` in ``func`` (optional outputs)."""
    out = set()
    for node in ast.walk(_tree(func)):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if (isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == name
                        and isinstance(t.slice, ast.Constant)):
                    out.add(t.slice.value)
    return out


def call_dict_keys(func, callee: str) -> set[str]:
    """String keys of dict literals passed as first argument to a call of ``callee`` (a name or attribute)."""
    out: set[str] = set()
    for node in ast.walk(_tree(func)):
        if isinstance(node, ast.Call):
            f = node.func
            called = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
            if called == callee and node.args and isinstance(node.args[0], ast.Dict):
                out |= _dict_keys(node.args[0])
    return out


def string_constants(func) -> set[str]:
    return {n.value for n in ast.walk(_tree(func)) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def params(func) -> list[tuple[str, object, object]]:
    sig = inspect.signature(func)
    return [(p.name, p.kind, p.default) for p in sig.parameters.values()]
