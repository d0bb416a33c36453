"""Plain Python functions as tools, with the schema derived from the signature.

``function_tool`` reads the signature once: each parameter becomes a
property (``str``, ``int``, ``float``, ``bool``, ``Literal[...]``, an
``Enum``, a ``TypedDict``, a dataclass, a pydantic model, ``list[X]``,
``dict[str, X]``, ``X | None``, ``Any``; see ``_function_types``).
``Annotated[X, "text"]`` or a Google-style ``Args:`` section gives its
description, ``Annotated`` constraints become schema keywords, and a
JSON-representable default is shown as ``default``; a parameter without a
default is required; a parameter annotated ``ToolContext`` is injected, not
shown to the model. The body receives typed values (an enum member, a
dataclass instance, a model instance), converted after the executor has
validated the JSON. Sync functions run in a worker thread that the executor
abandons if the call is cancelled or times out.
"""

from __future__ import annotations

import inspect
import re
import typing
import warnings
from typing import Any, overload

import attrs
import trio

from .._core import _messages as say
from .._core._errors import RegistrationError, ToolError
from .._core._tool_protocol import ToolContext
from .._core._types import (
    ErrorClass,
    JsonContent,
    SideEffects,
    ToolDefinition,
    ToolOutput,
    describe,
)
from ._function_meta import NO_DEFAULT, Converter, Invalid
from ._function_types import integral, typed, with_default

if typing.TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

__all__ = ["FunctionTool", "function_tool"]

_ARG_LINE = re.compile(r"^\s*(\w+)(?:\s*\([^)]*\))?\s*:\s*(.+)$")


def _docstring_parts(fn: Callable[..., Any]) -> tuple[str, dict[str, str]]:
    doc = inspect.getdoc(fn) or ""
    summary = doc.split("\n\n", 1)[0].strip()
    params: dict[str, str] = {}
    in_args = False
    for line in doc.splitlines():
        if line.strip() in ("Args:", "Arguments:", "Parameters:"):
            in_args = True
        elif in_args and line and not line[0].isspace():
            in_args = False
        elif in_args and (m := _ARG_LINE.match(line)):
            params[m.group(1)] = m.group(2).strip()
    return summary, params


@attrs.frozen
class FunctionTool:
    """A tool made from a Python function by ``function_tool``.

    It keeps no per-call state, so one instance serves every call.
    """

    definition: ToolDefinition
    fn: Callable[..., Any]
    _ctx_param: str | None = attrs.field(alias="ctx_param")
    _is_async: bool = attrs.field(alias="is_async")
    _converters: tuple[tuple[str, Converter], ...] = attrs.field(
        alias="converters", default=(), repr=False
    )
    _bare: Callable[..., Awaitable[Any]] | None = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(
            self, "_bare", _bare(self.fn, self._is_async, self._ctx_param, self._converters)
        )

    async def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        """Call the function with the arguments (and the context, if it asks)."""
        if self._converters:
            arguments = self._typed(arguments)
        kwargs = arguments if self._ctx_param is None else {**arguments, self._ctx_param: ctx}
        if self._is_async:
            value = await self.fn(**kwargs)
        else:
            value = await trio.to_thread.run_sync(lambda: self.fn(**kwargs), abandon_on_cancel=True)
        return _to_output(value, self.definition.name)

    @property
    def callable_here(self) -> bool:
        """Whether ``call_here`` can run it: a sync function without a context."""
        return not self._is_async and self._ctx_param is None

    def call_here(self, arguments: Mapping[str, Any]) -> ToolOutput:
        """Call a sync, context-free function tool in this thread, blocking.

        For backends that run a call in another process (``RayBackend``):
        the same conversion of arguments and of the returned value as
        ``execute``, without a trio run or a worker thread.

        Raises:
            ValueError: the function is async or takes a ``ToolContext``.
        """
        if not self.callable_here:
            raise ValueError(
                f"function tool {self.definition.name!r} is async or takes a context; "
                "call_here runs only sync functions without one"
            )
        if self._converters:
            arguments = self._typed(arguments)
        return _to_output(self.fn(**arguments), self.definition.name)

    @property
    def reads_context(self) -> bool:
        """Whether ``execute`` reads its ``ctx`` (only if the function takes one).

        When it does not, the executor skips building a ``ToolContext`` for
        the call.
        """
        return self._ctx_param is not None

    @property
    def bare(self) -> Callable[..., Awaitable[Any]] | None:
        """What a call awaits, when a call is just ``await bare(**arguments)``.

        That is an async function taking no context and no typed values but
        top-level ints (the executor hands those ``2`` for ``2.0`` itself);
        the executor then awaits it directly and converts its value with
        ``output``. ``None`` for any other function.
        """
        return self._bare

    @property
    def coroutine_function(self) -> Callable[..., Awaitable[Any]] | None:
        """The async function a call awaits, with nothing else awaited around it.

        That is an async function taking no context: ``execute`` converts the
        arguments to typed values, awaits the function and converts its value,
        and none of that awaits. The registry reads the function's code: if
        it has no ``await``, no call of the tool can suspend. ``None`` for
        any other function.
        """
        return self.fn if self._is_async and self._ctx_param is None else None

    def output(self, value: Any) -> ToolOutput:
        """The tool output for a value the function returned."""
        return _to_output(value, self.definition.name)

    def _typed(self, arguments: Mapping[str, Any]) -> Mapping[str, Any]:
        """The validated JSON arguments as the values the function declares."""
        kwargs = dict(arguments)
        for name, convert in self._converters:
            if name in kwargs:
                try:
                    kwargs[name] = convert(kwargs[name])
                except Invalid as exc:
                    violations = exc.under(name).violations()
                    raise ToolError(
                        say.invalid(self.definition.name, violations),
                        error_class=ErrorClass.INVALID_ARGUMENTS,
                        details={"violations": violations},
                    ) from None
        return kwargs

    def __call__(self) -> FunctionTool:
        """Act as its own factory (it is stateless), so it can be registered."""
        return self


