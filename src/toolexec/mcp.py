"""MCP servers as a tool source: their tools run through the executor like native ones.

Install the extra (``pip install toolexec[mcp]``); this is the only module
that imports the official ``mcp`` SDK.

Example::

    config = {"mcpServers": {"notes": {"command": "python", "args": ["notes_server.py"]}}}
    registry = ToolRegistry()
    async with open_mcp_servers(registry, config) as servers:
        executor = ToolExecutor(registry)
        outcome = await executor.execute_batch(
            [ToolCall("c1", "mcp__notes__read_note", {"path": "todo.txt"})]
        )

Theory of operation.

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
  handled by ``toolexec._process``, as the shell tool's are.
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
import subprocess
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import anyio
import attrs
import mcp_types
import trio
from mcp import Client
from mcp.client.stdio import get_default_environment
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage

from ._errors import RegistrationError, ToolError, ToolexecError
from ._process import LineTail, open_group_process, reap, terminate_group
from ._schema import compile_schema
from ._types import (
    ContentBlock,
    ImageContent,
    JsonContent,
    SideEffects,
    TextContent,
    ToolDefinition,
    ToolOutput,
)

if TYPE_CHECKING:
    from ._registry import ToolRegistry
    from ._tool import ToolContext

__all__ = [
    "MCPConnectionError",
    "MCPServer",
    "MCPServerConfig",
    "MCPTool",
    "open_mcp_server",
    "open_mcp_servers",
    "parse_mcp_servers",
]

_log = logging.getLogger("toolexec.mcp")

_STDERR_LINES = 20
# MCP allows dots (and servers send more); providers accept [A-Za-z0-9_-].
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9_-]")
_EXIT_GRACE = 2.0


class MCPConnectionError(ToolexecError):
    """An MCP server could not be started, reached, or initialised.

    The message names the server, how it was reached, the cause and, for a
    stdio server, the last lines it wrote to stderr.
    """


# -- configuration ----------------------------------------------------------


def _str_tuple(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


def _str_map(value: Mapping[str, str] | None) -> Mapping[str, str]:
    return dict(value or {})


@attrs.frozen
class MCPServerConfig:
    """How to reach one MCP server: a command (stdio) or a URL (streamable HTTP).

    Build it from the ``mcpServers`` entry users already write with
    ``MCPServerConfig.from_entry(name, entry)``, or directly.

    Args:
        name: the server's name; its tools are registered as
            ``mcp__<name>__<tool>``.
        command: executable to start (stdio transport).
        args: its arguments.
        env: extra environment variables, merged over a minimal inherited
            environment (``HOME``, ``PATH``, ``USER``, ...), as the SDK does.
        cwd: working directory for the command.
        url: streamable HTTP endpoint (instead of ``command``).
        headers: HTTP headers sent with every request (e.g. authorization).
        timeout: per-call deadline in seconds for this server's tools;
            ``None`` keeps the executor default (60 s for read-only tools,
            600 s for the others).
        mode: protocol negotiation, passed to the SDK ``Client``: ``"auto"``
            (default) or ``"legacy"`` (the ``initialize`` handshake only).
        connect_timeout: seconds allowed for starting and initialising.
    """

    name: str
    command: str | None = None
    args: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    env: Mapping[str, str] = attrs.field(factory=dict, converter=_str_map)
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = attrs.field(factory=dict, converter=_str_map)
    timeout: float | None = None
    mode: str = "auto"
    connect_timeout: float = 30.0

    def __attrs_post_init__(self) -> None:
        if (self.command is None) == (self.url is None):
            raise ValueError(
                f"MCP server {self.name!r}: give exactly one of 'command' (stdio) or 'url' (HTTP)"
            )

    @classmethod
    def from_entry(cls, name: str, entry: Mapping[str, Any], **options: Any) -> MCPServerConfig:
        """Read one ``mcpServers`` entry: ``{command, args, env, cwd}`` or ``{url, headers}``.

        ``type`` may be ``"stdio"``, ``"http"`` or ``"streamable-http"``; the
        old SSE transport is refused. Other keys are ignored. ``options``
        set the fields the format has no key for (``timeout``, ``mode``,
        ``connect_timeout``).

        Raises:
            ValueError: the entry is malformed; the message says how.
        """
        if not isinstance(entry, Mapping):
            raise ValueError(f"MCP server {name!r}: expected an object, got {entry!r}")
        kind = entry.get("type", "http" if "url" in entry else "stdio")
        if kind == "sse":
            raise ValueError(
                f"MCP server {name!r}: the SSE transport is deprecated and not supported; "
                "use a streamable HTTP endpoint ('type': 'http')"
            )
        if kind not in ("stdio", "http", "streamable-http", "streamableHttp"):
            raise ValueError(f"MCP server {name!r}: unknown transport type {kind!r}")
        args = entry.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise ValueError(f"MCP server {name!r}: 'args' must be a list of strings")
        for key in ("env", "headers"):
            value = entry.get(key, {})
            if not isinstance(value, Mapping) or not all(
                isinstance(v, str) for v in value.values()
            ):
                raise ValueError(f"MCP server {name!r}: {key!r} must map names to strings")
        return cls(
            name,
            command=entry.get("command"),
            args=args,
            env=entry.get("env"),
            cwd=entry.get("cwd"),
            url=entry.get("url"),
            headers=entry.get("headers"),
            **options,
        )

    def describe(self) -> str:
        """How the server is reached, for messages (``stdio: python s.py``)."""
        if self.url is not None:
            return f"HTTP {self.url}"
        return "stdio: " + " ".join([self.command or "", *self.args])


def parse_mcp_servers(config: Mapping[str, Any], **options: Any) -> tuple[MCPServerConfig, ...]:
    """Read an ``mcpServers`` configuration into server configs.

    Accepts the whole file's object (``{"mcpServers": {...}}``) or the inner
    mapping. Entries with ``"disabled": true`` are left out. ``options``
    apply to every server (see ``MCPServerConfig.from_entry``).

    Raises:
        ValueError: the configuration is malformed.
    """
    servers = config.get("mcpServers", config)
    if not isinstance(servers, Mapping):
        raise ValueError("'mcpServers' must map server names to server entries")
    return tuple(
        MCPServerConfig.from_entry(name, entry, **options)
        for name, entry in servers.items()
        if not (isinstance(entry, Mapping) and entry.get("disabled") is True)
    )


# -- schemas ------------------------------------------------------------------


class _Unportable(Exception):
    pass


def _portable(schema: Mapping[str, Any]) -> dict[str, Any]:
    """Rewrite a schema into the portable subset, or raise ``_Unportable``."""
    defs = {**schema.get("definitions", {}), **schema.get("$defs", {})}
    out: dict[str, Any] = _rewrite(schema, defs, ())
    out.pop("$defs", None)
    out.pop("definitions", None)
    return out


def _rewrite(node: Any, defs: Mapping[str, Any], seen: tuple[str, ...]) -> Any:
    if isinstance(node, list):
        return [_rewrite(item, defs, seen) for item in node]
    if not isinstance(node, Mapping):
        return node
    if "$ref" in node:
        ref = node["$ref"]
        prefix = next((p for p in ("#/$defs/", "#/definitions/") if ref.startswith(p)), None)
        if prefix is None or ref[len(prefix) :] not in defs:
            raise _Unportable(f"$ref {ref!r} is not a local definition")
        if ref in seen:
            raise _Unportable(f"$ref {ref!r} is recursive")
        target = _rewrite(defs[ref[len(prefix) :]], defs, (*seen, ref))
        return {**target, **_rewrite({k: v for k, v in node.items() if k != "$ref"}, defs, seen)}
    out = {k: _rewrite(v, defs, seen) for k, v in node.items() if k not in ("$defs", "definitions")}
    for key in ("anyOf", "oneOf"):
        if key in out:
            branches = out.pop(key)
            merged = _merge_types(branches, exclusive=key == "oneOf")
            if merged is None:
                raise _Unportable(f"{key} over overlapping alternatives")
            for name, value in merged.items():
                if name in out and out[name] != value:
                    raise _Unportable(f"{key} conflicts with a sibling {name!r}")
                out[name] = value
    return out


# Keywords that only describe; merging them loses nothing.
_ANNOTATIONS = frozenset(
    ("title", "description", "default", "examples", "deprecated", "$comment", "readOnly")
)


def _merge_types(branches: list[Any], *, exclusive: bool) -> dict[str, Any] | None:
    """Merge alternatives that each allow one distinct type into one schema.

    Exact because every other keyword of a branch either only describes or
    only constrains values of that branch's type (``minLength`` says nothing
    about integers). ``enum``/``const`` constrain every type, so they are
    merged only beside a bare ``null`` alternative (``None`` joins the enum).
    """
    merged: dict[str, Any] = {}
    types: list[str] = []
    enums: list[Any] = []
    for branch in branches:
        kind = branch.get("type") if isinstance(branch, Mapping) else None
        if not isinstance(kind, str) or kind in types:
            return None
        types.append(kind)
        for name, value in branch.items():
            if name in ("enum", "const"):
                enums.extend(value if name == "enum" else [value])
            elif name != "type" and not (name in _ANNOTATIONS and name in merged):
                if name in merged and merged[name] != value:
                    return None
                merged[name] = value
    if exclusive and {"integer", "number"} <= set(types):
        return None
    if enums:
        plain = [b for b in branches if "enum" not in b and "const" not in b]
        if plain and plain != [{"type": "null"}]:
            return None
        merged["enum"] = enums + [None] * len(plain)
    merged["type"] = types if len(types) > 1 else types[0]
    return merged


# -- stdio transport ----------------------------------------------------------


def _parse_line(line: bytes) -> SessionMessage | Exception:
    try:
        message = mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValueError as exc:
        return exc
    return SessionMessage(message)


async def _lines(stream: trio.abc.ReceiveStream) -> AsyncGenerator[bytes, None]:
    """Split a byte stream into lines (without the newline), in linear time."""
    pending = bytearray()
    async for chunk in stream:
        start = 0
        while (end := chunk.find(b"\n", start)) != -1:
            pending += chunk[start:end]
            yield bytes(pending)
            pending.clear()
            start = end + 1
        pending += chunk[start:]


@attrs.define(eq=False)
class _StdioProcess:
    """A stdio server process, its process group, and the tail of its stderr."""

    config: MCPServerConfig
    process: trio.Process | None = None
    stderr: LineTail = attrs.field(factory=lambda: LineTail(_STDERR_LINES))

    @contextlib.asynccontextmanager
    async def open(self) -> AsyncIterator[tuple[Any, Any]]:
        config = self.config
        assert config.command is not None
        process = await open_group_process(
            [config.command, *config.args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=get_default_environment() | dict(config.env),
            cwd=config.cwd,
        )
        self.process = process
        read_send, read_recv = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        write_send, write_recv = anyio.create_memory_object_stream[SessionMessage](0)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._read_stdout, process, read_send)
                nursery.start_soon(self._write_stdin, process, write_recv, read_send)
                nursery.start_soon(self._read_stderr, process)
                try:
                    yield read_recv, write_send
                finally:
                    with trio.CancelScope(shield=True):
                        await self._stop(process)
                    nursery.cancel_scope.cancel()
        finally:
            for stream in (read_send, read_recv, write_send, write_recv):
                stream.close()
            await reap(process, _EXIT_GRACE)

    async def _read_stdout(self, process: trio.Process, send: Any) -> None:
        assert process.stdout is not None
        async with send:
            with contextlib.suppress(trio.ClosedResourceError, trio.BrokenResourceError):
                async with contextlib.aclosing(_lines(process.stdout)) as lines:
                    async for line in lines:
                        if line.strip():
                            try:
                                await send.send(_parse_line(line))
                            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                                return

    async def _write_stdin(self, process: trio.Process, receive: Any, read_send: Any) -> None:
        assert process.stdin is not None
        try:
            async with receive:
                async for message in receive:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send_all(data.encode() + b"\n")
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            await read_send.aclose()  # the session sees the connection end
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            await process.stdin.aclose()

    async def _read_stderr(self, process: trio.Process) -> None:
        assert process.stderr is not None
        logger = _log.getChild(self.config.name)
        with contextlib.suppress(trio.ClosedResourceError, trio.BrokenResourceError, OSError):
            async for chunk in process.stderr:
                for line in self.stderr.add(chunk):
                    logger.debug("stderr: %s", line)
            for line in self.stderr.close():
                logger.debug("stderr: %s", line)

    async def _stop(self, process: trio.Process) -> None:
        """Close stdin, give the server a grace period to exit, then end its group.

        Runs while stdout and stderr are still read, so a server that
        writes while it shuts down is not blocked on a full pipe.
        """
        assert process.stdin is not None
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            await process.stdin.aclose()
        with trio.move_on_after(_EXIT_GRACE):
            await process.wait()
        await terminate_group(process, _EXIT_GRACE)

    async def exit_summary(self) -> str:
        """Describe how the process ended, waiting briefly for it to be reaped."""
        process = self.process
        if process is None:
            return ""
        with trio.move_on_after(1.0):
            await process.wait()
        parts = []
        if process.returncode is not None:
            parts.append(f"the server process exited with code {process.returncode}")
        if self.stderr.lines:
            parts.append("its last stderr lines:\n" + "\n".join(self.stderr.lines))
        return "; ".join(parts)


# -- the server and its tools -------------------------------------------------


def _side_effects(tool: mcp_types.Tool) -> SideEffects:
    hints = tool.annotations
    if hints is not None and hints.read_only_hint is True:
        return SideEffects.READ
    return SideEffects.EXECUTE


def _progress_text(progress: float, total: float | None, message: str | None) -> str:
    numbers = f"{progress:g}/{total:g}" if total else f"{progress:g}"
    return f"{message} ({numbers})" if message else numbers


def _convert_block(block: Any) -> ContentBlock:
    kind = getattr(block, "type", None)
    if kind == "text":
        return TextContent(block.text)
    if kind == "image":
        return ImageContent(block.data, block.mime_type)
    if kind == "audio":
        return TextContent(f"[audio content ({block.mime_type}) omitted]")
    if kind == "resource_link":
        return TextContent(f"[resource {block.uri}: {block.name}]")
    if kind == "resource":
        resource = block.resource
        text = getattr(resource, "text", None)
        if text is not None:
            return TextContent(text)
        return TextContent(f"[binary resource {resource.uri} ({resource.mime_type}) omitted]")
    return JsonContent(block.model_dump(mode="json") if hasattr(block, "model_dump") else block)


def _convert_result(result: mcp_types.CallToolResult, server: str, tool: str) -> ToolOutput:
    content = tuple(_convert_block(b) for b in result.content)
    details: dict[str, Any] = {"mcp_server": server, "mcp_tool": tool}
    if result.structured_content is not None:
        details["structured_content"] = result.structured_content
        if not content:
            content = (JsonContent(result.structured_content),)
    if result.is_error and not content:
        content = (TextContent(f"MCP tool '{tool}' reported an error without a message."),)
    return ToolOutput(content, details, bool(result.is_error))


@attrs.define(eq=False)
class MCPTool:
    """One tool of a connected MCP server, as a toolexec ``Tool``.

    Stateless: the registry's factory hands out this same instance for
    every call, and the connection it calls through is shared.
    """

    definition: ToolDefinition
    server: MCPServer
    remote_name: str

    async def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        """Call the tool on its server; see the module docstring for the error mapping."""
        return await self.server._call(self.remote_name, arguments, ctx)

    def __call__(self) -> MCPTool:
        """Be the registry's factory for this tool."""
        return self


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
    _stdio: _StdioProcess | None = attrs.field(default=None, init=False, repr=False)
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
        if self._client is None or self._closed:
            raise RuntimeError(f"MCP server {self.name!r} is not connected")
        return self._client

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
        schema = _portable(tool.input_schema)
        return ToolDefinition(
            name=self.prefix() + _UNSAFE_NAME.sub("_", tool.name),
            description=tool.description or tool.title or "",
            input_schema=schema,
            side_effects=_side_effects(tool),
            timeout=self.config.timeout,
        )

    def _apply(self, listed: list[mcp_types.Tool], *, strict: bool) -> None:
        wanted: dict[str, MCPTool] = {}
        self.skipped = {}
        for tool in listed:
            try:
                definition = self._definition(tool)
                compile_schema(definition.input_schema, tool=definition.name)
            except _Unportable as exc:
                self._skip(tool.name, f"its input schema is outside the portable subset: {exc}")
                continue
            except RegistrationError as exc:
                self._skip(tool.name, str(exc))
                continue
            if definition.name in wanted:
                other = wanted[definition.name].remote_name
                self._skip(tool.name, f"its name becomes {definition.name!r}, as {other!r} does")
                continue
            wanted[definition.name] = MCPTool(definition, self, tool.name)
        for name, old in list(self.tools.items()):
            if name not in wanted or wanted[name].definition != old.definition:
                self.registry.unregister(name)
                del self.tools[name]
        for name, wrapped in wanted.items():
            if name in self.tools:
                continue
            if name in self.registry:
                reason = "a tool with that name is already registered"
                if strict:
                    self._unregister_all()
                    raise RegistrationError(
                        f"MCP server {self.name!r}: cannot register {name!r}: {reason}; "
                        "rename the server in the configuration"
                    )
                self._skip(wrapped.remote_name, reason)
                continue
            try:
                self.registry.register(wrapped)
            except RegistrationError as exc:
                self._skip(wrapped.remote_name, str(exc))
                continue
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
            self._lost = f"{type(_sole_leaf(exc)).__name__}: {_sole_leaf(exc)}"
            _log.warning("MCP server %r: connection lost: %s", self.name, self._lost)
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
        if client is None or self._closed:
            lost = f" (connection lost: {self._lost})" if self._lost else ""
            raise ToolError(f"MCP server '{self.name}' is not connected{lost}.")
        live = True

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            if live:
                ctx.report_progress(_progress_text(progress, total, message))

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
        return _convert_result(result, self.name, remote)

    async def _error_text(self, remote: str, exc: MCPError) -> str:
        if exc.code == mcp_types.CONNECTION_CLOSED:
            text = f"MCP server '{self.name}' closed the connection during the call to '{remote}'"
            summary = await self._stdio.exit_summary() if self._stdio is not None else ""
            return f"{text}: {summary}" if summary else f"{text}."
        return f"MCP server '{self.name}' rejected the call to '{remote}': {exc.message}"

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            self._changed.set()
        elif isinstance(message, Exception):
            _log.warning("MCP server %r: transport error: %s", self.name, message)

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


