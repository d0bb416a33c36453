"""Run time: one queued call from approval to its result.

The user-facing story: docs/concepts.md, "Admission" and "Timeouts and
cancellation".

Theory of operation. Most runs go through ``Crew`` (below); ``run_call``
is the general path, one task per call, for runs where a call waits for a
human or for its tool's own cap. ``run_call`` drives a call through its
lifecycle:

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

import contextlib
import json
import logging
import math
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
from ._lifecycle import CallSlot, State, error_result
from ._report import Reporter
from ._tool_protocol import ToolContext, _drop
from ._types import ErrorClass, JsonContent, RoutingClass, TextContent, ToolOutput, ToolResult

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Coroutine, Generator, Sequence
    from types import TracebackType

    from .._gate._asker import Asker
    from .._gate._hooks import CallHook
    from ._events import EventSink
    from ._limits import ClassPool, Pools
    from ._tool_protocol import Services
    from ._types import ContentBlock, PathResolver

__all__ = ["Crew", "RunBinding", "Runtime", "run_alone", "run_call", "run_solo"]

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


class _Cohort:
    """Calls started together in one scheduling pass, under one deadline (``Crew._cohort``).

    Every call's first step runs in the same pass, so the deadline is set
    once, by the last to arrive: the latest start plus the shared timeout.
    Until then there is none, and none could have fired: deadlines are
    looked at between passes.
    """

    __slots__ = ("arrived", "latest", "scope", "size", "timed_out", "timeout")

    def __init__(self, size: int, timeout: float, scope: trio.CancelScope) -> None:
        self.size, self.timeout, self.scope = size, timeout, scope
        self.arrived = 0
        self.latest = -math.inf
        # Calls the deadline cancelled, with their start: answered once the
        # cohort's scope has absorbed the cancellation.
        self.timed_out: list[tuple[CallSlot, float]] = []

    def started(self, start: float) -> float:
        """Note a call's start (the last to arrive sets the deadline); the start."""
        self.latest = max(self.latest, start)
        if self.arrived == self.size:
            self.scope.deadline = self.latest + self.timeout
        return start