def _bare(
    fn: Callable[..., Any],
    is_async: bool,
    ctx_param: str | None,
    converters: tuple[tuple[str, Converter], ...],
) -> Callable[..., Awaitable[Any]] | None:
    """``FunctionTool.bare``: ``fn`` when a call is just ``await fn(**arguments)``, or ``None``."""
    if not is_async or ctx_param is not None:
        return None
    if all(convert is integral for _, convert in converters):
        # Top-level ints only: the executor hands a validated call ``2`` for
        # ``2.0`` in every integer argument (``RegisteredTool.integers``).
        return fn
    return None


def _to_output(value: Any, name: str) -> ToolOutput:
    if isinstance(value, ToolOutput):
        return value
    if isinstance(value, str):
        return ToolOutput.text(value)
    if value is None:
        return ToolOutput.text("")
    if inspect.isawaitable(value):
        if inspect.iscoroutine(value):
            value.close()  # never run: closing it spares the "never awaited" warning
        raise ToolError(
            f"Tool '{name}' returned {describe(value)} instead of its result; the function "
            "must await it (this is a bug in the tool)."
        )
    try:
        return ToolOutput((JsonContent(value),))
    except TypeError:
        raise ToolError(
            f"Tool '{name}' returned {describe(value)}, which JSON cannot represent; return a "
            "str, a JSON value (dict, list, number, bool, None) or a ToolOutput "
            "(this is a bug in the tool)."
        ) from None


def _build(
    fn: Callable[..., Any] | Callable[..., Awaitable[Any]],
    name: str | None,
    description: str | None,
    side_effects: SideEffects,
    timeout: float | None,
    is_recursive: bool,
    classifier: Callable[[Mapping[str, Any]], SideEffects] | None,
    resource_hints: Mapping[str, float] | None = None,
    idempotent: bool = False,
) -> FunctionTool:
    tool_name = name or fn.__name__
    where = f"function tool {tool_name!r}"
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:  # an annotation that does not resolve
        raise RegistrationError(f"{where}: cannot resolve annotations: {exc}") from None
    summary, arg_docs = _docstring_parts(fn)
    input_schema, converters, ctx_param = _parameters(fn, hints, arg_docs, where)
    definition = ToolDefinition(
        name=tool_name,
        description=description or summary or tool_name,
        input_schema=input_schema,
        side_effects=side_effects,
        is_recursive=is_recursive,
        timeout=timeout,
        classifier=classifier,
        resource_hints={} if resource_hints is None else resource_hints,
        idempotent=idempotent,
    )
    return FunctionTool(
        definition,
        fn,
        ctx_param=ctx_param,
        is_async=inspect.iscoroutinefunction(fn),
        converters=converters,
    )