# -- opening ------------------------------------------------------------------


def _as_config(
    name: str | MCPServerConfig, entry: Mapping[str, Any] | None, options: Mapping[str, Any]
) -> MCPServerConfig:
    if isinstance(name, MCPServerConfig):
        return attrs.evolve(name, **options) if options else name
    if entry is None:
        raise TypeError(f"open_mcp_server({name!r}) needs the server's entry")
    return MCPServerConfig.from_entry(name, entry, **options)


def _sole_leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


@contextlib.asynccontextmanager
async def _unwrapping() -> AsyncIterator[list[BaseException]]:
    """Re-raise the caller's own exception unwrapped from task-group groups."""
    raised: list[BaseException] = []
    try:
        yield raised
    except BaseExceptionGroup as group:
        leaf = _sole_leaf(group)
        if not raised or leaf is not raised[0]:
            raise
        context = leaf.__context__
        try:
            raise leaf from leaf.__cause__
        finally:
            leaf.__context__ = context


@contextlib.asynccontextmanager
async def open_mcp_server(
    registry: ToolRegistry,
    name: str | MCPServerConfig,
    entry: Mapping[str, Any] | None = None,
    **options: Any,
) -> AsyncIterator[MCPServer]:
    """Connect to one MCP server and register its tools while the block runs.

    Example::

        async with open_mcp_server(registry, "notes", {"command": "notes-mcp"}) as server:
            print(server.tools)       # {"mcp__notes__read_note": MCPTool(...), ...}

    Args:
        registry: where the tools are registered (and unregistered on exit).
        name: the server's name, or a complete ``MCPServerConfig``.
        entry: the server's ``mcpServers`` entry when ``name`` is a string.
        options: ``MCPServerConfig`` fields (``timeout``, ``mode``, ...).

    Raises:
        MCPConnectionError: the server could not be started or initialised.
        RegistrationError: one of its tool names is already registered.
        ValueError: the entry is malformed.
    """
    config = _as_config(name, entry, options)
    server = MCPServer(config, registry)
    async with _unwrapping() as raised, trio.open_nursery() as nursery:
        # The connection lives in its own task, so a transport failure ends
        # the connection (later calls get error results) but never reaches
        # into the caller's block.
        try:
            await nursery.start(server._run)
        except BaseException as exc:
            raised.append(_sole_leaf(exc))
            raise
        try:
            yield server
        except BaseException as exc:
            raised.append(exc)
            raise
        finally:
            server._unregister_all()
            server._stop.set()


