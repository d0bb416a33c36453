"""Exact rewrites of the keywords providers refuse: ``oneOf`` and ``allOf``.

Tool sources (MCP servers, OpenAPI documents) keep a schema as it was given
wherever the portable subset (``_schema``) takes it. OpenAI refuses
``oneOf`` and ``allOf`` in function parameters, so where a rewrite says
exactly the same thing, the sources make it; where none does, the tool is
refused, saying why:

* ``oneOf`` becomes ``anyOf`` when no value can match two of its branches
  (``one_of_means_any_of``): the branches accept disjoint JSON types
  (``integer`` counts as a ``number``), disjoint ``const``/``enum`` values,
  or are objects that each require one property whose ``const``/``enum``
  values are disjoint (a discriminator). Where two branches overlap only
  because one is redundant (repeated, a type the other names too, or a few
  values of a type the other takes whole), the union is what was meant,
  and ``anyOf`` says it.
  Annotations never matter.
* ``allOf`` is merged into its schema (``merge_all_of``) when its parts do
  not conflict: ``properties`` are merged (a property both define is merged
  the same way), ``required`` lists are joined, ``type``s and ``enum``s
  intersected, lower bounds raised and upper bounds lowered; annotations
  (``description``, ``title``, ``default``...) may differ, the first one
  wins. ``additionalProperties`` beside another part's ``properties`` does
  not merge exactly (it would judge properties it did not see), nor do
  different values of any other keyword.

``look(ref)`` gives what a ``$ref`` points to (the source knows where), or
raises ``LookupError``; a part that is a ``$ref`` is merged as its target.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["ANNOTATIONS", "Conflict", "Look", "merge_all_of", "one_of_means_any_of"]

Look = Callable[[str], Any]

#: Keywords that only describe; two parts may disagree on them.
ANNOTATIONS = frozenset(
    (
        "title",
        "description",
        "default",
        "examples",
        "example",
        "deprecated",
        "readOnly",
        "writeOnly",
        "$comment",
    )
)
# Keywords beside allOf that neither constrain nor describe a value.
_PLACES = frozenset(("$defs", "definitions", "$schema", "$id", "$anchor"))
_ALL = frozenset(("null", "boolean", "object", "array", "number", "string"))
_LOWER = frozenset(("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties"))
_UPPER = frozenset(("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties"))
_CLOSED = ("additionalProperties", "unevaluatedProperties", "unevaluatedItems")
_DEPTH = 32  # how far $refs are followed before a schema counts as unknown (or cyclic)


class Conflict(Exception):
    """Why ``allOf`` parts cannot be merged exactly; the message says."""


# -- oneOf ----------------------------------------------------------------------


def one_of_means_any_of(branches: list[Any], look: Look) -> bool:
    """Whether ``anyOf`` over ``branches`` says what ``oneOf`` means.

    True when no value can match two branches, or where two can, one of
    them is redundant: a repeated branch, or one whose every value (its
    types, its ``enum``, its ``const``) the other, which only names types,
    accepts (``oneOf: [{type: string}, {enum: ["INF"]}]``, ``oneOf:
    [{type: integer}, {type: number}]``). Read literally such a ``oneOf``
    refuses the values both accept; its author meant the union, so it is
    read as ``anyOf``.
    """
    facts = [_Facts.of(branch, look) for branch in branches]
    return all(
        a.disjoint(b) or _redundant(x, y, look) or _redundant(y, x, look)
        for i, (a, x) in enumerate(zip(facts, branches, strict=True))
        for b, y in zip(facts[i + 1 :], branches[i + 1 :], strict=True)
    )


_TYPE_ONLY = frozenset(("type", "format"))  # format only describes, in 2020-12


def _redundant(mine: Any, theirs: Any, look: Look) -> bool:
    """Whether every value ``mine`` accepts, ``theirs`` accepts too (provably, simply)."""
    mine, theirs = _followed(mine, look), _followed(theirs, look)
    if not isinstance(mine, Mapping) or not isinstance(theirs, Mapping):
        return False
    if _meaning(mine) == _meaning(theirs):
        return True
    if set(_meaning(theirs)) != {"type"} or set(_meaning(mine)) - {"type", "enum", "const"}:
        return False
    kinds = _types(theirs["type"])
    if set(_meaning(mine)) == {"type"}:
        return all(
            k in kinds or (k == "integer" and "number" in kinds) for k in _types(mine["type"])
        )
    values = [mine["const"]] if "const" in mine else mine.get("enum")
    return isinstance(values, list) and all(_fits(v, kinds) for v in values)


def _types(kind: Any) -> list[Any]:
    return kind if isinstance(kind, list) else [kind]


def _meaning(schema: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in schema.items() if k not in ANNOTATIONS and k != "format"}


def _followed(schema: Any, look: Look) -> Any:
    for _ in range(_DEPTH):
        if not (isinstance(schema, Mapping) and set(_meaning(schema)) == {"$ref"}):
            break
        try:
            schema = look(schema["$ref"])
        except LookupError:
            break
    return schema


def _fits(value: Any, kinds: list[Any]) -> bool:
    kind = _kind(value)
    if kind == "number" and "integer" in kinds and float(value).is_integer():
        return True
    return kind in kinds


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _key(value: Any) -> str:
    """One key per JSON value as JSON Schema compares them (``1`` equals ``1.0``)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"n:{float(value)!r}"
    return json.dumps(value, sort_keys=True)