class Crew:
    """A run's calls, taken in emitted order by at most ``min(N, width)`` workers.

    The batch's own task is the first worker; a run costs a nursery only if
    it may have more than one. A worker holds one permit of the run's class
    and takes calls one after another, running each in its own task:

    - A tool that finishes without blocking costs no task, no permit round
      trip and no deadline: it never reached a checkpoint, so nothing could
      have cancelled it, and the worker goes straight on to the next call
      with the same permit (nobody can have queued for it meanwhile: no
      other task ran, and trio's ``nowait`` acquire never jumps a queue).
    - When a tool first blocks (``_call``), the worker sets the call's
      deadline on its cancel scope and hires more workers if calls are left
      and the width allows (``_hire``), so the run goes on while this call
      waits, as it would with one task per call. After a call that blocked (or a
      permit that had to be waited for) the worker gives the permit back,
      so a waiter elsewhere in the tree gets it first, and takes one again
      before its next call. A deadline that fired spends the scope; the
      worker opens a fresh one.

    Workers take a permit *before* they take a call, so calls are admitted
    in emitted order whoever runs them. Only runs whose calls wait in their
    class pool alone come here (``one_queue``): a call with its own tool cap
    would take that permit second, against the fixed order, and a call
    waiting for a human must not hold one.
    """

    __slots__ = (
        "_arrived",
        "_aside",
        "_closed",
        "_coming",
        "_hired",
        "_inert",
        "_limiter",
        "_next",
        "_nursery",
        "_report",
        "_rt",
        "_slots",
        "_timed_out",
        "_width",
        "blocked",
    )

    def __init__(
        self,
        rt: Runtime,
        slots: Sequence[CallSlot],
        report: Reporter,
        *,
        routing: RoutingClass | None = None,
        aside: Callable[[CallSlot], bool] | None = None,
    ) -> None:
        self._rt, self._slots, self._report = rt, slots, report
        # Calls whose deadline cancelled their tool, by worker scope, answered
        # once the scope has absorbed the cancellation (``_work``).
        self._timed_out: dict[trio.CancelScope, tuple[CallSlot, float]] = {}
        # An open run (``routing`` given) starts empty and grows (``offer``)
        # until ``close``; ``aside`` picks its calls that go through ``run_call``.
        self._closed = routing is None
        self._aside = aside
        routing = slots[0].routing if routing is None else routing
        self._limiter = rt.pools.by_class[routing]
        serial = routing is RoutingClass.SERIAL_MUT
        width = int(self._limiter.total_tokens)
        self._width = 1 if serial else width if not self._closed else min(len(slots), width)
        # No call of the run can block: no worker is hired (so no nursery) and no
        # deadline can matter (so no cancel scope).
        self._inert = self._closed and all(map(_never_suspends, slots))
        if self._inert:
            self._width = 1
        self._arrived = _ARRIVED
        self._next = 0  # the next call to take
        self._hired = 1  # workers started, the batch's task included
        self._coming = 0  # of them, those that have not run yet
        self._nursery: trio.Nursery | None = None
        self.blocked = False  # whether any call of the run reached a checkpoint

    async def run(self) -> None:
        """Run every call of the run to its result."""
        if self._width == 1:
            await self._work()
            return
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await self._work()

    def _hire(self) -> None:
        """A call blocked: start a worker for every call no worker is about to take.

        A tool that blocks says the run is I/O-bound: its calls should all be
        waiting at once, as with one task per call, and hiring them all now
        starts them in one scheduling round (hiring one per blocked call
        took one round per call: a hundred 10 ms calls read 1.7 times the
        naive floor's wall time). The width caps them; a worker that finds
        no call left ends at once.
        """
        self.blocked = True
        left = len(self._slots) - self._next - self._coming
        more = min(self._width - self._hired, left)
        if more > 0:
            assert self._nursery is not None
            if more == left and self._closed and not self._coming and self._start_cohort():
                return
            self._hired += more
            self._coming += more
            for _ in range(more):
                self._nursery.start_soon(self._work, True)

    def _start_cohort(self) -> bool:
        """Start every call left at once, one task each under one deadline; or say it can't.

        When the width lets every call left have a worker of its own, and
        they share a timeout, and the class pool has a permit for each now
        (taken here, in emitted order, on each call's behalf), the calls
        need no worker loop and no deadline scope each: they start in one
        scheduling pass, so one deadline, the latest of theirs, serves all
        (``_cohort``). A call never times out early; it may time out late by
        as long as that pass took to start the others.
        """
        slots = self._slots[self._next :]
        timeout = _timeout(slots[0])
        if any(_timeout(slot) != timeout for slot in slots):
            return False
        if self._aside is not None and any(map(self._aside, slots)):
            return False  # a call waits for a human or a tool cap first: ``run_call``
        limiter = self._limiter
        for i, slot in enumerate(slots):
            try:
                limiter.acquire_on_behalf_of_nowait(slot)
            except trio.WouldBlock:  # someone waits, or the pool is short: the general way
                for taken in slots[:i]:
                    limiter.release_on_behalf_of(taken)
                return False
        self._next = len(self._slots)
        assert self._nursery is not None
        self._nursery.start_soon(self._cohort, slots, timeout)
        return True

    async def _cohort(self, slots: Sequence[CallSlot], timeout: float) -> None:
        """Run calls that start together, one task each; answer those the deadline ended.

        They are answered once the cohort's scope has absorbed the
        cancellation; if an enclosing scope was cancelled in the same
        instant, it goes on, and the calls are answered as cancelled.
        """
        async with trio.open_nursery() as nursery:
            cohort = _Cohort(len(slots), timeout, nursery.cancel_scope)
            for slot in slots:
                nursery.start_soon(self._member, slot, cohort)
        for slot, start in cohort.timed_out:
            self._answer(slot, _timeout_result(slot), start)

    async def _member(self, slot: CallSlot, cohort: _Cohort) -> None:
        """One call of a cohort, its permit already taken: the tool, under the shared deadline."""
        rt, report, scope = self._rt, self._report, cohort.scope
        try:
            cohort.arrived += 1
            # A cancel may have landed before the call: never start a tool after it.
            await trio.lowlevel.checkpoint_if_cancelled()
            start = cohort.started(_begin(slot, report))
            output: object = None
            failure: ToolResult | None = None
            rt.in_flight += 1
            try:
                running, convert = _open(rt, slot, report)
                value = await running
                output = value if convert is None else convert(value)
            except BaseException as exc:
                if _propagates(exc):
                    if scope.cancel_called:
                        cohort.timed_out.append((slot, start))
                    raise
                failure = _failed(slot, exc)
            finally:
                rt.in_flight -= 1
            if scope.cancel_called:  # the tool outlived the deadline
                failure = _timeout_result(slot)
            _settle(slot, report, output, failure, start)
        finally:
            self._limiter.release_on_behalf_of(slot)

    async def _work(self, hired: bool = False) -> None:
        """One worker: take a permit, then a call, run it; until no call is left."""
        if hired:
            self._coming -= 1
        slots, limiter = self._slots, self._limiter
        me = trio.lowlevel.current_task()  # the permit's borrower
        held = keep = False  # our permit; and whether nobody can have queued for it since
        try:
            while await self._more(not hired):
                with _NO_DEADLINES if self._inert else trio.CancelScope() as scope:
                    try:
                        while self._next < len(slots):
                            if not held:
                                keep, held = await _take_permit(limiter, me), True
                                continue  # the other workers may have taken every call meanwhile
                            slot = slots[self._next]
                            self._next += 1
                            # A cancel may have landed before this call: never start a tool
                            # after it.
                            await trio.lowlevel.checkpoint_if_cancelled()
                            blocked = await self._take(slot, scope, me)
                            held = _still_held(limiter, me, blocked, keep)
                            if blocked and _spent(scope, self._next < len(slots)):
                                break  # open a fresh scope
                    finally:
                        # Only the worker's scope was cancelled if it absorbs the
                        # cancellation: then the call timed out. If an enclosing scope
                        # was cancelled in the same instant, the cancellation goes on
                        # and the call is answered as cancelled, as with a per-call scope.
                        timed_out = self._timed_out.pop(scope, None)
                if timed_out is not None:
                    self._answer(timed_out[0], _timeout_result(timed_out[0]), timed_out[1])
                held = held and _give_back(limiter, me)  # hold no permit while idle
        finally:
            if held and me in limiter.statistics().borrowers:  # (not if an aside call's was)
                limiter.release_on_behalf_of(me)

    async def _more(self, foreman: bool) -> bool:
        """Whether calls are left to take; the foreman of an open run waits for them."""
        while self._next >= len(self._slots):
            if not foreman:
                self._hired -= 1  # this worker ends: another may be hired for a later call
                return False
            if self._closed:
                return False
            self._arrived = trio.Event()
            await self._arrived.wait()
        return True

    def offer(self) -> None:
        """A call was appended to an open run: wake the foreman or hire for it."""
        if not self._arrived.is_set():
            self._arrived.set()
        else:
            self._hire()

    def close(self) -> None:
        """No more calls will join this run."""
        self._closed = True
        self._arrived.set()

    def _take(
        self, slot: CallSlot, scope: trio.CancelScope, worker: object
    ) -> Awaitable[bool | None]:
        """Run a call: here, or through ``run_call`` if it waits for a human or a
        tool cap; ``None`` then, the worker's permit having been given back first
        (``run_call`` takes its own, in the fixed order, once approved)."""
        if self._aside is not None and self._aside(slot):
            self._limiter.release_on_behalf_of(worker)
            self._hire()
            return _aside(run_call(self._rt, slot, self._report))
        return self._call(slot, scope)

    @types.coroutine
    def _call(self, slot: CallSlot, scope: trio.CancelScope) -> Generator[Any, Any, bool]:
        """Run one admitted call in this task to its result; whether its tool blocked.

        The tool's first step runs here. If it finishes in it, it never
        reached a checkpoint. Otherwise the call gets its deadline on
        ``scope``, the crew hires, and the trap the tool yielded goes on to
        trio unchanged, every later step relayed as ``yield from`` would.
        A deadline that cancels the tool propagates to ``scope``; the worker
        answers the call (its deadline is ``scope.deadline``).
        """
        rt, report = self._rt, self._report
        start = _begin(slot, report)
        blocked = closing = False
        output: object = None
        failure: ToolResult | None = None
        rt.in_flight += 1
        try:
            running, convert = _open(rt, slot, report)
            sent: object = None
            thrown: BaseException | None = None
            while True:
                try:
                    trap = running.send(sent) if thrown is None else running.throw(thrown)
                except StopIteration as done:
                    output = done.value if convert is None else convert(done.value)
                    break
                if not blocked:  # the first checkpoint: now the deadline matters
                    blocked = True
                    scope.deadline = start + _timeout(slot)
                    self._hire()
                try:
                    sent, thrown = (yield trap), None
                except GeneratorExit:  # this worker's coroutine is being closed
                    closing = True
                    running.close()
                    raise
                except BaseException as exc:
                    sent, thrown = None, exc
        except BaseException as exc:
            if closing or self._unwinds(exc, slot, scope, blocked, start):
                raise
            failure = _failed(slot, exc)
        finally:
            rt.in_flight -= 1
        if blocked and scope.cancel_called:  # the tool outlived its deadline
            failure = _timeout_result(slot)
        _settle(slot, report, output, failure, start)
        return blocked

    def _unwinds(
        self,
        exc: BaseException,
        slot: CallSlot,
        scope: trio.CancelScope,
        blocked: bool,
        start: float,
    ) -> bool:
        """Whether ``exc`` out of a tool is ours to pass on, not its failure (``_propagates``).

        A cancellation that our deadline caused is noted here, and the call
        answered as timed out once the worker's scope has absorbed it
        (``_work``); an enclosing scope cancelled in the same instant wins.
        """
        if not _propagates(exc):
            return False
        if blocked and scope.cancel_called:
            self._timed_out[scope] = (slot, start)
        return True

    def _answer(self, slot: CallSlot, failure: ToolResult, start: float) -> None:
        """Answer a call whose deadline cancelled its tool."""
        _settle(slot, self._report, None, failure, start)


