"""The tool side of the contract: the ``Tool`` protocol and its ``ToolContext``.

A tool sees the executor only through the context it is handed: ids, the
agent path, the workspace, progress reporting, and a grace period for
cleanup. Cancellation is trio's own: when a call times out or is cancelled,
the tool's ``await`` raises ``trio.Cancelled``; a tool that must clean up
(kill a process, remove a temp file) does so inside ``ctx.cleanup_scope()``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import attrs
import trio

if TYPE_CHECKING:
    from ._executor import ToolExecutor
    from ._types import ToolDefinition, ToolOutput

__all__ = ["Tool", "ToolContext", "ToolFactory"]


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


def _drop(_kind: str, _payload: Any) -> None:
    return None


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
        executor: the executor running this call (sub-agent tools fork it).
        grant: what the policy attached to this call (backend, limits).
        grace_period: seconds a cancelled tool gets for its cleanup.
    """

    call_id: str
    tool_name: str
    agent_path: str = "root"
    session_id: str = ""
    workspace: Any = None
    executor: ToolExecutor | None = None
    grant: Any = None
    grace_period: float = 5.0
    _emit: Callable[[str, Any], None] = attrs.field(default=_drop, alias="emit", repr=False)

    @property
    def logger(self) -> logging.Logger:
        """A logger for this tool (``toolexec.tools.<name>``)."""
        return _log.getChild(self.tool_name)

    @property
    def observed(self) -> bool:
        """Whether progress and updates reach anyone (event sinks or hooks).

        A tool can skip building updates nobody receives.
        """
        return self._emit is not _drop

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
