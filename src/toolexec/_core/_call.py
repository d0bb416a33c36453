"""One call's lifecycle, each step written once: approve, admit, start, execute, conclude.

The user-facing story: docs/concepts.md, "Admission" and "Timeouts and
cancellation".

Theory of operation. ``_lifecycle.CallSlot`` records where a call is and
refuses an illegal move; the functions here are the steps that move it. The
ways of scheduling calls (``_drive``: inline, or a task per call;
``_workers``: a fixed set of workers) decide only *who* drives a call
through them and *when*; none of them repeats a step.

1. *Approve* (``approve``): a call that needs a human waits for the answer
   first, holding no permit (``_gate._asker``).
2. *Admit* (``Admission``): the tool's own limiter if the host capped it,
   then its class limiter, in that order, released on every path. A worker
   takes its class permit itself, on behalf of the calls it will run.
3. *Start* (``begin``): the call is running; ``CallStarted`` is sent. Its
   deadline is ``deadline_of``, applied by the driver (a scope of its own,
   a worker's, or the batch's).
4. *Execute* (``execute``): the tool, or the backend its grant names, run
   one step at a time in the call's own copy of the context (as a task of
   its own would be). Every exception becomes a result; ``trio.Cancelled``
   and ``KeyboardInterrupt`` are never caught here.
5. *Conclude* (``conclude``): the output checked, capped and made the one
   result; the hooks and sinks told.
"""

from __future__ import annotations

import contextvars
import json
import logging
import threading
import traceback
import types
from typing import TYPE_CHECKING, Any

import attrs
import trio

from .._gate._policy import HOST_GRANT
from . import _messages as say
from ._errors import ToolError
from ._events import CallStarted
from ._lifecycle import State, error_result
from ._tool_protocol import ToolContext, drop_update
from ._types import ErrorClass, JsonContent, TextContent, ToolOutput, ToolResult

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Generator
    from types import TracebackType

    from .._gate._asker import Asker
    from .._gate._hooks import CallHook
    from ._events import EventSink
    from ._lifecycle import CallSlot
    from ._limits import Pools
    from ._report import Reporter
    from ._tool_protocol import Services
    from ._types import ContentBlock, PathResolver

__all__ = [
    "Admission",
    "RunBinding",
    "Runtime",
    "approve",
    "begin",
    "conclude",
    "deadline_of",
    "execute",
    "never_suspends",
    "timed_out",
]

_log = logging.getLogger("toolexec")


@attrs.define(eq=False, kw_only=True)
class Runtime:
    """The run-time half of an executor: its pools, observers and counters.

    ``executor`` is the ``ToolExecutor`` these belong to, handed to tools
    through their context (``ctx.service(ToolExecutor)``).
    """

    agent_path: str
    session_id: str
    workspace: PathResolver | None
    grace_period: float
    pools: Pools
    sinks: tuple[EventSink, ...]
    hooks: tuple[CallHook, ...]
    asker: Asker
    services: Services
    executor: object
    # (batch id, call id) of the call this executor's sub-agent runs under.
    parent_call: tuple[str, str] | None = None
    in_flight: int = 0
    # ``Batch.cancel`` of every batch running now, for ``cancel_all``.
    cancellers: set[Callable[[], None]] = attrs.field(factory=set)
    # Which trio run this executor tree's batches belong to (shared by forks).
    binding: RunBinding = attrs.field(factory=lambda: RunBinding())

    def bind_run(self) -> None:
        """Refuse a batch from a second trio run while another run's are running."""
        self.binding.enter()

    def release_run(self) -> None:
        """The batch that ``bind_run`` admitted has ended."""
        self.binding.leave()


class RunBinding:
    """The trio run an executor and its forks are running batches in now.

    trio limiters belong to one run, and forks share some of the parent's, so
    the whole tree is bound at once. Checking and counting happen under one
    lock, so two threads' runs starting batches at the same instant cannot
    both pass: one of them gets the error, whatever the timing.
    """

    __slots__ = ("_active", "_lock", "_root")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._root: object = None
        self._active = 0

    def enter(self) -> None:
        root = trio.lowlevel.current_root_task()
        with self._lock:
            if self._active and root is not self._root:
                raise RuntimeError(
                    "this ToolExecutor (or its parent or a fork of it) is running batches"
                    " in another trio run; its pools belong to one run at a time: use one"
                    " executor per trio run, or toolexec.aio to call one executor from"
                    " asyncio"
                )
            self._root = root
            self._active += 1

    def leave(self) -> None:
        with self._lock:
            self._active -= 1


# -- 1. approve ---------------------------------------------------------------


async def approve(rt: Runtime, slot: CallSlot, report: Reporter) -> bool:
    """Ask a human if the call needs one; ``False`` if refused (the call is answered)."""
    if slot.needs_approval is None:
        return True
    slot.advance(State.APPROVING)
    denial = await rt.asker.ask(slot, report)
    if denial is None:
        return True
    slot.finish(denial)
    if report.observed:
        report.settle(slot)
    return False


