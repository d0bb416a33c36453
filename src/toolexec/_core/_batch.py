"""A planned batch and its run: runs in order, steering, host cancel, outcome.

Theory of operation. ``ToolExecutor.prepare`` plans a batch (docs/concepts.md,
"Routing" and "Runs") and hands it here with the executor's ``Runtime``;
the batch never sees
the executor itself. ``Batch.run`` executes the runs one after another
inside the batch's cancel scope: a serial-mutator run (or a run of one call)
is awaited call by call in emitted order; the calls of any other run start
together in a nursery the batch owns. Steering is polled after every run;
when it returns messages the calls not yet started are answered
``skipped``. A streamed batch (``ToolExecutor.open_batch``) is planned call
by call as ``add`` receives them, cut into the same runs by the same
strategy (``ExecutionStrategy.place``), and runs each run as soon as it is
known to be open: every earlier run has finished. The run's ``WorkerPool`` takes
its calls as they arrive, until the next run opens or ``close`` is called.
``Batch.cancel`` cancels the scope: trio unwinds every task, the
scope absorbs its own cancellation, and each call without a result is
answered ``cancelled``. Cancellation from an enclosing scope is not ours to
absorb; it propagates, and structured concurrency still leaves nothing
running.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, TypeAlias

import attrs
import trio

from . import _messages as say
from ._call import never_suspends
from ._drive import AdmissionOrder, may_wait, one_queue, run_call, run_solo
from ._errors import bare_interrupt
from ._events import BatchFinished, BatchPlanned, RunFinished, RunStarted
from ._lifecycle import CallSlot, State, error_result
from ._report import Reporter
from ._resources import KeyedRun, keyed_place
from ._types import ErrorClass, RoutingClass, ToolCall, ToolResult
from ._workers import HostCancelled, WorkerPool

if TYPE_CHECKING:
    from ._call import Runtime
    from ._journaling import BatchJournal
    from ._limits import Pools
    from ._plan import BatchPlan, ExecutionStrategy, RunPlan
    from ._routing import Expected, Planner

__all__ = ["Batch", "BatchOutcome", "Steering", "Stream"]

_log = logging.getLogger("toolexec")

Steering: TypeAlias = Callable[[], Sequence[str] | Awaitable[Sequence[str] | None] | None]


@attrs.frozen
class BatchOutcome:
    """What a batch hands back.

    Attributes:
        results: exactly one per call, in call order.
        plan: the runs the batch was cut into.
        steering_messages: what steering returned, if it fired.
        cancelled: whether the host cancelled the batch.
    """

    results: tuple[ToolResult, ...]
    plan: BatchPlan
    steering_messages: tuple[str, ...] = ()
    cancelled: bool = False


@attrs.define(eq=False)
class Batch:
    """A planned batch: inspect ``plan``, then ``await run()`` once; ``cancel()`` any time.

    Cancelling answers every call without a result ``cancelled`` and leaves
    no task running; ``run`` still returns normally with every result.

    A streamed batch (``ToolExecutor.open_batch``) takes its calls through
    ``add`` and ``close`` instead, before or while it runs; its ``plan`` is
    complete once it is closed (or cancelled) and ``run`` has returned.
    """

    id: str
    _slots: list[CallSlot] = attrs.field(alias="slots", repr=False)
    plan: BatchPlan
    _runtime: Runtime = attrs.field(alias="runtime", repr=False)
    _steering: Steering | None = attrs.field(alias="steering", repr=False)
    _report: Reporter = attrs.field(init=False, repr=False)
    _scope: trio.CancelScope = attrs.field(factory=trio.CancelScope, init=False, repr=False)
    _stream: Stream | None = attrs.field(default=None, alias="stream", repr=False)
    _cancelled: bool = attrs.field(default=False, init=False)
    _started: bool = attrs.field(default=False, init=False)
    _finished: bool = attrs.field(default=False, init=False)
    _token: trio.lowlevel.TrioToken | None = attrs.field(default=None, init=False, repr=False)
    # The batch's journal (docs/durable.md), if the executor has one.
    _journal: BatchJournal | None = attrs.field(default=None, alias="journal", repr=False)

    def __attrs_post_init__(self) -> None:
        rt = self._runtime
        self._report = Reporter(
            rt.agent_path, self.id, rt.sinks, rt.hooks, rt.parent_call, self._journal
        )

    def cancel(self) -> None:
        """Cancel the batch: unfinished calls get ``cancelled`` results.

        Thread-safe: called from another thread while the batch runs, the
        cancel is handed to the batch's trio run and takes effect there.
        """
        token = self._token
        if token is not None and not _in_run(token):
            with contextlib.suppress(trio.RunFinishedError):  # the run is over: so is the batch
                token.run_sync_soon(self.cancel)
            return
        self._cancelled = True
        self._scope.cancel()

    def add(self, call: ToolCall) -> None:
        """Add a call to a streamed batch (``ToolExecutor.open_batch``).

        The call is planned at once and starts as soon as its run is open:
        every call before it is known, and every earlier run has finished.
        Call from the trio thread, before or while the batch runs.

        Raises:
            TypeError: ``call`` is not a ``ToolCall``.
            RuntimeError: the batch was not opened for streaming, or it was
                closed, or it has finished; or this thread runs no trio run,
                or another trio run than the batch's (nothing is added).
        """
        stream = self._stream
        if not isinstance(call, ToolCall):
            raise TypeError(f"Batch.add takes a ToolCall, got {call!r}")
        self._check_thread("add", "batch.add, call")
        if stream is None or stream.closed or self._finished:
            why = "it was planned whole" if stream is None else "it was closed or has finished"
            raise RuntimeError(
                f"batch {self.id} takes no more calls: {why}; open a streamed batch with "
                "ToolExecutor.open_batch() and add calls before close()"
            )
        ahead = stream.expected.pop(call.id, None) if stream.expected else None
        if ahead is None:
            slot, expected = CallSlot(len(self._slots), call), None
        else:  # its slot was made at ``expect``, off the call's path to its tool
            expected, slot = ahead
            slot.index, slot.call = len(self._slots), call
        self._slots.append(slot)
        stream.planner.plan_call(slot, expected)
        if slot.state is State.DONE:  # answered at once; it splits no run
            if self._started:
                self._report.settle(slot)
            return
        stream.place(slot)

    def expect(self, call: ToolCall) -> None:
        """Say that a call being streamed may be complete as it stands: read ahead.

        A feed calls this when a call's JSON text looks complete, before the
        provider's event that ends the call. The batch looks its tool up and
        parses and validates the arguments now, so that ``add`` of the same
        call (same id, name and text) only asks the hooks, the policy and the
        rest. Nothing is added and nothing starts; no hook or policy is asked
        until ``add``. A call added with other text is read afresh, so
        results never depend on it. Does nothing for a batch that takes no
        more calls.

        Raises:
            TypeError: ``call`` is not a ``ToolCall``.
            RuntimeError: this thread runs no trio run, or another trio run
                than the batch's (as for ``add``).
        """
        if not isinstance(call, ToolCall):
            raise TypeError(f"Batch.expect takes a ToolCall, got {call!r}")
        self._check_thread("expect", "batch.expect, call")
        stream = self._stream
        if stream is not None and not stream.closed and not self._finished:
            expected = stream.planner.expect(call)
            if expected is not None:
                stream.expected[call.id] = (expected, CallSlot(0, call))
            else:
                stream.expected.pop(call.id, None)

    def close(self) -> None:
        """End a streamed batch: no more calls. ``run`` returns once every call has its result.

        Closing twice, or closing a batch planned whole, does nothing.

        Raises:
            RuntimeError: this thread runs no trio run, or another trio run
                than the batch's (the batch stays open).
        """
        if self._stream is not None:
            self._check_thread("close", "batch.close")
            self._stream.close()

    def _check_thread(self, method: str, arguments: str) -> None:
        """Refuse ``add`` or ``close`` from outside the batch's trio run, before any change."""
        try:
            here = trio.lowlevel.current_trio_token()
        except RuntimeError:
            raise RuntimeError(
                f"Batch.{method} was called outside the trio run (batch {self.id}); from "
                f"another thread, use trio.from_thread.run_sync({arguments})"
            ) from None
        token = self._token
        if token is not None and here is not token:
            raise RuntimeError(
                f"Batch.{method} was called from another trio run than the batch's (batch "
                f"{self.id}); call it in the batch's run, or hand it over from a thread "
                f"that runs no trio run: trio.from_thread.run_sync({arguments}, "
                "trio_token=...) with the token of the batch's run "
                "(trio.lowlevel.current_trio_token() there)"
            )

    @property
    def calls(self) -> list[ToolCall]:
        """The calls of the batch, in call order."""
        return [s.call for s in self._slots]

    async def run(self, *, steering: Steering | None = None) -> BatchOutcome:
        """Execute the plan; return one result per call, in call order.

        Args:
            steering: overrides the executor's steering for this batch.

        Raises:
            RuntimeError: the batch was already run, or its executor is
                running batches in another trio run (use one executor per
                run, or ``toolexec.aio``).
        """
        if self._started:
            raise RuntimeError(f"batch {self.id} was already run; prepare a new one")
        self._runtime.bind_run()
        self._started = True
        self._token = trio.lowlevel.current_trio_token()
        steer = steering if steering is not None else self._steering
        cancellers = self._runtime.cancellers
        cancellers.add(self.cancel)
        messages: tuple[str, ...] = ()
        try:
            if self._stream is not None:
                messages = await self._run_stream(self._stream, steer)
            else:
                messages = await self._run_planned(steer)
        except BaseException as exc:
            # An enclosing scope was cancelled (or KeyboardInterrupt): every task
            # has already ended. Record the unfinished calls as cancelled for the
            # sinks (hooks, audit), then let the exception go on; an interrupt
            # goes on bare, as the host's ``except KeyboardInterrupt`` expects.
            self._cancelled = True
            self._finish(messages)
            interrupt = bare_interrupt(exc)
            if interrupt is not None and interrupt is not exc:
                raise interrupt from None
            raise
        finally:
            cancellers.discard(self.cancel)
            self._runtime.release_run()
        outcome = self._finish(messages)
        if self._journal is not None:  # every result durable before the host has it
            await self._journal.flush()
        return outcome

    async def _run_planned(self, steer: Steering | None) -> tuple[str, ...]:
        """Run a planned batch's runs in order; what steering returned, if it fired."""
        messages: tuple[str, ...] = ()
        self._report.emit(BatchPlanned, plan=self.plan)
        for i in self.plan.short_circuited:
            self._report.settle(self._slots[i])
        alone = self._alone() if steer is None else None
        if alone is not None and choose_driver(self._runtime.pools, *alone, alone=True) == INLINE:
            await self._run_solo(*alone)
            return ()
        if steer is None and not self._cancelled and self._inert():
            await self._run_inert()
            return ()
        with self._scope:
            for run in self.plan.runs:
                if await self._run(run) and run is not self.plan.runs[-1]:
                    # The run blocked, so other tasks ran meanwhile: let any
                    # of them woken in the same instant (a cancel, say) act
                    # before the next run starts, whatever trio's wake order.
                    await trio.lowlevel.checkpoint()
                if steer is not None and (messages := await _poll(steer)):
                    break
        return messages

    async def _run_stream(self, stream: Stream, steer: Steering | None) -> tuple[str, ...]:
        """Run a streamed batch's runs as they open; what steering returned, if it fired."""
        rt, report = self._runtime, self._report
        for slot in self._slots:
            if slot.state is State.DONE:
                report.settle(slot)
        messages: tuple[str, ...] = ()
        with self._scope:
            k = 0
            while await stream.opened(k):
                routing, slots = stream.runs[k][0], stream.slots[k]
                ids = tuple(s.call.id for s in slots)
                report.emit(RunStarted, index=k, routing=routing, call_ids=ids)
                workers: WorkerPool | KeyedRun
                if stream.keyed[k]:  # resource-keyed conflicts: _resources
                    workers = KeyedRun(rt, slots, report, closed=False)
                else:
                    workers = WorkerPool(rt, slots, report, routing=routing, aside=self._aside)
                stream.workers = workers
                if stream.closed or k + 1 < len(stream.runs):
                    workers.close()
                await workers.run()
                stream.workers = None
                report.emit(RunFinished, index=k)
                k += 1
                if workers.blocked and (k < len(stream.runs) or not stream.closed):
                    await trio.lowlevel.checkpoint()  # as between planned runs
                if steer is not None and (messages := await _poll(steer)):
                    break
            while not stream.closed:  # steered: the calls still to come are skipped too
                await stream.opened(len(stream.runs))
        self.plan = stream.make_plan(self._slots, stream.cut())
        report.emit(BatchPlanned, plan=self.plan)
        return messages

    def _aside(self, slot: CallSlot) -> bool:
        """Whether a worker hands a call to ``run_call`` (a human, or a tool cap)."""
        return slot.needs_approval is not None or slot.call.name in self._runtime.pools.per_tool

    def _alone(self) -> tuple[RunPlan, list[CallSlot]] | None:
        """The batch's run and call, if it has one call in one run."""
        runs = self.plan.runs
        if len(runs) != 1 or len(runs[0].call_indices) != 1:
            return None
        return runs[0], [self._slots[runs[0].call_indices[0]]]

    async def _run_solo(self, run: RunPlan, slots: list[CallSlot]) -> None:
        """Run the batch's only call in this task (``run_solo``), between its run's events."""
        report, slot = self._report, slots[0]
        report.emit(RunStarted, index=run.index, routing=run.routing, call_ids=run.call_ids)
        await run_solo(self._runtime, slot, report, self._scope, self._host_cancelled)
        report.emit(RunFinished, index=run.index)

    def _host_cancelled(self) -> bool:
        return self._cancelled

    def _inert(self) -> bool:
        """Whether no call of any run can block: each waits in its class pool alone
        (a worker pool drives it) and its tool has no ``await``."""
        runs = self.plan.runs
        if any(run.keyed for run in runs):
            return False
        slots = [self._slots[i] for run in runs for i in run.call_indices]
        return one_queue(self._runtime.pools, slots) and all(map(never_suspends, slots))

    async def _run_inert(self) -> None:
        """Run the runs of a batch whose calls cannot block, outside the batch's scope.

        No call reaches a checkpoint, so no other task runs until the batch
        ends: only a tool or a sink of this batch, calling ``cancel`` as it
        runs, can cancel it, and entering a cancel scope costs more than a
        call. The workers look for that cancel before each call
        (``stop``) and end the batch as the scope would have: the call in
        hand and every later one unstarted, the run left unfinished.
        """
        rt, report = self._runtime, self._report
        try:
            for run in self.plan.runs:
                report.emit(RunStarted, index=run.index, routing=run.routing, call_ids=run.call_ids)
                slots = [self._slots[i] for i in run.call_indices]
                await WorkerPool(rt, slots, report, stop=self._host_cancelled).run()
                report.emit(RunFinished, index=run.index)
        except HostCancelled:
            pass

    async def _run(self, run: RunPlan) -> bool:
        """Run one run to its end; whether any of its calls blocked."""
        rt, report = self._runtime, self._report
        report.emit(RunStarted, index=run.index, routing=run.routing, call_ids=run.call_ids)
        slots = [self._slots[i] for i in run.call_indices]
        blocked = True
        driver = choose_driver(rt.pools, run, slots)
        if driver == KEYED:  # resource-keyed conflicts: _resources
            await KeyedRun(rt, slots, report).run()
        elif driver in (WORKERS, WORKERS_AND_TASKS):
            aside = self._aside if driver == WORKERS_AND_TASKS else None
            workers = WorkerPool(rt, slots, report, aside=aside)
            await workers.run()
            blocked = workers.blocked
        elif driver == IN_ORDER:
            for slot in slots:
                await run_call(rt, slot, report)
        else:
            await self._run_together(slots)
        if report.journal is not None:  # the run's records, in one write
            await report.journal.flush()
        report.emit(RunFinished, index=run.index)
        return blocked

    async def _run_together(self, slots: list[CallSlot]) -> None:
        """Start a run's calls together, a task each, admitted in emitted order where they wait."""
        rt, report = self._runtime, self._report
        order = AdmissionOrder(len(slots)) if may_wait(rt.pools, slots) else None
        async with trio.open_nursery() as nursery:
            for i, slot in enumerate(slots):
                place = None if order is None else order.place(i)
                nursery.start_soon(run_call, rt, slot, report, place, True, name=_RUN_CALL_NAME)

    def _finish(self, messages: tuple[str, ...]) -> BatchOutcome:
        self._finished = True
        if self._stream is not None and self._cancelled:
            self.plan = self._stream.make_plan(self._slots, self._stream.cut())
        for slot in self._slots:
            if slot.state is not State.DONE:
                if self._cancelled or slot.started:
                    slot.finish(error_result(slot, ErrorClass.CANCELLED, say.CANCELLED))
                else:
                    slot.finish(error_result(slot, ErrorClass.SKIPPED, say.SKIPPED))
                self._report.settle(slot)
        results = tuple(s.result for s in self._slots if s.result is not None)
        self._report.emit(BatchFinished, steering_messages=messages, cancelled=self._cancelled)
        return BatchOutcome(results, self.plan, messages, self._cancelled)