class _Facts:
    """What a branch is known to allow: JSON types, values, and required properties."""

    def __init__(self) -> None:
        self.kinds: frozenset[str] = _ALL
        self.values: frozenset[str] | None = None  # None: not limited to an enum
        self.properties: dict[str, _Facts] = {}
        self.required: set[str] = set()

    @classmethod
    def of(cls, schema: Any, look: Look, depth: int = 0) -> _Facts:
        facts = cls()
        if schema is False:
            facts.kinds = frozenset()
        if isinstance(schema, Mapping) and depth < _DEPTH:
            facts._learn(schema, look, depth)
        return facts

    def _learn(self, schema: Mapping[str, Any], look: Look, depth: int) -> None:
        kind = schema.get("type")
        if isinstance(kind, str | list):
            named = {kind} if isinstance(kind, str) else set(kind)
            self.kinds &= frozenset("number" if k == "integer" else k for k in named)
        for values in ([schema["const"]] if "const" in schema else None, schema.get("enum")):
            if isinstance(values, list):
                self.kinds &= frozenset(map(_kind, values))
                keys = frozenset(map(_key, values))
                self.values = keys if self.values is None else self.values & keys
        if isinstance(schema.get("required"), list):
            self.required.update(r for r in schema["required"] if isinstance(r, str))
        properties = schema.get("properties")
        for name, sub in properties.items() if isinstance(properties, Mapping) else ():
            self.properties.setdefault(name, _Facts.of(sub, look, depth + 1))
        ref = schema.get("$ref")
        if isinstance(ref, str):
            with contextlib.suppress(LookupError):  # unknown: nothing learnt
                self._add(_Facts.of(look(ref), look, depth + 1))
        if isinstance(schema.get("anyOf"), list):
            alternatives = [_Facts.of(b, look, depth + 1) for b in schema["anyOf"]]
            self.kinds &= frozenset().union(*(a.kinds for a in alternatives))
        for part in schema["allOf"] if isinstance(schema.get("allOf"), list) else ():
            self._add(_Facts.of(part, look, depth + 1))

    def _add(self, other: _Facts) -> None:
        """Narrow to what ``other`` allows too (both apply)."""
        self.kinds &= other.kinds
        if other.values is not None:
            self.values = other.values if self.values is None else self.values & other.values
        self.required |= other.required
        for name, sub in other.properties.items():
            self.properties.setdefault(name, sub)

    def disjoint(self, other: _Facts) -> bool:
        if not self.kinds & other.kinds:
            return True
        if self.values is not None and other.values is not None and not self.values & other.values:
            return True
        if self.kinds | other.kinds != {"object"}:
            return False
        for name in self.required & other.required:
            mine, theirs = self.properties.get(name), other.properties.get(name)
            if mine is not None and theirs is not None and mine.disjoint(theirs):
                return True
        return False