# -- 2. admit -----------------------------------------------------------------


class Admission:
    """Hold a call's permits: the tool's limiter (if capped), then its class's."""

    __slots__ = ("_class_limiter", "_slot", "_tool_limiter")

    def __init__(self, pools: Pools, slot: CallSlot) -> None:
        self._slot = slot
        self._tool_limiter = pools.per_tool.get(slot.call.name)
        self._class_limiter = pools.by_class[slot.routing]

    async def __aenter__(self) -> None:
        # The nowait fast path skips the two scheduling round trips of the async
        # acquire when a token is free; nowait never jumps the queue of waiters.
        slot, tool, group = self._slot, self._tool_limiter, self._class_limiter
        slot.advance(State.ADMITTING)
        if tool is not None:
            await take_permit(tool, slot)
        try:
            await take_permit(group, slot)
        except BaseException:
            if tool is not None:
                tool.release_on_behalf_of(slot)
            raise

    async def __aexit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _tb: TracebackType | None,
    ) -> None:
        self._class_limiter.release_on_behalf_of(self._slot)
        if self._tool_limiter is not None:
            self._tool_limiter.release_on_behalf_of(self._slot)


async def take_permit(limiter: Any, borrower: object) -> bool:
    """Take a permit for ``borrower``; whether it came without waiting."""
    try:
        limiter.acquire_on_behalf_of_nowait(borrower)
    except trio.WouldBlock:
        await limiter.acquire_on_behalf_of(borrower)
        return False
    return True


# -- 3. start -----------------------------------------------------------------


def begin(slot: CallSlot, report: Reporter) -> float:
    """Mark an admitted call running (telling the sinks, if any); its start time.

    A call whose class permit a worker took on its behalf is still queued:
    it is admitted here.
    """
    if slot.state is State.QUEUED:
        slot.advance(State.ADMITTING)
    slot.advance(State.RUNNING)
    if report.journal is not None:
        report.journal.started(slot)
    if report.sinks:
        report.call_event(CallStarted, slot.call, routing=slot.routing)
    return trio.current_time()


def deadline_of(slot: CallSlot) -> float:
    """The call's timeout in seconds: its tool's, tightened by its grant."""
    assert slot.entry is not None
    timeout = slot.entry.definition.effective_timeout
    grant = slot.grant
    if grant is not None and grant.timeout is not None and grant.timeout < timeout:
        timeout = grant.timeout
    return timeout


def never_suspends(slot: CallSlot) -> bool:
    """Whether the call runs to its end in one step (a tool with no ``await``, here)."""
    entry = slot.entry
    return entry is not None and entry.never_suspends and slot.backend is None


# -- 4. execute ---------------------------------------------------------------


# A parked call holds this generator, sized by its frame's locals and deepest
# expression, so it keeps few: ``value`` is both the tool's trap on its way to
# trio and trio's answer on its way back, and ``thrown`` is ``_CLOSING`` once
# the driver is being closed.
@types.coroutine
def execute(
    rt: Runtime,
    slot: CallSlot,
    report: Reporter,
    on_block: Callable[[], None] | None = None,
    *,
    own_task: bool = False,
) -> Generator[Any, Any, tuple[object, ToolResult | None]]:
    """Run a started call's tool to its end: ``(output, None)`` or ``(None, failure)``.

    The tool runs one step at a time in its own copy of the context, as in a
    task of its own (a driver that is the call's own task, ``own_task``, has
    one already). When it first blocks, ``on_block`` is called: the driver
    sets the deadline then, as nothing could have cancelled it before. Traps
    and answers are relayed as ``yield from`` would; ``trio.Cancelled`` and
    ``KeyboardInterrupt`` go on to the driver (``propagates``).
    """
    context = None if own_task else contextvars.copy_context()
    value: Any = None
    thrown: BaseException | None = None
    rt.in_flight += 1
    try:
        running, bare = _open(rt, slot, report)
        while True:
            try:
                if context is None:
                    value = running.send(value) if thrown is None else running.throw(thrown)
                elif thrown is None:
                    value = context.run(running.send, value)
                else:
                    value = context.run(running.throw, thrown)
            except StopIteration as exc:
                return (exc.value if bare is None else bare.output(exc.value)), None
            if on_block is not None:
                on_block()
                on_block = None
            try:
                value, thrown = (yield value), None
            except GeneratorExit:  # the driver's coroutine is being closed
                thrown = _CLOSING
                running.close()
                raise
            except BaseException as exc:
                value, thrown = None, exc
    except BaseException as exc:
        if thrown is _CLOSING or propagates(exc):
            raise
        return None, failed(slot, exc)
    finally:
        rt.in_flight -= 1


# ``execute``'s mark that its driver is being closed (never thrown into a tool).
_CLOSING = GeneratorExit()


