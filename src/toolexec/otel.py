"""OpenTelemetry spans for toolexec's events (extra ``otel``).

``OTelSink`` is an event sink: give it to an executor and every batch becomes
a tree of spans, ``toolexec.batch`` > ``toolexec.run`` > ``execute_tool
{tool}``, named and tagged after the OpenTelemetry GenAI conventions.

Example::

    from toolexec.otel import OTelSink

    executor = ToolExecutor(registry, sinks=[OTelSink()])
    with tracer.start_as_current_span("turn"):
        await executor.execute_batch(calls)   # the batch span sits under "turn"

Theory of operation. Sinks hear events as they happen, on the path of the
call, so each span is started and ended as its events arrive, with explicit
timestamps: an event's trio clock time plus an offset to the epoch, taken
when the sink is idle (no batch open) and a batch begins. Spans therefore
agree with ``event.time`` and ``duration`` exactly, also on trio's
``MockClock``. Where a span sits:

- a batch span's parent is the current OpenTelemetry context of the task that
  runs the batch, read when it starts (``BatchPlanned``), so a batch nests
  under the host's current span (through ``toolexec.aio``, the awaiting
  asyncio task's, whose context variables the batch gets); a sub-agent's
  batch instead sits under the span of the call that started the sub-agent
  (``parent_call_id``);
- a run span's parent is its batch span; a call span's parent is its run span,
  or the batch span for a call answered when the batch was planned;
- a call span starts at the call's first event of its own (an approval
  request, or the start of the tool) and ends with its result; approvals and
  progress are span events on it. A call that never started (denied, skipped,
  cancelled, bad input) gets a span all the same, ending with its result.

One sink may serve several executors at once. Batch ids are unique per
executor only (two root executors both have a ``root:b0``), so an event is
matched to the open batch of its id whose trio task it runs under.

A failed call's span has status ERROR and ``error.type`` set to toolexec's
error class (``timeout``, ``execution_error``, ...).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import attrs
import trio
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from ._core._events import (
    ApprovalRequested,
    ApprovalResolved,
    BatchFinished,
    BatchPlanned,
    CallCompleted,
    CallFailed,
    CallProgress,
    CallStarted,
    RunFinished,
    RunStarted,
)
from ._core._public import fixup_module_metadata as _fixup_module_metadata

if TYPE_CHECKING:
    from collections.abc import Iterator

    from opentelemetry.trace import Span, Tracer

    from ._core._events import Event

__all__ = ["OTelSink"]


@attrs.define(eq=False)
class _Batch:
    span: Span
    task: object  # the trio task running the batch, or None outside trio
    runs: dict[int, Span] = attrs.field(factory=dict)
    run_of: dict[str, int] = attrs.field(factory=dict)
    calls: dict[str, Span] = attrs.field(factory=dict)


def _current_task() -> object:
    try:
        return trio.lowlevel.current_task()
    except RuntimeError:  # events replayed outside a trio run
        return None


def _ancestors(task: object) -> Iterator[object]:
    """``task`` and the tasks whose nurseries it descends from, nearest first."""
    while task is not None:
        yield task
        nursery = getattr(task, "parent_nursery", None)
        task = None if nursery is None else nursery.parent_task


def _tracer(tracer: Tracer | None) -> Tracer:
    return tracer if tracer is not None else trace.get_tracer("toolexec")


def _call_attributes(tool_name: str, call_id: str) -> dict[str, str]:
    return {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool_name,
        "gen_ai.tool.call.id": call_id,
    }


@attrs.define(eq=False)
class OTelSink:
    """Turn events into OpenTelemetry spans: batch > run > ``execute_tool`` call.

    Call spans follow the GenAI semantic conventions: named ``execute_tool
    {tool name}``, with ``gen_ai.operation.name``, ``gen_ai.tool.name`` and
    ``gen_ai.tool.call.id``; a failed call adds ``error.type`` and status
    ERROR. A batch nests under the host's current span when it starts, and a
    sub-agent's batch under the call that started it. Module docstring:
    timing and placement.

    Example::

        executor = ToolExecutor(registry, sinks=[OTelSink()])

    Args:
        tracer: the tracer to make spans with; by default the global tracer
            provider's tracer for ``toolexec``.
    """

    tracer: Tracer = attrs.field(default=None, converter=_tracer)
    _offset: int = attrs.field(default=0, init=False)
    # Open batches by id; two root executors may both have a ``root:b0`` open,
    # so each id maps to its batches, told apart by the trio task running them.
    _batches: dict[str, list[_Batch]] = attrs.field(factory=dict, init=False)

    def emit(self, event: Event) -> None:
        """Start, annotate or end the span the event concerns."""
        if isinstance(event, BatchPlanned):
            self._batch_planned(event)
            return
        batch = self._find(event.batch_id)
        if batch is None:
            return  # the sink was attached after this batch began
        if isinstance(event, RunStarted | RunFinished):
            self._run(event, batch)
        elif isinstance(event, CallCompleted | CallFailed):
            self._call_ended(event, batch)
        elif isinstance(event, CallStarted | CallProgress | ApprovalRequested | ApprovalResolved):
            self._call_step(event, batch)
        elif isinstance(event, BatchFinished):
            self._batch_finished(event, batch)

    def _find(self, batch_id: str) -> _Batch | None:
        """The open batch with this id that the current task belongs to."""
        found = self._batches.get(batch_id)
        if not found:
            return None
        if len(found) == 1:
            return found[0]
        by_task = {id(b.task): b for b in found}
        for task in _ancestors(_current_task()):
            if id(task) in by_task:
                return by_task[id(task)]
        return found[-1]  # emitted from outside the batch's tasks: the latest

    def _ns(self, trio_time: float) -> int:
        return self._offset + round(trio_time * 1e9)

    def _batch_planned(self, event: BatchPlanned) -> None:
        if not self._batches:
            self._offset = time.time_ns() - round(event.time * 1e9)
        parent = otel_context.get_current()
        if event.parent_batch_id is not None and event.parent_call_id is not None:
            above = self._find(event.parent_batch_id)
            call = None if above is None else above.calls.get(event.parent_call_id)
            if call is not None:
                parent = trace.set_span_in_context(call)
        span = self.tracer.start_span(
            "toolexec.batch",
            context=parent,
            start_time=self._ns(event.time),
            attributes={
                "toolexec.agent.path": event.agent_path,
                "toolexec.batch.id": event.batch_id,
            },
        )
        self._batches.setdefault(event.batch_id, []).append(_Batch(span, _current_task()))

    def _run(self, event: RunStarted | RunFinished, batch: _Batch) -> None:
        if isinstance(event, RunFinished):
            span = batch.runs.pop(event.index, None)
            if span is not None:
                span.end(end_time=self._ns(event.time))
            return
        batch.runs[event.index] = self.tracer.start_span(
            "toolexec.run",
            context=trace.set_span_in_context(batch.span),
            start_time=self._ns(event.time),
            attributes={
                "toolexec.run.index": event.index,
                "toolexec.run.routing": event.routing.value,
            },
        )
        batch.run_of.update(dict.fromkeys(event.call_ids, event.index))

    def _call_span(self, event: Event, batch: _Batch, call_id: str, tool_name: str) -> Span:
        span = batch.calls.get(call_id)
        if span is None:
            run = batch.runs.get(batch.run_of.get(call_id, -1))
            span = batch.calls[call_id] = self.tracer.start_span(
                f"execute_tool {tool_name}",
                context=trace.set_span_in_context(run if run is not None else batch.span),
                start_time=self._ns(event.time),
                attributes=_call_attributes(tool_name, call_id),
            )
        return span

    def _call_step(
        self,
        event: CallStarted | CallProgress | ApprovalRequested | ApprovalResolved,
        batch: _Batch,
    ) -> None:
        span = self._call_span(event, batch, event.call_id, event.tool_name)
        at = self._ns(event.time)
        if isinstance(event, ApprovalRequested):
            span.add_event("approval_requested", {"summary": event.summary}, timestamp=at)
        elif isinstance(event, ApprovalResolved):
            answer: dict[str, bool | str] = {"approved": event.approved, "by": event.by}
            span.add_event("approval_resolved", answer, timestamp=at)
        elif isinstance(event, CallProgress):
            span.add_event("progress", {"message": event.message}, timestamp=at)

    def _call_ended(self, event: CallCompleted | CallFailed, batch: _Batch) -> None:
        span = self._call_span(event, batch, event.call_id, event.tool_name)
        del batch.calls[event.call_id]
        if isinstance(event, CallFailed):
            span.set_attribute("error.type", event.error_class.value)
            span.set_status(Status(StatusCode.ERROR, event.message))
        span.end(end_time=self._ns(event.time))

    def _batch_finished(self, event: BatchFinished, batch: _Batch) -> None:
        end = self._ns(event.time)
        for span in batch.runs.values():  # a cancelled batch may leave a run open
            span.end(end_time=end)
        batch.span.set_attribute("toolexec.batch.cancelled", event.cancelled)
        batch.span.end(end_time=end)
        same_id = self._batches[event.batch_id]
        same_id.remove(batch)
        if not same_id:
            del self._batches[event.batch_id]


_fixup_module_metadata(__name__, __all__)
