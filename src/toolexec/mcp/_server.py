"""A connected MCP server: its connection, its tools in the registry, its calls.

Theory of operation. ``MCPServer._run`` is the connection's own task (see
``open_mcp_server``): it connects (stdio or streamable HTTP), lists the
tools, registers them, and then waits; a failure after that ends the
connection without reaching the caller, and later calls get error results
naming the server. Every listing (the first, and each refresh on a
``tools/list_changed`` notification or a 2026 ``subscriptions/listen``
event) goes through ``_apply``, which registers new tools, unregisters
removed ones and replaces changed ones, never shadowing another tool.
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
from typing import TYPE_CHECKING, Any

import attrs
import mcp_types
import trio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from .._core._errors import RegistrationError, ToolError, ToolexecError
from .._core._types import ToolDefinition
from .._gate._schema import CompiledSchema, compile_schema, one_line
from ._convert import convert_result, progress_text, side_effects
from ._schemas import UnportableSchema, portable_schema
from ._stdio import StdioProcess, StrayLine

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .._core._registry import ToolRegistry
    from .._core._tool_protocol import ToolContext
    from .._core._types import ToolOutput
    from ._config import MCPServerConfig

__all__ = ["MCPConnectionError", "MCPServer", "MCPTool", "sole_leaf"]

_log = logging.getLogger("toolexec.mcp")

# MCP allows dots (and servers send more); providers accept [A-Za-z0-9_-].
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9_-]")


class MCPConnectionError(ToolexecError):
    """An MCP server could not be started, reached, or initialised.

    The message names the server, how it was reached, the cause and, for a
    stdio server, the last lines it wrote to stderr.
    """


@attrs.define(eq=False)
class MCPServer:
    """A connected MCP server whose tools are registered in a ``ToolRegistry``.

    Get one from ``open_mcp_server`` or ``open_mcp_servers``.

    Attributes:
        config: how the server was reached.
        registry: where its tools are registered.
        tools: registered name -> the ``MCPTool`` behind it.
        skipped: server tool name -> why it was not registered.
        protocol_version: the negotiated MCP protocol version.
        revision: incremented each time the tool list is (re)applied.
    """

    config: MCPServerConfig
    registry: ToolRegistry
    tools: dict[str, MCPTool] = attrs.field(factory=dict, init=False)
    skipped: dict[str, str] = attrs.field(factory=dict, init=False)
    protocol_version: str = attrs.field(default="", init=False)
    revision: int = attrs.field(default=0, init=False)
    _client: Client | None = attrs.field(default=None, init=False, repr=False)
    _stdio: StdioProcess | None = attrs.field(default=None, init=False, repr=False)
    _changed: trio.Event = attrs.field(factory=trio.Event, init=False, repr=False)
    _refreshed: trio.Event = attrs.field(factory=trio.Event, init=False, repr=False)
    _lock: trio.Lock = attrs.field(factory=trio.Lock, init=False, repr=False)
    _closed: bool = attrs.field(default=False, init=False, repr=False)
    _lost: str = attrs.field(default="", init=False, repr=False)
    _stop: trio.Event = attrs.field(factory=trio.Event, init=False, repr=False)

    @property
    def name(self) -> str:
        """The server's configured name."""
        return self.config.name

    @property
    def pid(self) -> int | None:
        """The stdio server's process id (``None`` for HTTP servers)."""
        if self._stdio is None or self._stdio.process is None:
            return None
        return self._stdio.process.pid

    @property
    def client(self) -> Client:
        """The SDK ``Client`` of this connection, for what toolexec does not wrap.

        Resources and prompts, for instance. Raises ``RuntimeError`` once
        the connection is closed.
        """
        if self._client is None or not self.connected:
            raise RuntimeError(f"MCP server {self.name!r} is not connected")
        return self._client

    @property
    def connected(self) -> bool:
        """Whether the connection is open and, for a stdio server, its process alive."""
        if self._closed:
            return False
        return self._stdio is None or not self._stdio.exited.is_set()

    def prefix(self) -> str:
        """The prefix of this server's registered tool names (``mcp__<name>__``)."""
        return f"mcp__{self.config.name}__"

    async def refresh(self) -> None:
        """List the server's tools again and update the registry to match.

        Raises:
            RegistrationError: on the first listing only, if a tool name is
                already taken by another tool.
        """
        async with self._lock:
            assert self._client is not None
            listed: list[mcp_types.Tool] = []
            cursor: str | None = None
            for _ in range(100):
                page = await self._client.list_tools(cursor=cursor, cache_mode="bypass")
                listed.extend(page.tools)
                cursor = page.next_cursor
                if cursor is None:
                    break
            self._apply(listed, strict=self.revision == 0)
            self.revision += 1
            self._refreshed.set()
            self._refreshed = trio.Event()

    async def wait_revision(self, after: int) -> None:
        """Wait until ``revision`` is greater than ``after`` (a refresh was applied)."""
        while self.revision <= after:
            await self._refreshed.wait()

    def _definition(self, tool: mcp_types.Tool) -> ToolDefinition:
        schema = portable_schema(tool.input_schema)
        return ToolDefinition(
            name=self.prefix() + _UNSAFE_NAME.sub("_", tool.name),
            description=tool.description or tool.title or "",
            input_schema=schema,
            side_effects=side_effects(tool),
            timeout=self.config.timeout,
        )

    def _apply(self, listed: list[mcp_types.Tool], *, strict: bool) -> None:
        """Make the registry hold exactly the listed tools that can be registered."""
        self.skipped = {}
        wanted = self._wanted(listed)
        for name, old in list(self.tools.items()):
            if name not in wanted or wanted[name].definition != old.definition:
                self.registry.unregister(name)
                del self.tools[name]
        for name, wrapped in wanted.items():
            if name not in self.tools:
                self._register(name, wrapped, strict=strict)

    def _wanted(self, listed: list[mcp_types.Tool]) -> dict[str, MCPTool]:
        """The listed tools as ``MCPTool`` by registered name; the others are skipped."""
        wanted: dict[str, MCPTool] = {}
        for tool in listed:
            try:
                definition = self._definition(tool)
                compiled = compile_schema(definition.input_schema, tool=definition.name)
            except UnportableSchema as exc:
                self._skip(tool.name, f"its input schema cannot be sent as it is: {exc}")
                continue
            except RegistrationError as exc:
                self._skip(tool.name, str(exc))
                continue
            if definition.name in wanted:
                other = wanted[definition.name].remote_name
                self._skip(tool.name, f"its name becomes {definition.name!r}, as {other!r} does")
                continue
            wanted[definition.name] = MCPTool(definition, self, tool.name, compiled)
        return wanted

    def _register(self, name: str, wrapped: MCPTool, *, strict: bool) -> None:
        """Register one tool, never over another; ``strict``: a taken name is an error."""
        if name in self.registry:
            reason = "a tool with that name is already registered"
            if strict:
                self._unregister_all()
                raise RegistrationError(
                    f"MCP server {self.name!r}: cannot register {name!r}: {reason}; "
                    "rename the server in the configuration"
                )
            self._skip(wrapped.remote_name, reason)
            return
        try:
            self.registry.register(wrapped)
        except RegistrationError as exc:
            self._skip(wrapped.remote_name, str(exc))
            return
        self.tools[name] = wrapped

    async def _run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        config = self.config
        started = False
        try:
            # The deadline covers starting, initialising and the first listing.
            with trio.CancelScope(deadline=trio.current_time() + config.connect_timeout) as scope:
                async with contextlib.AsyncExitStack() as stack:
                    await _connect(self, stack)
                    nursery = await stack.enter_async_context(trio.open_nursery())
                    if self._wants_listen():  # subscribe first: no change is missed
                        await nursery.start(self._listen_changes)
                    await self.refresh()
                    scope.deadline = math.inf
                    nursery.start_soon(self._watch_changes)
                    task_status.started()
                    started = True
                    await self._stop.wait()
                    nursery.cancel_scope.cancel()
        except Exception as exc:
            if not started:
                self._unregister_all()
                raise
            self._lost = f"connection lost: {type(sole_leaf(exc)).__name__}: {sole_leaf(exc)}"
            _log.warning("MCP server %r: %s", self.name, self._lost)
        finally:
            self._closed = True
        if scope.cancelled_caught and not started:
            raise MCPConnectionError(
                await self._connect_failure(f"no answer within {config.connect_timeout:g}s")
            )

    def _wants_listen(self) -> bool:
        """Whether tool-list changes arrive as 2026 listen events (not notifications)."""
        client = self._client
        if client is None or client.session.discover_result is None:
            return False
        tools = client.server_capabilities.tools
        return bool(tools is not None and tools.list_changed)

    async def _connect_failure(self, detail: str) -> str:
        if self._stdio is not None and (summary := await self._stdio.exit_summary()):
            detail = f"{detail}; {summary}"
        config = self.config
        return f"could not connect to MCP server {config.name!r} ({config.describe()}): {detail}"

    def _skip(self, tool: str, reason: str) -> None:
        reason = one_line(reason)
        self.skipped[tool] = reason
        _log.warning("MCP server %r: tool %r not registered: %s", self.name, tool, reason)

    def _unregister_all(self) -> None:
        for name in self.tools:
            self.registry.unregister(name)
        self.tools.clear()

    async def _call(
        self, remote: str, arguments: Mapping[str, Any], ctx: ToolContext
    ) -> ToolOutput:
        client = self._client
        if client is None or not self.connected:
            raise ToolError(await self._not_connected())
        live = True

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            if live:
                ctx.report_progress(progress_text(progress, total, message))

        try:
            result = await client.call_tool(remote, dict(arguments), progress_callback=on_progress)
            # Progress callbacks run as tasks of the SDK; let those already
            # scheduled report before the result does, then drop late ones.
            await trio.lowlevel.checkpoint()
        except MCPError as exc:
            raise ToolError(await self._error_text(remote, exc)) from None
        except Exception as exc:  # transport failures, malformed results
            raise ToolError(
                f"MCP server '{self.name}' failed during the call to '{remote}': "
                f"{type(exc).__name__}: {exc}"
            ) from None
        finally:
            live = False
        return convert_result(result, self.name, remote)

    async def _not_connected(self) -> str:
        """Why calls cannot be made: the call did not reach the server."""
        lost = self._lost
        if not lost and self._stdio is not None and self._stdio.exited.is_set():
            lost = self._lost = await self._stdio.exit_summary()
        why = f" ({lost})" if lost else ""
        return f"MCP server '{self.name}' is not connected{why}; the call was not sent."

    async def _error_text(self, remote: str, exc: MCPError) -> str:
        if exc.code == mcp_types.CONNECTION_CLOSED:
            text = f"MCP server '{self.name}' closed the connection during the call to '{remote}'"
            summary = await self._stdio.exit_summary() if self._stdio is not None else ""
            return f"{text}: {summary}" if summary else f"{text}."
        if exc.code == mcp_types.INTERNAL_ERROR:  # the tool itself failed inside the server
            return f"MCP tool '{remote}' failed inside server '{self.name}': {exc.message}"
        return f"MCP server '{self.name}' rejected the call to '{remote}': {exc.message}"

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            self._changed.set()
        elif isinstance(message, StrayLine):
            _log.warning("MCP server %r: %s", self.name, message)
        elif isinstance(message, Exception):
            _log.warning(
                "MCP server %r: the connection reported an error: %s",
                self.name,
                one_line(f"{type(message).__name__}: {message}", 300),
            )

    async def _watch_changes(self) -> None:
        while True:
            await self._changed.wait()
            self._changed = trio.Event()
            try:
                await self.refresh()
            except Exception as exc:
                _log.warning("MCP server %r: refreshing the tool list failed: %s", self.name, exc)

    async def _listen_changes(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        assert self._client is not None
        started = False
        try:
            async with self._client.listen(tools_list_changed=True) as subscription:
                task_status.started()
                started = True
                async for _event in subscription:
                    self._changed.set()
        except Exception as exc:
            _log.warning("MCP server %r: tool list subscription ended: %s", self.name, exc)
            if not started:
                task_status.started()


def sole_leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


async def _connect(server: MCPServer, stack: contextlib.AsyncExitStack) -> None:
    config = server.config
    if config.command is not None:
        server._stdio = StdioProcess(config)
        transport: Any = server._stdio.open()
    else:
        assert config.url is not None
        http = await stack.enter_async_context(
            create_mcp_http_client(headers=dict(config.headers) or None)
        )
        transport = streamable_http_client(config.url, http_client=http)
    client = Client(
        transport,
        mode=config.mode,
        cache=None,
        message_handler=server._on_message,
        client_info=mcp_types.Implementation(name="toolexec", version=_version()),
    )
    try:
        await stack.enter_async_context(client)
    except Exception as exc:
        cause = sole_leaf(exc)
        detail = f"{type(cause).__name__}: {cause}"
        if isinstance(cause, MCPError) and cause.code == mcp_types.CONNECTION_CLOSED:
            detail = "the server closed the connection"
        raise MCPConnectionError(await server._connect_failure(detail)) from exc
    server._client = client
    server.protocol_version = client.protocol_version


def _version() -> str:
    from .._core._version import VERSION

    return VERSION


@attrs.define(eq=False)
class MCPTool:
    """One tool of a connected MCP server, as a toolexec ``Tool``.

    Stateless: the registry's factory hands out this same instance for
    every call, and the connection it calls through is shared.
    """

    definition: ToolDefinition
    server: MCPServer
    remote_name: str
    #: The input schema as checked and compiled when the tool was listed;
    #: the registry reuses it instead of compiling it again.
    compiled_schema: CompiledSchema | None = attrs.field(default=None, repr=False, eq=False)

    async def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        """Call the tool on its server; see the module docstring for the error mapping."""
        return await self.server._call(self.remote_name, arguments, ctx)

    def __call__(self) -> MCPTool:
        """Be the registry's factory for this tool."""
        return self
