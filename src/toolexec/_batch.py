"""A planned batch and its run: runs in order, steering, host cancel, outcome.

Theory of operation. ``ToolExecutor.prepare`` plans a batch (DESIGN 3.1,
3.2) and hands it here. ``Batch.run`` executes the runs one after another
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
from typing import TYPE_CHECKING, Any, TypeAlias

import attrs
import trio

from ._events import (
    BatchFinished,
    BatchPlanned,
    CallCompleted,
    CallFailed,
    CallProgress,
    CallUpdate,
    Event,
    InputInvalid,
    RunFinished,
    RunStarted,
    emit_to,
)
from ._lifecycle import CallSlot, State, error_result
from ._types import ErrorClass, RoutingClass, ToolCall, ToolResult

if TYPE_CHECKING:
    from ._executor import ToolExecutor
    from ._plan import BatchPlan, RunPlan

__all__ = ["Batch", "BatchOutcome", "Steering"]

_log = logging.getLogger("toolexec")

Steering: TypeAlias = Callable[[], Sequence[str] | Awaitable[Sequence[str] | None] | None]

SKIPPED_TEXT = "Skipped: the user sent a new message before this call started."
CANCELLED_TEXT = "Cancelled: the host cancelled this call before it finished."


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

    executor: ToolExecutor
    id: str
    _slots: list[CallSlot] = attrs.field(alias="slots", repr=False)
    plan: BatchPlan
    _scope: trio.CancelScope = attrs.field(factory=trio.CancelScope, init=False, repr=False)
    _cancelled: bool = attrs.field(default=False, init=False)
    _started: bool = attrs.field(default=False, init=False)

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
            RuntimeError: the batch was already run.
        """
        if self._started:
            raise RuntimeError(f"batch {self.id} was already run; prepare a new one")
        self._started = True
        executor = self.executor
        steer = steering if steering is not None else executor.steering
        executor._batches.add(self)
        messages: tuple[str, ...] = ()
        try:
            self._emit(BatchPlanned, plan=self.plan)
            for i in self.plan.short_circuited:
                self._settle(self._slots[i])
            with self._scope:
                for run in self.plan.runs:
                    await self._run(run)
                    if steer is not None and (messages := await _poll(steer)):
                        break
        except BaseException:
            # An enclosing scope was cancelled (or KeyboardInterrupt): every task
            # has already ended. Record the unfinished calls as cancelled for the
            # sinks (hooks, audit), then let the exception go on.
            self._cancelled = True
            self._finish(messages)
            raise
        finally:
            executor._batches.discard(self)
        return self._finish(messages)

    async def _run(self, run: RunPlan) -> None:
        executor = self.executor
        self._emit(RunStarted, index=run.index, routing=run.routing, call_ids=run.call_ids)
        slots = [self._slots[i] for i in run.call_indices]
        if run.routing is RoutingClass.SERIAL_MUT or len(slots) == 1:
            for slot in slots:
                await executor._run_call(slot, self)
        else:
            async with trio.open_nursery() as nursery:
                for slot in slots:
                    nursery.start_soon(executor._run_call, slot, self)
        self._emit(RunFinished, index=run.index)

    def _finish(self, messages: tuple[str, ...]) -> BatchOutcome:
        for slot in self._slots:
            if slot.state is not State.DONE:
                if self._cancelled or slot.started:
                    slot.finish(error_result(slot, ErrorClass.CANCELLED, CANCELLED_TEXT))
                else:
                    slot.finish(error_result(slot, ErrorClass.SKIPPED, SKIPPED_TEXT))
                self._settle(slot)
        results = tuple(s.result for s in self._slots if s.result is not None)
        self._emit(BatchFinished, steering_messages=messages, cancelled=self._cancelled)
        return BatchOutcome(results, self.plan, messages, self._cancelled)

    def _emit(self, kind: Callable[..., Event], **fields: Any) -> None:
        executor = self.executor
        if executor.sinks:
            event = kind(
                agent_path=executor.agent_path, batch_id=self.id, time=trio.current_time(), **fields
            )
            emit_to(executor.sinks, event)

    def _settle(self, slot: CallSlot) -> None:
        executor = self.executor
        if executor.hooks and slot.result is not None:
            for hook in executor.hooks:
                try:
                    hook.after_call(slot.call, slot.result, executor.agent_path)
                except Exception:
                    _log.exception("after_call hook %r raised; ignored", hook)
        if executor.sinks:
            self._emit_result(slot)

    def emit_call_event(self, kind: Callable[..., Event], call: ToolCall, **fields: Any) -> None:
        """Send ``kind(...)`` for ``call`` to the sinks, filling the common fields."""
        self._emit(kind, call_id=call.id, tool_name=call.name, **fields)

    def _emit_result(self, slot: CallSlot) -> None:
        result = slot.result
        if not self.executor.sinks or result is None:
            return
        if result.error_class is ErrorClass.INVALID_ARGUMENTS:
            violations = tuple(result.details.get("violations", [result.text]))
            self.emit_call_event(InputInvalid, slot.call, violations=violations)
        if result.error_class is not None:
            self.emit_call_event(
                CallFailed,
                slot.call,
                error_class=result.error_class,
                message=result.text,
                duration=result.duration,
            )
        else:
            self.emit_call_event(CallCompleted, slot.call, duration=result.duration)

    def progress_emitter(self, call: ToolCall) -> Callable[[str, Any], None]:
        """The function a call's ``ToolContext`` reports progress through."""
        executor = self.executor

        def emit(kind: str, payload: Any) -> None:
            if kind == "progress":
                for hook in executor.hooks:
                    try:
                        hook.on_progress(call, str(payload), executor.agent_path)
                    except Exception:
                        _log.exception("on_progress hook %r raised; ignored", hook)
                self.emit_call_event(CallProgress, call, message=str(payload))
            else:
                self.emit_call_event(CallUpdate, call, partial=payload)

        return emit


async def _poll(steering: Steering) -> tuple[str, ...]:
    try:
        answer = steering()
        if inspect.isawaitable(answer):
            answer = await answer
    except Exception:
        _log.exception("steering callback raised; treating it as no message")
        return ()
    return tuple(answer or ())
