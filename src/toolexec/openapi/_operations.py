"""One OpenAPI operation as a tool: its name, argument schema, side effects, plan.

Everything a call needs is worked out here, once, when the document is
loaded: the per-call path (``_http``) only fills in the values.

Arguments. Each path, query, header and cookie parameter is an argument
under its own name; the JSON request body is the argument ``body``. When
two parameters share a name (``id`` in the path and in the query), or one
is called ``body`` while the operation has a body, each of them is named
``<location>_<name>`` instead (``path_id``, ``query_id``). Parameters that
carry credentials (``Authorization``, and the header, query or cookie named
by an API-key security scheme) are left out: the host supplies those.
Headers named ``Accept`` or ``Content-Type`` are ignored, as OpenAPI says.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Mapping
from typing import Any

import attrs

from .._core._types import SideEffects, ToolDefinition
from ._auth import Credentials, credentials_for
from ._document import OpenAPIError
from ._schemas import Resolver, Unsupported, local_refs, portable

__all__ = ["METHODS", "Operation", "Param", "build_operation", "tool_name"]

METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
_READ_METHODS = frozenset(("get", "head", "options"))
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
_TEMPLATE = re.compile(r"\{([^{}]+)\}")
_DEFAULT_STYLE = {"path": "simple", "query": "form", "header": "simple", "cookie": "form"}
_IGNORED_HEADERS = frozenset(("accept", "content-type"))
_SIDE_EFFECTS = {effect.value: effect for effect in SideEffects}


@attrs.frozen
class Param:
    """Where one argument goes on the wire."""

    argument: str
    name: str
    location: str
    explode: bool


@attrs.frozen
class Operation:
    """Everything a call of one operation needs, worked out at load time.

    ``path`` alternates literal text and path parameters (``Param``).
    """

    label: str
    method: str
    path: tuple[str | Param, ...]
    params: tuple[Param, ...]
    body: bool
    credentials: Credentials
    definition: ToolDefinition


@attrs.frozen
class Context:
    """What every operation of one document is built with."""

    resolver: Resolver
    schemes: Mapping[str, Any]
    secret_places: frozenset[tuple[str, str]]
    secrets: Mapping[str, str]
    security: Any
    timeout: float
    max_schema_bytes: int
    #: Each parameter object of the document as converted (or why it cannot
    #: be), by identity: a shared parameter is converted once.
    parameters: dict[int, tuple[Any, bool, bool] | str] = attrs.field(factory=dict)


def tool_name(prefix: str, operation: Mapping[str, Any], method: str, path: str) -> str:
    """The operationId (or method and path) in the registry's charset, at most 64 long."""
    raw = operation.get("operationId")
    name = _UNSAFE.sub("_", raw).strip("_") if isinstance(raw, str) else ""
    if not name:
        name = re.sub("_+", "_", _UNSAFE.sub("_", f"{method}_{path}")).strip("_")
    name = prefix + name
    if len(name) > 64:
        name = name[:55] + "_" + hashlib.sha256(name.encode()).hexdigest()[:8]
    return name


def side_effects(operation: Mapping[str, Any], method: str, label: str) -> SideEffects:
    """READ for GET, HEAD and OPTIONS, else WRITE; ``x-toolexec-side-effects`` overrides."""
    if "x-toolexec-side-effects" not in operation:
        return SideEffects.READ if method in _READ_METHODS else SideEffects.WRITE
    value = operation["x-toolexec-side-effects"]
    if value not in _SIDE_EFFECTS:
        allowed = ", ".join(map(repr, _SIDE_EFFECTS))
        raise OpenAPIError(
            f"operation {label!r}: x-toolexec-side-effects must be one of {allowed}, got {value!r}"
        )
    return _SIDE_EFFECTS[value]


def build_operation(
    ctx: Context, name: str, method: str, path: str, item: Mapping[str, Any], label: str
) -> Operation:
    """The plan of one operation, or ``Unsupported`` saying why it cannot be a tool."""
    operation = item[method]
    effects = side_effects(operation, method, label)
    raw_params = _parameters(ctx, item, operation)
    body_schema, body_required = _body(ctx, operation.get("requestBody"))
    names = _argument_names(raw_params, has_body=body_schema is not None)
    properties: dict[str, Any] = {}
    required: list[str] = []
    params: list[Param] = []
    for (pname, location), (param_schema, is_required, explode) in raw_params.items():
        argument = names[pname, location]
        properties[argument] = param_schema
        if is_required:
            required.append(argument)
        params.append(Param(argument, pname, location, explode))
    if body_schema is not None:
        properties["body"] = body_schema
        if body_required:
            required.append("body")
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
    }
    if required:
        schema["required"] = required
    _add_defs(ctx, schema)
    definition = ToolDefinition(
        name, _description(operation, method, path), schema, effects, timeout=ctx.timeout
    )
    credentials = credentials_for(operation.get("security", ctx.security), ctx.schemes, ctx.secrets)
    segments = _path(path, [p for p in params if p.location == "path"])
    query = tuple(p for p in params if p.location != "path")
    return Operation(
        label, method.upper(), segments, query, body_schema is not None, credentials, definition
    )