@attrs.define(eq=False)
class Stream:
    """The planning half of a streamed batch: its runs as they open, and the live one.

    ``planner`` plans a call (the executor's), ``strategy`` places it in a
    run (with ``resource_conflicts``, as ``_resources.keyed_place`` does) and
    ``make_plan`` turns the calls and their runs into the batch's plan once
    they are all known.
    """

    planner: Planner
    strategy: ExecutionStrategy
    make_plan: Callable[
        [Sequence[CallSlot], Sequence[tuple[RoutingClass, list[int], bool]]], BatchPlan
    ]
    resource_conflicts: bool = False
    runs: list[tuple[RoutingClass, list[int]]] = attrs.field(factory=list)
    keyed: list[bool] = attrs.field(factory=list)  # whether each run is keyed
    slots: list[list[CallSlot]] = attrs.field(factory=list)  # each run's calls
    # What runs the last run's calls, while it runs.
    workers: WorkerPool | KeyedRun | None = None
    closed: bool = False
    # Calls read ahead (``Batch.expect``), by call id, until added: what was read,
    # and a slot made for the call.
    expected: dict[str, tuple[Expected, CallSlot]] = attrs.field(factory=dict)
    _changed: trio.Event | None = None

    def place(self, slot: CallSlot) -> None:
        """Put a planned call in its run: the live one, or a new one (closing the live one)."""
        if self.resource_conflicts:
            opened = keyed_place(self.strategy, self.runs, self.keyed, slot)
        elif opened := self.strategy.place(self.runs, slot.index, slot.routing):
            self.keyed.append(False)
        if opened:
            self.slots.append([slot])
            if self.workers is not None:
                self.workers.close()
            self._wake()
        else:
            self.slots[-1].append(slot)
            if self.workers is not None:
                self.workers.offer()

    def cut(self) -> list[tuple[RoutingClass, list[int], bool]]:
        """The runs so far, as the planner's cut: ``(routing, call indices, keyed)``."""
        return [
            (route, indices, k) for (route, indices), k in zip(self.runs, self.keyed, strict=True)
        ]

    def close(self) -> None:
        """No more calls."""
        if not self.closed:
            self.closed = True
            self.expected.clear()
            if self.workers is not None:
                self.workers.close()
            self._wake()

    async def opened(self, k: int) -> bool:
        """Wait until run ``k`` opens (``True``) or the batch closes without it."""
        while k >= len(self.runs) and not self.closed:
            self._changed = trio.Event()
            await self._changed.wait()
        return k < len(self.runs)

    def _wake(self) -> None:
        if self._changed is not None:
            self._changed.set()


