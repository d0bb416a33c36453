"""A fixed set of workers that drive a run's calls through their lifecycle.

The user-facing story: docs/concepts.md, "Admission"; docs/performance.md.

Theory of operation. A run of calls that wait in their class pool alone
(no tool cap, no human) is driven by a ``WorkerPool``: at most
``min(N, width)`` workers, each holding one permit of the run's class and
taking the run's calls in emitted order. A worker drives each call through
the steps of ``_call`` (start, execute, conclude); it never copies one. A
call that must wait for a human or its tool's cap is handed to ``_drive.run_call``
(a task of its own) with the worker's permit given back first.
"""

from __future__ import annotations

import contextlib
import math
from typing import TYPE_CHECKING, Any

import trio

from ._call import begin, conclude, deadline_of, execute, never_suspends, take_permit, timed_out
from ._drive import run_call
from ._types import RoutingClass

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from trio.lowlevel import RaiseCancelT

    from ._call import Runtime
    from ._lifecycle import CallSlot
    from ._limits import ClassPool
    from ._report import Reporter
    from ._types import ToolResult

__all__ = ["HostCancelled", "WorkerPool"]


class HostCancelled(Exception):
    """The host cancelled a batch whose calls cannot block, between two of its calls.

    Raised by a ``WorkerPool`` given ``stop`` (``Batch._run_inert``), caught
    by the batch: it stands for the cancellation the batch's scope would
    have raised there.
    """


class _SharedDeadline:
    """Calls started together in one scheduling pass, under one deadline (``WorkerPool._cohort``).

    Every call's first step runs in the same pass, so the deadline is set
    once, by the last to arrive: the latest start plus the shared timeout.
    Until then there is none, and none could have fired: deadlines are
    looked at between passes.
    """

    __slots__ = ("arrived", "latest", "report", "scope", "size", "timed_out", "timeout")

    def __init__(
        self, size: int, timeout: float, scope: trio.CancelScope, report: Reporter
    ) -> None:
        self.size, self.timeout, self.scope, self.report = size, timeout, scope, report
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

    def unwound(self, slot: CallSlot, start: float) -> None:
        """A cancellation left the call's tool: if the deadline's, the call is
        answered once the scope has absorbed it (``WorkerPool._cohort``)."""
        if self.scope.cancel_called:
            self.timed_out.append((slot, start))

    def settle(self, slot: CallSlot, start: float, done: tuple[object, ToolResult | None]) -> None:
        """Conclude a call whose tool ended (``execute``'s ``done``), timed out if
        it outlived the deadline."""
        output, failure = done
        if self.scope.cancel_called:
            failure = timed_out(slot)
        conclude(slot, self.report, output, failure, start)


