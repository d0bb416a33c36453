"""The runner's side of the IPC protocol: send calls, match the answers by id.

``RunnerClient`` is blocking (file objects, for plain scripts);
``TrioRunnerClient`` is for trio programs, where several tasks may have
calls out at once. Both write each batch of calls with one write, so calls
sent together reach the supervisor together and run as one batch, and both
read answers with the same bounded line reader as the supervisor.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
import threading
from collections.abc import Mapping
from typing import IO, TYPE_CHECKING, Any, TypeAlias

import attrs
import trio

from .._core._json_bounds import loads_bounded
from ._protocol import (
    DEFAULT_MAX_LINE_BYTES,
    ERROR_CLASS_OF,
    LineSplitter,
    ProtocolError,
    encode,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator, Sequence

    from .._core._types import ErrorClass

__all__ = ["CallSpec", "RunnerClient", "ToolResponse", "TrioRunnerClient"]

#: A call to send: ``(tool, args)``, or ``(tool, args, tool_call_id)``.
CallSpec: TypeAlias = tuple[str, Mapping[str, Any]] | tuple[str, Mapping[str, Any], str]


@attrs.frozen
class ToolResponse:
    """The supervisor's answer to one call.

    ``ok`` calls carry ``result`` (``{"text": ..., "content": [...]}``);
    failed ones carry the ``error`` slug and a ``message`` for the model.
    A line the supervisor refused (``protocol_error`` naming the call) is
    a failed response whose ``error`` is the protocol slug.
    """

    tool_call_id: str
    ok: bool
    result: Any = None
    error: str | None = None
    message: str = ""
    details: Mapping[str, Any] = attrs.field(factory=dict)

    @property
    def text(self) -> str:
        """What the model reads: the result's text, or the error message."""
        if self.ok and isinstance(self.result, Mapping):
            return str(self.result.get("text", ""))
        return self.message

    @property
    def error_class(self) -> ErrorClass | None:
        """The ``ErrorClass`` of the error slug (``None`` when ok, or for a protocol slug)."""
        return None if self.error is None else ERROR_CLASS_OF.get(self.error)


def parse_answer(line: bytes) -> ToolResponse:
    """Decode one supervisor line.

    Raises:
        ProtocolError: the line is not an answer, or is a ``protocol_error``
            naming no call (a line this client sent was refused).
    """
    try:
        value = loads_bounded(line)
    except ValueError as exc:  # not JSON, over a bound, NaN or an infinity
        raise ProtocolError(
            "invalid_json", f"the supervisor sent a line that is not JSON: {exc}"
        ) from None
    if not isinstance(value, dict):
        raise ProtocolError("invalid_message", "the supervisor sent a line that is not an object")
    op, cid = value.get("op"), value.get("tool_call_id")
    if op == "tool_response" and isinstance(cid, str):
        return ToolResponse(
            cid,
            value.get("ok") is True,
            value.get("result"),
            value.get("error"),
            str(value.get("message", "")),
            value.get("details") or {},
        )
    if op == "protocol_error":
        slug, message = str(value.get("error")), str(value.get("message", ""))
        if isinstance(cid, str):
            return ToolResponse(cid, False, None, slug, message)
        raise ProtocolError(slug, f"the supervisor refused line {value.get('line')}: {message}")
    raise ProtocolError("unknown_op", f"the supervisor sent an unknown message: {line[:200]!r}")


def _call_line(spec: CallSpec, ids: Iterator[int]) -> tuple[str, bytes]:
    tool, args = spec[0], spec[1]
    cid = spec[2] if len(spec) == 3 else f"call-{next(ids)}"
    return cid, encode({"op": "tool_call", "tool_call_id": cid, "tool": tool, "args": dict(args)})


