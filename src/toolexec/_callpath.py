"""Run time: one queued call from approval to its result.

The user-facing story: docs/concepts.md, "Admission" and "Timeouts and
cancellation".

Theory of operation. ``run_call`` drives a call through its lifecycle:

1. *Approve* (``_asking.Asker``): a call that needs a human waits for
   the answer first, holding no permit.
2. *Admit* (``Admission``): the tool's own limiter if the host capped it,
   then its class limiter, in that order, as one ``async with`` that
   releases both on every path. A last check that the batch was not
   cancelled while the call waited, since the nowait fast path does not look.
3. *Start* (``_start``): the deadline (the tool's, tightened by the grant)
   and the ``ToolContext``.
4. *Execute* (in ``run_call``): the tool, or the backend its grant names,
   under the deadline.
   Every exception becomes a result; ``trio.Cancelled`` and
   ``KeyboardInterrupt`` are never caught here.
5. *Conclude* (``_conclude``): the output checked, capped and made a result.
"""

from __future__ import annotations

import json
import logging
import threading
import traceback
from typing import TYPE_CHECKING, Any

import attrs
import trio

from . import _messages as say
from ._errors import ToolError
from ._events import CallStarted
from ._lifecycle import CallSlot, State, error_result
from ._policy import HOST_GRANT
from ._tool import ToolContext, _drop
from ._types import ErrorClass, JsonContent, TextContent, ToolOutput, ToolResult

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from types import TracebackType

    from ._asking import Asker
    from ._events import EventSink
    from ._hooks import CallHook
    from ._limits import Pools
    from ._report import Reporter
    from ._tool import Services
    from ._types import ContentBlock, PathResolver

__all__ = ["RunBinding", "Runtime", "run_call"]

_log = logging.getLogger("toolexec")


@attrs.define(eq=False)
class Runtime:
    """The run-time half of an executor: its pools, observers and counters."""

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


class Admission:
    """Hold a call's permits: the tool's limiter (if capped), then its class's."""

    __slots__ = ("_admitted", "_class_limiter", "_slot", "_tool_limiter")

    def __init__(self, pools: Pools, slot: CallSlot, *, admitted: bool = False) -> None:
        self._slot = slot
        self._tool_limiter = pools.per_tool.get(slot.call.name)
        self._class_limiter = pools.by_class[slot.routing]
        self._admitted = admitted  # ``admit_in_order`` took the class permit already

    async def __aenter__(self) -> None:
        if self._admitted:
            return
        # The nowait fast path skips the two scheduling round trips of the async
        # acquire when a token is free; nowait never jumps the queue of waiters.
        slot, tool, group = self._slot, self._tool_limiter, self._class_limiter
        if tool is not None:
            try:
                tool.acquire_on_behalf_of_nowait(slot)
            except trio.WouldBlock:
                await tool.acquire_on_behalf_of(slot)
        try:
            try:
                group.acquire_on_behalf_of_nowait(slot)
            except trio.WouldBlock:
                await group.acquire_on_behalf_of(slot)
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


class Turns:
    """Admission in emitted order within one run.

    trio starts a run's tasks in a deliberately varied order, so calls that
    must wait for a permit would queue in a different order on every run.
    With turns, each call first waits until the call before it has queued
    for its permits (or has gone to ask a human), so waiting calls are
    admitted in the order the model emitted them. ``may_wait`` says when a
    run needs this; a run that cannot wait skips the cost.
    """

    __slots__ = ("_queued",)

    def __init__(self, n: int) -> None:
        self._queued = [trio.Event() for _ in range(n)]

    def turn(self, i: int) -> Turn:
        """The turn of the run's ``i``-th call."""
        return Turn(self._queued[i - 1] if i else None, self._queued[i])


class Turn:
    """One call's place in its run's admission order."""

    __slots__ = ("_mine", "_previous")

    def __init__(self, previous: trio.Event | None, mine: trio.Event) -> None:
        self._previous, self._mine = previous, mine

    async def wait(self) -> None:
        """Wait until the call before this one has queued."""
        if self._previous is not None and not self._previous.is_set():
            await self._previous.wait()

    def pass_on(self) -> None:
        """Let the next call queue: this one has (no await may come in between)."""
        self._mine.set()


def may_wait(pools: Pools, slots: Sequence[CallSlot]) -> bool:
    """Whether some call of a run may have to wait for a permit."""
    if pools.per_tool and any(s.call.name in pools.per_tool for s in slots):
        return True
    return len(slots) > pools.by_class[slots[0].routing].available_tokens


def one_queue(pools: Pools, slots: Sequence[CallSlot]) -> bool:
    """Whether the run's calls wait in one queue only: their class pool.

    Then ``admit_in_order`` admits them, with no per-call turns: no tool
    of the run has its own cap and no call waits for a human first.
    """
    per_tool = pools.per_tool
    return all(s.needs_approval is None and s.call.name not in per_tool for s in slots)


