"""MCP input schemas rewritten into the registry's portable subset, where one exists.

Servers (pydantic ones above all) send local ``$ref`` and ``anyOf`` over
``null``; the registry accepts neither. ``portable_schema`` inlines local
definitions and merges alternatives that each allow one distinct type into
a type list, which is exact (see ``_merge_types``); anything else raises
``UnportableSchema`` and the tool is skipped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["UnportableSchema", "portable_schema"]


class UnportableSchema(Exception):
    """A schema with no equivalent in the portable subset; the message says why."""


def portable_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """Rewrite a schema into the portable subset, or raise ``UnportableSchema``."""
    defs = {**schema.get("definitions", {}), **schema.get("$defs", {})}
    out: dict[str, Any] = _rewrite(schema, defs, ())
    out.pop("$defs", None)
    out.pop("definitions", None)
    return out


def _rewrite(node: Any, defs: Mapping[str, Any], seen: tuple[str, ...]) -> Any:
    if isinstance(node, list):
        return [_rewrite(item, defs, seen) for item in node]
    if not isinstance(node, Mapping):
        return node
    if "$ref" in node:
        return _inline_ref(node, defs, seen)
    out = {k: _rewrite(v, defs, seen) for k, v in node.items() if k not in ("$defs", "definitions")}
    for key in ("anyOf", "oneOf"):
        if key in out:
            _merge_alternatives(out, key)
    return out


def _inline_ref(node: Mapping[str, Any], defs: Mapping[str, Any], seen: tuple[str, ...]) -> Any:
    """The local definition ``node`` refers to, with ``node``'s other keywords over it."""
    ref = node["$ref"]
    prefix = next((p for p in ("#/$defs/", "#/definitions/") if ref.startswith(p)), None)
    if prefix is None or ref[len(prefix) :] not in defs:
        raise UnportableSchema(f"$ref {ref!r} is not a local definition")
    if ref in seen:
        raise UnportableSchema(f"$ref {ref!r} is recursive")
    target = _rewrite(defs[ref[len(prefix) :]], defs, (*seen, ref))
    return {**target, **_rewrite({k: v for k, v in node.items() if k != "$ref"}, defs, seen)}


def _merge_alternatives(out: dict[str, Any], key: str) -> None:
    """Replace ``out[key]`` (``anyOf``/``oneOf``) by the one schema it amounts to."""
    merged = _merge_types(out.pop(key), exclusive=key == "oneOf")
    if merged is None:
        raise UnportableSchema(f"{key} over overlapping alternatives")
    for name, value in merged.items():
        if name in out and out[name] != value:
            raise UnportableSchema(f"{key} conflicts with a sibling {name!r}")
        out[name] = value


# Keywords that only describe; merging them loses nothing.
_ANNOTATIONS = frozenset(
    ("title", "description", "default", "examples", "deprecated", "$comment", "readOnly")
)


def _merge_types(branches: list[Any], *, exclusive: bool) -> dict[str, Any] | None:
    """Merge alternatives that each allow one distinct type into one schema.

    Exact because every other keyword of a branch either only describes or
    only constrains values of that branch's type (``minLength`` says nothing
    about integers). ``enum``/``const`` constrain every type, so they are
    merged only beside a bare ``null`` alternative (``None`` joins the enum).
    """
    merged: dict[str, Any] = {}
    types: list[str] = []
    enums: list[Any] = []
    for branch in branches:
        kind = branch.get("type") if isinstance(branch, Mapping) else None
        if not isinstance(kind, str) or kind in types:
            return None
        types.append(kind)
        for name, value in branch.items():
            if name in ("enum", "const"):
                enums.extend(value if name == "enum" else [value])
            elif name != "type" and not (name in _ANNOTATIONS and name in merged):
                if name in merged and merged[name] != value:
                    return None
                merged[name] = value
    if exclusive and {"integer", "number"} <= set(types):
        return None
    if enums:
        plain = [b for b in branches if "enum" not in b and "const" not in b]
        if plain and plain != [{"type": "null"}]:
            return None
        merged["enum"] = enums + [None] * len(plain)
    merged["type"] = types if len(types) > 1 else types[0]
    return merged
