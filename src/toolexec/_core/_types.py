"""The values that flow through the executor: calls, results, definitions.

Everything here is a frozen attrs class or an enum. Nothing here does I/O.
"""

from __future__ import annotations

import enum
import inspect
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

import attrs

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from pathlib import Path

    from ._resource_keys import Resource

__all__ = [
    "ContentBlock",
    "ErrorClass",
    "ImageContent",
    "JsonContent",
    "PathResolver",
    "RoutingClass",
    "SideEffects",
    "TextContent",
    "ToolCall",
    "ToolDefinition",
    "ToolOutput",
    "ToolResult",
]


class SideEffects(enum.Enum):
    """The strongest effect a tool is *capable* of, declared by capability.

    ``NONE`` and ``READ`` tools are routed as read-only; the others mutate.
    A tool that reads and then writes is ``WRITE``; a shell is ``EXECUTE``
    even when a given command only reads (a per-call classifier can say so).
    """

    NONE = "none"
    READ = "read"
    WRITE = "write"
    EXECUTE = "execute"
    NETWORK = "network"

    @property
    def is_read_only(self) -> bool:
        """Whether a call with these effects cannot change anything."""
        return self is SideEffects.NONE or self is SideEffects.READ


class RoutingClass(enum.Enum):
    """How the executor schedules one call (docs/concepts.md, "Routing")."""

    READ_ONLY = "read_only"
    CONCURRENT_MUT = "concurrent_mut"
    SERIAL_MUT = "serial_mut"
    SHORT_CIRCUIT = "short_circuit"


class ErrorClass(enum.Enum):
    """Why a result is an error. Closed: every ``is_error`` result has one."""

    NOT_FOUND = "not_found"
    INVALID_ARGUMENTS = "invalid_arguments"
    PERMISSION_DENIED = "permission_denied"
    USER_DENIED = "user_denied"
    CONFIRMATION_TIMEOUT = "confirmation_timeout"
    TIMEOUT = "timeout"
    EXECUTION_ERROR = "execution_error"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"


def _text(inst: object, attr: attrs.Attribute[Any], value: object) -> None:
    if type(value) is not str and not isinstance(value, str):
        raise TypeError(
            f"{type(inst).__name__}.{attr.name} must be a str, got {type(value).__name__}"
        )


@attrs.frozen
class TextContent:
    """A block of text for the model."""

    text: str = attrs.field(validator=_text)
    type: str = attrs.field(default="text", init=False)


@attrs.frozen
class ImageContent:
    """An image for the model, base64-encoded."""

    data: str = attrs.field(validator=_text)
    mime_type: str = attrs.field(validator=_text)
    type: str = attrs.field(default="image", init=False)


def _json_value(_inst: object, _attr: object, value: object) -> None:
    if value is None or type(value) in (str, int, bool):
        return
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise TypeError(
            f"JsonContent needs a value JSON can represent (dict, list, str, int, finite "
            f"float, bool or None), got {describe(value)}: {exc}"
        ) from None


def describe(value: object) -> str:
    """How an error message names an unexpected value: its type, or what it means."""
    if inspect.iscoroutine(value):
        return "a coroutine (did you forget `await`?)"
    return f"{type(value).__name__}"


def strings(value: Iterable[str], what: str) -> tuple[str, ...]:
    """``value`` as a tuple of strings, for a field that holds several (``what``).

    A single string is refused: iterating it would give one-letter entries
    (a tool pattern ``*``, a trusted root ``/``), silently wider than meant.
    """
    if isinstance(value, str):
        raise TypeError(
            f"{what} must be a collection of strings, got the string {value!r}; "
            f"write [{value!r}] for that one"
        )
    found = tuple(value)
    for item in found:
        if not isinstance(item, str):
            raise TypeError(f"{what} must hold strings, got {item!r} ({describe(item)})")
    return found


@attrs.frozen
class JsonContent:
    """A JSON value for the model (rendered as JSON text where a provider needs text).

    The value must be one JSON can represent: dicts with string keys, lists,
    strings, numbers (no NaN or infinity), booleans and ``None``; anything
    else raises ``TypeError`` where the block is made.
    """

    value: Any = attrs.field(validator=_json_value)
    type: str = attrs.field(default="json", init=False)


ContentBlock: TypeAlias = TextContent | ImageContent | JsonContent


