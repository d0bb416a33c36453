"""A batch timeline as Chrome trace-event JSON (opens in Perfetto and chrome://tracing).

Theory of operation. ``TraceRecorder`` is an event sink that only appends;
``chrome_trace()`` turns what it saw into complete (``"ph": "X"``) slices
afterwards, so recording costs a call nothing. Layout, per agent path one
process (``pid``): thread 0 holds a slice for the batch and one per run;
each call gets a thread of its own holding exactly one ``call`` slice (from
the moment its run began, or the plan for a short-circuited call, until its
result), with nested slices for the time it spent ``queued`` (its turn in a
serial run, or before an approval prompt), waiting for ``approval``, in
``wait for permit`` (limiters), and ``execute`` (the tool running). Without
an approval step the wait before ``execute`` is one ``queued / permit``
slice: a turn in a serial run and a permit look the same from the events.
A call answered at plan time (unknown tool, bad arguments, a denial) gets a
zero-length slice when its result is given. Timestamps are microseconds since the first event.
A sub-agent is a process of its own; its batch slice names the call that
started it in ``args`` (``parent_batch_id``, ``parent_call_id``), and the
process name says which call (``agent root/researcher#1 (under call_7)``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from ._events import (
    ApprovalRequested,
    ApprovalResolved,
    BatchFinished,
    BatchPlanned,
    CallCompleted,
    CallFailed,
    CallStarted,
    RunFinished,
    RunStarted,
)

if TYPE_CHECKING:
    from ._events import Event

__all__ = ["TraceRecorder"]


@attrs.define
class _Call:
    name: str
    tool: str
    lane: int
    ready: float | None = None
    asked: float | None = None
    answered: float | None = None
    approved: bool | None = None
    started: float | None = None
    ended: float | None = None
    outcome: str = "ok"


@attrs.define(eq=False)
class TraceRecorder:
    """Record batches as a Chrome trace-event timeline (Perfetto, chrome://tracing).

    An event sink that only appends what it hears, so recording costs a call
    nothing; ``chrome_trace()`` builds the timeline afterwards. Each agent
    path is a process; its batch and runs sit on thread 0 and every call on
    a thread of its own, with slices for the time it was queued, waited for
    approval or a permit, and executed. A sub-agent's batch slice names the
    parent call in its ``args``.

    Example::

        recorder = TraceRecorder()
        executor = ToolExecutor(registry, sinks=[recorder])
        await executor.execute_batch(calls)
        Path("trace.json").write_text(json.dumps(recorder.chrome_trace()))

    Attributes:
        events: every event recorded, in arrival order.
    """

    events: list[Event] = attrs.field(factory=list)

    def emit(self, event: Event) -> None:
        """Record one event."""
        self.events.append(event)

    def chrome_trace(self) -> dict[str, Any]:
        """The recorded batches as ``{"traceEvents": [...]}`` with one slice per call."""
        if not self.events:
            return {"traceEvents": [], "displayTimeUnit": "ms"}
        origin = min(e.time for e in self.events)
        builder = _Builder(origin)
        for event in self.events:
            builder.feed(event)
        return {"traceEvents": builder.finish(), "displayTimeUnit": "ms"}


@attrs.define
class _Builder:
    origin: float
    out: list[dict[str, Any]] = attrs.field(factory=list)
    pids: dict[str, int] = attrs.field(factory=dict)
    calls: dict[tuple[str, str], _Call] = attrs.field(factory=dict)
    open_runs: dict[tuple[str, int], tuple[float, str]] = attrs.field(factory=dict)
    batches: dict[str, float] = attrs.field(factory=dict)
    answered_at_plan: set[tuple[str, str]] = attrs.field(factory=set)

    def us(self, t: float) -> float:
        return round((t - self.origin) * 1e6, 3)

    def pid(self, agent_path: str, parent_call_id: str | None = None) -> int:
        if agent_path not in self.pids:
            self.pids[agent_path] = len(self.pids) + 1
            under = f" (under {parent_call_id})" if parent_call_id is not None else ""
            self.meta(self.pids[agent_path], 0, "process_name", f"agent {agent_path}{under}")
            self.meta(self.pids[agent_path], 0, "thread_name", "batch and runs")
        return self.pids[agent_path]

    def meta(self, pid: int, tid: int, kind: str, name: str) -> None:
        self.out.append({"ph": "M", "pid": pid, "tid": tid, "name": kind, "args": {"name": name}})

    def slice(
        self, pid: int, tid: int, name: str, cat: str, start: float, end: float, **args: Any
    ) -> None:
        self.out.append(
            {
                "ph": "X",
                "name": name,
                "cat": cat,
                "pid": pid,
                "tid": tid,
                "ts": self.us(start),
                "dur": max(round((end - start) * 1e6, 3), 0.0),
                "args": args,
            }
        )

    def call(self, agent_path: str, batch: str, call_id: str, tool: str) -> _Call:
        key = (batch, call_id)
        if key not in self.calls:
            lane = 1 + sum(1 for b, _ in self.calls if b == batch)
            self.calls[key] = _Call(f"{tool} {call_id}", tool, lane)
            self.meta(self.pid(agent_path), lane, "thread_name", f"call {call_id} {tool}")
        return self.calls[key]

    def feed(self, event: Event) -> None:
        pid = self.pid(event.agent_path, event.parent_call_id)
        if isinstance(event, BatchPlanned):
            self.planned(event)
        elif isinstance(event, RunStarted):
            self.run_started(event)
        elif isinstance(event, RunFinished):
            start, routing = self.open_runs.pop((event.batch_id, event.index), (event.time, "?"))
            self.slice(pid, 0, f"run {event.index} {routing}", "run", start, event.time)
        elif isinstance(event, BatchFinished):
            self.batch_finished(event, pid)
        elif isinstance(event, ApprovalRequested | ApprovalResolved | CallStarted):
            self.step(event)
        elif isinstance(event, CallCompleted | CallFailed):
            self.end(event, pid)

    def planned(self, event: BatchPlanned) -> None:
        self.batches[event.batch_id] = event.time
        short = event.plan.short_circuited_ids
        self.answered_at_plan.update((event.batch_id, cid) for cid in short)
        for run in event.plan.runs:
            for cid, tool in zip(run.call_ids, run.tool_names, strict=True):
                self.call(event.agent_path, event.batch_id, cid, tool)

    def batch_finished(self, event: BatchFinished, pid: int) -> None:
        start = self.batches.pop(event.batch_id, event.time)
        parent: dict[str, Any] = {}
        if event.parent_call_id is not None:
            parent = {
                "parent_batch_id": event.parent_batch_id,
                "parent_call_id": event.parent_call_id,
            }
        self.slice(pid, 0, f"batch {event.batch_id}", "batch", start, event.time, **parent)

    def run_started(self, event: RunStarted) -> None:
        self.open_runs[(event.batch_id, event.index)] = (event.time, event.routing.value)
        for cid in event.call_ids:
            found = self.calls.get((event.batch_id, cid))
            if found is not None:
                found.ready = event.time

    def step(self, event: ApprovalRequested | ApprovalResolved | CallStarted) -> None:
        call = self.call(event.agent_path, event.batch_id, event.call_id, event.tool_name)
        if isinstance(event, ApprovalRequested):
            call.asked = event.time
        elif isinstance(event, ApprovalResolved):
            call.answered, call.approved = event.time, event.approved
        else:
            call.started = event.time

    def end(self, event: CallCompleted | CallFailed, pid: int) -> None:
        call = self.call(event.agent_path, event.batch_id, event.call_id, event.tool_name)
        call.ended = event.time
        if isinstance(event, CallFailed):
            call.outcome = event.error_class.value
        begin = call.ready if call.ready is not None else self.batches.get(event.batch_id)
        if begin is None or (event.batch_id, event.call_id) in self.answered_at_plan:
            begin = event.time  # it never waited: its result was given when the batch began
        self.slice(
            pid,
            call.lane,
            call.name,
            "call",
            begin,
            event.time,
            call_id=event.call_id,
            tool=call.tool,
            outcome=call.outcome,
        )
        self.phases(pid, call, begin, event.time)

    def phases(self, pid: int, call: _Call, begin: float, end: float) -> None:
        lane = call.lane
        cursor = begin
        if call.asked is not None:
            if call.asked > cursor:
                self.slice(pid, lane, "queued", "wait", cursor, call.asked)
            answered = call.answered if call.answered is not None else end
            self.slice(
                pid, lane, "approval", "approval", call.asked, answered, approved=call.approved
            )
            cursor = answered
        elif call.started is None:
            return
        if call.started is not None:
            if call.started > cursor:
                name = "wait for permit" if call.asked is not None else "queued / permit"
                self.slice(pid, lane, name, "wait", cursor, call.started)
            self.slice(pid, lane, "execute", "execute", call.started, end)

    def finish(self) -> list[dict[str, Any]]:
        return self.out