async def _connect(server: MCPServer, stack: contextlib.AsyncExitStack) -> None:
    config = server.config
    if config.command is not None:
        server._stdio = _StdioProcess(config)
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
        cause = _sole_leaf(exc)
        detail = f"{type(cause).__name__}: {cause}"
        if isinstance(cause, MCPError) and cause.code == mcp_types.CONNECTION_CLOSED:
            detail = "the server closed the connection"
        raise MCPConnectionError(await server._connect_failure(detail)) from exc
    server._client = client
    server.protocol_version = client.protocol_version


def _version() -> str:
    from . import __version__

    return __version__


@contextlib.asynccontextmanager
async def open_mcp_servers(
    registry: ToolRegistry,
    config: Mapping[str, Any] | Iterable[MCPServerConfig],
    **options: Any,
) -> AsyncIterator[dict[str, MCPServer]]:
    """Connect to every server of an ``mcpServers`` configuration, concurrently.

    Example::

        config = json.loads(Path("mcp.json").read_text())
        async with open_mcp_servers(registry, config, timeout=30) as servers:
            ...   # servers["notes"].tools

    If any server fails to connect, the others are closed and the first
    failure is raised. On exit (or cancellation) every server is closed.

    Args:
        registry: where the tools are registered.
        config: ``{"mcpServers": {...}}``, the inner mapping, or configs.
        options: ``MCPServerConfig`` fields applied to every server.

    Raises:
        MCPConnectionError, RegistrationError, ValueError: as ``open_mcp_server``.
    """
    if isinstance(config, Mapping):
        configs = parse_mcp_servers(config, **options)
    else:
        configs = tuple(attrs.evolve(c, **options) for c in config)
    names = [c.name for c in configs]
    if len(set(names)) != len(names):
        raise ValueError(f"MCP server names must be unique, got {names}")
    servers: dict[str, MCPServer] = {}
    failures: list[BaseException] = []
    async with _unwrapping() as raised, trio.open_nursery() as nursery:
        stop = trio.Event()

        async def hold(cfg: MCPServerConfig, *, task_status: Any) -> None:
            async with open_mcp_server(registry, cfg) as server:
                task_status.started(server)
                await stop.wait()

        async def start(cfg: MCPServerConfig) -> None:
            try:
                servers[cfg.name] = await nursery.start(hold, cfg)
            except BaseException as exc:
                leaf = _sole_leaf(exc)
                if not isinstance(leaf, MCPConnectionError | RegistrationError):
                    raise
                failures.append(leaf)

        async with trio.open_nursery() as starters:
            for cfg in configs:
                starters.start_soon(start, cfg)
        if failures:
            nursery.cancel_scope.cancel()
        else:
            try:
                yield dict(servers)
            except BaseException as exc:
                raised.append(exc)
                raise
            finally:
                stop.set()
    if failures:
        raise failures[0]
