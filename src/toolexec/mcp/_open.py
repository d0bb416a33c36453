"""Opening MCP servers: ``open_mcp_server`` and ``open_mcp_servers``.

Each connection lives in a task of its own (``MCPServer._run``), not
around the caller's block, so a transport that fails ends that connection
without cancelling the caller; the caller's own exceptions come out
unwrapped, not inside the exception groups of the SDK's task groups
(``_unwrapping``). A server that fails to open is either fatal (the
default, ``required``) or skipped with its reason (``required=False``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import attrs
import trio

from .._core._errors import RegistrationError
from ._config import MCPServerConfig, parse_mcp_servers
from ._server import MCPConnectionError, MCPServer, sole_leaf

if TYPE_CHECKING:
    from .._core._registry import ToolRegistry

__all__ = ["MCPServerSet", "open_mcp_server", "open_mcp_servers"]

_log = logging.getLogger("toolexec.mcp")


@attrs.frozen
class MCPServerSet(Mapping[str, "MCPServer"]):
    """The servers ``open_mcp_servers`` opened, by name, and those it skipped.

    It is a read-only mapping of name -> ``MCPServer``: ``servers["notes"]``.

    Attributes:
        opened: name -> ``MCPServer``, in configuration order (what the set
            itself maps).
        skipped: name -> why, for each optional server (``"required":
            false``) that could not be opened; the message is the
            ``MCPConnectionError`` or ``RegistrationError`` it raised.
    """

    opened: Mapping[str, MCPServer]
    skipped: Mapping[str, str] = attrs.field(factory=dict)

    def __getitem__(self, name: str) -> MCPServer:
        return self.opened[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.opened)

    def __len__(self) -> int:
        return len(self.opened)


def _as_config(
    name: str | MCPServerConfig, entry: Mapping[str, Any] | None, options: Mapping[str, Any]
) -> MCPServerConfig:
    if isinstance(name, MCPServerConfig):
        return attrs.evolve(name, **options) if options else name
    if entry is None:
        raise TypeError(f"open_mcp_server({name!r}) needs the server's entry")
    return MCPServerConfig.from_entry(name, entry, **options)


@contextlib.asynccontextmanager
async def _unwrapping() -> AsyncIterator[list[BaseException]]:
    """Re-raise the caller's own exception unwrapped from task-group groups."""
    raised: list[BaseException] = []
    try:
        yield raised
    except BaseExceptionGroup as group:
        leaf = sole_leaf(group)
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
            raised.append(sole_leaf(exc))
            raise
        try:
            yield server
        except BaseException as exc:
            raised.append(exc)
            raise
        finally:
            server._unregister_all()
            server._stop.set()


def _configs(
    config: Mapping[str, Any] | Iterable[MCPServerConfig], options: Mapping[str, Any]
) -> tuple[MCPServerConfig, ...]:
    """The servers of ``config`` with ``options`` applied; their names must be unique.

    In a document, an entry's own ``required`` wins over ``options``.
    """
    if isinstance(config, Mapping):
        configs = parse_mcp_servers(config, **options)
    else:
        configs = tuple(attrs.evolve(c, **options) for c in config)
    names = [c.name for c in configs]
    if len(set(names)) != len(names):
        raise ValueError(f"MCP server names must be unique, got {names}")
    return configs


@contextlib.asynccontextmanager
async def open_mcp_servers(
    registry: ToolRegistry,
    config: Mapping[str, Any] | Iterable[MCPServerConfig],
    **options: Any,
) -> AsyncIterator[MCPServerSet]:
    """Connect to every server of an MCP configuration, concurrently.

    Example::

        config = json.loads(Path("mcp.json").read_text())
        async with open_mcp_servers(registry, config, timeout=30) as servers:
            ...   # servers["notes"].tools; servers.skipped: optional servers that failed

    A *required* server (the default) that fails to connect, or whose tool
    names are taken, closes the others and its failure is raised. An
    *optional* one (``"required": false``) is logged as a warning on
    ``toolexec.mcp`` and listed in ``skipped``; the others open. On exit
    (or cancellation) every server is closed.

    Args:
        registry: where the tools are registered.
        config: a document (``{"mcpServers": {...}}`` or ``{"servers":
            {...}}``, see ``parse_mcp_servers``) or configs.
        options: ``MCPServerConfig`` fields applied to every server; in a
            document, an entry's own ``required`` wins over ``required=`` here.

    Raises:
        MCPConnectionError, RegistrationError, ValueError: as ``open_mcp_server``.
    """
    configs = _configs(config, options)
    servers: dict[str, MCPServer] = {}
    skipped: dict[str, str] = {}
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
                leaf = sole_leaf(exc)
                if not isinstance(leaf, MCPConnectionError | RegistrationError):
                    raise
                if cfg.required:
                    failures.append(leaf)
                else:
                    _log.warning("skipped optional MCP server %r: %s", cfg.name, leaf)
                    skipped[cfg.name] = str(leaf)

        async with trio.open_nursery() as starters:
            for cfg in configs:
                starters.start_soon(start, cfg)
        if failures:
            nursery.cancel_scope.cancel()
        else:
            order = [c.name for c in configs]
            try:
                yield MCPServerSet(
                    {n: servers[n] for n in order if n in servers},
                    {n: skipped[n] for n in order if n in skipped},
                )
            except BaseException as exc:
                raised.append(exc)
                raise
            finally:
                stop.set()
    if failures:
        raise failures[0]
