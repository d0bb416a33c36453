"""JSON Schema at the edge: registration checks and the per-call validator.

Theory of operation: a schema is checked once, when its tool is registered,
with ``jsonschema`` (is it a valid Draft 2020-12 schema?) and against the
portable subset: what every target provider (OpenAI chat completions and
responses, Anthropic messages, as ``toolexec.formats`` renders tools)
accepts, and what the compiled validator checks without reaching outside
the schema. It is then compiled once with ``jsonschema_rs``; per call we
only ask the compiled validator ``is_valid`` (well under a microsecond for
typical arguments) and build the list of violations, each with its JSON
path, only for arguments that fail.

The portable subset. The top level is one object schema (``"type":
"object"``, no ``anyOf``/``oneOf``/``allOf``/``not``/``enum``/``const``/
``if``: OpenAI refuses them there, Anthropic the first three). Below it,
``anyOf``, ``$defs`` and local ``$ref``s (``#/...``, resolved as RFC 6901
pointers in the schema itself, recursion included) are accepted as given;
``oneOf``, ``allOf``, ``not``, ``if``/``then``/``else`` and
``patternProperties`` are refused, because OpenAI refuses them in function
parameters, and a ``$ref`` to anything outside the schema is refused,
because nothing would fetch it. Every refusal is one line naming the place,
the keyword and the provider.

Both libraries are imported by ``compile_schema``, when the first tool is
registered, not with this module: ``import toolexec`` does not pay for them,
and ``jsonschema`` (the slower import by far) only loads to word the error
of a schema the compiled meta-check refused.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

import attrs

from .._core import _messages as say
from .._core._errors import RegistrationError
from .._core._messages import CLIP_CHARS, ENUM_CHARS, clip
from ._pointer import is_local, resolve

__all__ = [
    "COMBINATORS",
    "SUBSCHEMA_MAPS",
    "SUBSCHEMA_VALUES",
    "CompiledSchema",
    "check_tool_name",
    "compile_schema",
    "one_line",
]

_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
#: How many violations an ``invalid_arguments`` result lists; the rest are counted.
MAX_VIOLATIONS = 20
# The longest violation worded here (a value sent, then the allowed values).
_WORDED_CHARS = 2 * CLIP_CHARS + ENUM_CHARS

# Keywords OpenAI refuses in function parameters; refused at registration.
_FORBIDDEN = ("oneOf", "allOf", "not", "if", "then", "else", "patternProperties")
# Keywords refused at the top level of a tool's schema, and who refuses each.
_TOP_LEVEL = {
    "anyOf": "OpenAI and Anthropic",
    "oneOf": "OpenAI and Anthropic",
    "allOf": "OpenAI and Anthropic",
    "not": "OpenAI",
    "enum": "OpenAI",
    "const": "OpenAI",
    "if": "OpenAI",
}
# The keywords that hold sub-schemas, for every module that walks a schema:
# those whose value maps names to sub-schemas,
SUBSCHEMA_MAPS = ("properties", "$defs", "definitions", "dependentSchemas")
# those whose value is one sub-schema (or a list of them, for prefixItems),
SUBSCHEMA_VALUES = (
    "items",
    "additionalProperties",
    "contains",
    "propertyNames",
    "unevaluatedProperties",
    "unevaluatedItems",
    "prefixItems",
)
# and the combinators, whose value is a list of sub-schemas (or one, for not).
COMBINATORS = ("not", "allOf", "anyOf", "oneOf")


def check_tool_name(name: str) -> None:
    """Refuse a tool name that some provider would not accept."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise RegistrationError(
            f"invalid tool name {name!r}: use 1 to 64 letters, digits, '_' or '-'"
        )


def one_line(text: str, limit: int = 1000) -> str:
    """``text`` on one line (every run of whitespace with a line break becomes a space), clipped."""
    if "\n" in text or "\r" in text:
        text = " ".join(text.split())
    return clip(text, limit)


