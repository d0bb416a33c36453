"""Driving calls without a worker pool: inline, or a task per call.

The user-facing story: docs/concepts.md, "Admission".

Theory of operation. Each driver takes a queued call through the steps of
``_call`` and differs from the others only in who runs them and where the
deadline lives:

- *Inline* (``run_solo``, ``run_alone``): the batch's own task runs its only
  call, under the batch's cancel scope, which doubles as the deadline; a
  tool that cannot block runs outside any scope, since no cancel or deadline
  can land while it runs.
- *A task per call* (``run_call``): for a call that waits for a human or for
  its tool's own cap. Approval comes first, then both permits, in the fixed
  order; the deadline is a scope of the call's own. ``AdmissionOrder``
  makes such calls of one run queue for their permits in emitted order.

``_workers.WorkerPool`` is the third driver, for runs whose calls wait in
their class pool alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from ._call import (
    Admission,
    approve,
    begin,
    conclude,
    deadline_of,
    execute,
    never_suspends,
    take_permit,
    timed_out,
)
from ._lifecycle import State
from ._report import Reporter

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from ._call import Runtime
    from ._lifecycle import CallSlot
    from ._limits import ClassPool, Pools
    from ._types import ToolResult

__all__ = ["AdmissionOrder", "may_wait", "one_queue", "run_alone", "run_call", "run_solo"]


def may_wait(pools: Pools, slots: Sequence[CallSlot]) -> bool:
    """Whether some call of a run may have to wait for a permit."""
    if pools.per_tool and any(s.call.name in pools.per_tool for s in slots):
        return True
    return len(slots) > pools.by_class[slots[0].routing].available_tokens


def one_queue(pools: Pools, slots: Sequence[CallSlot]) -> bool:
    """Whether the run's calls wait in one queue only, their class pool: no tool
    of the run has its own cap and no call waits for a human first."""
    per_tool = pools.per_tool
    return all(s.needs_approval is None and s.call.name not in per_tool for s in slots)


# -- a task per call ------------------------------------------------------------


class AdmissionOrder:
    """Admission in emitted order for the calls of one run, each in a task of its own.

    trio starts a run's tasks in a deliberately varied order, so calls that
    must wait for a permit would queue in a different order on every run.
    Here each call first waits until the call before it has queued for its
    permits (or has gone to ask a human), so waiting calls are admitted in
    the order the model emitted them. ``may_wait`` says when a run needs
    this; a run that cannot wait skips the cost.
    """

    __slots__ = ("_queued",)

    def __init__(self, n: int) -> None:
        self._queued = [trio.Event() for _ in range(n)]

    def place(self, i: int) -> Place:
        """The place of the run's ``i``-th call."""
        return Place(self._queued[i - 1] if i else None, self._queued[i])


class Place:
    """One call's place in its run's admission order."""

    __slots__ = ("_mine", "_previous")

    def __init__(self, previous: trio.Event | None, mine: trio.Event) -> None:
        self._previous, self._mine = previous, mine

    async def wait(self) -> None:
        """Wait until the call before this one has queued; then let the next one queue."""
        try:
            if self._previous is not None and not self._previous.is_set():
                await self._previous.wait()
        finally:
            self._mine.set()  # now, or at the latest when cancelled


async def run_call(
    rt: Runtime,
    slot: CallSlot,
    report: Reporter,
    place: Place | None = None,
    own_task: bool = False,
) -> None:
    """Drive one queued call to its result in this task: approve, admit, start,
    execute under a deadline of its own, conclude.

    ``place`` orders its admission within a run (``AdmissionOrder``);
    ``own_task``: this task was started for this call alone (``execute``).
    """
    if place is not None:
        await place.wait()
    if not await approve(rt, slot, report):
        return
    async with Admission(rt.pools, slot):
        # A cancel may have landed while this call waited for its turn (or
        # before the batch ran): never start a tool after it.
        await trio.lowlevel.checkpoint_if_cancelled()
        start = begin(slot, report)
        output: object = None
        failure: ToolResult | None = None
        with trio.CancelScope(deadline=start + deadline_of(slot)) as scope:
            output, failure = await execute(rt, slot, report, own_task=own_task)
        if scope.cancel_called:
            failure = timed_out(slot)
        conclude(slot, report, output, failure, start)


# -- inline ---------------------------------------------------------------------


async def run_solo(
    rt: Runtime, slot: CallSlot, report: Reporter, scope: trio.CancelScope, host: Callable[[], bool]
) -> None:
    """Run a batch's only call to its result, under the batch's own cancel scope.

    A batch of one call that waits in its class pool alone needs no workers:
    its task takes the permit and runs the tool itself, and the batch's
    scope (``Batch.cancel`` cancels it) doubles as the call's deadline, as
    nothing else of the batch runs under it. ``host()`` says whether the
    host cancelled the batch; if not, a cancellation the scope absorbed
    after the tool started was the deadline's, and the call timed out. A
    cancel by the host (in the same instant as the deadline, too) or by an
    enclosing scope leaves the call to be answered ``cancelled``, as with
    workers.

    A tool that cannot block, with a permit free, runs outside the scope:
    it reaches no checkpoint, so no cancel and no deadline can land while
    it runs, and entering a cancel scope costs more than the call.
    """
    limiter = rt.pools.by_class[slot.routing]
    if never_suspends(slot) and not scope.cancel_called:
        try:
            limiter.acquire_on_behalf_of_nowait(slot)
        except trio.WouldBlock:
            pass
        else:
            await _run_unblocking(rt, slot, report, limiter)
            return
    start: float | None = None
    with scope:
        await take_permit(limiter, slot)
        try:
            # A cancel may have landed before the call: never start a tool after it.
            await trio.lowlevel.checkpoint_if_cancelled()
            start = begin(slot, report)
            deadline = start + deadline_of(slot)

            def on_block() -> None:
                scope.deadline = deadline

            output, failure = await execute(rt, slot, report, on_block)
            if scope.cancel_called and not host():  # the tool outlived its deadline
                failure = timed_out(slot)
            conclude(slot, report, output, failure, start)
        finally:
            limiter.release_on_behalf_of(slot)
    if start is not None and slot.result is None and not host():  # the deadline fired
        conclude(slot, report, None, timed_out(slot), start)


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
            or not never_suspends(slot)
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
        start = begin(slot, report)
        output, failure = await execute(rt, slot, report)
        conclude(slot, report, output, failure, start)
    finally:
        limiter.release_on_behalf_of(slot)