async def run_solo(
    rt: Runtime, slot: CallSlot, report: Reporter, scope: trio.CancelScope, host: Callable[[], bool]
) -> None:
    """Run a batch's only call to its result, under the batch's own cancel scope.

    A batch of one call that waits in its class pool alone needs no crew:
    its task takes the permit and runs the tool itself, and the batch's
    scope (``Batch.cancel`` cancels it) doubles as the call's deadline, as
    nothing else of the batch runs under it. ``host()`` says whether the
    host cancelled the batch; if not, a cancellation the scope absorbed
    after the tool started was the deadline's, and the call timed out. A
    cancel by the host (in the same instant as the deadline, too) or by an
    enclosing scope leaves the call to be answered ``cancelled``, as in a
    crew.

    A tool that cannot block, with a permit free, runs outside the scope:
    it reaches no checkpoint, so no cancel and no deadline can land while
    it runs, and entering a cancel scope costs more than the call.
    """
    limiter = rt.pools.by_class[slot.routing]
    if _never_suspends(slot) and not scope.cancel_called:
        try:
            limiter.acquire_on_behalf_of_nowait(slot)
        except trio.WouldBlock:
            pass
        else:
            await _run_unblocking(rt, slot, report, limiter)
            return
    start: float | None = None
    with scope:
        try:
            limiter.acquire_on_behalf_of_nowait(slot)
        except trio.WouldBlock:
            await limiter.acquire_on_behalf_of(slot)
        try:
            # A cancel may have landed before the call: never start a tool after it.
            await trio.lowlevel.checkpoint_if_cancelled()
            start = _begin(slot, report)
            if not _never_suspends(slot):  # a tool that cannot block needs no deadline
                scope.deadline = start + _timeout(slot)
            output, failure = await _solo_tool(rt, slot, report)
            if scope.cancel_called and not host():  # the tool outlived its deadline
                failure = _timeout_result(slot)
            _settle(slot, report, output, failure, start)
        finally:
            limiter.release_on_behalf_of(slot)
    if start is not None and slot.result is None and not host():  # the deadline fired
        _settle(slot, report, None, _timeout_result(slot), start)