def _add_defs(ctx: Context, schema: dict[str, Any]) -> None:
    """Give ``schema`` the ``$defs`` it refers to; ``TooLarge`` past the bound."""
    size = len(json.dumps(schema, separators=(",", ":")))
    defs = ctx.resolver.defs(dict.fromkeys(local_refs(schema)), size, ctx.max_schema_bytes)
    if defs:
        schema["$defs"] = defs


def _description(operation: Mapping[str, Any], method: str, path: str) -> str:
    parts = [operation.get(k) for k in ("summary", "description")]
    text = "\n\n".join(p.strip() for p in parts if isinstance(p, str) and p.strip())
    return text or f"{method.upper()} {path}"


Raw = dict[tuple[str, str], tuple[Any, bool, bool]]


def _parameters(ctx: Context, item: Mapping[str, Any], operation: Mapping[str, Any]) -> Raw:
    """(name, location) -> (schema, required, explode); the operation's win over the path's."""
    found: Raw = {}
    for raw in [*item.get("parameters", []), *operation.get("parameters", [])]:
        param = ctx.resolver.deref(raw)
        if not isinstance(param, Mapping) or not isinstance(param.get("name"), str):
            raise Unsupported("a parameter has no name")
        name, location = param["name"], param.get("in")
        if location not in _DEFAULT_STYLE:
            raise Unsupported(
                f"parameter {name!r} is in {location!r}, not path/query/header/cookie"
            )
        if (location, name.lower()) in ctx.secret_places or (
            location == "header" and name.lower() in _IGNORED_HEADERS
        ):
            continue
        converted = ctx.parameters.get(id(param))
        if converted is None:
            try:
                converted = _parameter(ctx, param, name, location)
            except Unsupported as exc:
                converted = str(exc)
            ctx.parameters[id(param)] = converted
        if isinstance(converted, str):
            raise Unsupported(converted)
        found[name, location] = converted
    return found


def _parameter(
    ctx: Context, param: Mapping[str, Any], name: str, location: str
) -> tuple[Any, bool, bool]:
    if "schema" not in param:
        raise Unsupported(f"parameter {name!r} has no schema ('content' is not supported)")
    style = param.get("style", _DEFAULT_STYLE[location])
    if style != _DEFAULT_STYLE[location]:
        raise Unsupported(f"parameter {name!r} uses style {style!r}, which is not supported")
    schema = portable(param["schema"], ctx.resolver)
    kinds = _type(schema, ctx.resolver)
    if kinds == "object" or (isinstance(kinds, list) and "object" in kinds):
        raise Unsupported(f"parameter {name!r} is an object; only scalars and arrays are")
    if isinstance(param.get("description"), str) and isinstance(schema, Mapping):
        schema = {"description": param["description"], **schema}
    required = location == "path" or param.get("required") is True
    return schema, required, bool(param.get("explode", style == "form"))


def _type(schema: Any, resolver: Resolver) -> Any:
    """The ``type`` of a tool schema, through the ``$ref``s that stand for it."""
    for _ in range(32):
        if not isinstance(schema, Mapping) or "type" in schema or "$ref" not in schema:
            break
        try:
            schema = resolver.look(schema["$ref"])
        except LookupError:
            break
    return schema.get("type") if isinstance(schema, Mapping) else None


def _body(ctx: Context, raw: Any) -> tuple[Any, bool]:
    """The JSON request body's schema (``None`` without a body) and whether it is required."""
    if raw is None:
        return None, False
    body = ctx.resolver.deref(raw)
    content = body.get("content") if isinstance(body, Mapping) else None
    if not isinstance(content, Mapping) or not content:
        raise Unsupported("the request body has no content")
    media = next((m for m in content if _is_json(m)), None)
    if media is None:
        raise Unsupported(f"request body media types {sorted(content)} are not supported (JSON is)")
    schema = content[media].get("schema", {}) if isinstance(content[media], Mapping) else {}
    return portable(schema, ctx.resolver), body.get("required") is True


def _is_json(media: str) -> bool:
    media = media.split(";")[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


def _argument_names(raw: Raw, *, has_body: bool) -> dict[tuple[str, str], str]:
    counts = Counter([name for name, _ in raw])  # a list: Counter checks a generator slowly
    if has_body:
        counts["body"] += 1
    names = {key: key[0] if counts[key[0]] == 1 else f"{key[1]}_{key[0]}" for key in raw}
    taken = [*names.values(), *(["body"] if has_body else [])]
    if len(set(taken)) != len(taken):
        clashes = sorted(n for n, c in Counter(taken).items() if c > 1)
        raise Unsupported(f"argument names collide even with location prefixes: {clashes}")
    return names


def _path(template: str, params: list[Param]) -> tuple[str | Param, ...]:
    by_name = {p.name: p for p in params}
    segments: list[str | Param] = []
    for i, piece in enumerate(_TEMPLATE.split(template)):
        if i % 2 == 0:
            if piece:
                segments.append(piece)
        elif piece in by_name:
            segments.append(by_name[piece])
        else:
            raise Unsupported(f"path parameter {piece!r} is not declared")
    return tuple(segments)
