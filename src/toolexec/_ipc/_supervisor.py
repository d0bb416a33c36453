"""The supervisor: serve runners' tool calls through a ``ToolExecutor``.

The user-facing story: docs/ipc.md.

Theory of operation. Each runner gets a *session*: one task that reads,
runs and writes in turn, so that a runner that writes faster than its calls
run, or never reads its answers, meets back-pressure rather than growing
the supervisor's memory:

1. *read*: one read from the runner's pipe (at most 64 KiB), cut into lines
   by ``LineSplitter`` (at most ``max_line_bytes`` of an unfinished line
   held) and decoded; a line that is not a call is answered with a
   ``protocol_error`` at once, and a call joins the calls *waiting*;
2. *run*: the waiting calls are a batch (at most ``max_batch_calls``): the
   supervisor's gate first (the tool exists, the runner may use it, its
   path arguments are within the runner's grants), then the runner's fork
   of the executor, which routes, admits and orders them like any batch;
3. *write*: the batch's answers, in call order, in one write.

While a batch runs, a second task (``_read_ahead``) reads on: it refuses
bad lines at once, while the calls they might name are still in flight,
queues the calls for the next batches (until ``_AHEAD_CALLS``, or a batch,
or ``_AHEAD_BYTES`` of them wait), and sees the runner's stream end, which
cancels the batch. Calls sent during a batch so run together, as the next
batch, and a call never overtakes one sent before it. Only one of the two
reads at a time: the session reads itself only when no batch runs and no
read of the other is under way. While a write is stuck on a runner that
does not read, nothing is read, and the runner's own writes block.

Every accepted call is answered once: a refused line never names a call in
flight or one of the last ``_ANSWERED_IDS`` answered. A runner whose stream
ends has its running calls cancelled (and answered ``cancelled``), and the
calls it sent that had not started are answered ``cancelled`` without
running. A runner that closes its input or exits has nobody to answer: its
session is cancelled, and with it the calls still running.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys
from collections import OrderedDict, deque
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

import attrs
import trio

from .._core import _messages as say
from .._core._executor import ToolExecutor
from .._core._messages import clip
from .._core._registry import ToolRegistry
from .._gate._audit import JsonlAuditSink
from .._gate._policy import Deny
from .._gate._rules import Capabilities, CapabilityPolicy, ComposedPolicy, tool_regex
from .._proc._process import open_group_process, reap
from ._protocol import (
    DEFAULT_MAX_LINE_BYTES,
    FS_DENIED,
    SLUG_OF,
    LineSplitter,
    ProtocolError,
    decode_call,
    encode,
    protocol_error_message,
    response_message,
)

if TYPE_CHECKING:
    import re
    from collections.abc import Mapping, Sequence

    from .._core._types import ToolCall, ToolResult
    from .._tools._workspace import Workspace

__all__ = ["AuditLog", "RunnerConfig", "RunnerStatistics", "Supervisor"]

_log = logging.getLogger("toolexec.ipc")
_READ_CHUNK = 1 << 16
#: While a batch runs, reading on stops once this many calls wait (or a batch of them,
#: if more), or this many bytes of them: the runner's later lines wait in the pipe.
_AHEAD_CALLS = 32
_AHEAD_BYTES = 1 << 20
#: How many ids of answered calls a session remembers (a refused line reusing one names no call).
_ANSWERED_IDS = 1024
_REAP_GRACE = 2.0
_ENDED = "Cancelled: the runner's stream ended before this call started."
_GONE = "the runner went away before this call started"
_NOT_NAMED = (
    "; its tool_call_id is that of a call sent before (in flight, or just answered), "
    "so this error names none"
)


@runtime_checkable
class AuditLog(Protocol):
    """Where the supervisor records its decisions (``JsonlAuditSink`` is one)."""

    def record(self, kind: str, fields: Mapping[str, Any]) -> None:
        """Append one record of ``kind``."""
        ...


def _runner_name(_inst: object, _attr: object, value: str) -> None:
    if not isinstance(value, str) or not value or "/" in value or "#" in value:
        raise ValueError(
            f"a runner name is a non-empty string without '/' or '#' (it becomes the last "
            f"part of the runner's agent path), got {value!r}"
        )


@attrs.frozen
class RunnerConfig:
    """One runner: its name (its agent path is ``<executor path>/<name>``) and grants.

    ``capabilities`` says which tools the runner may call (name patterns)
    and which workspace paths, in which mode (``PathGrant``), its calls'
    path arguments may name. The default grants every tool and no path.
    """

    name: str = attrs.field(validator=_runner_name)
    capabilities: Capabilities = attrs.field(
        factory=Capabilities, validator=attrs.validators.instance_of(Capabilities)
    )


@attrs.frozen
class RunnerStatistics:
    """A snapshot of one runner's session.

    ``calls_in_flight`` counts the calls of the batch being run or answered;
    calls read while it runs, waiting for the next batch, are not counted
    (they are in ``calls_received``, not yet in ``calls_answered``).
    """

    name: str
    agent_path: str
    calls_received: int
    calls_answered: int
    calls_in_flight: int
    protocol_errors: int
    writes_waiting: int
    bytes_buffered: int


def _at_least_one(_inst: object, attr: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"Supervisor {attr.name} must be an integer >= 1, got {value!r}")


@attrs.define(eq=False)
class Supervisor:
    """Serves the tool calls of runner processes over JSON lines (docs/ipc.md).

    Example::

        supervisor = Supervisor(ToolExecutor(registry, sinks=[audit]))
        code = await supervisor.run_process(
            ["python", "agent.py"], RunnerConfig("agent", Capabilities(["read_file"])))

    Args:
        executor: runs the calls; each runner gets a fork of it
            (``fork_for_subagent(name)``), so pools and caps are shared
            across runners. ``None``: no tools, every call is ``tool_not_found``.
        audit: where ``tool.call.dispatched`` / ``tool.call.denied`` records
            go; ``None`` means every ``JsonlAuditSink`` among the executor's sinks.
        workspace: resolves path arguments for the grants; by default the
            executor's, or each tool's own (the built-in file tools name theirs).
        max_line_bytes: the longest line read from a runner; a longer one is
            refused without being held.
        max_batch_calls: the most calls one batch takes from a runner.
    """

    executor: ToolExecutor | None = None
    audit: Sequence[AuditLog] | None = None
    workspace: Workspace | None = None
    max_line_bytes: int = attrs.field(default=DEFAULT_MAX_LINE_BYTES, validator=_at_least_one)
    max_batch_calls: int = attrs.field(default=1024, validator=_at_least_one)
    _sessions: set[_Session] = attrs.field(factory=set, init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        if self.executor is None:
            self.executor = ToolExecutor(ToolRegistry())
        if self.audit is None:
            self.audit = tuple(s for s in self.executor.sinks if isinstance(s, JsonlAuditSink))
        else:
            self.audit = tuple(self.audit)
        if self.workspace is None:
            ws = self.executor.workspace
            self.workspace = ws if _is_workspace(ws) else None  # type: ignore[assignment]

    def statistics(self) -> tuple[RunnerStatistics, ...]:
        """A snapshot of every runner being served now."""
        return tuple(s.statistics() for s in self._sessions)

    async def serve(
        self, runner: RunnerConfig, receive: trio.abc.ReceiveStream, send: trio.abc.SendStream
    ) -> RunnerStatistics:
        """Serve one runner over a pair of streams until its stream ends or it goes away.

        Returns when the runner's output ended, its calls still running
        cancelled and every call it sent answered (those that had not
        started: ``cancelled``); or when ``send`` breaks or, for a pipe on
        Linux, loses its reader (the runner stopped reading for good),
        cancelling its calls still running. The streams stay open.
        """
        session = _Session(self, runner)
        self._sessions.add(session)
        try:
            await session.run(receive, send)
        finally:
            self._sessions.discard(session)
        return session.statistics()

    async def run_process(
        self,
        command: Sequence[str],
        runner: RunnerConfig,
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
    ) -> int:
        """Start ``command`` as a runner (its stdin and stdout are the channel); serve it.

        The runner's stderr is this process's. When the runner exits, or
        closes its stdin, its calls still running are cancelled; when its
        stdout ends, they are cancelled and answered, then its stdin is
        closed. Whatever is left of its process group is ended. Returns the
        runner's exit status.
        """
        process = await open_group_process(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None, cwd=cwd, env=env
        )
        assert process.stdin is not None
        assert process.stdout is not None
        try:
            async with trio.open_nursery() as nursery:
                served = trio.Event()
                nursery.start_soon(self._watch_exit, process, nursery.cancel_scope, served)
                await self.serve(runner, process.stdout, process.stdin)
                served.set()
                await process.stdin.aclose()
        finally:
            await reap(process, _REAP_GRACE)
        return process.returncode if process.returncode is not None else -1

    @staticmethod
    async def _watch_exit(
        process: trio.Process, scope: trio.CancelScope, served: trio.Event
    ) -> None:
        await process.wait()
        if not served.is_set():
            _log.info("runner %s exited; cancelling its calls", process.pid)
        scope.cancel()


def _is_workspace(value: object) -> bool:
    from .._tools._workspace import Workspace

    return isinstance(value, Workspace)


@attrs.define(eq=False)
class _Gate:
    """The supervisor's own checks, before a call reaches the executor."""

    registry: ToolRegistry
    agent_path: str
    tools: tuple[re.Pattern[str], ...]
    paths: CapabilityPolicy

    @classmethod
    def for_runner(
        cls, registry: ToolRegistry, agent_path: str, caps: Capabilities, ws: Workspace | None
    ) -> _Gate:
        patterns = tuple(tool_regex(p) for p in caps.tools)
        paths = CapabilityPolicy({agent_path: Capabilities(("*",), caps.paths)}, workspace=ws)
        return cls(registry, agent_path, patterns, paths)

    _granted: dict[str, bool] = attrs.field(factory=dict, init=False)

    def granted(self, name: str) -> bool:
        known = self._granted.get(name)
        if known is None:  # names come from the registry: the cache stays small
            known = self._granted[name] = any(p.fullmatch(name) for p in self.tools)
        return known

    def check(self, call: ToolCall) -> tuple[str, str] | None:
        """``(slug, message)`` refusing the call, or ``None`` to pass it on."""
        name = call.name
        entry = self.registry.lookup(name)
        if entry is None:
            names = (n for n in self.registry.names() if self.granted(n))
            return "tool_not_found", say.not_found(name, names)
        if not self.granted(name):
            return "permission_denied", (
                f"Tool '{name}' was denied: runner '{self.agent_path}' is not granted it"
            )
        definition = entry.definition
        if definition.path_arguments:
            args = _args(call)
            if _valid(entry.schema, args):
                decision = self.paths.decide(definition, args, self.agent_path)
                if isinstance(decision, Deny):
                    return FS_DENIED, f"Tool '{name}' was denied: {decision.reason}"
        return None