def block_text(block: ContentBlock) -> str:
    """A content block as the model reads it where only text is sent.

    The provider formats use this too, so ``ToolResult.text`` is exactly the
    text they send (before any ``Error:`` prefix a format adds).
    """
    if isinstance(block, TextContent):
        return block.text
    if isinstance(block, JsonContent):
        return json.dumps(block.value, ensure_ascii=False)
    return f"[image {block.mime_type}, {decoded_size(block.data)} bytes, not shown]"


def decoded_size(data: str) -> int:
    """How many bytes the base64 text ``data`` decodes to (padding and line breaks are not data)."""
    digits = "".join(data.split()).rstrip("=")
    return len(digits) * 3 // 4


class PathResolver(Protocol):
    """What the core needs of a workspace: its root, and where a path leads.

    ``Workspace`` is the implementation; policies use ``resolve_sync`` to
    judge a path argument where it really leads (links followed inside the
    root), and approval uses ``root`` to recognise trusted workspaces.
    """

    @property
    def root(self) -> Path:
        """The directory every path is resolved beneath."""
        ...

    def resolve_sync(self, path: str) -> str:
        """The root-relative path ``path`` leads to; raise ``ToolError`` if refused."""
        ...


@attrs.frozen
class ToolCall:
    """One call the model asked for.

    ``arguments`` is either a mapping or the raw JSON text a provider sent;
    the executor parses it, so malformed JSON (or a value that is not an
    object) becomes an error *result*. ``id`` and ``name`` must be strings:
    anything else raises ``TypeError`` here, where the call is made.
    """

    id: str
    name: str
    arguments: Mapping[str, Any] | str = attrs.field(factory=dict)

    def __attrs_post_init__(self) -> None:
        # Type checks first: they cost nanoseconds on the per-call path.
        if type(self.id) is not str or type(self.name) is not str:
            for field in ("id", "name"):
                value = getattr(self, field)
                if not isinstance(value, str):
                    raise TypeError(
                        f"ToolCall.{field} must be a string, got {describe(value)}"
                        + ("; the call id a provider sent is a string" if field == "id" else "")
                    )


_BLOCKS = (TextContent, ImageContent, JsonContent)


def _blocks(_inst: object, _attr: object, value: object) -> None:
    if type(value) is tuple:
        for block in value:
            if type(block) not in _BLOCKS:
                break
        else:
            return
    want = "ToolOutput content must be a tuple of content blocks (TextContent, ImageContent, "
    if not isinstance(value, tuple):
        hint = "; for plain text use ToolOutput.text(...)" if isinstance(value, str) else ""
        raise TypeError(f"{want}JsonContent), got {describe(value)}{hint}")
    for i, block in enumerate(value):
        if not isinstance(block, _BLOCKS):
            raise TypeError(f"{want}JsonContent); item {i} is {describe(block)}")


def _mapping(_inst: object, _attr: object, value: object) -> None:
    if type(value) is not dict and not isinstance(value, Mapping):
        raise TypeError(f"ToolOutput details must be a mapping, got {describe(value)}")


@attrs.frozen
class ToolOutput:
    """What a tool hands back: content for the model, details for the host.

    A tool that handled a failure itself (a missing file, say) returns
    ``is_error=True``; the call then gets an ``execution_error`` result
    carrying this content.
    """

    content: tuple[ContentBlock, ...] = attrs.field(default=(), validator=_blocks)
    details: Mapping[str, Any] = attrs.field(factory=dict, validator=_mapping)
    is_error: bool = False

    @classmethod
    def text(cls, text: str, *, is_error: bool = False, **details: Any) -> ToolOutput:
        """Build an output holding one text block."""
        if type(text) is not str or cls is not ToolOutput:
            return cls((TextContent(text),), details, is_error)
        # The per-call path (a function tool's str): ``text`` is checked here, so
        # the validators have nothing left to check; filling the slots directly
        # costs half of attrs' ``__init__``.
        block = _new(TextContent)
        _set_text(block, text)
        _set_type(block, "text")
        output = _new(ToolOutput)
        _set_content(output, (block,))
        _set_details(output, details)
        _set_is_error(output, is_error)
        return output


_new = object.__new__
_set_text = TextContent.__dict__["text"].__set__
_set_type = TextContent.__dict__["type"].__set__
_set_content = ToolOutput.__dict__["content"].__set__
_set_details = ToolOutput.__dict__["details"].__set__
_set_is_error = ToolOutput.__dict__["is_error"].__set__


