"""Where an admitted call runs: the ``Backend`` seam (docs/concepts.md, "Where a call runs").

The policy's ``ExecutionGrant`` names a sandbox; the executor looks the name
up among its backends when it plans the call (an unknown name is an error
result that names it, and nothing runs) and, once the call is admitted,
hands it to that backend. Admission, order, deadlines and the one-result
rule stay in the executor whatever the backend: a backend only runs the
call it is given, under the cancel scope the executor set, and returns the
tool's output or raises as the tool would.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import attrs

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ._tool_protocol import Tool, ToolContext
    from ._types import ToolOutput

__all__ = ["Backend", "HostBackend"]


@runtime_checkable
class Backend(Protocol):
    """Runs one admitted call somewhere: this process, a sandbox, a machine.

    ``run`` is called inside the call's deadline and cancel scope; it must
    honour ``trio.Cancelled`` like a tool (clean up within
    ``ctx.grace_period``), and return the tool's ``ToolOutput`` or raise
    (``ToolError`` for a failure the model should read). The grant in
    ``ctx.grant`` carries the limits the backend should enforce.

    Example::

        @attrs.frozen
        class Recording:
            async def run(self, tool, arguments, ctx):
                print("running", ctx.tool_name, "in", ctx.grant.sandbox)
                return await tool.execute(arguments, ctx)

        executor = ToolExecutor(registry, policy=..., backends={"rec": Recording()})
    """

    async def run(self, tool: Tool, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        """Run ``tool`` on ``arguments``; return its output."""
        ...


@attrs.frozen
class HostBackend:
    """The default backend: the call runs in this process, on this trio loop.

    Its name, the sandbox of a grant that names no other, is ``"host"``;
    every executor has it without being given it.
    """

    async def run(self, tool: Tool, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        """Await ``tool.execute(arguments, ctx)``."""
        return await tool.execute(arguments, ctx)
