"""OpenAPI schemas as tool schemas: shared schemas stay shared, in ``$defs``.

Theory of operation. A local ``$ref`` (an RFC 6901 pointer into the
document: ``#/components/schemas/Pet``, ``#/components/schemas/A/allOf/0``)
is not inlined: it becomes ``{"$ref": "#/$defs/Pet"}``, and each tool
schema carries in ``$defs`` the converted schemas it reaches, each
converted once per document (``Resolver.definition``). So a document that
reuses its schemas costs time in proportion to its own size, not to the
size of its expansion, and recursive schemas need no inline form.

Each schema is converted as it was given except where OpenAPI differs from
JSON Schema 2020-12 or a provider refuses a keyword, and then only exactly:
OpenAPI-only keywords are dropped (``discriminator``, ``xml``,
``externalDocs``, ``example``); 3.0's ``nullable: true`` becomes a type
list with ``"null"`` and its boolean ``exclusiveMinimum``/
``exclusiveMaximum`` the numeric form; ``allOf`` is merged when its parts
agree and ``oneOf`` becomes ``anyOf`` when no value can match two branches
(``toolexec._gate._rewrites``); ``anyOf`` is kept. A ``$ref`` beside
other keywords keeps them beside it when they only describe
(``description``...), and is otherwise replaced by its target with them
over it. Anything else outside the registry's portable subset is left in
place for the registry's check, which names it: the operation is then
skipped.

Each tool's schema is bounded (``max_bytes``, its compact JSON with its
``$defs``): the reachable schemas are gathered breadth-first and the
gathering stops as soon as the bound is passed, so an operation over it
costs no more than the bound, and is skipped with its size as the reason.
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import attrs

from .._gate._pointer import is_local, resolve, tokens
from .._gate._rewrites import ANNOTATIONS, Conflict, merge_all_of, one_of_means_any_of
from .._gate._schema import COMBINATORS, SUBSCHEMA_MAPS, SUBSCHEMA_VALUES

__all__ = ["Definition", "Resolver", "TooLarge", "Unsupported", "local_refs", "portable"]

_DROP = frozenset(("discriminator", "xml", "externalDocs", "example", "nullable"))
_SCHEMA_MAPS = frozenset(SUBSCHEMA_MAPS)
_SCHEMA_VALUES = frozenset((*SUBSCHEMA_VALUES, *COMBINATORS))
_DEFS = "#/$defs/"
_UNSAFE_KEY = re.compile(r"[^A-Za-z0-9._-]+")


class Unsupported(Exception):
    """What an operation uses that cannot become a tool; the message says what."""


class TooLarge(Unsupported):
    """A tool schema over the bound; the message gives its size."""


@attrs.frozen
class Definition:
    """One schema of the document, converted: its ``$defs`` key, schema, refs and size."""

    key: str
    schema: Any
    refs: tuple[str, ...]  # the $defs keys it refers to, each once, in order
    size: int  # its compact JSON, in bytes (characters)


@attrs.define(eq=False)
class Resolver:
    """The schemas of one document, each converted once, by the pointer that reaches it."""

    document: Mapping[str, Any]
    legacy: bool
    _found: dict[str, Definition | str] = attrs.field(factory=dict, init=False)
    _keys: dict[str, str] = attrs.field(factory=dict, init=False)  # pointer -> key
    _pointers: dict[str, str] = attrs.field(factory=dict, init=False)  # key -> pointer
    _busy: set[str] = attrs.field(factory=set, init=False)

    def target(self, ref: object) -> Any:
        """What a local ``$ref`` points to, or ``Unsupported`` saying why nothing."""
        if not is_local(ref):
            raise Unsupported(f"$ref {ref!r} is not local to the document")
        try:
            return resolve(self.document, str(ref))
        except LookupError:
            raise Unsupported(f"$ref {ref!r} points to nothing in the document") from None

    def deref(self, node: Any) -> Any:
        """Follow the ``$ref`` of a parameter or request body to its object."""
        seen: list[str] = []
        while (type(node) is dict or isinstance(node, Mapping)) and "$ref" in node:
            ref = node["$ref"]
            if ref in seen:
                raise Unsupported(f"$ref {ref!r} is cyclic")
            seen.append(ref)
            node = self.target(ref)
        return node

    def local(self, ref: str) -> str:
        """The tool-schema ``$ref`` standing for the document's ``ref``."""
        key = self._keys.get(ref)
        if key is None:
            steps = tokens(ref)
            tail = "/".join(steps[2:] if steps[:2] == ["components", "schemas"] else steps)
            base = _UNSAFE_KEY.sub("_", tail).strip("_") or "schema"
            key, n = base, 1
            while key in self._pointers:
                n += 1
                key = f"{base}_{n}"
            self._keys[ref], self._pointers[key] = key, ref
        return _DEFS + key

    def definition(self, local: str) -> Definition:
        """The converted schema a tool-schema ``$ref`` (``#/$defs/<key>``) stands for."""
        pointer = self._pointers[local.removeprefix(_DEFS)]
        found = self._found.get(pointer)
        if found is None:
            found = self._convert(pointer)
            if pointer not in self._busy:
                self._found[pointer] = found
        if isinstance(found, str):
            raise Unsupported(found)
        return found

    def look(self, local: str) -> Any:
        """What a tool-schema ``$ref`` points to (``KeyError`` for another kind of ref)."""
        return self.definition(local).schema

    def _convert(self, pointer: str) -> Definition | str:
        if pointer in self._busy:
            return f"$ref {pointer!r} is cyclic: it stands for itself"
        self._busy.add(pointer)
        try:
            target = self.target(pointer)
            self._check_alias(pointer, target)
            schema = portable(target, self)
        except Unsupported as exc:
            reason = str(exc)
            return reason if repr(pointer) in reason else f"in {pointer!r}: {reason}"
        finally:
            self._busy.discard(pointer)
        size = len(json.dumps(schema, separators=(",", ":")))
        refs = tuple(dict.fromkeys(local_refs(schema)))
        return Definition(self._keys[pointer], schema, refs, size)

    def _check_alias(self, pointer: str, node: Any) -> None:
        """Refuse a schema that is only a ``$ref`` to one that leads back to it."""
        seen = {pointer}
        while isinstance(node, Mapping) and set(node) == {"$ref"}:
            ref = node["$ref"]
            if ref in seen:
                raise Unsupported(f"$ref {pointer!r} is cyclic: it only refers to itself")
            seen.add(ref)
            node = self.target(ref)

    def defs(self, refs: Iterable[str], size: int, limit: int) -> dict[str, Any]:
        """The ``$defs`` reached from ``refs``; ``TooLarge`` past ``limit`` bytes in all."""
        found: dict[str, Any] = {}
        queue = deque(refs)
        _check_size(size, limit)
        while queue:
            key = queue.popleft()
            if key in found:
                continue
            definition = self.definition(_DEFS + key)
            found[key] = definition.schema
            size += definition.size + len(key) + 4
            _check_size(size, limit)
            queue.extend(definition.refs)
        return found


