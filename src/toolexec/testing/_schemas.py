"""Hypothesis strategies for tool arguments, drawn from a tool's JSON Schema.

Theory of operation. The registry only accepts the portable subset of JSON
Schema (no ``oneOf``, ``allOf``, ``not``, ``if/then/else``,
``patternProperties``), so a small generator covers most of what a
registered tool can declare: ``const``, ``enum``, ``type`` (one or a list),
``anyOf`` (a value of one branch),
strings (``minLength``, ``maxLength``, ``pattern``), integers and numbers
(``minimum``, ``maximum``, ``exclusiveMinimum``, ``exclusiveMaximum``),
booleans, null, arrays (``items``, ``minItems``, ``maxItems``) and objects
(``properties``, ``required``). Optional properties are drawn or left out;
properties a schema does not name are never added. Keywords outside that
list (``multipleOf``, ``format``, ``uniqueItems``...) are not generated for;
every drawn value is checked against the tool's compiled validator and
values that miss are rejected, so a draw is always valid for the tool. A
``$ref`` (into the schema's ``$defs``) is drawn for as any value, so a tool
whose arguments go through one mostly draws values the filter rejects.

Invalid arguments break a valid draw in one way the validator must refuse:
a property of the wrong type, a required property dropped, or a non-object.
This module imports hypothesis; ``toolexec.testing`` loads it only when one
of its names is first used.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import jsonschema_rs
from hypothesis import strategies as st

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from .._gate._schema import CompiledSchema

__all__ = ["BAD_JSON", "invalid_arguments", "tool_arguments", "values_for"]

#: The malformed JSON text a drawn call may carry instead of arguments.
BAD_JSON = '{"unterminated": '

_SCALARS = st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=5)


def tool_arguments(schema: Mapping[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Draw argument objects that satisfy ``schema`` (a tool's input schema).

    Example: ``tool_arguments({"type": "object", "properties": {"n":
    {"type": "integer", "minimum": 0}}, "required": ["n"]})`` draws
    ``{"n": 0}``, ``{"n": 17}``...

    Args:
        schema: an object schema in the registry's portable subset.

    Returns:
        A strategy of dicts; add ``.filter(compiled.is_valid)`` for keywords
        outside the subset this generator knows.
    """
    return _object(schema)


def values_for(schema: Any) -> st.SearchStrategy[Any]:
    """Draw JSON values for any sub-schema of the portable subset."""
    if schema is True or schema == {}:
        return _SCALARS
    if schema is False:
        return st.nothing()
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(list(schema["enum"]))
    if isinstance(schema.get("anyOf"), list) and schema["anyOf"]:
        return st.one_of([values_for(branch) for branch in schema["anyOf"]])
    kind = schema.get("type")
    if kind is None:
        kind = "object" if "properties" in schema else "array" if "items" in schema else None
    if isinstance(kind, list):
        return st.one_of([values_for({**schema, "type": k}) for k in kind])
    return _BY_TYPE.get(kind, _scalar)(schema)


def _scalar(_schema: Mapping[str, Any]) -> st.SearchStrategy[Any]:
    return _SCALARS


def _string(schema: Mapping[str, Any]) -> st.SearchStrategy[Any]:
    if "pattern" in schema:
        # JSON Schema's regexes are ECMA's: "$" does not match before a final
        # newline as Python's does, so the validator has the last word.
        pattern = schema["pattern"]
        accepts = jsonschema_rs.validator_for({"type": "string", "pattern": pattern}).is_valid
        return st.from_regex(pattern).filter(accepts)
    low = int(schema.get("minLength", 0))
    return st.text(min_size=low, max_size=int(schema.get("maxLength", low + 8)))


def _bounds(schema: Mapping[str, Any]) -> tuple[Any, Any, bool, bool]:
    low, high = schema.get("minimum"), schema.get("maximum")
    ex_low, ex_high = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    if ex_low is not None and (low is None or ex_low >= low):
        low, open_low = ex_low, True
    else:
        open_low = False
    if ex_high is not None and (high is None or ex_high <= high):
        high, open_high = ex_high, True
    else:
        open_high = False
    return low, high, open_low, open_high


def _integer(schema: Mapping[str, Any]) -> st.SearchStrategy[Any]:
    low, high, open_low, open_high = _bounds(schema)
    lo = None if low is None else math.floor(low) + 1 if open_low else math.ceil(low)
    hi = None if high is None else math.ceil(high) - 1 if open_high else math.floor(high)
    return st.integers(lo, hi)


def _number(schema: Mapping[str, Any]) -> st.SearchStrategy[Any]:
    low, high, open_low, open_high = _bounds(schema)
    return st.floats(
        low,
        high,
        exclude_min=open_low and low is not None,
        exclude_max=open_high and high is not None,
        allow_nan=False,
        allow_infinity=False,
    )


def _array(schema: Mapping[str, Any]) -> st.SearchStrategy[Any]:
    low = int(schema.get("minItems", 0))
    items = schema.get("items", True)
    return st.lists(values_for(items), min_size=low, max_size=int(schema.get("maxItems", low + 3)))


def _object(schema: Mapping[str, Any]) -> st.SearchStrategy[Any]:
    properties: Mapping[str, Any] = schema.get("properties") or {}
    required = [name for name in schema.get("required", ()) if name in properties]
    optional = {n: values_for(s) for n, s in properties.items() if n not in required}
    return st.fixed_dictionaries(
        {name: values_for(properties[name]) for name in required}, optional=optional
    )


_BY_TYPE: dict[Any, Callable[[Mapping[str, Any]], st.SearchStrategy[Any]]] = {
    "string": _string,
    "integer": _integer,
    "number": _number,
    "boolean": lambda _s: st.booleans(),
    "null": lambda _s: st.none(),
    "array": _array,
    "object": _object,
}


def invalid_arguments(compiled: CompiledSchema) -> st.SearchStrategy[dict[str, Any] | str]:
    """Draw arguments ``compiled`` refuses (malformed JSON text if nothing else is).

    A valid draw is broken one way: a property set to a value of another
    type, a required property left out, or the whole object replaced by
    JSON text that does not parse. Whatever the break, the draw is checked
    against the validator; one it still accepts becomes the malformed text.
    """
    schema = compiled.schema
    properties: Mapping[str, Any] = schema.get("properties") or {}
    breaks: list[st.SearchStrategy[dict[str, Any] | str]] = [st.just(BAD_JSON)]
    if properties:
        breaks.append(
            st.tuples(tool_arguments(schema), st.sampled_from(sorted(properties))).map(
                lambda pair: {**pair[0], pair[1]: _wrong_type(properties[pair[1]])}
            )
        )
    for name in schema.get("required", ()):
        breaks.append(st.tuples(tool_arguments(schema), st.just(name)).map(_without))
    return st.one_of(breaks).map(lambda a: a if _refused(compiled, a) else BAD_JSON)


def _wrong_type(schema: Any) -> Any:
    kind = schema.get("type") if isinstance(schema, dict) else None
    return [["not", "this"]] if kind in ("string", "integer", "number") else "not this"


def _without(pair: tuple[dict[str, Any], str]) -> dict[str, Any]:
    arguments, name = pair
    return {k: v for k, v in arguments.items() if k != name}


def _refused(compiled: CompiledSchema, arguments: dict[str, Any] | str) -> bool:
    if isinstance(arguments, str):  # only ever BAD_JSON, which does not parse
        return True
    return not compiled.is_valid(arguments)
