"""``Annotated`` metadata as JSON Schema keywords, and the errors of typed values.

A plain string is the description; ``annotated-types`` constraints
(``MinLen``, ``MaxLen``, ``Len``, ``Gt``, ``Ge``, ``Lt``, ``Le``,
``MultipleOf``, ``Interval``) and pydantic's ``Field(...)`` and
``StringConstraints(...)`` become ``minLength``/``minItems``,
``minimum``/``exclusiveMinimum``, ``pattern``, ``description`` and so on.
Neither library is imported here: an object is recognised only if its
library is already in ``sys.modules`` (it must be, for the object to exist).
Metadata that JSON Schema cannot express (a predicate, a transformation such
as ``to_lower``, an alias) is refused, never dropped.
"""

from __future__ import annotations

import enum
import math
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from .._core._errors import RegistrationError

__all__ = [
    "NO_DEFAULT",
    "Converter",
    "Invalid",
    "apply_metadata",
    "describe_annotation",
    "json_default",
    "json_path",
    "refuse",
]

Converter = Callable[[Any], Any]
NO_DEFAULT: Any = object()
# The module part of a dotted name in a repr: ``typing.``, ``collections.abc.``.
_QUALIFIED = re.compile(r"(?<![\w'\".])(?:[A-Za-z_]\w*\.)+(?=[A-Za-z_])")

_NUMERIC = {
    "Gt": ("gt", "exclusiveMinimum"),
    "Ge": ("ge", "minimum"),
    "Lt": ("lt", "exclusiveMaximum"),
    "Le": ("le", "maximum"),
    "MultipleOf": ("multiple_of", "multipleOf"),
}
_LENGTH = {"MinLen": ("min_length", 0), "MaxLen": ("max_length", 1)}
_LENGTH_KEYWORDS = {
    "string": ("minLength", "maxLength"),
    "array": ("minItems", "maxItems"),
    "object": ("minProperties", "maxProperties"),
}
# pydantic's general metadata: keys that only restate JSON's strictness.
_HARMLESS = {"strict", "allow_inf_nan"}
# FieldInfo attributes that would change the call, not just describe it.
_FIELD_REFUSED = ("alias", "validation_alias", "json_schema_extra")


class _FieldDescription(str):
    """The description a pydantic ``Field`` gives (told apart from other metadata)."""

    __slots__ = ()


class Invalid(Exception):
    """A value that passed the schema but that its type still refused.

    ``found`` holds ``(path, message)`` pairs; the path is relative to the
    value the converter was given, and each container adds its own step.
    """

    def __init__(self, found: list[tuple[tuple[str | int, ...], str]]) -> None:
        super().__init__(found)
        self.found = found

    @classmethod
    def of(cls, exc: Exception) -> Invalid:
        """Word an exception a converter raised (pydantic's, with its paths)."""
        errors = getattr(exc, "errors", None)
        if callable(errors) and _is_validation_error(exc):
            return cls([(tuple(e["loc"]), str(e["msg"])) for e in errors()])
        return cls([((), f"{type(exc).__name__}: {exc}")])

    def under(self, step: str | int) -> Invalid:
        """The same errors, seen from the container that holds the value."""
        return Invalid([((step, *path), message) for path, message in self.found])

    def violations(self) -> list[str]:
        """Each error as ``"<json path>: <message>"``, as the schema check words them."""
        return sorted(f"{json_path(path)}: {message}" for path, message in self.found)


def _is_validation_error(exc: Exception) -> bool:
    core = sys.modules.get("pydantic_core")
    return core is not None and isinstance(exc, core.ValidationError)


def json_path(path: Sequence[str | int]) -> str:
    """``("a", 0, "b")`` -> ``$.a[0].b``."""
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


def describe_annotation(annotation: Any) -> str:
    """A short name for an annotation: ``Point`` for a class, else its repr."""
    if isinstance(annotation, type):
        return annotation.__qualname__
    return _QUALIFIED.sub("", repr(annotation))


def refuse(annotation: Any, where: str, why: str) -> RegistrationError:
    """The error for an annotation the portable subset cannot express."""
    return RegistrationError(
        f"{where}: annotation {describe_annotation(annotation)} has no JSON Schema mapping: {why}"
    )