def _open(rt: Runtime, slot: CallSlot, report: Reporter) -> tuple[Coroutine[Any, Any, Any], Any]:
    """Start the call's tool: its coroutine, and the tool if it was called ``bare``.

    A plain async function tool is called directly (``bare``), and its
    arguments are handed over (the slot lets go of them); its ``output``
    turns the function's value into the output. The tool itself is kept
    for that, not its bound ``output``: a parked call would hold a method
    object for nothing. A tool that declares it never reads its context
    gets none built.
    """
    entry = slot.entry
    assert entry is not None
    tool = entry.factory()
    arguments = slot.arguments
    if slot.backend is not None:  # a backend may read the context for any tool
        return slot.backend.run(tool, arguments, _context(rt, slot, report)), None
    bare = getattr(tool, "bare", None)
    if bare is not None:
        slot.arguments = _HANDED_OVER
        return bare(**arguments), tool
    if getattr(tool, "reads_context", True):
        return tool.execute(arguments, _context(rt, slot, report)), None
    return tool.execute(arguments, None), None  # type: ignore[arg-type]


_HANDED_OVER: dict[str, Any] = {}


def _context(rt: Runtime, slot: CallSlot, report: Reporter) -> ToolContext:
    call = slot.call
    return ToolContext(
        call.id,
        call.name,
        rt.agent_path,
        rt.session_id,
        rt.workspace,
        slot.grant or HOST_GRANT,
        rt.grace_period,
        executor=rt.executor,
        services=rt.services,
        emit=report.progress_emitter(call) if report.observed else drop_update,
        batch_id=report.batch_id,
        idempotency_key=None if report.journal is None else report.journal.idempotency_key(call.id),
    )


def propagates(exc: BaseException) -> bool:
    """Whether an exception out of a tool is not the tool's failure but ours to pass on:
    trio's cancellation (our deadline, or an enclosing scope) and KeyboardInterrupt."""
    if isinstance(exc, trio.Cancelled | KeyboardInterrupt):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return exc.subgroup((trio.Cancelled, KeyboardInterrupt)) is not None
    return False


def failed(slot: CallSlot, exc: BaseException) -> ToolResult:
    """The result for a tool that raised (``ToolError``: its own words)."""
    if isinstance(exc, ToolError):
        return error_result(slot, exc.error_class, exc.message, details=exc.details)
    call = slot.call
    _log.error("tool %r raised in call %r", call.name, call.id, exc_info=exc)
    return error_result(
        slot,
        ErrorClass.EXECUTION_ERROR,
        say.crashed(call.name, exc),
        details={"traceback": "".join(traceback.format_exception(exc))},
    )


def timed_out(slot: CallSlot) -> ToolResult:
    """The result of a call whose deadline cancelled its tool."""
    return error_result(slot, ErrorClass.TIMEOUT, say.timed_out(slot.call.name, deadline_of(slot)))


# -- 5. conclude --------------------------------------------------------------


def conclude(
    slot: CallSlot, report: Reporter, output: object, failure: ToolResult | None, start: float
) -> None:
    """Give a call that started at ``start`` its one result, and report it."""
    result = _result(slot, output, failure, trio.current_time() - start)
    if report.journal is not None:
        result = report.journal.concluded(slot, result)
    slot.finish(result)
    if report.observed:
        report.settle(slot)


def _result(
    slot: CallSlot, output: object, failure: ToolResult | None, duration: float
) -> ToolResult:
    cap = (slot.grant or HOST_GRANT).max_output_chars
    if failure is not None:
        if cap is not None:  # an error's text is output the model reads too
            return attrs.evolve(failure, content=_cap(failure.content, cap), duration=duration)
        return attrs.evolve(failure, duration=duration)
    if not isinstance(output, ToolOutput):
        text = say.not_an_output(slot.call.name, output)
        return error_result(slot, ErrorClass.EXECUTION_ERROR, text, duration=duration)
    content = output.content if cap is None else _cap(output.content, cap)
    return ToolResult(
        slot.call.id,
        slot.call.name,
        content,
        output.is_error,
        ErrorClass.EXECUTION_ERROR if output.is_error else None,
        output.details,
        duration,
        slot.routing,
    )


def _cap(content: tuple[ContentBlock, ...], limit: int) -> tuple[ContentBlock, ...]:
    """At most ``limit`` characters of text for the model: text blocks and JSON
    values as the model reads them (a JSON value too long becomes its cut text)."""
    out: list[ContentBlock] = []
    left = limit
    for block in content:
        text = _model_text(block)
        if isinstance(block, JsonContent) and len(text) > left:
            block = TextContent(text)
        if len(text) > left:
            out.append(TextContent(text[:left] + say.truncated(len(text) - left)))
            left = 0
        else:
            out.append(block)
            left -= len(text)
    return tuple(out)


def _model_text(block: Any) -> str:
    if isinstance(block, JsonContent):
        return json.dumps(block.value, ensure_ascii=False, default=str)
    return block.text if isinstance(block, TextContent) else ""