@attrs.frozen
class ToolResult:
    """The one result every call gets, in call order.

    ``details`` is for the host, never shown to the model. ``duration`` is
    the execution time in seconds (zero for calls that never ran).
    """

    call_id: str
    tool_name: str
    content: tuple[ContentBlock, ...]
    is_error: bool = False
    error_class: ErrorClass | None = None
    details: Mapping[str, Any] = attrs.field(factory=dict)
    duration: float = 0.0
    routing: RoutingClass = RoutingClass.SHORT_CIRCUIT

    @property
    def text(self) -> str:
        """What the model reads: every block as text (JSON as JSON text, an
        image as a short note), joined by newlines."""
        return "\n".join(map(block_text, self.content))


RESOURCE_HINTS = ("num_cpus", "num_gpus", "memory")


def resource_problem(hints: object) -> str | None:
    """What is wrong with resource hints (``None`` if nothing): a mapping of
    ``num_cpus`` and ``num_gpus`` (numbers >= 0) and ``memory`` (bytes, an
    integer >= 1)."""
    if not isinstance(hints, Mapping):
        return f"must be a mapping of {', '.join(RESOURCE_HINTS)}, got {describe(hints)}"
    for key, value in hints.items():
        if key not in RESOURCE_HINTS:
            return f"has unknown hint {key!r}; the hints are {', '.join(RESOURCE_HINTS)}"
        if key == "memory":
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                return f"memory must be an integer number of bytes >= 1, got {value!r}"
        elif isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
            return f"{key} must be a number >= 0, got {value!r}"
    return None


def _check_resource_hints(_inst: object, _attr: object, value: Mapping[str, float]) -> None:
    problem = resource_problem(value)
    if problem is not None:
        raise ValueError(f"ToolDefinition resource_hints {problem}")


def _check_timeout(_inst: object, _attr: object, value: float | None) -> None:
    if value is not None and not value > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {value!r}")


@attrs.frozen
class ToolDefinition:
    """Everything the executor and the model need to know about a tool.

    Args:
        name: what the model calls it (letters, digits, ``_`` and ``-``, 1-64).
        description: what the model is told the tool does.
        input_schema: a JSON Schema object in the portable subset.
        side_effects: the strongest effect the tool is capable of; the
            default is the unsafe one.
        is_recursive: set by tools that run a child agent (sub-agents).
        timeout: seconds; ``None`` means 60, or 600 for ``EXECUTE``/``NETWORK``.
        classifier: optional ``(arguments) -> SideEffects`` naming the effect
            of one particular call (a shell tool says ``READ`` for ``ls``).
            It may only lower the class for routing; if it raises, the
            declared effect is used.
        path_arguments: argument names holding workspace paths, with the
            access mode (``"r"`` or ``"w"``) capability policies check.
        workspace: the workspace (a ``PathResolver``) those paths are resolved in, if the
            tool has one (the built-in file tools set it), so that policies
            judge a path where it really leads even when they were given no
            workspace themselves.
        resource_hints: what one call needs where it is scheduled (``num_cpus``,
            ``num_gpus``, ``memory`` in bytes); backends that place work on a
            cluster (``RayBackend``) reserve it, the host ignores it. A
            grant's limits with the same keys take precedence.
        resources: optional ``(arguments) -> iterable of Resource``: what one
            call reads and writes, for executors built with
            ``resource_conflicts=True`` (docs/resources.md). It is called in
            a worker thread when the call's run starts. Tools without it keep
            their class behaviour.
        idempotent: running a call twice has the effect of running it once
            (the tool makes sure, with ``ToolContext.idempotency_key``), so
            a journaled call interrupted by a crash runs again on resume
            (docs/durable.md).
    """

    name: str
    description: str
    input_schema: Mapping[str, Any] = attrs.field(
        factory=lambda: {"type": "object", "properties": {}}
    )
    side_effects: SideEffects = SideEffects.EXECUTE
    is_recursive: bool = False
    timeout: float | None = attrs.field(default=None, validator=_check_timeout)
    classifier: Callable[[Mapping[str, Any]], SideEffects] | None = attrs.field(
        default=None, eq=False
    )
    path_arguments: Mapping[str, str] = attrs.field(factory=dict)
    workspace: PathResolver | None = attrs.field(default=None, eq=False, repr=False)
    resource_hints: Mapping[str, float] = attrs.field(factory=dict, validator=_check_resource_hints)
    resources: Callable[[Mapping[str, Any]], Iterable[Resource]] | None = attrs.field(
        default=None, eq=False, repr=False
    )
    idempotent: bool = False

    @property
    def effective_timeout(self) -> float:
        """The deadline a call of this tool runs under, in seconds."""
        if self.timeout is not None:
            return self.timeout
        if self.side_effects in (SideEffects.EXECUTE, SideEffects.NETWORK):
            return 600.0
        return 60.0
