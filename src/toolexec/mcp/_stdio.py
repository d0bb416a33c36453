"""The stdio transport: an MCP server as a child process speaking JSON-RPC lines.

toolexec's own transport instead of the SDK's, so the server runs in a
process group of its own (``toolexec._proc._process``) that is ended whole, and
the last lines of its stderr can be quoted when it fails. One task reads
stdout into session messages, one writes session messages to stdin, one
keeps the tail of stderr (logged at DEBUG). On close, stdin is closed, the
server gets a grace period to exit, and whatever is left alive in its group
gets SIGTERM, a grace period and SIGKILL while its output is still read;
then it is reaped, whatever happened before.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import subprocess
from typing import TYPE_CHECKING, Any

import anyio
import attrs
import mcp_types
import trio
from mcp.client.stdio import get_default_environment
from mcp.shared.message import SessionMessage

from .._core._messages import clip
from .._proc._process import LineTail, open_group_process, reap, terminate_group

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, AsyncIterator

    from ._config import MCPServerConfig

__all__ = ["StdioProcess", "StrayLine", "exit_text"]

_log = logging.getLogger("toolexec.mcp")

_STDERR_LINES = 20
_EXIT_GRACE = 2.0


class StrayLine(ValueError):
    """A line on a stdio server's stdout that is not a JSON-RPC message (it is ignored).

    Its text is one sentence quoting the start of the line, not the parser's
    account of why it is not one.
    """


def _parse_line(line: bytes) -> SessionMessage | Exception:
    try:
        message = mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValueError:
        text = line.decode("utf-8", errors="replace")
        return StrayLine(
            f"the server wrote a line that is not a JSON-RPC message to its stdout, "
            f"which was ignored: {clip(text, 200)!r}"
        )
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
class StdioProcess:
    """A stdio server process, its process group, and the tail of its stderr."""

    config: MCPServerConfig
    process: trio.Process | None = None
    stderr: LineTail = attrs.field(factory=lambda: LineTail(_STDERR_LINES))
    # Set when the server process has exited (a crash, while connected).
    exited: trio.Event = attrs.field(factory=trio.Event)

    @contextlib.asynccontextmanager
    async def open(self) -> AsyncIterator[tuple[Any, Any]]:
        """Start the server; yield the (read, write) streams of its session; end it on exit."""
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
                nursery.start_soon(self._watch_exit, process)
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

    async def _watch_exit(self, process: trio.Process) -> None:
        """When the server exits, end what it left in its group at once.

        A server that crashes while connected must not leave its children
        running until the connection's block is left.
        """
        await process.wait()
        self.exited.set()
        await terminate_group(process, _EXIT_GRACE)

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
            parts.append(exit_text(process.returncode))
        if self.stderr.lines:
            parts.append("its last stderr lines:\n" + "\n".join(self.stderr.lines))
        return "; ".join(parts)


def exit_text(returncode: int) -> str:
    """How a server process ended: its exit code, or the signal that killed it, by name."""
    if returncode >= 0:
        return f"the server process exited with code {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    return f"the server process was killed by {name}"