# Who drives a run's calls through their lifecycle (docs/concepts.md, "Admission").
INLINE = "inline"  # the batch's own task: its only call (``_drive.run_solo``)
WORKERS = "workers"  # a worker pool (``_workers.WorkerPool``)
# A worker pool that hands each call waiting for a human or its tool's cap to
# a task of its own (``_drive.run_call``): a streamed run's driver.
WORKERS_AND_TASKS = "workers and tasks"
TASKS = "tasks"  # a task per call, admitted in emitted order (``_drive.run_call``)
IN_ORDER = "in order"  # one call after another in the batch's task (``_drive.run_call``)
KEYED = "keyed"  # a task per call, after the calls it conflicts with (``_resources``)


def choose_driver(
    pools: Pools, run: RunPlan, slots: Sequence[CallSlot], *, alone: bool = False
) -> str:
    """Who drives a planned run's calls: one of ``INLINE``, ``WORKERS``, ``TASKS``,
    ``IN_ORDER``, ``KEYED`` (a streamed run's is ``WORKERS_AND_TASKS``).
    ``alone``: the run is a batch's only call.

    Every driver takes each call through the same lifecycle (``_call``); the
    choice changes the cost, never the results, events or hook calls (the
    stress suite runs every driver on the same batches). A serial run is
    never driven by a task per call: its calls would ask their humans at
    once, and the answers could admit them out of emitted order.
    """
    if run.keyed:
        return KEYED
    if one_queue(pools, slots):
        return INLINE if alone else WORKERS
    if run.routing is RoutingClass.SERIAL_MUT or len(slots) == 1:
        return IN_ORDER
    return TASKS


