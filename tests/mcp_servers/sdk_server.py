"""An MCP server written with the official SDK, for toolexec's MCP tests.

Run ``python sdk_server.py`` for stdio, or ``python sdk_server.py http`` to
serve streamable HTTP on 127.0.0.1 with a port the OS picks; the server then
prints ``PORT <n>`` on stdout once it is listening.

Its tools cover what a client must handle: read-only and mutating
annotations, an error result (and one without a message), every kind of
content block, structured content alone, progress, a call that blocks until cancelled
(and a way to ask whether the server saw the cancellation), a crash
mid-call, a child process, and a tool list that changes at runtime.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import (
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextResourceContents,
    ToolAnnotations,
)
from pydantic import BaseModel

server = MCPServer("toolexec-test")
READ_ONLY = ToolAnnotations(read_only_hint=True)
DESTRUCTIVE = ToolAnnotations(destructive_hint=True)

_cancelled: dict[str, anyio.Event] = {}


def _cancel_event(key: str) -> anyio.Event:
    return _cancelled.setdefault(key, anyio.Event())


@server.tool(annotations=READ_ONLY)
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@server.tool(annotations=READ_ONLY)
async def ping(text: str) -> str:
    """Return the text at once (async: no worker thread on the server)."""
    return text


@server.tool(annotations=READ_ONLY)
def read_note(path: str) -> str:
    """Read a note file ('' when it does not exist)."""
    try:
        return Path(path).read_text()
    except FileNotFoundError:
        return ""


@server.tool(annotations=DESTRUCTIVE)
def write_note(path: str, text: str) -> str:
    """Overwrite a note file."""
    Path(path).write_text(text)
    return f"wrote {len(text)} characters"


@server.tool(annotations=READ_ONLY)
def greet(name: str | None = None) -> str:
    """Greet someone, or everyone (an optional argument: anyOf with null)."""
    return f"hello {name or 'everyone'}"


@server.tool(name="notes.count", annotations=READ_ONLY)
def notes_count(text: str) -> int:
    """Count the characters of a text (a dotted name, as MCP allows)."""
    return len(text)


@server.tool(annotations=READ_ONLY)
def big(size: int) -> str:
    """Return `size` characters in one result."""
    return "x" * size


class Node(BaseModel):
    label: str
    children: list[Node] = []


@server.tool(annotations=READ_ONLY)
def count_nodes(root: Node) -> int:
    """Count the nodes of a tree (a recursive schema, with $defs and $ref)."""
    return 1 + sum(count_nodes(child) for child in root.children)


@server.tool()
def fail(message: str) -> str:
    """Fail with the given message (an isError result)."""
    raise ToolError(message)


@server.tool(annotations=READ_ONLY)
def media() -> CallToolResult:
    """Answer with one block of each kind a result may hold besides text."""
    return CallToolResult(
        content=[
            ImageContent(type="image", data="iVBORw0K", mime_type="image/png"),
            AudioContent(type="audio", data="UklGRg==", mime_type="audio/wav"),
            ResourceLink(type="resource_link", uri="file:///notes/a.md", name="a.md"),
            EmbeddedResource(
                type="resource",
                resource=TextResourceContents(uri="file:///notes/b.md", text="note b"),
            ),
            EmbeddedResource(
                type="resource",
                resource=BlobResourceContents(
                    uri="file:///notes/c.bin", mime_type="application/octet-stream", blob="AAE="
                ),
            ),
        ]
    )


@server.tool(annotations=READ_ONLY)
def structured_only() -> CallToolResult:
    """Answer with structured content and no content blocks."""
    return CallToolResult(content=[], structured_content={"count": 2, "names": ["a", "b"]})


@server.tool()
def silent_error() -> CallToolResult:
    """Report an error with no content at all."""
    return CallToolResult(content=[], is_error=True)


@server.tool()
async def progress(steps: int, ctx: Context) -> str:
    """Report `steps` progress notifications, then finish."""
    for i in range(steps):
        await ctx.report_progress(i + 1, steps, f"step {i + 1} of {steps}")
    return "done"


@server.tool()
async def block(key: str, ctx: Context) -> str:
    """Report progress 'started', then wait until cancelled."""
    try:
        await ctx.report_progress(0, None, "started")
        await anyio.sleep_forever()
    finally:
        _cancel_event(key).set()
    return "unreachable"


@server.tool(annotations=READ_ONLY)
async def was_cancelled(key: str) -> str:
    """Say whether the `block` call with this key was cancelled (waits up to 10 s)."""
    with anyio.move_on_after(10):
        await _cancel_event(key).wait()
        return "cancelled"
    return "not cancelled"


@server.tool()
async def crash(ctx: Context) -> str:
    """Exit the server process in the middle of the call."""
    await ctx.report_progress(0, None, "about to crash")
    os._exit(3)


@server.tool()
def spawn_child() -> str:
    """Start a long-lived child process in the server's process group; return its pid."""
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(300)"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return str(child.pid)


@server.tool(annotations=READ_ONLY)
def pid() -> str:
    """Return the server's process id."""
    return str(os.getpid())


def _extra(text: str) -> str:
    return f"extra: {text}"


@server.tool()
async def add_tool(name: str, ctx: Context) -> str:
    """Add a tool called `name` and announce that the tool list changed."""
    server.add_tool(_extra, name=name, description="A tool added at runtime.")
    await _announce(ctx)
    return f"added {name}"


@server.tool()
async def remove_tool(name: str, ctx: Context) -> str:
    """Remove the tool called `name` and announce that the tool list changed."""
    server.remove_tool(name)
    await _announce(ctx)
    return f"removed {name}"


async def _announce(ctx: Context) -> None:
    # Handshake-era clients hear a notification; 2026-era ones a listen event.
    await ctx.notify_tools_changed()
    await ctx.session.send_tool_list_changed()


def _serve_http() -> None:
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    app = server.streamable_http_app(host="127.0.0.1")
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    http = uvicorn.Server(config)

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(http.serve, [sock])
            while not http.started:
                await anyio.sleep(0.01)
            print(f"PORT {port}", flush=True)

    anyio.run(main)


if __name__ == "__main__":
    if sys.argv[1:] == ["http"]:
        _serve_http()
    else:
        server.run("stdio")