def _args(call: ToolCall) -> dict[str, Any]:
    # A decoded call's arguments are the line's JSON object (``decode_call``).
    return cast("dict[str, Any]", call.arguments)


def _valid(schema: Any, args: Mapping[str, Any]) -> bool:
    # Invalid arguments go on to the executor, which answers ``invalid_args``
    # and whose copy of the runner's grants still stands behind any hook.
    try:
        return bool(schema.is_valid(args))
    except (TypeError, ValueError):
        return False


@attrs.define(eq=False)
class _Answered:
    """The ids of the last ``size`` calls answered, oldest first (a bounded memory).

    A refused line reusing one of them names no call: its error could
    otherwise be taken for a second answer to the call that ran.
    """

    size: int
    ids: OrderedDict[str, None] = attrs.field(factory=OrderedDict)

    def add(self, cid: str) -> None:
        ids = self.ids
        if cid in ids:
            ids.move_to_end(cid)
            return
        ids[cid] = None
        if len(ids) > self.size:
            ids.popitem(last=False)

    def __contains__(self, cid: object) -> bool:
        return cid in self.ids


@attrs.define(eq=False)
class _Session:
    """One runner being served: read, run, write, in turn; read on while a batch runs."""

    supervisor: Supervisor
    runner: RunnerConfig
    executor: ToolExecutor = attrs.field(init=False)
    gate: _Gate = attrs.field(init=False)
    audit: tuple[AuditLog, ...] = attrs.field(init=False)
    in_flight: set[str] = attrs.field(factory=set, init=False)
    answered_ids: _Answered = attrs.field(factory=lambda: _Answered(_ANSWERED_IDS), init=False)
    #: Calls taken from the runner's lines and not yet in a batch, in the order sent.
    waiting: deque[ToolCall] = attrs.field(factory=deque, init=False)
    waiting_bytes: int = 0  # bytes of the lines of calls queued since ``waiting`` was empty
    running: bool = False  # a batch is running
    reading: bool = False  # ``_read_ahead`` has a read, or the lines of one, under way
    ended: bool = False  # the runner's stream ended
    batch_started: trio.lowlevel.ParkingLot = attrs.field(factory=trio.lowlevel.ParkingLot)
    read_done: trio.lowlevel.ParkingLot = attrs.field(factory=trio.lowlevel.ParkingLot)
    received: int = 0
    answered: int = 0
    protocol_errors: int = 0
    lines: int = 0
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope, init=False)
    splitter: LineSplitter = attrs.field(init=False)
    writer: _Writer | None = None

    def __attrs_post_init__(self) -> None:
        sup = self.supervisor
        assert sup.executor is not None
        caps = self.runner.capabilities
        parent = sup.executor
        path = f"{parent.agent_path}/{self.runner.name}"
        # The gate checks the arguments as sent. Only a hook can change them
        # after it, so only then does the fork check the grants again.
        policy = parent.policy
        if parent.hooks:
            own = CapabilityPolicy({path: caps}, workspace=sup.workspace)
            policy = ComposedPolicy([parent.policy, own])
        self.executor = parent.fork_for_subagent(self.runner.name, policy=policy)
        self.gate = _Gate.for_runner(parent.registry, path, caps, sup.workspace)
        self.audit = tuple(sup.audit or ())
        self.splitter = LineSplitter(sup.max_line_bytes)

    def statistics(self) -> RunnerStatistics:
        queued = self.writer.waiting() if self.writer is not None else 0
        return RunnerStatistics(
            self.runner.name,
            self.executor.agent_path,
            self.received,
            self.answered,
            len(self.in_flight) - len(self.waiting),
            self.protocol_errors,
            queued,
            self.splitter.buffered,
        )

    async def run(self, receive: trio.abc.ReceiveStream, send: trio.abc.SendStream) -> None:
        out = self.writer = _Writer(send, self.scope, self.runner.name)
        try:
            with self.scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._read_ahead, receive, out)
                    fd = _pipe_to_watch(send, receive)
                    if fd is not None:
                        nursery.start_soon(_watch_reader, fd, self.scope, self.runner.name)
                    await self._serve(receive, out)
                    nursery.cancel_scope.cancel()
        finally:
            for call in self.waiting:  # the runner went away: these never reached the executor
                self._record("tool.call.denied", call, error="cancelled", message=_GONE)

    async def _serve(self, receive: trio.abc.ReceiveStream, out: _Writer) -> None:
        """Run what is waiting, else wait for the read under way, else read; to the end."""
        waiting, limit = self.waiting, self.supervisor.max_batch_calls
        while True:
            if waiting:
                if len(waiting) <= limit:
                    calls = list(waiting)
                    waiting.clear()
                else:
                    calls = [waiting.popleft() for _ in range(limit)]
                if not waiting:
                    self.waiting_bytes = 0
                await self._run_batch(calls, out)
            elif self.reading:
                await self.read_done.park()
            elif self.ended:
                break
            elif chunk := await _receive(receive):
                await self._take_lines(chunk, out)
            else:
                self.ended = True
        truncated = self.splitter.close()
        if truncated is not None:
            await self._refuse(truncated, self.lines + 1, out)

    async def _read_ahead(self, receive: trio.abc.ReceiveStream, out: _Writer) -> None:
        """While a batch runs, read on: refuse bad lines at once, queue the calls for
        the next batches, and see the stream end; until a batch of calls (at least
        ``_AHEAD_CALLS``) or ``_AHEAD_BYTES`` of them wait."""
        most = max(self.supervisor.max_batch_calls, _AHEAD_CALLS)
        while True:
            await self.batch_started.park()
            while (
                self.running
                and not self.ended
                and len(self.waiting) < most
                and self.waiting_bytes < _AHEAD_BYTES
            ):
                self.reading = True
                try:
                    if chunk := await _receive(receive):
                        await self._take_lines(chunk, out)
                    else:
                        self._end()
                finally:
                    self.reading = False
                    self.read_done.unpark_all()

    def _end(self) -> None:
        """The runner's stream ended: it will read no answer it waits for; cancel the batch."""
        self.ended = True
        if self.running:
            _log.info("runner %s: its stream ended; cancelling its calls", self.runner.name)
            self.executor.cancel_all()

    async def _take_lines(self, chunk: bytes | bytearray, out: _Writer) -> None:
        """Decode the lines ``chunk`` completes: refuse what is not a call, queue the calls."""
        in_flight, waiting = self.in_flight, self.waiting
        for item in self.splitter.feed(chunk):
            self.lines += 1
            try:
                if isinstance(item, ProtocolError):
                    raise item
                call = decode_call(item)
                if call.id in in_flight:
                    raise ProtocolError(
                        "duplicate_tool_call_id",
                        f"tool_call_id {clip(json.dumps(call.id))} is already in flight "
                        "(sent before and not answered yet); give every call a fresh id",
                    )
            except ProtocolError as exc:
                await self._refuse(exc, self.lines, out)
                continue
            in_flight.add(call.id)
            self.received += 1
            waiting.append(call)
            self.waiting_bytes += len(item)

    async def _refuse(self, error: ProtocolError, line: int, out: _Writer) -> None:
        named = error.tool_call_id
        if named is not None and (named in self.in_flight or named in self.answered_ids):
            # Naming it would answer a call that ran, or runs, a second time.
            error = ProtocolError(error.slug, error.message + _NOT_NAMED)
            named = None
        self.protocol_errors += 1
        _log.warning("runner %s, line %d: %s: %s", self.runner.name, line, error.slug, error)
        if await out.send(protocol_error_message(error, line)) and named is not None:
            self.answered += 1  # the refusal is that line's one answer
            self.answered_ids.add(named)

    async def _run_batch(self, calls: list[ToolCall], out: _Writer) -> None:
        if self.ended:  # nobody will read them: answered, not run
            answer = b"".join(self._refusal(call, ("cancelled", _ENDED)) for call in calls)
        else:
            self.running = True
            self.batch_started.unpark()
            try:
                if len(calls) == 1:  # the commonest batch: a runner waiting on one call
                    answer = await self._answer_one(calls[0])
                else:
                    answer = b"".join(await self._answer_all(calls))
            finally:
                self.running = False
        if not await out.send(answer):
            return
        in_flight, answered = self.in_flight, self.answered_ids
        for call in calls:
            in_flight.discard(call.id)
            answered.add(call.id)
        self.answered += len(calls)

    async def _answer_one(self, call: ToolCall) -> bytes:
        """The answer line to a batch of one call (``_answer_all`` for one, with less work)."""
        verdict = self.gate.check(call)
        if verdict is not None:
            return self._refusal(call, verdict)
        if self.audit:
            (result,) = await self._execute([call])
        else:
            result = await self.executor.execute_call(call)
        return response_message(call.id, result)

    async def _answer_all(self, calls: list[ToolCall]) -> list[bytes]:
        """The answer lines to a batch, in call order: the gate's refusals and the results."""
        refused: list[bytes | None] = []
        forward: list[ToolCall] = []
        for call in calls:
            verdict = self.gate.check(call)
            if verdict is None:
                forward.append(call)
                refused.append(None)
            else:
                refused.append(self._refusal(call, verdict))
        results = iter(await self._execute(forward) if forward else ())
        return [
            answer if answer is not None else response_message(call.id, next(results))
            for call, answer in zip(calls, refused, strict=True)
        ]

    def _refusal(self, call: ToolCall, verdict: tuple[str, str]) -> bytes:
        """The supervisor answers ``call`` itself: record it; the answer line saying why."""
        slug, message = verdict
        message = say.bounded(message)
        self._record("tool.call.denied", call, error=slug, message=message)
        return encode(
            {
                "op": "tool_response",
                "tool_call_id": call.id,
                "ok": False,
                "error": slug,
                "message": message,
            }
        )

    async def _execute(self, forward: list[ToolCall]) -> Sequence[ToolResult]:
        """Run the calls the gate passed as one batch (results in their order);
        record the executor's decisions: one record a call."""
        batch = self.executor.prepare(forward)
        if not self.audit:
            return (await batch.run()).results
        answered_at_once = set(batch.plan.short_circuited_ids)
        for call in forward:
            if call.id not in answered_at_once:
                self._record("tool.call.dispatched", call)
        outcome = await batch.run()
        for call, r in zip(forward, outcome.results, strict=True):
            if call.id in answered_at_once:  # refused, or skipped by a hook, as it was planned
                self._record("tool.call.denied", call, error=_slug(r), message=r.text)
        return outcome.results

    def _record(self, kind: str, call: ToolCall, **extra: str) -> None:
        if not self.audit:
            return
        fields = {
            "time": trio.current_time(),
            "agent_path": self.executor.agent_path,
            "runner": self.runner.name,
            "tool_call_id": call.id,
            "tool": call.name,
            "args": call.arguments,
            **extra,
        }
        for log in self.audit:
            try:
                log.record(kind, fields)
            except Exception:
                _log.exception("audit log %r raised; record dropped for it", log)