def json_default(value: Any) -> Any:
    """``value`` as JSON (an enum member as its value), or ``NO_DEFAULT``."""
    value = getattr(value, "value", value) if _is_enum_member(value) else value
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else NO_DEFAULT
    if isinstance(value, (list, tuple)):
        items = [json_default(v) for v in value]
        return NO_DEFAULT if any(v is NO_DEFAULT for v in items) else items
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        entries = {k: json_default(v) for k, v in value.items()}
        return NO_DEFAULT if NO_DEFAULT in entries.values() else entries
    return NO_DEFAULT


def _is_enum_member(value: Any) -> bool:
    return isinstance(value, enum.Enum)


def apply_metadata(
    schema: dict[str, Any], metadata: Sequence[Any], annotation: Any, where: str
) -> dict[str, Any]:
    """Add what ``Annotated`` metadata says to ``schema``; refuse what it cannot say."""
    texts = [m for m in metadata if isinstance(m, str)]
    if texts:
        schema["description"] = texts[0]
    for item in _flatten([m for m in metadata if not isinstance(m, str)], annotation, where):
        _apply_one(schema, item, annotation, where)
    return schema


def _flatten(metadata: Sequence[Any], annotation: Any, where: str) -> Iterator[Any]:
    """Each constraint alone: groups (``Len``, ``Interval``, ``Field``) opened."""
    at = sys.modules.get("annotated_types")
    fields = sys.modules.get("pydantic.fields")
    for item in metadata:
        if fields is not None and isinstance(item, fields.FieldInfo):
            yield from _field_info(item, annotation, where)
        elif at is not None and isinstance(item, at.GroupedMetadata):
            yield from _flatten(list(item), annotation, where)
        else:
            yield item


def _field_info(info: Any, annotation: Any, where: str) -> Iterator[Any]:
    for name in _FIELD_REFUSED:
        if getattr(info, name, None) is not None:
            raise refuse(annotation, where, f"Field({name}=...) changes the call itself")
    if not info.is_required():
        raise refuse(annotation, where, "give the default in the signature, not in Field()")
    if info.description is not None:
        yield _FieldDescription(info.description)
    yield from _flatten(list(info.metadata), annotation, where)


def _apply_one(schema: dict[str, Any], item: Any, annotation: Any, where: str) -> None:
    name = type(item).__name__
    if isinstance(item, _FieldDescription):
        schema["description"] = str(item)
    elif name in _NUMERIC and _from_annotated_types(item):
        attr, keyword = _NUMERIC[name]
        _need(schema, ("integer", "number"), item, annotation, where)
        schema[keyword] = _number(getattr(item, attr), item, annotation, where)
    elif name in _LENGTH and _from_annotated_types(item):
        attr, end = _LENGTH[name]
        kind = _need(schema, tuple(_LENGTH_KEYWORDS), item, annotation, where)
        if (bound := getattr(item, attr)) is not None:
            schema[_LENGTH_KEYWORDS[kind][end]] = bound
    elif name in ("_PydanticGeneralMetadata", "Strict") and _from_annotated_types(item):
        _general(schema, vars(item), annotation, where)
    else:
        raise refuse(
            annotation, where, f"metadata {item!r} is not a constraint JSON Schema can express"
        )


def _from_annotated_types(item: Any) -> bool:
    at = sys.modules.get("annotated_types")
    return at is not None and isinstance(item, at.BaseMetadata)


def _need(
    schema: dict[str, Any], kinds: tuple[str, ...], item: Any, annotation: Any, where: str
) -> str:
    declared = schema.get("type")
    types = declared if isinstance(declared, list) else [declared]
    for kind in types:
        if kind in kinds:
            return str(kind)
    raise refuse(annotation, where, f"{item!r} applies to {' or '.join(kinds)} values only")


def _number(value: Any, item: Any, annotation: Any, where: str) -> int | float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    raise refuse(annotation, where, f"the bound of {item!r} is not a JSON number")


def _general(schema: dict[str, Any], values: dict[str, Any], annotation: Any, where: str) -> None:
    for key, value in values.items():
        if key == "pattern" and value is not None:
            _need(schema, ("string",), f"pattern={value!r}", annotation, where)
            schema["pattern"] = value if isinstance(value, str) else value.pattern
        elif value is not None and key not in _HARMLESS:
            raise refuse(annotation, where, f"{key}={value!r} is not a check JSON Schema can make")
