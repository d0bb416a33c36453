"""OpenAPI schemas rewritten into the registry's portable JSON Schema subset.

Local ``$ref`` are inlined (a cyclic one is refused: a recursive schema has
no inline form); OpenAPI-only keywords are dropped (``discriminator``,
``xml``, ``externalDocs``, ``example``); 3.0's ``nullable`` becomes a type
list with ``"null"`` and its boolean ``exclusiveMinimum``/``exclusiveMaximum``
become the numeric 2020-12 form; ``allOf`` is merged when its parts do not
conflict; ``anyOf``/``oneOf`` of one schema and ``{"type": "null"}`` become
that schema made nullable. Anything else outside the subset is left in place
for the registry's check, which names it: the operation is then skipped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

import attrs

from .._gate._schema import COMBINATORS, SUBSCHEMA_MAPS, SUBSCHEMA_VALUES

__all__ = ["Resolver", "Unsupported", "portable"]

_DROP = frozenset(("discriminator", "xml", "externalDocs", "example", "nullable"))
_SCHEMA_MAPS = frozenset(SUBSCHEMA_MAPS)
_SCHEMA_VALUES = frozenset((*SUBSCHEMA_VALUES, *COMBINATORS))
_NULL = {"type": "null"}


class Unsupported(Exception):
    """What an operation uses that cannot become a tool; the message says what."""


@attrs.define(eq=False)
class Resolver:
    """Local ``$ref`` lookup in one document, remembering the schemas converted.

    A schema reached through a ``$ref`` that converted once converts the same
    way everywhere (no cycle runs through it), so it is converted once.
    """

    document: Mapping[str, Any]
    legacy: bool
    converted: dict[str, Any] = attrs.field(factory=dict)

    def target(self, ref: object) -> Any:
        """What a local ``$ref`` (a JSON pointer into the document) points to."""
        if not isinstance(ref, str) or not ref.startswith("#/"):
            raise Unsupported(f"$ref {ref!r} is not local to the document")
        node: Any = self.document
        for part in ref[2:].split("/"):
            key = unquote(part).replace("~1", "/").replace("~0", "~")
            if not isinstance(node, Mapping) or key not in node:
                raise Unsupported(f"$ref {ref!r} points to nothing in the document")
            node = node[key]
        return node

    def deref(self, node: Any) -> Any:
        """Follow the ``$ref`` of a parameter or request body to its object."""
        seen: list[str] = []
        while isinstance(node, Mapping) and "$ref" in node:
            ref = node["$ref"]
            if ref in seen:
                raise Unsupported(f"$ref {ref!r} is cyclic")
            seen.append(ref)
            node = self.target(ref)
        return node


def portable(schema: Any, resolver: Resolver, seen: tuple[str, ...] = ()) -> Any:
    """``schema`` in the portable subset, or ``Unsupported`` saying why not."""
    if isinstance(schema, bool):
        return schema
    if not isinstance(schema, Mapping):
        raise Unsupported(f"a schema must be an object, got {type(schema).__name__}")
    if "$ref" in schema:
        return _inline(schema, resolver, seen)
    out = {
        key: _keyword(key, value, resolver, seen)
        for key, value in schema.items()
        if key not in _DROP
    }
    if resolver.legacy:
        _legacy(schema, out)
    for key in ("anyOf", "oneOf"):
        if key in out:
            _nullable_alternative(out, key)
    if "allOf" in out:
        _merge_all_of(out)
    return out


def _keyword(key: str, value: Any, resolver: Resolver, seen: tuple[str, ...]) -> Any:
    if key in _SCHEMA_MAPS and isinstance(value, Mapping):
        return {name: portable(sub, resolver, seen) for name, sub in value.items()}
    if key in _SCHEMA_VALUES:
        if isinstance(value, list):
            return [portable(sub, resolver, seen) for sub in value]
        return portable(value, resolver, seen)
    return value


def _inline(schema: Mapping[str, Any], resolver: Resolver, seen: tuple[str, ...]) -> Any:
    ref = schema["$ref"]
    if ref in seen:
        raise Unsupported(f"$ref {ref!r} is cyclic (a recursive schema has no inline form)")
    target = resolver.converted.get(ref)
    if target is None:
        target = portable(resolver.target(ref), resolver, (*seen, ref))
        resolver.converted[ref] = target
    rest = {k: v for k, v in schema.items() if k != "$ref"}
    if not rest:
        return target
    return {**target, **portable(rest, resolver, seen)}


def _legacy(schema: Mapping[str, Any], out: dict[str, Any]) -> None:
    """OpenAPI 3.0's ``nullable`` and boolean exclusive bounds, in 2020-12 form."""
    if schema.get("nullable") is True:
        _add_null(out)
    for bound, flag in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
        if isinstance(schema.get(flag), bool):
            del out[flag]
            if schema[flag] and bound in out:
                out[flag] = out.pop(bound)


def _add_null(out: dict[str, Any]) -> None:
    kind = out.get("type")
    if isinstance(kind, str):
        out["type"] = [kind, "null"]
    elif isinstance(kind, list) and "null" not in kind:
        out["type"] = [*kind, "null"]
    if isinstance(out.get("enum"), list) and None not in out["enum"]:
        out["enum"] = [*out["enum"], None]


def _nullable_alternative(out: dict[str, Any], key: str) -> None:
    """``anyOf``/``oneOf`` of one schema and null: that schema, nullable."""
    branches = out[key]
    others = [b for b in branches if b != _NULL]
    if len(branches) != 2 or len(others) != 1 or not isinstance(others[0], Mapping):
        return  # left for the registry's check to name
    if not isinstance(others[0].get("type"), str):
        return
    del out[key]
    _merge_into(out, others[0], key)
    _add_null(out)


def _merge_all_of(out: dict[str, Any]) -> None:
    """Merge ``allOf`` parts into ``out``; conflicting parts are refused."""
    parts = out.pop("allOf")
    if len(parts) > 1 and any("additionalProperties" in p for p in parts):
        raise Unsupported("allOf with additionalProperties cannot be merged exactly")
    for part in parts:
        _merge_into(out, part, "allOf")


def _merge_into(out: dict[str, Any], part: Any, key: str) -> None:
    if not isinstance(part, Mapping):
        raise Unsupported(f"{key} part is not an object schema")
    for name, value in part.items():
        if name == "properties":
            merged = {**out.get("properties", {})}
            for prop, sub in value.items():
                if prop in merged and merged[prop] != sub:
                    raise Unsupported(f"{key} parts define property {prop!r} differently")
                merged[prop] = sub
            out["properties"] = merged
        elif name == "required":
            out["required"] = list(dict.fromkeys([*out.get("required", []), *value]))
        elif name in out and out[name] != value and name not in ("description", "title"):
            raise Unsupported(f"{key} parts conflict on {name!r}")
        else:
            out.setdefault(name, value)
