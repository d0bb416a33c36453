"""MCP input schemas, kept as the server gave them wherever providers accept them.

The registry's portable subset (``toolexec._gate._schema``) takes ``anyOf``,
``$defs`` and local ``$ref``s as they are, so a server's schema is passed
on unchanged (descriptions on each branch, a repeated branch, a union of
objects, a recursive definition included). Only what OpenAI refuses is
rewritten, and only where the rewrite is exact (``toolexec._gate._rewrites``):
``oneOf`` over alternatives no value can match twice becomes ``anyOf``,
``allOf`` whose parts agree is merged, and a top-level ``$ref`` is
replaced by what it points to; definitions nothing refers to are dropped
(a server may send all of them with every tool). ``portable_schema`` raises
``UnportableSchema`` when such a keyword has no exact rewrite; whatever else
is outside the subset is left for the registry's check, which names it.
Nothing is copied that is not rewritten.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._gate._pointer import resolve, tokens
from .._gate._rewrites import Conflict, merge_all_of, one_of_means_any_of
from .._gate._schema import SUBSCHEMA_MAPS, SUBSCHEMA_VALUES

__all__ = ["UnportableSchema", "portable_schema"]

_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")


class UnportableSchema(Exception):
    """A schema with a keyword a provider refuses and no exact rewrite; the message says why."""


def portable_schema(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """``schema`` with the exact rewrites it needs (itself if none); else ``UnportableSchema``."""

    def look(ref: str) -> Any:
        return resolve(schema, ref)

    out = _rewrite(_without_unused_defs(schema), look, "#")
    if isinstance(out, Mapping) and isinstance(out.get("$ref"), str) and "type" not in out:
        out = _top_level_ref(out, look)
    return out  # type: ignore[no-any-return]


_DEFS = ("$defs", "definitions")


def _without_unused_defs(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """``schema`` without the definitions nothing refers to (exact: they validate nothing).

    A server may give every tool all of its definitions; one a tool never
    uses must not decide whether the tool can be registered.
    """
    defs = {key: schema[key] for key in _DEFS if isinstance(schema.get(key), Mapping)}
    if not defs:
        return schema
    used: set[tuple[str, str]] = set()
    pending = list(_refs({k: v for k, v in schema.items() if k not in defs}))
    while pending:
        try:
            steps = tokens(pending.pop())
        except LookupError:
            continue
        if len(steps) < 2 or steps[0] not in defs or steps[1] not in defs[steps[0]]:
            continue  # not into a definition: into the schema itself, walked already
        if (steps[0], steps[1]) not in used:
            used.add((steps[0], steps[1]))
            pending.extend(_refs(defs[steps[0]][steps[1]]))
    if len(used) == sum(len(d) for d in defs.values()):
        return schema
    out = {k: v for k, v in schema.items() if k not in defs}
    for key, entries in defs.items():
        kept = {name: sub for name, sub in entries.items() if (key, name) in used}
        if kept:
            out[key] = kept
    return out


def _refs(node: Any) -> list[str]:
    """Every ``$ref`` string in ``node``, at any depth."""
    found: list[str] = []
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            if isinstance(item.get("$ref"), str):
                found.append(item["$ref"])
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


def _rewrite(node: Any, look: Any, where: str) -> Any:
    if not isinstance(node, Mapping):
        return node
    changed = _rewritten_subschemas(node, look, where)
    out: Mapping[str, Any] = {**node, **changed} if changed else node
    if isinstance(out.get("allOf"), list):
        try:
            out = merge_all_of(out, look)
        except Conflict as exc:
            raise UnportableSchema(
                f"schema at {where} uses 'allOf', which OpenAI refuses in function parameters, "
                f"and its parts cannot be merged exactly: {exc}"
            ) from None
    if isinstance(out.get("oneOf"), list) and "anyOf" not in out:
        if not one_of_means_any_of(out["oneOf"], look):
            raise UnportableSchema(
                f"schema at {where} uses 'oneOf', which OpenAI refuses in function parameters, "
                "over alternatives a value may match together (anyOf would accept it)"
            )
        out = {("anyOf" if k == "oneOf" else k): v for k, v in out.items()}
    return out


def _rewritten_subschemas(node: Mapping[str, Any], look: Any, where: str) -> dict[str, Any]:
    """The keywords of ``node`` whose sub-schemas were rewritten, with their new values."""
    changed: dict[str, Any] = {}
    for key in SUBSCHEMA_MAPS:
        subs = node.get(key)
        if isinstance(subs, Mapping):
            new = {name: _rewrite(sub, look, f"{where}/{key}/{name}") for name, sub in subs.items()}
            if any(new[name] is not sub for name, sub in subs.items()):
                changed[key] = new
    for key in (*SUBSCHEMA_VALUES, *_LISTS):
        sub = node.get(key)
        if isinstance(sub, list):
            items = [_rewrite(s, look, f"{where}/{key}/{i}") for i, s in enumerate(sub)]
            if any(a is not b for a, b in zip(items, sub, strict=True)):
                changed[key] = items
        elif (
            isinstance(sub, Mapping)
            and (new_sub := _rewrite(sub, look, f"{where}/{key}")) is not sub
        ):
            changed[key] = new_sub
    return changed


def _top_level_ref(schema: Mapping[str, Any], look: Any) -> Mapping[str, Any]:
    """A schema that is only a ``$ref`` (and ``$defs``) at the top: what it points to."""
    rest = {k: v for k, v in schema.items() if k != "$ref"}
    try:
        return merge_all_of({**rest, "allOf": [{"$ref": schema["$ref"]}]}, look)
    except Conflict:
        return schema
