"""Python annotations as JSON Schema, each with a converter to the typed value.

Theory of operation: ``typed(annotation, where)`` runs once, when a function
tool is made. It returns the schema the model sees and, when the body wants
something JSON does not carry (an enum member, a dataclass instance, a
pydantic model), a converter from the JSON value to it. By the time a
converter runs the executor has validated the arguments against the schema,
so converters only build; one that still fails (a dataclass's
``__post_init__``, a pydantic validator) raises ``Invalid`` with the JSON
path of the value. Whatever the portable subset cannot express raises
``RegistrationError`` naming the annotation and why; nothing is dropped.

JSON Schema's ``integer`` accepts ``2.0`` (a number with no fraction), and
so does an ``enum`` holding ``2``: an ``int`` (or a ``Literal`` with an int)
gets the converter ``integral``, which hands the body the int, wherever it
is nested.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import inspect
import types
import typing
from typing import Any, Literal

import attrs

from ._function_meta import NO_DEFAULT, Converter, Invalid, apply_metadata, json_default, refuse
from ._function_pydantic import is_model, model_parameter

__all__ = ["Typed", "integral", "typed", "with_default"]

_SIMPLE: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}
_REASONS: dict[Any, str] = {
    set: "JSON has no sets; use list[X]",
    frozenset: "JSON has no sets; use list[X]",
    tuple: "use list[X], or a dataclass for fixed fields",
    collections.abc.Callable: "a function cannot be sent as JSON",
    bytes: "JSON has no bytes; use str",
}
_OTHERWISE = (
    "use str, int, float, bool, Any, Literal[...], an Enum, a TypedDict, a dataclass, "
    "a pydantic model, list[X], dict[str, X] or X | None"
)


_UNSHOWN: Any = object()  # optional, but no default a schema can show


@attrs.frozen
class Typed:
    """What one annotation becomes: its schema, and the converter (if any)."""

    schema: dict[str, Any]
    convert: Converter | None = None


def typed(annotation: Any, where: str, seen: frozenset[Any] = frozenset()) -> Typed:
    """The schema and converter for ``annotation``; ``where`` names it in errors.

    Raises:
        RegistrationError: the annotation has no portable JSON Schema.
    """
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        base, *metadata = typing.get_args(annotation)
        inner = typed(base, where, seen)
        return Typed(apply_metadata(dict(inner.schema), metadata, annotation, where), inner.convert)
    if origin in (typing.Required, typing.NotRequired):
        return typed(typing.get_args(annotation)[0], where, seen)
    if annotation in _SIMPLE:
        return Typed({"type": _SIMPLE[annotation]}, integral if annotation is int else None)
    if annotation is Any or annotation is inspect.Parameter.empty:
        return Typed({})
    for rule in (_container, _literal, _union, _enum, _record):
        found = rule(annotation, origin, where, seen)
        if found is not None:
            return found
    raise refuse(annotation, where, _REASONS.get(origin or annotation, _OTHERWISE))


def integral(value: Any) -> Any:
    """An integral float (``2.0``, which ``integer`` lets through) as an int; else ``value``."""
    return int(value) if type(value) is float and value.is_integer() else value


def _container(annotation: Any, origin: Any, where: str, seen: frozenset[Any]) -> Typed | None:
    args = typing.get_args(annotation)
    if annotation is list or origin is list:
        if not args:
            return Typed({"type": "array"})
        items = typed(args[0], where, seen)
        return Typed({"type": "array", "items": items.schema}, _each(items.convert))
    if annotation in (dict, collections.abc.Mapping) or origin in (dict, collections.abc.Mapping):
        if not args or args[1] is Any:
            return Typed({"type": "object"})
        if args[0] is not str:
            raise refuse(annotation, where, "JSON object keys are strings; use dict[str, X]")
        values = typed(args[1], where, seen)
        schema = {"type": "object", "additionalProperties": values.schema}
        return Typed(schema, _each_value(values.convert))
    return None


def _each(convert: Converter | None) -> Converter | None:
    if convert is None:
        return None

    def run(value: list[Any]) -> list[Any]:
        out = []
        for i, item in enumerate(value):
            try:
                out.append(convert(item))
            except Invalid as exc:
                raise exc.under(i) from None
        return out

    return run


def _each_value(convert: Converter | None) -> Converter | None:
    if convert is None:
        return None

    def run(value: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for key, item in value.items():
            try:
                out[key] = convert(item)
            except Invalid as exc:
                raise exc.under(key) from None
        return out

    return run


def _fields(converters: dict[str, Converter]) -> Converter:
    """Convert the named entries of a JSON object, each error under its key."""

    def run(value: dict[str, Any]) -> dict[str, Any]:
        out = dict(value)
        for key, convert in converters.items():
            if key in out:
                try:
                    out[key] = convert(out[key])
                except Invalid as exc:
                    raise exc.under(key) from None
        return out

    return run


def _scalar_enum(values: list[Any], annotation: Any, where: str) -> dict[str, Any]:
    bad = [v for v in values if v is not None and type(v) not in _SIMPLE]
    if bad or not values:
        raise refuse(annotation, where, f"its values must be JSON scalars, not {bad!r}")
    kinds = {_SIMPLE.get(type(v), "null") for v in values}
    return {"type": kinds.pop(), "enum": values} if len(kinds) == 1 else {"enum": values}


def _literal(annotation: Any, origin: Any, where: str, seen: frozenset[Any]) -> Typed | None:
    if origin is not Literal:
        return None
    values = list(typing.get_args(annotation))
    schema = _scalar_enum(values, annotation, where)
    return Typed(schema, integral if any(type(v) is int for v in values) else None)


def _enum(annotation: Any, origin: Any, where: str, seen: frozenset[Any]) -> Typed | None:
    if not (isinstance(annotation, type) and issubclass(annotation, enum.Enum)):
        return None
    values = [member.value for member in annotation]
    return Typed(_scalar_enum(values, annotation, where), annotation)


def _union(annotation: Any, origin: Any, where: str, seen: frozenset[Any]) -> Typed | None:
    if origin not in (typing.Union, types.UnionType):
        return None
    args = typing.get_args(annotation)
    members = [typed(a, where, seen) for a in args if a is not type(None)]
    if len(members) == 1:  # X | None (a union has two members or more)
        return _nullable(members[0])
    if any(m.convert not in (None, integral) or set(m.schema) != {"type"} for m in members):
        raise refuse(
            annotation,
            where,
            "a union of these types needs anyOf, outside the portable subset; only "
            "unions of str, int, float, bool and None map to a list of types",
        )
    kinds = [m.schema["type"] for m in members]
    schema = {"type": kinds + (["null"] if len(members) < len(args) else [])}
    # ``int | float`` takes a float as a float; ``int | str`` an integral one as an int.
    return Typed(schema, integral if "integer" in kinds and "number" not in kinds else None)


def _nullable(inner: Typed) -> Typed:
    schema = dict(inner.schema)
    kind = schema.get("type")
    if isinstance(kind, str):
        schema["type"] = [kind, "null"]
    if "enum" in schema and None not in schema["enum"]:
        schema["enum"] = [*schema["enum"], None]
    convert = inner.convert
    if convert is None or convert is integral:  # integral(None) is None
        return Typed(schema, convert)
    return Typed(schema, lambda value: None if value is None else convert(value))


def _record(annotation: Any, origin: Any, where: str, seen: frozenset[Any]) -> Typed | None:
    """A dataclass, a TypedDict or a pydantic model: a JSON object."""
    if is_model(annotation):
        schema, convert = model_parameter(annotation, where)
        return Typed(schema, convert)
    is_dataclass = isinstance(annotation, type) and dataclasses.is_dataclass(annotation)
    if not (is_dataclass or typing.is_typeddict(annotation)):
        return None
    if annotation in seen:
        raise refuse(annotation, where, "it refers to itself, which needs $ref to express")
    try:
        hints = typing.get_type_hints(annotation, include_extras=True)
    except Exception as exc:  # an annotation that does not resolve
        raise refuse(annotation, where, f"its annotations do not resolve ({exc})") from None
    if is_dataclass:
        fields = [f for f in dataclasses.fields(annotation) if f.init]
        _check_init(annotation, {f.name for f in fields}, where)
        entries = [(f.name, hints[f.name], _field_default(f)) for f in fields]
    else:
        entries = [
            (key, hint, NO_DEFAULT if _required_key(annotation, key, hint) else _UNSHOWN)
            for key, hint in hints.items()
        ]
    schema, converters = _object(entries, annotation, where, seen | {annotation})
    if is_dataclass:
        return Typed(schema, _construct(annotation, converters))
    return Typed(schema, _fields(converters) if converters else None)


def _check_init(cls: type[Any], fields: set[str], where: str) -> None:
    """Refuse a dataclass whose ``__init__`` takes more than its fields (an ``InitVar``)."""
    extra = set(inspect.signature(cls).parameters) - fields
    if extra:
        raise refuse(cls, where, f"its __init__ also takes {sorted(extra)}, which are not fields")


def _required_key(cls: Any, key: str, hint: Any) -> bool:
    """Whether a TypedDict key is required; read from the hint first, since
    string annotations hide ``NotRequired`` from ``__required_keys__``."""
    origin = typing.get_origin(hint)
    if origin in (typing.Required, typing.NotRequired):
        return origin is typing.Required
    return key in cls.__required_keys__


def _field_default(field: dataclasses.Field[Any]) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return _UNSHOWN  # optional; the factory makes the value, the schema shows none
    return NO_DEFAULT


def _object(
    entries: list[tuple[str, Any, Any]], annotation: Any, where: str, seen: frozenset[Any]
) -> tuple[dict[str, Any], dict[str, Converter]]:
    """The object schema of named entries: ``(name, hint, default or NO_DEFAULT)``."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    converters: dict[str, Converter] = {}
    name = getattr(annotation, "__qualname__", repr(annotation))
    for key, hint, default in entries:
        field = typed(hint, f"{where}, field {key!r} of {name}", seen)
        properties[key] = with_default(field.schema, default)
        if default is NO_DEFAULT:
            required.append(key)
        if field.convert is not None:
            converters[key] = field.convert
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    schema["additionalProperties"] = False
    return schema, converters


def with_default(schema: dict[str, Any], default: Any) -> dict[str, Any]:
    """``schema`` with ``default`` added, if the default is a JSON value."""
    if default is NO_DEFAULT:
        return schema
    shown = json_default(default)
    return schema if shown is NO_DEFAULT else {**schema, "default": shown}


def _construct(cls: type[Any], converters: dict[str, Converter]) -> Converter:
    fields = _fields(converters) if converters else None

    def run(value: dict[str, Any]) -> Any:
        kwargs = value if fields is None else fields(value)
        try:
            return cls(**kwargs)
        except (TypeError, ValueError) as exc:  # __post_init__ refused it
            raise Invalid.of(exc) from None

    return run
