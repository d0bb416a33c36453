"""How to reach an MCP server: ``MCPServerConfig`` and the configuration documents.

Two document layouts are read: ``{"mcpServers": {...}}`` (Claude Desktop,
Cursor, Claude Code) and ``{"servers": {...}}`` (VS Code's ``mcp.json``).
Their entries share the keys toolexec reads (``type``, ``command``,
``args``, ``env``, ``cwd``, ``url``, ``headers``), plus toolexec's own
``required`` (the failure policy) and ``disabled``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from .._core._types import strings

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
    return strings(value, "an MCP server's args")


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
        required: the failure policy. ``True`` (default): if the server
            cannot be opened, ``open_mcp_servers`` closes the others and
            raises. ``False``: the failure is logged and the server is
            skipped (listed in ``MCPServerSet.skipped``); the others open.
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
    required: bool = attrs.field(default=True, validator=attrs.validators.instance_of(bool))

    def __attrs_post_init__(self) -> None:
        if (self.command is None) == (self.url is None):
            raise ValueError(
                f"MCP server {self.name!r}: give exactly one of 'command' (stdio) or 'url' (HTTP)"
            )

    @classmethod
    def from_entry(cls, name: str, entry: Mapping[str, Any], **options: Any) -> MCPServerConfig:
        """Read one server entry: ``{command, args, env, cwd}`` or ``{url, headers}``.

        ``type`` may be ``"stdio"``, ``"http"`` or ``"streamable-http"``; the
        old SSE transport is refused. ``"required": false`` makes the server
        optional (see ``required``). Other keys are ignored. ``options`` set
        the fields the format has no key for (``timeout``, ``mode``,
        ``connect_timeout``); the entry's ``required`` wins over theirs.

        Raises:
            ValueError: the entry is malformed; the message names the entry,
                what is wrong and what is allowed.
        """
        if not isinstance(entry, Mapping):
            raise ValueError(
                f"MCP server {name!r}: expected an object with 'command' (stdio) or 'url' "
                f"(HTTP), got {type(entry).__name__} {entry!r}"
            )
        _check_entry(name, entry)
        if "required" in entry:
            options = {**options, "required": entry["required"]}
        return cls(
            name,
            command=entry.get("command"),
            args=entry.get("args", []),
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


_TRANSPORTS = ("stdio", "http", "streamable-http", "streamableHttp")


def _check_entry(name: str, entry: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` naming the entry, the key, what it holds and what is allowed."""
    kind = entry.get("type", "http" if "url" in entry else "stdio")
    if kind == "sse":
        raise ValueError(
            f"MCP server {name!r}: the SSE transport is deprecated and not supported; "
            "use a streamable HTTP endpoint ('type': 'http')"
        )
    if kind not in _TRANSPORTS:
        raise ValueError(
            f"MCP server {name!r}: unknown transport type {kind!r}; "
            f"allowed: {', '.join(map(repr, _TRANSPORTS[:3]))}"
        )
    for key in ("command", "cwd", "url"):
        if key in entry and not isinstance(entry[key], str):
            raise ValueError(f"MCP server {name!r}: {key!r} must be a string, got {entry[key]!r}")
    args = entry.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ValueError(f"MCP server {name!r}: 'args' must be a list of strings, got {args!r}")
    for key in ("env", "headers"):
        value = entry.get(key, {})
        if not isinstance(value, Mapping) or not all(isinstance(v, str) for v in value.values()):
            raise ValueError(
                f"MCP server {name!r}: {key!r} must map names to strings, got {value!r}"
            )
    for key in ("required", "disabled"):
        if not isinstance(entry.get(key, True), bool):
            raise ValueError(
                f"MCP server {name!r}: {key!r} must be true or false, got {entry[key]!r}"
            )


LAYOUTS = ("mcpServers", "servers")


def _servers_of(document: Mapping[str, Any]) -> Mapping[str, Any]:
    """The name -> entry mapping of a document in either layout."""
    if not isinstance(document, Mapping):
        raise ValueError(
            f"an MCP configuration must be an object, got {type(document).__name__}; "
            'expected {"mcpServers": {...}} or {"servers": {...}} (VS Code\'s mcp.json)'
        )
    found = [key for key in LAYOUTS if key in document]
    if len(found) != 1:
        keys = ", ".join(map(repr, document)) or "none"
        why = (
            "has both 'mcpServers' and 'servers'" if found else f"has no server list (keys: {keys})"
        )
        raise ValueError(
            f"the MCP configuration {why}; expected exactly one of "
            '{"mcpServers": {name: entry}} (Claude Desktop, Cursor) or '
            '{"servers": {name: entry}} (VS Code\'s mcp.json)'
        )
    servers = document[found[0]]
    if not isinstance(servers, Mapping):
        raise ValueError(
            f"{found[0]!r} must map server names to server entries, got {type(servers).__name__}"
        )
    return servers


def parse_mcp_servers(config: Mapping[str, Any], **options: Any) -> tuple[MCPServerConfig, ...]:
    """Read an MCP configuration document into server configs.

    Two layouts are read: ``{"mcpServers": {name: entry}}`` (Claude Desktop,
    Cursor, Claude Code) and ``{"servers": {name: entry}}`` (VS Code's
    ``mcp.json``; its other top-level keys, such as ``inputs``, are
    ignored). Entries with ``"disabled": true`` are left out. ``options``
    apply to every server (see ``MCPServerConfig.from_entry``).

    Example::

        parse_mcp_servers({"servers": {"notes": {"type": "stdio", "command": "notes-mcp"}}})

    Raises:
        ValueError: the document has neither layout or both, or an entry
            is malformed. Every malformed entry is named, in one message.
    """
    configs: list[MCPServerConfig] = []
    problems: list[str] = []
    for name, entry in _servers_of(config).items():
        if isinstance(entry, Mapping) and entry.get("disabled") is True:
            continue
        try:
            configs.append(MCPServerConfig.from_entry(name, entry, **options))
        except (ValueError, TypeError) as exc:
            problems.append(str(exc))
    if len(problems) == 1:
        raise ValueError(problems[0])
    if problems:
        raise ValueError(
            f"{len(problems)} MCP server entries are malformed:\n"
            + "\n".join(f"- {p}" for p in problems)
        )
    return tuple(configs)