async def run_alone(rt: Runtime, slot: CallSlot, batch_id: str) -> bool:
    """Answer a planned one-call batch in this task, with no batch, where nothing could tell.

    For ``ToolExecutor.execute_call`` when nobody observes the executor (no
    sinks, hooks or steering): a call answered at plan time is done, and a
    queued call whose tool cannot block, that waits in its class pool alone
    and finds a permit free, runs here as ``run_solo`` would run it. Returns
    ``False``, the call untouched, for anything else: a batch runs it. The
    run binding is checked as a batch's would be.
    """
    rt.bind_run()
    try:
        if slot.state is State.DONE:
            return True
        if (
            slot.needs_approval is not None
            or not _never_suspends(slot)
            or slot.call.name in rt.pools.per_tool
        ):
            return False
        limiter = rt.pools.by_class[slot.routing]
        try:
            limiter.acquire_on_behalf_of_nowait(slot)
        except trio.WouldBlock:
            return False
        report = Reporter(rt.agent_path, batch_id, (), (), rt.parent_call)
        await _run_unblocking(rt, slot, report, limiter)
        return True
    finally:
        rt.release_run()


async def _run_unblocking(
    rt: Runtime, slot: CallSlot, report: Reporter, limiter: ClassPool
) -> None:
    """Run a call that cannot block, its permit held, to its result; give the permit back."""
    try:
        # An enclosing cancel may have landed before the call: never start a tool after it.
        await trio.lowlevel.checkpoint_if_cancelled()
        start = _begin(slot, report)
        output, failure = await _solo_tool(rt, slot, report)
        _settle(slot, report, output, failure, start)
    finally:
        limiter.release_on_behalf_of(slot)