# -- allOf ----------------------------------------------------------------------


def merge_all_of(schema: Mapping[str, Any], look: Look, depth: int = 0) -> dict[str, Any]:
    """``schema`` with its ``allOf`` parts merged into it; ``Conflict`` if not exact."""
    out = {k: v for k, v in schema.items() if k != "allOf"}
    parts = [_expand(part, look, depth) for part in schema["allOf"]]
    constraining = [p for p in (out, *parts) if set(p) - ANNOTATIONS - _PLACES]
    if len(constraining) > 1 and any(k in p for p in constraining for k in _CLOSED):
        raise Conflict("allOf with additionalProperties cannot be merged exactly")
    for part in parts:
        _merge_into(out, part, look, depth)
    return out


def _expand(part: Any, look: Look, depth: int) -> dict[str, Any]:
    """An ``allOf`` part as plain keywords: its own ``allOf`` merged, its ``$ref`` followed."""
    if part is True:
        return {}
    if not isinstance(part, Mapping):
        raise Conflict("allOf part is not an object schema")
    if depth > _DEPTH:
        raise Conflict("allOf parts refer to each other in a cycle")
    out = dict(part)
    if "allOf" in out:
        out = merge_all_of(out, look, depth + 1)
    if isinstance(out.get("$ref"), str):
        try:
            target = look(out.pop("$ref"))
        except LookupError:
            raise Conflict(f"allOf part $ref {part['$ref']!r} points to nothing") from None
        base = _expand(target, look, depth + 1)
        _merge_into(base, out, look, depth + 1)
        out = base
    return out


def _merge_into(out: dict[str, Any], part: Mapping[str, Any], look: Look, depth: int) -> None:
    for name, value in part.items():
        mine = out.get(name)
        if name not in out or mine == value or name in ANNOTATIONS:
            out.setdefault(name, value)
        elif name == "properties" and isinstance(mine, Mapping) and isinstance(value, Mapping):
            out[name] = _merge_properties(mine, value, look, depth)
        elif name == "required" and isinstance(mine, list) and isinstance(value, list):
            out[name] = list(dict.fromkeys([*mine, *value]))
        else:
            out[name] = _narrow(name, mine, value)


def _merge_properties(
    mine: Mapping[str, Any], theirs: Mapping[str, Any], look: Look, depth: int
) -> dict[str, Any]:
    merged = dict(mine)
    for name, sub in theirs.items():
        if name in merged and merged[name] != sub:
            try:
                both = _expand(merged[name], look, depth + 1)
                _merge_into(both, _expand(sub, look, depth + 1), look, depth + 1)
            except Conflict:
                raise Conflict(f"allOf parts define property {name!r} differently") from None
            merged[name] = both
        else:
            merged.setdefault(name, sub)
    return merged


def _narrow(name: str, mine: Any, theirs: Any) -> Any:
    """The value of keyword ``name`` that both parts' values amount to, or ``Conflict``."""
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (mine, theirs))
    if numbers and name in _LOWER:
        return max(mine, theirs)
    if numbers and name in _UPPER:
        return min(mine, theirs)
    if name == "type" and isinstance(mine, str | list) and isinstance(theirs, str | list):
        kinds = _common_types(mine, theirs)
        if kinds:
            return kinds[0] if len(kinds) == 1 else kinds
    if name == "enum" and isinstance(mine, list) and isinstance(theirs, list):
        keys = {_key(v) for v in theirs}
        values = [v for v in mine if _key(v) in keys]
        if values:
            return values
    raise Conflict(f"allOf parts conflict on {name!r}")


def _common_types(mine: str | list[str], theirs: str | list[str]) -> list[str]:
    """The types both allow, in ``mine``'s order (an integer is a number)."""
    a = [mine] if isinstance(mine, str) else list(mine)
    b = [theirs] if isinstance(theirs, str) else list(theirs)
    both = [t for t in a if t in b]
    if "integer" not in both and (
        ("integer" in a and "number" in b) or ("integer" in b and "number" in a)
    ):
        both.append("integer")
    return both
