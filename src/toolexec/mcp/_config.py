"""How to reach an MCP server: ``MCPServerConfig`` and the ``mcpServers`` format."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

__all__ = ["MCPServerConfig", "parse_mcp_servers"]


_NAME = re.compile(r"[A-Za-z0-9_-]+")
# Tool names are at most 64 characters: leave room for "mcp__<name>__" and a tool.
_MAX_NAME = 64 - len("mcp____") - 8


def _check_name(name: object) -> None:
    """Refuse a server name that cannot be part of a tool name."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        suggestion = re.sub(r"[^A-Za-z0-9_-]", "_", name) if isinstance(name, str) else "notes"
        raise ValueError(
            f"MCP server name {name!r} cannot be part of a tool name (mcp__<server>__<tool>): "
            f"use letters, digits, '_' and '-', e.g. {suggestion!r}"
        )
    if len(name) > _MAX_NAME:
        raise ValueError(
            f"MCP server name {name!r} is {len(name)} characters; at most {_MAX_NAME} leave "
            "room for its tools' names within the 64 characters providers accept"
        )


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

    name: str = attrs.field(validator=lambda _i, _a, v: _check_name(v))
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