def _take_stdio() -> tuple[int, int]:
    """Move this process's stdin and stdout aside for the channel; their copies.

    Afterwards fd 1 (``print``, child processes) is stderr and fd 0 reads
    nothing, so nothing else can write into the channel.
    """
    sys.stdout.flush()
    read_fd, write_fd = os.dup(0), os.dup(1)
    os.dup2(2, 1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    return read_fd, write_fd


@attrs.define(eq=False)
class RunnerClient:
    """A blocking client for a runner script; threads may share one.

    Example::

        client = RunnerClient.stdio()
        response = client.call("read_file", {"path": "notes/todo.txt"})
        print(response.ok, response.text, file=sys.stderr)

    Args:
        reader: the binary stream the answers arrive on.
        writer: the binary stream calls are written to.
        max_line_bytes: the longest answer line read.
    """

    reader: IO[bytes]
    writer: IO[bytes]
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    _ids: Iterator[int] = attrs.field(factory=itertools.count, init=False, repr=False)
    _waiting: dict[str, ToolResponse] = attrs.field(factory=dict, init=False, repr=False)
    _reading: threading.Lock = attrs.field(factory=threading.Lock, init=False, repr=False)
    _writing: threading.Lock = attrs.field(factory=threading.Lock, init=False, repr=False)

    @classmethod
    def stdio(cls, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> RunnerClient:
        """A client on this process's stdin and stdout, the channel a supervisor gives.

        The channel's descriptors are moved aside first: afterwards fd 1
        (``print``, child processes) is stderr and fd 0 reads nothing, so
        nothing else can write into the channel.
        """
        read_fd, write_fd = _take_stdio()
        return cls(os.fdopen(read_fd, "rb", buffering=0), os.fdopen(write_fd, "wb"), max_line_bytes)

    def send(self, calls: Sequence[CallSpec]) -> list[str]:
        """Write calls in one write (they form one batch); return their ids."""
        with self._writing:
            lines = [_call_line(spec, self._ids) for spec in calls]
            self.writer.write(b"".join(line for _, line in lines))
            self.writer.flush()
        return [cid for cid, _ in lines]

    def receive(self, tool_call_id: str) -> ToolResponse:
        """Read answers until the one for ``tool_call_id`` (others are kept for later).

        Raises:
            EOFError: the supervisor closed the channel first.
            ProtocolError: the supervisor refused a line without naming it.
        """
        with self._reading:  # one reader at a time; the others find their answers kept
            while tool_call_id not in self._waiting:
                line = self.reader.readline(self.max_line_bytes + 1)
                if not line.endswith(b"\n"):
                    if len(line) > self.max_line_bytes:
                        raise ProtocolError("line_too_long", "an answer is over max_line_bytes")
                    raise EOFError("the supervisor closed the channel")
                response = parse_answer(line[:-1])
                self._waiting[response.tool_call_id] = response
            return self._waiting.pop(tool_call_id)

    def call(self, tool: str, args: Mapping[str, Any] | None = None) -> ToolResponse:
        """Send one call and wait for its answer."""
        (cid,) = self.send([(tool, args or {})])
        return self.receive(cid)

    def call_many(self, calls: Sequence[CallSpec]) -> list[ToolResponse]:
        """Send calls together (one batch) and return their answers in call order."""
        return [self.receive(cid) for cid in self.send(calls)]

    def close(self) -> None:
        """Close both streams (the supervisor sees the runner's output end)."""
        with contextlib.suppress(OSError):
            self.writer.close()
        self.reader.close()


@attrs.define(eq=False)
class TrioRunnerClient:
    """A trio client: calls from any task, answers matched by id.

    Open it with ``async with TrioRunnerClient.open(receive, send) as client``
    (or ``open_stdio()``); a task inside reads the answers.

    Example::

        async with TrioRunnerClient.open_stdio() as client:
            first, second = await client.call_many([("echo", {"text": "a"}),
                                                    ("echo", {"text": "b"})])
    """

    send_stream: trio.abc.SendStream
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    _ids: Iterator[int] = attrs.field(factory=itertools.count, init=False, repr=False)
    _lock: trio.Lock = attrs.field(factory=trio.Lock, init=False, repr=False)
    _pending: dict[str, trio.Event] = attrs.field(factory=dict, init=False, repr=False)
    _answers: dict[str, ToolResponse] = attrs.field(factory=dict, init=False, repr=False)
    _failure: BaseException | None = attrs.field(default=None, init=False, repr=False)

    @classmethod
    @contextlib.asynccontextmanager
    async def open(
        cls,
        receive: trio.abc.ReceiveStream,
        send: trio.abc.SendStream,
        *,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    ) -> AsyncIterator[TrioRunnerClient]:
        """A client on a pair of streams, reading answers while the block runs."""
        client = cls(send, max_line_bytes)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client._read, receive)
            try:
                yield client
            finally:
                nursery.cancel_scope.cancel()

    @classmethod
    @contextlib.asynccontextmanager
    async def open_stdio(
        cls, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    ) -> AsyncIterator[TrioRunnerClient]:
        """A client on this process's stdin and stdout, moved aside as by ``RunnerClient.stdio``."""
        read_fd, write_fd = _take_stdio()
        receive, send = trio.lowlevel.FdStream(read_fd), trio.lowlevel.FdStream(write_fd)
        async with receive, send, cls.open(receive, send, max_line_bytes=max_line_bytes) as c:
            yield c

    async def call(self, tool: str, args: Mapping[str, Any] | None = None) -> ToolResponse:
        """Send one call and wait for its answer."""
        (response,) = await self.call_many([(tool, args or {})])
        return response

    async def call_many(self, calls: Sequence[CallSpec]) -> list[ToolResponse]:
        """Send calls together (one write, one batch); their answers in call order.

        Raises:
            EOFError: the supervisor closed the channel before answering.
            ProtocolError: the supervisor refused a line without naming it.
        """
        if self._failure is not None:
            raise self._failure
        lines = [_call_line(spec, self._ids) for spec in calls]
        events = {cid: trio.Event() for cid, _ in lines}
        self._pending.update(events)
        try:
            async with self._lock:
                await self.send_stream.send_all(b"".join(line for _, line in lines))
            for event in events.values():
                await event.wait()
            return [self._answer(cid) for cid, _ in lines]
        finally:
            for cid in events:
                self._pending.pop(cid, None)
                self._answers.pop(cid, None)

    def _answer(self, cid: str) -> ToolResponse:
        if cid in self._answers:
            return self._answers[cid]
        assert self._failure is not None
        raise self._failure

    async def _read(self, receive: trio.abc.ReceiveStream) -> None:
        splitter = LineSplitter(self.max_line_bytes)
        try:
            while chunk := await receive.receive_some(1 << 16):
                for item in splitter.feed(chunk):
                    if isinstance(item, ProtocolError):
                        raise item
                    self._deliver(parse_answer(item))
            self._failure = EOFError("the supervisor closed the channel")
        except ProtocolError as exc:
            self._failure = exc
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            self._failure = EOFError(f"the channel broke: {exc}")
        for event in self._pending.values():
            event.set()

    def _deliver(self, response: ToolResponse) -> None:
        event = self._pending.get(response.tool_call_id)
        if event is not None:
            self._answers[response.tool_call_id] = response
            event.set()
