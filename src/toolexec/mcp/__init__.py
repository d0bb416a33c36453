"""MCP servers as a tool source: their tools run through the executor like native ones.

Install the extra (``pip install toolexec[mcp]``); this is the only package
that imports the official ``mcp`` SDK. Its modules, by concept: ``_config``
(how to reach a server), ``_schemas`` (input schemas made portable),
``_stdio`` (the stdio transport), ``_tool`` (an MCP tool as a toolexec
tool), ``_server`` (a connection and its registered tools), ``_open`` (the
``open_mcp_server(s)`` entry points and the ``MCPServerSet`` they yield).

Example::

    config = {"mcpServers": {"notes": {"command": "python", "args": ["notes_server.py"]}}}
    registry = ToolRegistry()
    async with open_mcp_servers(registry, config) as servers:
        executor = ToolExecutor(registry)
        outcome = await executor.execute_batch(
            [ToolCall("c1", "mcp__notes__read_note", {"path": "todo.txt"})]
        )

Theory of operation.

* *Configure*: ``{"mcpServers": {...}}`` and VS Code's ``{"servers":
  {...}}`` documents are read; a malformed entry is a ``ValueError`` naming
  it before anything starts. Each server is required (its failure to open
  is raised, the others closed) or optional (``"required": false``:
  logged, skipped, listed in ``MCPServerSet.skipped``).
* *Connect*: a stdio server is started in its own process group (toolexec's
  own transport, so it can kill the whole group and quote the server's last
  stderr lines when it dies); a ``url`` server is reached over streamable
  HTTP. The SDK ``Client`` negotiates the protocol (``mode="auto"``: the
  2026 ``server/discover`` probe, falling back to the ``initialize``
  handshake).
* *Register*: every listed tool becomes ``mcp__<server>__<tool>``. A name
  already taken by another tool is refused (``RegistrationError`` when the
  server is opened): nothing is ever shadowed. Characters providers refuse
  in tool names (MCP allows dots) become ``_``. ``readOnlyHint`` maps to
  ``SideEffects.READ``; anything else (``destructiveHint``, or no hint at
  all) to ``SideEffects.EXECUTE``, since a server is an arbitrary program.
  Input schemas are rewritten into the registry's portable subset when an
  equivalent exists (local ``$ref`` inlined, ``anyOf``/``oneOf`` over
  distinct types merged into a type list, as pydantic emits for
  ``x: str | None``); a tool whose schema cannot be rewritten is skipped
  with a logged warning and listed in ``MCPServer.skipped``.
* *Call*: arguments were validated by the executor against that schema;
  progress notifications become ``ctx.report_progress``; an ``isError``
  result becomes an ``execution_error`` result with the server's text; a
  protocol error or a server that dies mid-call becomes an
  ``execution_error`` naming the server, never a hang. A timeout or a
  cancel cancels the request scope, and the SDK sends
  ``notifications/cancelled`` so the server stops the work.
* *Isolation*: each connection lives in a task of its own, not around the
  caller's block, so a transport that fails (a server killed mid-stream)
  ends that connection, and its later calls get error results, without
  cancelling the caller. The caller's own exceptions come out unwrapped,
  not inside the exception groups of the SDK's task groups.
* *Refresh*: a ``notifications/tools/list_changed`` (handshake-era
  servers) or a ``subscriptions/listen`` event (2026 servers) re-lists the
  tools and updates the registry: new tools appear, removed ones go,
  changed ones are replaced.
* *Close*: the tools are unregistered, stdin is closed, the server gets a
  grace period to exit, then whatever is left alive in its process group
  (the server, or children it started) gets SIGTERM, a grace period and
  SIGKILL, while its output is still read, so no descendant survives. This
  also happens when the enclosing scope is cancelled. Processes are
  handled by ``toolexec._proc._process``, as the shell tool's are.
"""

from __future__ import annotations

from .._core._public import fixup_module_metadata as _fixup_module_metadata
from ._config import MCPServerConfig, parse_mcp_servers
from ._open import MCPServerSet, open_mcp_server, open_mcp_servers
from ._server import MCPConnectionError, MCPServer, MCPTool

__all__ = [
    "MCPConnectionError",
    "MCPServer",
    "MCPServerConfig",
    "MCPServerSet",
    "MCPTool",
    "open_mcp_server",
    "open_mcp_servers",
    "parse_mcp_servers",
]

_fixup_module_metadata(__name__, __all__)