def _in_run(token: trio.lowlevel.TrioToken) -> bool:
    """Whether this thread is running the trio run ``token`` belongs to."""
    try:
        return trio.lowlevel.current_trio_token() is token
    except RuntimeError:  # no trio run on this thread
        return False


async def _poll(steering: Steering) -> tuple[str, ...]:
    try:
        answer = steering()
        if inspect.isawaitable(answer):
            answer = await answer
    except Exception:
        _log.exception("steering callback raised; treating it as no message")
        return ()
    return steering_messages(answer)


def steering_messages(answer: object) -> tuple[str, ...]:
    """What a steering answer says: no message, one, or several.

    ``None`` and empty sequences are no message; a string is one message; a
    list or tuple of strings is those messages. Anything else is a host bug:
    it is logged, and the batch stops as if steered (each item, or the value,
    shown as text), since skipping the calls not yet started is the safe
    reading of an answer that is not empty.
    """
    if not answer:
        return ()
    if isinstance(answer, str):
        return (answer,)
    if isinstance(answer, list | tuple) and all(isinstance(m, str) for m in answer):
        return tuple(answer)
    _log.error("steering returned %r, not a sequence of strings; stopping the batch", answer)
    if isinstance(answer, list | tuple):
        return tuple(m if isinstance(m, str) else repr(m) for m in answer)
    return (repr(answer),)


# The name trio would give each ``run_call`` task, made once (trio makes a new
# string per task from the function's module and qualified name otherwise).
_RUN_CALL_NAME = f"{run_call.__module__}.{run_call.__qualname__}"
