"""A planned batch and its run: runs in order, steering, host cancel, outcome.

Theory of operation. ``ToolExecutor.prepare`` plans a batch (docs/concepts.md,
"Routing" and "Runs") and hands it here with the executor's ``Runtime``;
the batch never sees
the executor itself. ``Batch.run`` executes the runs one after another
inside the batch's cancel scope: a serial-mutator run (or a run of one call)
is awaited call by call in emitted order; the calls of any other run start
together in a nursery the batch owns. Steering is polled after every run;
when it returns messages the calls not yet started are answered
``skipped``. ``Batch.cancel`` cancels the scope: trio unwinds every task, the
scope absorbs its own cancellation, and each call without a result is
answered ``cancelled``. Cancellation from an enclosing scope is not ours to
absorb; it propagates, and structured concurrency still leaves nothing
running.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, TypeAlias

import attrs
import trio

from . import _messages as say
from ._callpath import Turns, admit_in_order, may_wait, one_queue, run_call
from ._errors import bare_interrupt
from ._events import BatchFinished, BatchPlanned, RunFinished, RunStarted
from ._lifecycle import CallSlot, State, error_result
from ._report import Reporter
from ._resources import run_keyed
from ._types import ErrorClass, RoutingClass, ToolCall, ToolResult

if TYPE_CHECKING:
    from ._callpath import Runtime
    from ._plan import BatchPlan, RunPlan

__all__ = ["Batch", "BatchOutcome", "Steering"]

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
    """

    id: str
    _slots: list[CallSlot] = attrs.field(alias="slots", repr=False)
    plan: BatchPlan
    _runtime: Runtime = attrs.field(alias="runtime", repr=False)
    _steering: Steering | None = attrs.field(alias="steering", repr=False)
    _report: Reporter = attrs.field(init=False, repr=False)
    _scope: trio.CancelScope = attrs.field(factory=trio.CancelScope, init=False, repr=False)
    _cancelled: bool = attrs.field(default=False, init=False)
    _started: bool = attrs.field(default=False, init=False)

    def __attrs_post_init__(self) -> None:
        rt = self._runtime
        self._report = Reporter(rt.agent_path, self.id, rt.sinks, rt.hooks, rt.parent_call)

    def cancel(self) -> None:
        """Cancel the batch: unfinished calls get ``cancelled`` results."""
        self._cancelled = True
        self._scope.cancel()

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
        steer = steering if steering is not None else self._steering
        cancellers = self._runtime.cancellers
        cancellers.add(self.cancel)
        messages: tuple[str, ...] = ()
        try:
            self._report.emit(BatchPlanned, plan=self.plan)
            for i in self.plan.short_circuited:
                self._report.settle(self._slots[i])
            with self._scope:
                for run in self.plan.runs:
                    await self._run(run)
                    if steer is not None and (messages := await _poll(steer)):
                        break
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
        return self._finish(messages)

    async def _run(self, run: RunPlan) -> None:
        rt, report = self._runtime, self._report
        report.emit(RunStarted, index=run.index, routing=run.routing, call_ids=run.call_ids)
        slots = [self._slots[i] for i in run.call_indices]
        if run.keyed:  # resource-keyed conflicts: _resources
            await run_keyed(rt, slots, report)
        elif run.routing is RoutingClass.SERIAL_MUT or len(slots) == 1:
            for slot in slots:
                await run_call(rt, slot, report)
        else:
            await self._run_together(slots)
        report.emit(RunFinished, index=run.index)

    async def _run_together(self, slots: list[CallSlot]) -> None:
        """Start a run's calls together, admitted in emitted order where they wait."""
        rt, report = self._runtime, self._report
        ordered = may_wait(rt.pools, slots)
        async with trio.open_nursery() as nursery:
            if ordered and one_queue(rt.pools, slots):
                await admit_in_order(rt, slots, report, nursery)
                return
            turns = Turns(len(slots)) if ordered else None
            for i, slot in enumerate(slots):
                turn = None if turns is None else turns.turn(i)
                nursery.start_soon(run_call, rt, slot, report, turn)

    def _finish(self, messages: tuple[str, ...]) -> BatchOutcome:
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
