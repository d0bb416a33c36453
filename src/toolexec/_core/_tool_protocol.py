"""The tool side of the contract: the ``Tool`` protocol and its ``ToolContext``.

A tool sees the executor only through the context it is handed: ids, the
agent path, the workspace, its grant, progress reporting, a grace period for
cleanup, and the *services* the host gave the executor (objects looked up by
type, such as the agent tree a sub-agent tool needs; the executor running
the call is one of them, so a tool that starts a child agent can fork it).

Cancellation is trio's own: when a call times out or is cancelled, the
tool's ``await`` raises ``trio.Cancelled``; a tool that must clean up (kill
a process, remove a temp file) does so inside ``ctx.cleanup_scope()``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, overload, runtime_checkable

import attrs
import trio

from .._gate._policy import HOST_GRANT, ExecutionGrant

if TYPE_CHECKING:
    from ._types import PathResolver, ToolDefinition, ToolOutput

__all__ = ["Services", "Tool", "ToolContext", "ToolFactory"]

T = TypeVar("T")


@runtime_checkable
class Tool(Protocol):
    """What every tool implements: a definition and ``execute``.

    Tools are registered as zero-argument factories; each call gets the
    instance the factory returns, so per-call state never leaks between
    concurrent calls. ``execute`` receives arguments already parsed and
    validated against ``definition.input_schema``. Raise ``ToolError`` to
    fail with a message for the model, or return ``ToolOutput(is_error=True)``.
    """

    @property
    def definition(self) -> ToolDefinition:
        """The tool's name, schema, side effects and limits."""
        ...

    async def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        """Run one call."""
        ...


ToolFactory = Callable[[], Tool]

_log = logging.getLogger("toolexec.tools")


def drop_update(_kind: str, _payload: Any) -> None:
    return None


@attrs.define(eq=False)
class Services:
    """Host objects shared by a tree of executors, one per type.

    The root executor makes one from its ``services=`` argument; every fork
    shares it, so what one agent installs (the default agent tree) the whole
    tree sees.
    """

    _by_type: dict[type, object] = attrs.field(factory=dict, alias="by_type")

    @classmethod
    def of(cls, objects: Iterable[object]) -> Services:
        """Index ``objects`` by their type; two of one type is an error."""
        by_type: dict[type, object] = {}
        for obj in objects:
            if type(obj) in by_type:
                raise ValueError(f"two services of type {type(obj).__name__}; give one")
            by_type[type(obj)] = obj
        return cls(by_type=by_type)

    def get(self, kind: type[T]) -> T | None:
        """The service of type ``kind`` (or a subclass), or ``None``."""
        found = self._by_type.get(kind)
        if found is None:
            found = next((o for o in self._by_type.values() if isinstance(o, kind)), None)
        return found  # type: ignore[return-value]

    def setdefault(self, kind: type[T], factory: Callable[[], T]) -> T:
        """The service of type ``kind``, installed from ``factory`` if absent."""
        found = self.get(kind)
        if found is None:
            found = self._by_type[kind] = factory()
        return found


@attrs.define(eq=False)
class ToolContext:
    """What a running tool knows about its call and its world.

    Attributes:
        call_id: the id of the call being executed.
        tool_name: the tool's registered name.
        agent_path: where in the agent tree this call runs (``"root"``,
            ``"root/researcher#2"``).
        session_id: the host's session id.
        workspace: the workspace the executor was given, if any.
        grant: what the policy attached to this call (sandbox, limits).
        grace_period: seconds a cancelled tool gets for its cleanup.
        batch_id: the id of the batch the call belongs to.
        idempotency_key: with a journal (docs/durable.md), a key for this
            call that is the same on every attempt, for an idempotent tool
            to hand to whatever it changes; ``None`` without a journal.

    Use ``service(kind)`` for the host objects the executor was given and for
    the executor itself (``ctx.service(ToolExecutor)``).
    """

    call_id: str
    tool_name: str
    agent_path: str = "root"
    session_id: str = ""
    workspace: PathResolver | None = None
    grant: ExecutionGrant = HOST_GRANT
    grace_period: float = 5.0
    _executor: object = attrs.field(default=None, alias="executor", repr=False)
    _services: Services = attrs.field(factory=Services, alias="services", repr=False)
    _emit: Callable[[str, Any], None] = attrs.field(default=drop_update, alias="emit", repr=False)
    batch_id: str = ""
    idempotency_key: str | None = None

    @overload
    def service(self, kind: type[T]) -> T | None: ...
    @overload
    def service(self, kind: type[T], default: Callable[[], T]) -> T: ...

    def service(self, kind: type[T], default: Callable[[], T] | None = None) -> T | None:
        """The object of type ``kind`` this call can use, or ``None``.

        That is the executor running the call (``ctx.service(ToolExecutor)``)
        or one of the services its host gave it (``ToolExecutor(...,
        services=[...])``). With ``default``, a missing service is made by
        calling it and installed for the whole tree of executors.
        """
        if isinstance(self._executor, kind):
            return self._executor
        if default is None:
            return self._services.get(kind)
        return self._services.setdefault(kind, default)

    @property
    def logger(self) -> logging.Logger:
        """A logger for this tool (``toolexec.tools.<name>``)."""
        return _log.getChild(self.tool_name)

    @property
    def observed(self) -> bool:
        """Whether progress and updates reach anyone (event sinks or hooks).

        A tool can skip building updates nobody receives.
        """
        return self._emit is not drop_update

    def report_progress(self, message: str) -> None:
        """Tell the host how the call is going (never shown to the model).

        Safe to call from the trio thread or from a worker thread running a
        sync tool. Never blocks and never raises.
        """
        self._emit_any("progress", message)

    def update(self, partial: ToolOutput) -> None:
        """Stream a partial output to the host (never shown to the model)."""
        self._emit_any("update", partial)

    def cleanup_scope(self) -> trio.CancelScope:
        """A shielded scope lasting at most ``grace_period``, for cleanup.

        Use it in a ``finally`` or ``except trio.Cancelled`` block::

            try:
                await run()
            finally:
                with ctx.cleanup_scope():
                    await terminate_gracefully()
        """
        return trio.CancelScope(shield=True, deadline=trio.current_time() + self.grace_period)

    def _emit_any(self, kind: str, payload: Any) -> None:
        try:
            trio.lowlevel.current_task()
        except RuntimeError:  # a worker thread: hop back to trio to emit
            with contextlib.suppress(RuntimeError, trio.RunFinishedError):
                trio.from_thread.run_sync(self._emit, kind, payload)
            return
        self._emit(kind, payload)
