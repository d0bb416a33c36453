"""pydantic models as function-tool parameters, with their schema inlined.

Only used when pydantic is already imported (a tool's annotation names a
model, so it must be); this module never imports pydantic. The model's own
JSON Schema is taken once, at registration, and rewritten into the portable
subset: every ``$ref`` replaced by its definition, ``anyOf`` of one type
and ``null`` turned into a type list, titles dropped. A model that refers
to itself cannot be inlined and is refused, as is a union of two shapes.
The body receives ``Model.model_validate(value)``.
"""

from __future__ import annotations

import sys
from typing import Any

from .._gate._schema import SUBSCHEMA_MAPS, SUBSCHEMA_VALUES
from ._function_meta import Converter, Invalid, refuse

__all__ = ["is_model", "model_parameter"]

_UNPORTABLE = ("oneOf", "allOf", "not", "if", "then", "else", "patternProperties")


class _Refused(Exception):
    """Why the model's schema has no portable form."""


def is_model(annotation: Any) -> bool:
    """Whether ``annotation`` is a pydantic model class (pydantic never imported)."""
    pydantic = sys.modules.get("pydantic")
    return (
        pydantic is not None
        and isinstance(annotation, type)
        and issubclass(annotation, pydantic.BaseModel)
    )


def model_parameter(model: Any, where: str) -> tuple[dict[str, Any], Converter]:
    """The inlined schema of ``model`` and the converter that validates into it."""
    try:
        raw = model.model_json_schema()
        schema = _inline(raw, raw.get("$defs", {}), ())
    except _Refused as exc:
        raise refuse(model, where, str(exc)) from None
    except Exception as exc:  # pydantic cannot make a schema (an arbitrary type inside)
        raise refuse(model, where, f"pydantic gives no JSON Schema for it ({exc})") from None
    validate = model.model_validate

    def convert(value: Any) -> Any:
        try:
            return validate(value)
        except ValueError as exc:  # pydantic's ValidationError
            raise Invalid.of(exc) from None

    return schema, convert


def _inline(node: Any, defs: dict[str, Any], stack: tuple[str, ...]) -> Any:
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        return _resolve(node, defs, stack)
    for key in _UNPORTABLE:
        if key in node and not (key == "allOf" and len(node[key]) == 1):
            raise _Refused(f"its schema needs {key!r}, outside the portable subset")
    if "allOf" in node:  # one member: a reference with siblings, in older pydantic
        rest = {k: v for k, v in node.items() if k != "allOf"}
        return {**_inline(node["allOf"][0], defs, stack), **_inline(rest, defs, stack)}
    if "anyOf" in node:
        return _any_of(node, defs, stack)
    return _walk(node, defs, stack)


def _resolve(node: dict[str, Any], defs: dict[str, Any], stack: tuple[str, ...]) -> Any:
    ref = node["$ref"]
    name = ref.removeprefix("#/$defs/")
    if name in stack:
        raise _Refused(f"{name} refers to itself, so it cannot be inlined without $ref")
    if name not in defs:
        raise _Refused(f"its schema refers to {ref!r}, which it does not define")
    target = _inline(defs[name], defs, (*stack, name))
    siblings = _inline({k: v for k, v in node.items() if k != "$ref"}, defs, stack)
    return {**target, **siblings}


def _walk(node: dict[str, Any], defs: dict[str, Any], stack: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("title", "$defs"):
            continue
        if key in SUBSCHEMA_MAPS:
            out[key] = {name: _inline(sub, defs, stack) for name, sub in value.items()}
        elif key in SUBSCHEMA_VALUES:
            out[key] = (
                [_inline(s, defs, stack) for s in value]
                if isinstance(value, list)
                else _inline(value, defs, stack)
            )
        else:
            out[key] = value
    return out


def _any_of(node: dict[str, Any], defs: dict[str, Any], stack: tuple[str, ...]) -> dict[str, Any]:
    members = [_inline(m, defs, stack) for m in node["anyOf"]]
    rest = _walk({k: v for k, v in node.items() if k != "anyOf"}, defs, stack)
    null = {"type": "null"}
    shaped = [m for m in members if m != null]
    nullable = len(shaped) < len(members)
    if len(shaped) == 1 and isinstance(shaped[0].get("type"), str):
        merged = {**shaped[0], **rest}
        if nullable:
            merged["type"] = [merged["type"], "null"]
            if "enum" in merged and None not in merged["enum"]:
                merged["enum"] = [*merged["enum"], None]
        return merged
    if all(set(m) == {"type"} and isinstance(m["type"], str) for m in shaped):
        return {**rest, "type": [m["type"] for m in shaped] + (["null"] if nullable else [])}
    raise _Refused("a union of these shapes needs anyOf, outside the portable subset")