def _check_size(size: int, limit: int) -> None:
    if size > limit:
        raise TooLarge(
            f"its input schema is over the bound of {limit:,} bytes of JSON (at least {size:,} "
            "with the schemas it refers to); raise max_schema_bytes= to register it"
        )


def local_refs(schema: Any) -> Iterator[str]:
    """The ``$defs`` keys a converted schema refers to."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if type(node) is dict:  # converted schemas are made of dicts and lists
            ref = node.get("$ref")
            if type(ref) is str and ref.startswith(_DEFS):
                yield ref[len(_DEFS) :]
            stack.extend(v for v in node.values() if type(v) is dict or type(v) is list)
        elif type(node) is list:
            stack.extend(v for v in node if type(v) is dict or type(v) is list)


def portable(schema: Any, resolver: Resolver) -> Any:
    """``schema`` as a tool schema (``$ref``s to ``$defs``), or ``Unsupported`` saying why not."""
    if type(schema) is not dict and not isinstance(schema, Mapping):  # dict: no ABC check
        if isinstance(schema, bool):
            return schema
        raise Unsupported(f"a schema must be an object, got {type(schema).__name__}")
    if "$ref" in schema:
        return _reference(schema, resolver)
    out = {key: _keyword(key, value, resolver) for key, value in schema.items() if key not in _DROP}
    if resolver.legacy:
        _legacy(schema, out)
    if "allOf" in out:
        try:
            out = merge_all_of(out, resolver.look)
        except Conflict as exc:
            raise Unsupported(str(exc)) from None
    if "oneOf" in out and "anyOf" not in out:
        if not one_of_means_any_of(out["oneOf"], resolver.look):
            raise Unsupported(
                "oneOf over alternatives a value may match together: OpenAI refuses oneOf, "
                "and anyOf would accept such a value"
            )
        out = {("anyOf" if k == "oneOf" else k): v for k, v in out.items()}
    return out


def _keyword(key: str, value: Any, resolver: Resolver) -> Any:
    if key in _SCHEMA_MAPS and (type(value) is dict or isinstance(value, Mapping)):
        return {name: portable(sub, resolver) for name, sub in value.items()}
    if key in _SCHEMA_VALUES:
        if isinstance(value, list):
            return [portable(sub, resolver) for sub in value]
        return portable(value, resolver)
    return value


def _reference(schema: Mapping[str, Any], resolver: Resolver) -> Any:
    """A ``$ref`` (and what is beside it) as a tool-schema ``$ref`` to ``$defs``."""
    ref = schema["$ref"]
    resolver.target(ref)  # it must point somewhere
    local = resolver.local(ref)
    rest = {k: v for k, v in schema.items() if k != "$ref"}
    nullable = resolver.legacy and rest.pop("nullable", None) is True
    if set(rest) <= ANNOTATIONS | _DROP:
        out: Any = {"$ref": local, **portable(rest, resolver)}
    else:  # validating keywords beside it: its target, with them over it
        target = resolver.definition(local).schema
        siblings = portable(rest, resolver)
        out = {**target, **siblings} if isinstance(target, Mapping) else siblings
        if target is False:
            out = False
    return {"anyOf": [out, {"type": "null"}]} if nullable else out


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