def _check_top_level(schema: Mapping[str, Any], tool: str) -> None:
    for key, who in _TOP_LEVEL.items():
        if key in schema:
            verb = "refuses" if who == "OpenAI" else "refuse"
            raise RegistrationError(
                f"tool {tool!r}: input_schema uses {key!r} at the top level, which {who} "
                f"{verb}: a tool's arguments must be one object schema"
            )


# What each keyword is to the subset check: refused, a map of sub-schemas,
# sub-schemas (one or a list), or a reference.
_REFUSED, _MAP, _SUBS, _REF = range(4)
_KEYWORDS = {
    **dict.fromkeys(_FORBIDDEN, _REFUSED),
    **dict.fromkeys(SUBSCHEMA_MAPS, _MAP),
    **dict.fromkeys((*SUBSCHEMA_VALUES, "anyOf"), _SUBS),
    "$ref": _REF,
}


def _in_subset(schema: Mapping[str, Any]) -> bool:
    """Whether ``schema`` is in the portable subset: ``_check_subset`` without the places.

    A tool source's schemas share their ``$defs`` and are large, so this
    walk keeps to one loop over each schema's keywords and checks each
    reference once.
    """
    stack: list[Any] = [schema]
    refs: set[str] = set()
    while stack:
        node = stack.pop()
        if type(node) is not dict and not isinstance(node, Mapping):  # dict: no ABC check
            if isinstance(node, bool):
                continue
            return False
        for key, value in node.items():
            kind = _KEYWORDS.get(key)
            if kind is None:
                continue
            if kind == _MAP and (type(value) is dict or isinstance(value, Mapping)):
                stack.extend(value.values())
            elif kind == _SUBS and isinstance(value, list):
                stack.extend(value)
            elif kind == _SUBS:
                stack.append(value)
            elif kind == _REFUSED or not isinstance(value, str):
                return False
            else:
                refs.add(value)
    return all(is_local(ref) and _resolves(schema, ref) for ref in refs)


def _resolves(root: Mapping[str, Any], ref: str) -> bool:
    try:
        resolve(root, ref)
    except LookupError:
        return False
    return True


def _check_subset(schema: Any, where: str, tool: str, root: Mapping[str, Any]) -> None:
    if isinstance(schema, bool):
        return
    if not isinstance(schema, Mapping):
        raise RegistrationError(f"tool {tool!r}: schema at {where} must be an object")
    for key in _FORBIDDEN:
        if key in schema:
            raise RegistrationError(
                f"tool {tool!r}: schema at {where} uses {key!r}, which OpenAI refuses in "
                "function parameters (outside the portable subset); use anyOf, a list of "
                "types or an enum where they say the same"
            )
    if "$ref" in schema:
        _check_ref(schema["$ref"], where, tool, root)
    for sub, sub_where in _subschemas(schema, where):
        _check_subset(sub, sub_where, tool, root)


def _check_ref(ref: Any, where: str, tool: str, root: Mapping[str, Any]) -> None:
    shown = clip(repr(ref))
    if not is_local(ref):
        raise RegistrationError(
            f"tool {tool!r}: schema at {where} uses '$ref' {shown}, which is not local to the "
            "schema (outside the portable subset): nothing would fetch it; put it in $defs"
        )
    try:
        resolve(root, ref)
    except LookupError:
        raise RegistrationError(
            f"tool {tool!r}: schema at {where} uses '$ref' {shown}, which points to nothing "
            "in the schema"
        ) from None


def _subschemas(schema: Mapping[str, Any], where: str) -> Iterator[tuple[Any, str]]:
    """The schemas nested in ``schema``, each with its place."""
    for key in SUBSCHEMA_MAPS:
        for name, sub in (schema.get(key) or {}).items():
            yield sub, f"{where}/{key}/{name}"
    for key in (*SUBSCHEMA_VALUES, "anyOf"):
        sub = schema.get(key)
        if isinstance(sub, list):
            for i, item in enumerate(sub):
                yield item, f"{where}/{key}/{i}"
        elif sub is not None:
            yield sub, f"{where}/{key}"


