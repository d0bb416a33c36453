"""The name -> tool table, with each tool's schema compiled at registration."""

from __future__ import annotations

import dis
import inspect
import types
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from .._gate._schema import CompiledSchema, check_tool_name, compile_schema
from ._errors import RegistrationError
from ._types import ToolDefinition

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from ._tool_protocol import ToolFactory

__all__ = ["RegisteredTool", "ToolRegistry"]


# The opcodes at which a coroutine can suspend: ``await`` (and the awaits
# inside ``async for`` and ``async with``) compiles to them.
_SUSPENDS = frozenset(
    {
        "GET_AWAITABLE",
        "GET_AITER",
        "GET_ANEXT",
        "BEFORE_ASYNC_WITH",
        "END_ASYNC_FOR",
        "SEND",
        "YIELD_FROM",
        "YIELD_VALUE",
    }
)


def cannot_suspend(fn: object) -> bool:
    """Whether ``fn`` is an async function whose body has no ``await`` at all.

    Such a coroutine runs to its end in one step: it never reaches a trio
    checkpoint, so it can neither block nor be cancelled. Anything else
    (a wrapped function, a callable object, a tool that is not a bare
    function) is taken to be able to suspend.
    """
    if not inspect.iscoroutinefunction(fn) or not isinstance(fn, types.FunctionType):
        return False
    return not any(i.opname in _SUSPENDS for i in dis.get_instructions(fn.__code__))


def _precompiled(instance: object, definition: ToolDefinition) -> CompiledSchema | None:
    """The schema a tool source already checked and compiled for this very definition.

    A source that must know whether a schema compiles before it offers the
    tool (an OpenAPI operation, an MCP tool) keeps what it compiled as the
    tool's ``compiled_schema``, so each schema is compiled once.
    """
    compiled = getattr(instance, "compiled_schema", None)
    if isinstance(compiled, CompiledSchema) and compiled.schema is definition.input_schema:
        return compiled
    return None


@attrs.frozen
class RegisteredTool:
    """A registered tool: its definition, factory and compiled schema."""

    definition: ToolDefinition
    factory: ToolFactory
    schema: CompiledSchema
    #: Every call finishes without reaching a checkpoint (``cannot_suspend``),
    #: so a run of such calls needs no nursery for workers that never come.
    never_suspends: bool = False
    # Precomputed for routing, which runs per call.
    read_only: bool = attrs.field(init=False)
    #: The top-level arguments the schema types as integers only: JSON Schema's
    #: integer takes ``2.0``, and the tool is handed ``2`` (``integral_arguments``).
    integers: tuple[str, ...] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "read_only", self.definition.side_effects.is_read_only)
        object.__setattr__(self, "integers", _integer_properties(self.definition.input_schema))


def _integer_properties(schema: Mapping[str, Any]) -> tuple[str, ...]:
    """The names of the top-level properties whose type admits integers and no
    other number (``"integer"``, or a list of types with it and without ``"number"``)."""
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return ()
    found = []
    for name, sub in properties.items():
        kind = sub.get("type") if isinstance(sub, Mapping) else None
        if kind == "integer" or (
            isinstance(kind, list) and "integer" in kind and "number" not in kind
        ):
            found.append(name)
    return tuple(found)


def integral_arguments(entry: RegisteredTool, arguments: dict[str, Any]) -> dict[str, Any]:
    """A validated call's arguments with ``2`` for ``2.0`` in every integer
    argument: the same dict if none needs it, else a copy (never the host's)."""
    converted = arguments
    for name in entry.integers:
        value = arguments.get(name)
        if type(value) is float:
            if converted is arguments:
                converted = dict(arguments)
            converted[name] = int(value)
    return converted


@attrs.define(eq=False)
class ToolRegistry:
    """The tools an executor can run, by name.

    Register a zero-argument factory; it is called once at registration to
    read the definition (checked here, so a bad schema fails at startup, not
    per call) and once per call to get the instance that runs it.

    Example::

        registry = ToolRegistry()
        registry.register(MyTool)          # a class is a factory
        registry.register(my_function_tool)
    """

    _entries: dict[str, RegisteredTool] = attrs.field(factory=dict, init=False)

    def register(self, factory: ToolFactory) -> ToolDefinition:
        """Add a tool; return its definition.

        Raises:
            RegistrationError: the factory fails or returns no tool, the name
                is invalid or taken, or the schema is invalid or outside the
                portable subset.
        """
        try:
            instance = factory()
        except Exception as exc:
            raise RegistrationError(
                f"tool factory {factory!r} raised {type(exc).__name__}: {exc}"
            ) from exc
        definition = getattr(instance, "definition", None)
        if not isinstance(definition, ToolDefinition) or not callable(
            getattr(instance, "execute", None)
        ):
            raise RegistrationError(
                f"tool factory {factory!r} returned {instance!r}, which is not a Tool "
                "(it needs a ToolDefinition `definition` and an async `execute`)"
            )
        check_tool_name(definition.name)
        if definition.name in self._entries:
            raise RegistrationError(
                f"a tool named {definition.name!r} is already registered; "
                "unregister it first or choose another name"
            )
        schema = _precompiled(instance, definition) or compile_schema(
            definition.input_schema, tool=definition.name
        )
        # Only a tool that is its own factory (a function tool) is the one every
        # call runs; another factory's instances could differ.
        own: object = factory
        body = getattr(instance, "coroutine_function", None)
        never = own is instance and cannot_suspend(body)
        self._entries[definition.name] = RegisteredTool(definition, factory, schema, never)
        return definition

    def unregister(self, name: str) -> None:
        """Remove a tool; a missing name is not an error."""
        self._entries.pop(name, None)

    def definition(self, name: str) -> ToolDefinition:
        """The definition of a registered tool (``KeyError`` if absent)."""
        return self._entries[name].definition

    def definitions(self) -> list[ToolDefinition]:
        """All definitions, in registration order (what the model is shown)."""
        return [e.definition for e in self._entries.values()]

    def names(self) -> list[str]:
        """All tool names, in registration order."""
        return list(self._entries)

    def subset(self, names: Iterable[str]) -> ToolRegistry:
        """A new registry holding only ``names`` (each must be registered here)."""
        child = ToolRegistry()
        for name in names:
            if name not in self._entries:
                raise KeyError(f"no tool named {name!r} in this registry")
            child._entries[name] = self._entries[name]
        return child

    def lookup(self, name: str) -> RegisteredTool | None:
        """The registered tool called ``name``, or ``None`` (the executor's lookup)."""
        return self._entries.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)
