"""The built-in tool set: ``register_builtin_tools``, and ``echo``.

The tools themselves live by concept: the file tools in ``_file_tools``,
``search_files`` in ``_search``, ``shell`` in ``_shell``. This module puts
them together for a workspace, and holds ``echo``, which needs none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from .._core._types import SideEffects, ToolDefinition, ToolOutput
from ._file_tools import EditFileTool, ListDirTool, ReadFileTool, WriteFileTool, tool_schema
from ._search import SearchFilesTool
from ._shell import ShellTool

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .._core._registry import ToolRegistry
    from .._core._tool_protocol import ToolContext
    from ._workspace import Workspace

__all__ = ["EchoTool", "register_builtin_tools"]


# -- echo ---------------------------------------------------------------------

ECHO = ToolDefinition(
    name="echo",
    description="Return the given text unchanged (useful for testing tool calling).",
    input_schema=tool_schema(
        {"text": {"type": "string", "description": "The text to return."}}, "text"
    ),
    side_effects=SideEffects.NONE,
)


@attrs.define(eq=False)
class EchoTool:
    """``echo``: return the text it is given."""

    definition: ToolDefinition = attrs.field(default=ECHO, init=False)

    def __call__(self) -> EchoTool:
        """Act as its own factory: it keeps no per-call state."""
        return self

    async def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        """Return the text."""
        return ToolOutput.text(arguments["text"])


# -- registration -----------------------------------------------------------------


def register_builtin_tools(
    registry: ToolRegistry, workspace: Workspace, *, shell: bool = False
) -> list[ToolDefinition]:
    """Register the built-in tools for ``workspace``; return their definitions.

    Registers ``read_file``, ``write_file``, ``edit_file``, ``list_dir``,
    ``search_files`` and ``echo``, and ``shell`` only when asked
    (``shell=True``): a shell runs anything the model writes, so give it an
    approver too (``ToolExecutor(registry, approver=...)`` asks before every
    write and command). To tune a tool (caps, timeouts), register its class
    yourself instead, e.g. ``registry.register(ShellTool(workspace,
    default_timeout=30))``.

    Raises:
        RegistrationError: a tool of the same name is already registered.
    """
    tools: list[Any] = [
        ReadFileTool(workspace),
        WriteFileTool(workspace),
        EditFileTool(workspace),
        ListDirTool(workspace),
        SearchFilesTool(workspace),
        EchoTool(),
    ]
    if shell:
        tools.append(ShellTool(workspace))
    return [registry.register(tool) for tool in tools]