async def _solo_tool(
    rt: Runtime, slot: CallSlot, report: Reporter
) -> tuple[object, ToolResult | None]:
    """The started call's tool: its output, or its failure; a cancellation goes on."""
    rt.in_flight += 1
    try:
        running, convert = _open(rt, slot, report)
        value = await running
        return (value if convert is None else convert(value)), None
    except BaseException as exc:
        if _propagates(exc):
            raise
        return None, _failed(slot, exc)
    finally:
        rt.in_flight -= 1


def _settle(
    slot: CallSlot, report: Reporter, output: object, failure: ToolResult | None, start: float
) -> None:
    """Answer a call that started at ``start``, and report it."""
    slot.finish(_conclude(slot, output, failure, trio.current_time() - start))
    if report.observed:
        report.settle(slot)


def _never_suspends(slot: CallSlot) -> bool:
    """Whether the call runs to its end in one step (a tool with no ``await``, here)."""
    entry = slot.entry
    return entry is not None and entry.never_suspends and slot.backend is None


def _open(
    rt: Runtime, slot: CallSlot, report: Reporter
) -> tuple[Coroutine[Any, Any, Any], Callable[[Any], object] | None]:
    """Start the call's tool: its coroutine, and what turns its value into output.

    A plain async function tool is called directly (``bare``), and its
    arguments are handed over (the slot lets go of them); a tool that
    declares it never reads its context gets none built.
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
        return bare(**arguments), tool.output  # type: ignore[attr-defined]
    if getattr(tool, "reads_context", True):
        return tool.execute(arguments, _context(rt, slot, report)), None
    return tool.execute(arguments, None), None  # type: ignore[arg-type]


_HANDED_OVER: dict[str, Any] = {}

# The scope of a worker whose calls cannot block: never entered, as no
# deadline of theirs can fire (``Crew._inert``).
_NO_DEADLINES = contextlib.nullcontext(trio.CancelScope())


def _set_event() -> trio.Event:
    event = trio.Event()
    event.set()
    return event


_ARRIVED = _set_event()  # nobody waits for a call (a set event is never waited on)


def _give_back(limiter: ClassPool, borrower: object) -> bool:
    """Release ``borrower``'s permit; ``False``, for ``held``."""
    limiter.release_on_behalf_of(borrower)
    return False


def _spent(scope: trio.CancelScope, more: bool) -> bool:
    """After a call that blocked: whether its deadline fired (the scope is spent);
    if not, and ``more`` calls are left, the deadline is cleared for the next."""
    if scope.cancel_called:
        return True
    if more:
        scope.deadline = math.inf
    return False


async def _aside(work: Awaitable[None]) -> None:
    await work


def _still_held(limiter: ClassPool, borrower: object, blocked: bool | None, keep: bool) -> bool:
    """After a call: whether its worker still holds its permit.

    It gives it back after a call that blocked, or if others may have queued
    for it since it was taken; a call run aside gave it back before it ran.
    """
    if blocked is None:
        return False
    if blocked or not keep:
        limiter.release_on_behalf_of(borrower)
        return False
    return True


async def _take_permit(limiter: ClassPool, borrower: object) -> bool:
    """Take a permit for ``borrower``; whether it came without waiting."""
    try:
        limiter.acquire_on_behalf_of_nowait(borrower)
    except trio.WouldBlock:
        await limiter.acquire_on_behalf_of(borrower)
        return False
    return True


def _begin(slot: CallSlot, report: Reporter) -> float:
    """Mark an admitted call running (telling the sinks, if any); its start time."""
    slot.advance(State.ADMITTING)
    slot.advance(State.RUNNING)
    if report.sinks:
        report.call_event(CallStarted, slot.call, routing=slot.routing)
    return trio.current_time()


def _failed(slot: CallSlot, exc: BaseException) -> ToolResult:
    """The result for a tool that raised (``ToolError``: its own words)."""
    if isinstance(exc, ToolError):
        return error_result(slot, exc.error_class, exc.message, details=exc.details)
    return _crashed(slot, exc)


def _timeout(slot: CallSlot) -> float:
    """The call's deadline in seconds: its tool's, tightened by its grant."""
    assert slot.entry is not None
    timeout = slot.entry.definition.effective_timeout
    grant = slot.grant
    if grant is not None and grant.timeout is not None and grant.timeout < timeout:
        timeout = grant.timeout
    return timeout


def _timeout_result(slot: CallSlot) -> ToolResult:
    return error_result(slot, ErrorClass.TIMEOUT, say.timed_out(slot.call.name, _timeout(slot)))


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
        emit=report.progress_emitter(call) if report.observed else _drop,
        batch_id=report.batch_id,
    )


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