def _parameters(
    fn: Callable[..., Any], hints: dict[str, Any], arg_docs: dict[str, str], where: str
) -> tuple[dict[str, Any], tuple[tuple[str, Converter], ...], str | None]:
    """The input schema, the converters and the context parameter of ``fn``."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    converters: list[tuple[str, Converter]] = []
    ctx_param = None
    for param in inspect.signature(fn).parameters.values():
        hint = hints.get(param.name, param.annotation)
        if hint is ToolContext or ToolContext in typing.get_args(hint):
            ctx_param = param.name
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise RegistrationError(
                f"{where}: parameter {param.name!r} must be a named parameter "
                "(no *args, **kwargs or positional-only parameters)"
            )
        if hint is inspect.Parameter.empty:
            _warn_unannotated(where, param.name)
        found = typed(hint, f"{where}, parameter {param.name!r}")
        schema = dict(found.schema)
        if param.name in arg_docs and "description" not in schema:
            schema["description"] = arg_docs[param.name]
        default = NO_DEFAULT if param.default is param.empty else param.default
        properties[param.name] = with_default(schema, default)
        if default is NO_DEFAULT:
            required.append(param.name)
        if found.convert is not None:
            converters.append((param.name, found.convert))
    input_schema = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        input_schema["required"] = required
    return input_schema, tuple(converters), ctx_param


def _warn_unannotated(where: str, name: str) -> None:
    """Say, where the tool is made, that a parameter takes any value for want of a type."""
    warnings.warn(
        f"{where}, parameter {name!r} has no annotation: the model sees the schema {{}} "
        "(any JSON value) and the body gets the JSON value as it is; annotate it "
        "(Any keeps this, without this warning)",
        UserWarning,
        stacklevel=_caller_level(),
    )


def _caller_level() -> int:
    """The ``stacklevel`` that points a warning at the first caller outside toolexec."""
    level, frame = 0, inspect.currentframe()
    while frame is not None and _ours(frame.f_globals.get("__name__", "")):
        frame = frame.f_back
        level += 1
    return level


def _ours(module: str) -> bool:
    return module == "toolexec" or module.startswith("toolexec.")


@overload
def function_tool(fn: Callable[..., Any], /) -> FunctionTool: ...
@overload
def function_tool(
    *,
    name: str | None = None,
    description: str | None = None,
    side_effects: SideEffects = SideEffects.EXECUTE,
    timeout: float | None = None,
    is_recursive: bool = False,
    classifier: Callable[[Mapping[str, Any]], SideEffects] | None = None,
    resource_hints: Mapping[str, float] | None = None,
    idempotent: bool = False,
) -> Callable[[Callable[..., Any]], FunctionTool]: ...
def function_tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    side_effects: SideEffects = SideEffects.EXECUTE,
    timeout: float | None = None,
    is_recursive: bool = False,
    classifier: Callable[[Mapping[str, Any]], SideEffects] | None = None,
    resource_hints: Mapping[str, float] | None = None,
    idempotent: bool = False,
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Turn a sync or async function into a tool; usable as a decorator.

    The input schema comes from the signature: simple types, ``Literal``,
    enums, TypedDicts, dataclasses, pydantic models, ``list[X]``,
    ``dict[str, X]`` and ``X | None``, with ``Annotated`` descriptions and
    constraints and JSON-representable defaults; the body receives typed
    values (an enum member, a dataclass or model instance). A parameter
    annotated ``ToolContext`` receives the call's context instead. A
    parameter with no annotation takes any JSON value (the schema ``{}``),
    with a ``UserWarning`` where the tool is made; annotate it ``Any`` to
    mean that.

    Example::

        @function_tool(side_effects=SideEffects.READ)
        async def word_count(text: str) -> int:
            "Count the words in a text."
            return len(text.split())

        registry.register(word_count)

    Args:
        fn: the function (when used without arguments).
        name: the tool name; defaults to the function's name.
        description: defaults to the docstring's first paragraph.
        side_effects: what the function is capable of; defaults to the unsafe
            ``EXECUTE`` so nothing runs concurrently by accident.
        timeout, is_recursive, classifier, resource_hints, idempotent: as in
            ``ToolDefinition`` (an idempotent tool takes a ``ToolContext`` to
            read its ``idempotency_key``).

    Raises:
        RegistrationError: a parameter's annotation has no JSON Schema mapping
            in the portable subset (the message names the parameter, the
            annotation and why).
    """

    def wrap(f: Callable[..., Any]) -> FunctionTool:
        return _build(
            f,
            name,
            description,
            side_effects,
            timeout,
            is_recursive,
            classifier,
            resource_hints,
            idempotent,
        )

    return wrap(fn) if fn is not None else wrap