@attrs.frozen
class CompiledSchema:
    """A tool's input schema, checked and compiled once."""

    schema: Mapping[str, Any]
    _validator: Any = attrs.field(alias="validator", eq=False, repr=False)

    def is_valid(self, arguments: Mapping[str, Any]) -> bool:
        """Whether ``arguments`` satisfy the schema (the per-call fast path)."""
        return bool(self._validator.is_valid(arguments))

    def violations(self, arguments: Mapping[str, Any]) -> list[str]:
        """The violations as ``"<json path>: <message>"``, in path order (indices by number).

        At most ``MAX_VIOLATIONS`` are listed, then one line counting the
        rest; a message quoting a long value shows its two ends (``clip``).
        A wrong type says what was expected and what was sent; a value
        outside an ``enum`` or ``const`` lists the allowed values, up to the
        bound of ``_messages.not_one_of``.
        """
        found = []
        for error in self._validator.iter_errors(arguments):
            steps = error.instance_path
            key = tuple((0, p, "") if isinstance(p, int) else (1, 0, str(p)) for p in steps)
            found.append((key, steps, _worded(error)))
        found.sort(key=lambda item: (item[0], item[2]))
        lines = [
            "$"
            + "".join(f"[{p}]" if isinstance(p, int) else f".{clip(str(p))}" for p in steps)
            + f": {message}"
            for _, steps, message in found[:MAX_VIOLATIONS]
        ]
        if len(found) > MAX_VIOLATIONS:
            lines.append(f"{len(found) - MAX_VIOLATIONS} more violations not shown")
        return lines


def _worded(error: Any) -> str:
    """A violation as the model reads it: one it can act on, clipped."""
    kind = error.kind
    name = kind.name
    if name == "type":
        return clip(say.wrong_type(kind.types, error.instance), _WORDED_CHARS)
    if name == "enum":
        return clip(say.not_one_of(error.instance, kind.options), _WORDED_CHARS)
    if name == "const":
        return clip(say.not_the_constant(error.instance, kind.expected_value), _WORDED_CHARS)
    return clip(error.message)


def compile_schema(schema: Mapping[str, Any], *, tool: str) -> CompiledSchema:
    """Check a tool's input schema and compile it; raise ``RegistrationError``."""
    if not isinstance(schema, Mapping) or schema.get("type") != "object":
        raise RegistrationError(
            f"tool {tool!r}: input_schema must be a JSON Schema object with "
            f'"type": "object" (tool arguments are always a JSON object)'
        )
    import jsonschema_rs

    _check_top_level(schema, tool)
    if not _in_subset(schema):
        # Say where and why; a schema that is not valid JSON Schema first.
        if not jsonschema_rs.meta.is_valid(dict(schema)):
            _check_meta_schema(schema, tool)
        _check_subset(schema, "#", tool, schema)
    try:  # building the validator checks the schema against the meta-schema too
        validator = jsonschema_rs.Draft202012Validator(dict(schema))
    except Exception as exc:  # e.g. a regex the compiled engine does not support
        if not jsonschema_rs.meta.is_valid(dict(schema)):
            _check_meta_schema(schema, tool)  # jsonschema words it (~50x slower to load)
        detail = one_line(str(getattr(exc, "message", None) or exc).split("\n\n")[0])
        raise RegistrationError(
            f"tool {tool!r}: input_schema cannot be compiled: {detail}"
        ) from None
    return CompiledSchema(schema, validator=validator)


def _check_meta_schema(schema: Mapping[str, Any], tool: str) -> None:
    """Raise ``RegistrationError`` worded by ``jsonschema`` for an invalid schema."""
    import jsonschema

    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        path = "/".join(str(p) for p in exc.absolute_path) or "(root)"
        raise RegistrationError(
            f"tool {tool!r}: input_schema is not a valid JSON Schema at {path}: "
            f"{one_line(exc.message)}"
        ) from None