class WorkerPool:
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
        "_aside",
        "_check",
        "_closed",
        "_coming",
        "_hired",
        "_inert",
        "_limiter",
        "_next",
        "_nursery",
        "_on_block",
        "_report",
        "_rt",
        "_running",
        "_slots",
        "_stop",
        "_timed_out",
        "_waiting",
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
        stop: Callable[[], bool] | None = None,
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
        # ``stop``: the batch already knows its calls cannot block, and runs them
        # outside its scope, asking ``stop`` before each call (``_check``).
        self._inert = stop is not None or (self._closed and all(map(never_suspends, slots)))
        self._stop = stop
        self._check = self._stopped if stop is not None else trio.lowlevel.checkpoint_if_cancelled
        if self._inert:
            self._width = 1
        self._next = 0  # the next call to take
        self._hired = 1  # workers started, the batch's task included
        self._coming = 0  # of them, those that have not run yet
        # Of them, those waiting for a call to arrive in an open run (``_wait_here``).
        self._waiting: list[trio.lowlevel.Task] = []
        self._nursery: trio.Nursery | None = None
        self._on_block = self._blocked_first
        # The call in its first step: [slot, worker scope, start, whether it blocked].
        self._running: list[Any] = []
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
        if not self._closed and left == 0 and not self._waiting and not self._coming:
            left = 1  # a spare, to wait for the next call to arrive (``_wait_here``)
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
        timeout = deadline_of(slots[0])
        if any(deadline_of(slot) != timeout for slot in slots):
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
            cohort = _SharedDeadline(len(slots), timeout, nursery.cancel_scope, self._report)
            for slot in slots:
                nursery.start_soon(self._member, slot, cohort, name=_MEMBER_NAME)
        for slot, start in cohort.timed_out:
            conclude(slot, self._report, None, timed_out(slot), start)

    async def _member(self, slot: CallSlot, cohort: _SharedDeadline) -> None:
        """One call of a cohort, its permit already taken: the tool, under the shared deadline.

        A parked call holds this frame, and trio's frame object for it, both
        sized by its locals and its deepest expression; so they are few here,
        and the rest of the call's work is in ``_execute`` and the cohort's.
        """
        try:
            cohort.arrived += 1
            # A cancel may have landed before the call: never start a tool after it.
            await trio.lowlevel.checkpoint_if_cancelled()
            start = cohort.started(begin(slot, self._report))
            try:
                done = await self._execute(slot)
            except BaseException:
                cohort.unwound(slot, start)
                raise
            cohort.settle(slot, start, done)
        finally:
            self._limiter.release_on_behalf_of(slot)

    def _execute(self, slot: CallSlot) -> Awaitable[tuple[object, ToolResult | None]]:
        """``execute`` for a call that is a task of its own (a call here, not in
        ``_member``, keeps the deepest expression of ``_member`` shallow)."""
        return execute(self._rt, slot, self._report, own_task=True)

    async def _work(self, hired: bool = False) -> None:
        """One worker: take a permit, then a call, run it; until no call is left."""
        if hired:
            self._coming -= 1
        slots, limiter = self._slots, self._limiter
        me = object()  # the permit's borrower (not the task: a tool may run a nested batch)
        held = keep = False  # our permit; and whether nobody can have queued for it since
        try:
            while self._more(not hired):
                with _NO_DEADLINES if self._inert else trio.CancelScope() as scope:
                    try:
                        while self._next < len(slots) or (
                            not held and await self._wait_here(scope, not hired)
                        ):
                            if not held:
                                keep, held = await take_permit(limiter, me), True
                                continue  # the other workers may have taken every call meanwhile
                            slot = slots[self._next]
                            self._next += 1
                            # A cancel may have landed before this call: never start a tool
                            # after it.
                            await self._check()
                            if self._aside is not None and self._aside(slot):
                                held = await self._run_aside(slot, me)
                                continue
                            # The call runs in this worker's own frame (no coroutine of its
                            # own): ``execute`` relays its tool's steps to trio directly.
                            running = self._start(slot, scope)
                            try:
                                done = await execute(self._rt, slot, self._report, self._on_block)
                            except BaseException as exc:
                                self._unwinding(running, exc)
                                raise
                            blocked = self._finish(running, *done)
                            held = _still_held(limiter, me, blocked, keep)
                            if blocked and _spent(scope, self._next < len(slots)):
                                break  # open a fresh scope
                    finally:
                        # Only the worker's scope was cancelled if it absorbs the
                        # cancellation: then the call timed out. If an enclosing scope
                        # was cancelled in the same instant, the cancellation goes on
                        # and the call is answered as cancelled, as with a per-call scope.
                        timed_out_call = self._timed_out.pop(scope, None)
                if timed_out_call is not None:
                    late, start = timed_out_call
                    conclude(late, self._report, None, timed_out(late), start)
                held = held and _give_back(limiter, me)  # hold no permit while idle
        finally:
            if held and me in limiter.statistics().borrowers:  # (not if an aside call's was)
                limiter.release_on_behalf_of(me)

    async def _stopped(self) -> None:
        """Before a call of a batch run outside its scope: raise if it was cancelled."""
        assert self._stop is not None
        if self._stop():
            raise HostCancelled
        await trio.lowlevel.checkpoint_if_cancelled()

    def _more(self, foreman: bool) -> bool:
        """Whether this worker goes on: calls are left, or it is the one to wait for
        the next call of an open run (``_wait_here``); if not, it is counted out."""
        if self._next < len(self._slots) or self._may_wait(foreman):
            return True
        if not foreman:
            self._hired -= 1  # this worker ends: another may be hired for a later call
        return False

    def _may_wait(self, foreman: bool) -> bool:
        """Whether a worker out of calls waits for the next: in an open run, the
        foreman does, and so does one other worker when nobody else does (the
        spare that ``_hire`` starts while every worker's call blocks, so that a
        call streamed in later wakes a waiting worker, ``offer``, instead of
        paying for a task to be started)."""
        return not self._closed and (foreman or not self._waiting)

    async def _wait_here(self, scope: trio.CancelScope, foreman: bool) -> bool:
        """Out of calls, holding no permit: wait for the next one in this worker's
        scope (entering a fresh one would cost the streamed call more than its
        wake-up); ``False`` if this worker is not the one to wait, or its scope
        is spent."""
        if scope.cancel_called or not self._may_wait(foreman):
            return False
        scope.deadline = math.inf  # the last call's deadline no longer matters
        task, waiting = trio.lowlevel.current_task(), self._waiting
        waiting.append(task)

        def abort(_: RaiseCancelT) -> trio.lowlevel.Abort:
            waiting.remove(task)
            return trio.lowlevel.Abort.SUCCEEDED

        # Woken by ``offer`` or ``close`` (no event and parking lot: a streamed
        # call's wake-up is on its path to the tool).
        await trio.lowlevel.wait_task_rescheduled(abort)
        return True

    def offer(self) -> None:
        """A call was appended to an open run: wake a waiting worker, or hire one for it."""
        if self._waiting:
            trio.lowlevel.reschedule(self._waiting.pop(0))
        else:
            self._hire()

    def close(self) -> None:
        """No more calls will join this run."""
        self._closed = True
        waiting, self._waiting = self._waiting, []
        for task in waiting:
            trio.lowlevel.reschedule(task)

    async def _run_aside(self, slot: CallSlot, worker: object) -> bool:
        """Run a call that waits for a human or a tool cap through ``run_call``, the
        worker's permit given back first (``run_call`` takes its own, in the fixed
        order, once approved); ``False``: the worker holds no permit after it."""
        self._limiter.release_on_behalf_of(worker)
        self._hire()
        await run_call(self._rt, slot, self._report)
        return False

    def _start(self, slot: CallSlot, scope: trio.CancelScope) -> list[Any]:
        """Start an admitted call in this worker: ``[slot, scope, start, blocked]``.

        The tool's first step runs in the worker's frame. If it finishes in
        it, it never reached a checkpoint. Otherwise the call gets its
        deadline on ``scope`` and the pool hires (``_on_block``, called by
        ``execute`` before the tool's first trap goes to trio, so no other
        worker has run since ``_running`` was set).
        """
        running: list[Any] = [slot, scope, begin(slot, self._report), False]
        self._running = running
        return running

    def _unwinding(self, running: list[Any], exc: BaseException) -> None:
        """A cancellation left the call's tool: if our deadline caused it, the
        worker answers the call once the scope has absorbed it (``_work``); an
        enclosing scope cancelled in the same instant wins."""
        slot, scope, start, blocked = running
        if blocked and scope.cancel_called and not isinstance(exc, GeneratorExit):
            self._timed_out[scope] = (slot, start)

    def _finish(self, running: list[Any], output: object, failure: ToolResult | None) -> bool:
        """Conclude the call ``_start`` started; whether its tool blocked."""
        slot, scope, start, blocked = running
        if blocked and scope.cancel_called:  # the tool outlived its deadline
            failure = timed_out(slot)
        conclude(slot, self._report, output, failure, start)
        return bool(blocked)

    def _blocked_first(self) -> None:
        """The running call first blocked: its deadline starts to matter; hire."""
        running = self._running
        running[3] = True
        running[1].deadline = running[2] + deadline_of(running[0])
        self._hire()


# The name trio would give each member's task, made once: trio makes one per
# task from the function's module and qualified name otherwise (about 90
# bytes a call while a cohort is parked).
_MEMBER_NAME = f"{__name__}.WorkerPool._member"

# The scope of a worker whose calls cannot block: never entered, as no
# deadline of theirs can fire (``WorkerPool._inert``).
_NO_DEADLINES = contextlib.nullcontext(trio.CancelScope())


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


def _still_held(limiter: ClassPool, borrower: object, blocked: bool, keep: bool) -> bool:
    """After a call: whether its worker still holds its permit.

    It gives it back after a call that blocked, or if others may have queued
    for it since it was taken.
    """
    if blocked or not keep:
        limiter.release_on_behalf_of(borrower)
        return False
    return True
