"""The supervisor: serve runners' tool calls through a ``ToolExecutor``.

The user-facing story: docs/ipc.md.

Theory of operation. Each runner gets a *session*: one task that reads,
runs and writes in turn, so that a runner that writes faster than its calls
run, or never reads its answers, meets back-pressure rather than growing
the supervisor's memory:

1. *read*: one read from the runner's pipe (at most 64 KiB), cut into lines
   by ``LineSplitter`` (at most ``max_line_bytes`` of an unfinished line
   held) and decoded; a line that is not a call is answered with a
   ``protocol_error`` at once;
2. *run*: the calls that read completed are a batch (split into batches of
   at most ``max_batch_calls``): the supervisor's gate first (the tool
   exists, the runner may use it, its path arguments are within the
   runner's grants), then the runner's fork of the executor, which routes,
   admits and orders them like any batch;
3. *write*: the batch's answers, in call order, in one write.

While a batch runs nothing is read, so what the runner sends meanwhile
waits in the pipe and comes back in one read, as the next batch: calls sent
together run together, and a call never overtakes one sent before it.
While a write is stuck on a runner that does not read, nothing is read
either, and the runner's own writes block. A runner that closes its input
or exits has nobody to answer: its session is cancelled, and with it the
calls still running.
"""

from __future__ import annotations

import json
import logging
import subprocess
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

import attrs
import trio

from .._core._executor import ToolExecutor
from .._core._registry import ToolRegistry
from .._core._types import ErrorClass
from .._gate._audit import JsonlAuditSink
from .._gate._policy import Deny
from .._gate._rules import Capabilities, CapabilityPolicy, ComposedPolicy, _glob_regex
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
_REAP_GRACE = 2.0


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
    """A snapshot of one runner's session."""

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
        """Serve one runner over a pair of streams until it stops sending or goes away.

        Returns when the runner's output ended and every call it sent is
        answered, or when ``send`` breaks (the runner stopped reading for
        good), cancelling its calls still running. The streams stay open.
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

        The runner's stderr is this process's. When the runner exits, its
        calls still running are cancelled; when it stops sending, its stdin
        is closed once every call is answered. Whatever is left of its
        process group is ended. Returns the runner's exit status.
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
        patterns = tuple(_glob_regex(p.replace("*", "**")) for p in caps.tools)
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
            names = ", ".join(n for n in self.registry.names() if self.granted(n)) or "(none)"
            return "tool_not_found", f"Tool '{name}' not found. Available: {names}"
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
class _Session:
    """One runner being served: read, run, write, in turn."""

    supervisor: Supervisor
    runner: RunnerConfig
    executor: ToolExecutor = attrs.field(init=False)
    gate: _Gate = attrs.field(init=False)
    audit: tuple[AuditLog, ...] = attrs.field(init=False)
    in_flight: set[str] = attrs.field(factory=set, init=False)
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
            len(self.in_flight),
            self.protocol_errors,
            queued,
            self.splitter.buffered,
        )

    async def run(self, receive: trio.abc.ReceiveStream, send: trio.abc.SendStream) -> None:
        out = self.writer = _Writer(send, self.scope, self.runner.name)
        limit = self.supervisor.max_batch_calls
        with self.scope:
            while chunk := await _receive(receive):
                calls = await self._take_lines(chunk, out)
                if len(calls) <= limit:
                    if calls:
                        await self._run_batch(calls, out)
                    continue
                for start in range(0, len(calls), limit):
                    await self._run_batch(calls[start : start + limit], out)
            truncated = self.splitter.close()
            if truncated is not None:
                await self._refuse(truncated, self.lines + 1, out)

    async def _take_lines(self, chunk: bytes | bytearray, out: _Writer) -> list[ToolCall]:
        group: list[ToolCall] = []
        in_flight = self.in_flight
        for item in self.splitter.feed(chunk):
            self.lines += 1
            try:
                if isinstance(item, ProtocolError):
                    raise item
                call = decode_call(item)
                if call.id in in_flight:
                    raise ProtocolError(
                        "duplicate_tool_call_id",
                        f"tool_call_id {json.dumps(call.id)} is already in flight "
                        "(sent before and not answered yet); give every call a fresh id",
                    )
            except ProtocolError as exc:
                await self._refuse(exc, self.lines, out)
                continue
            in_flight.add(call.id)
            self.received += 1
            group.append(call)
        return group

    async def _refuse(self, error: ProtocolError, line: int, out: _Writer) -> None:
        self.protocol_errors += 1
        _log.warning("runner %s, line %d: %s: %s", self.runner.name, line, error.slug, error)
        delivered = await out.send(protocol_error_message(error, line))
        named = error.tool_call_id
        if delivered and named is not None and named not in self.in_flight:
            self.answered += 1

    async def _run_batch(self, calls: list[ToolCall], out: _Writer) -> None:
        if len(calls) == 1:  # the commonest batch: a runner waiting on one call
            answer = await self._answer_one(calls[0])
        else:
            answer = b"".join(await self._answer_all(calls))
        if not await out.send(answer):
            return
        in_flight = self.in_flight
        for call in calls:
            in_flight.discard(call.id)
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
        """The gate refused ``call``: record it; the answer line saying why."""
        slug, message = verdict
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
        record the executor's decisions."""
        batch = self.executor.prepare(forward)
        if not self.audit:
            return (await batch.run()).results
        answered_at_once = set(batch.plan.short_circuited_ids)
        for call in forward:
            if call.id not in answered_at_once:
                self._record("tool.call.dispatched", call)
        outcome = await batch.run()
        for call, r in zip(forward, outcome.results, strict=True):
            if call.id in answered_at_once and r.error_class is not ErrorClass.SKIPPED:
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
    """The one way into a runner's input: a broken write ends the session.

    Only the session's task writes, one write after another (trio's own
    conflict detector would refuse a second writer), so no lock is needed:
    ``writing`` counts the write under way, for the statistics.
    """

    stream: trio.abc.SendStream
    scope: trio.CancelScope
    name: str
    writing: int = 0

    async def send(self, data: bytes) -> bool:
        """Write ``data``; ``False`` (and the session cancelled) if the runner is gone."""
        self.writing += 1
        try:
            await self.stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            _log.info("runner %s stopped reading; cancelling its calls", self.name)
            self.scope.cancel()
            return False
        finally:
            self.writing -= 1
        return True

    def waiting(self) -> int:
        """Writes under way (at most one: the session's)."""
        return self.writing


async def _receive(stream: trio.abc.ReceiveStream) -> bytes | bytearray:
    try:
        return await stream.receive_some(_READ_CHUNK)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        return b""


def _slug(result: ToolResult) -> str:
    assert result.error_class is not None
    return SLUG_OF[result.error_class]