@attrs.define(eq=False)
class _Writer:
    """The one way into a runner's input: one write at a time; a broken write ends the session.

    The session's task writes answers and ``_read_ahead`` writes refusals;
    a write waits for the one under way (trio's conflict detector would
    refuse a second writer). ``writing`` counts the writes under way or
    waiting, for the statistics.
    """

    stream: trio.abc.SendStream
    scope: trio.CancelScope
    name: str
    writing: int = 0
    busy: bool = False
    turn: trio.lowlevel.ParkingLot = attrs.field(factory=trio.lowlevel.ParkingLot)

    async def send(self, data: bytes) -> bool:
        """Write ``data``; ``False`` (and the session cancelled) if the runner is gone."""
        self.writing += 1
        try:
            while self.busy:
                await self.turn.park()
            self.busy = True
            try:
                await self.stream.send_all(data)
            finally:
                self.busy = False
                self.turn.unpark()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            _log.info("runner %s stopped reading; cancelling its calls", self.name)
            self.scope.cancel()
            return False
        finally:
            self.writing -= 1
        return True

    def waiting(self) -> int:
        """Writes under way or waiting for their turn (at most two: answers and a refusal)."""
        return self.writing


def _pipe_to_watch(send: trio.abc.SendStream, receive: trio.abc.ReceiveStream) -> int | None:
    """The descriptor of ``send`` if it is the write-only end of a pipe, on Linux.

    There a closed reader can be seen without writing: ``_watch_reader``.
    """
    if sys.platform != "linux" or not isinstance(send, trio.lowlevel.FdStream):
        return None
    import fcntl

    fd = send.fileno()
    if isinstance(receive, trio.lowlevel.FdStream) and receive.fileno() == fd:
        return None
    try:
        mode, flags = os.fstat(fd).st_mode, fcntl.fcntl(fd, fcntl.F_GETFL)
    except OSError:
        return None
    return fd if stat.S_ISFIFO(mode) and flags & os.O_ACCMODE == os.O_WRONLY else None


async def _watch_reader(fd: int, scope: trio.CancelScope, name: str) -> None:
    """Cancel the session once the runner's input, a pipe, has no reader left.

    The write end of a pipe never becomes readable: epoll reports only an
    error on it (``EPOLLERR``), when the last reader is gone, and an error
    wakes a task waiting to read.
    """
    try:
        await trio.lowlevel.wait_readable(fd)
    except (trio.ClosedResourceError, trio.BusyResourceError):  # closed, or watched already
        return
    _log.info("runner %s closed its input; cancelling its calls", name)
    scope.cancel()


async def _receive(stream: trio.abc.ReceiveStream) -> bytes | bytearray:
    try:
        return await stream.receive_some(_READ_CHUNK)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        return b""


def _slug(result: ToolResult) -> str:
    assert result.error_class is not None
    return SLUG_OF[result.error_class]