async def admit_in_order(
    rt: Runtime, slots: Sequence[CallSlot], report: Reporter, nursery: trio.Nursery
) -> None:
    """Take each call's class permit in emitted order, and start it once it has one.

    The permit is taken on the call's behalf and released by the call, so a
    waiting call costs what it would waiting in its own task, while the
    order the calls are admitted in is the order the model emitted them.
    """
    limiter = rt.pools.by_class[slots[0].routing]
    for slot in slots:
        slot.advance(State.ADMITTING)
        try:
            limiter.acquire_on_behalf_of_nowait(slot)
        except trio.WouldBlock:
            await limiter.acquire_on_behalf_of(slot)
        nursery.start_soon(run_call, rt, slot, report, None, True)


async def run_call(
    rt: Runtime,
    slot: CallSlot,
    report: Reporter,
    turn: Turn | None = None,
    admitted: bool = False,
) -> None:
    """Run one queued call to its result, and report it.

    ``turn`` orders its admission within a run; ``admitted`` says its class
    permit is already held (``admit_in_order``).
    """
    waits = turn is not None or slot.needs_approval is not None
    if waits and not await _take_turn_and_ask(rt, slot, report, turn):
        return
    if not admitted:
        slot.advance(State.ADMITTING)
    async with Admission(rt.pools, slot, admitted=admitted):
        # A cancel may have landed while this call waited for its turn (or
        # before the batch ran): never start a tool after it.
        await trio.lowlevel.checkpoint_if_cancelled()
        entry = slot.entry
        assert entry is not None
        ctx, start, timeout = _start(rt, slot, report)
        output: object = None
        failure: ToolResult | None = None
        rt.in_flight += 1
        try:
            with trio.CancelScope(deadline=start + timeout) as scope:
                tool = entry.factory()
                if slot.backend is None:
                    output = await tool.execute(slot.arguments, ctx)
                else:
                    output = await slot.backend.run(tool, slot.arguments, ctx)
        except ToolError as exc:
            failure = error_result(slot, exc.error_class, exc.message, details=exc.details)
        except Exception as exc:
            failure = _crashed(slot, exc)
        except BaseException as exc:  # SystemExit, GeneratorExit, ...: the tool failed
            if _propagates(exc):
                raise
            failure = _crashed(slot, exc)
        finally:
            rt.in_flight -= 1
        if scope.cancel_called:
            failure = error_result(slot, ErrorClass.TIMEOUT, say.timed_out(slot.call.name, timeout))
        slot.finish(_conclude(slot, output, failure, trio.current_time() - start))
    if report.observed:
        report.settle(slot)


async def _take_turn_and_ask(
    rt: Runtime, slot: CallSlot, report: Reporter, turn: Turn | None
) -> bool:
    """Wait for the call's turn and its approval; ``False`` if it was refused (and settled)."""
    if turn is not None:
        try:
            await turn.wait()
        finally:
            turn.pass_on()  # now, or at the latest when cancelled
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


def _start(rt: Runtime, slot: CallSlot, report: Reporter) -> tuple[ToolContext, float, float]:
    call, entry = slot.call, slot.entry
    assert entry is not None
    grant = slot.grant or HOST_GRANT
    timeout = entry.definition.effective_timeout
    if grant.timeout is not None and grant.timeout < timeout:
        timeout = grant.timeout
    slot.advance(State.RUNNING)
    start = trio.current_time()
    report.call_event(CallStarted, call, routing=slot.routing)
    ctx = ToolContext(
        call.id,
        call.name,
        rt.agent_path,
        rt.session_id,
        rt.workspace,
        grant,
        rt.grace_period,
        executor=rt.executor,
        services=rt.services,
        emit=report.progress_emitter(call) if report.observed else _drop,
        batch_id=report.batch_id,
    )
    return ctx, start, timeout


def _propagates(exc: BaseException) -> bool:
    """Whether an exception out of a tool is not the tool's failure but ours to pass on:
    trio's cancellation (our deadline, or an enclosing scope) and KeyboardInterrupt."""
    if isinstance(exc, trio.Cancelled | KeyboardInterrupt):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return exc.subgroup((trio.Cancelled, KeyboardInterrupt)) is not None
    return False


def _crashed(slot: CallSlot, exc: BaseException) -> ToolResult:
    call = slot.call
    _log.error("tool %r raised in call %r", call.name, call.id, exc_info=exc)
    return error_result(
        slot,
        ErrorClass.EXECUTION_ERROR,
        say.crashed(call.name, exc),
        details={"traceback": "".join(traceback.format_exception(exc))},
    )


def _conclude(
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
