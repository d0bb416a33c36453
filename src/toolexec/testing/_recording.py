"""Run one batch with every tool wrapped, and record what the executor did.

Theory of operation. ``record_batch`` builds an instrumented copy of the
executor (``attrs.evolve``: same limiters, policy, hooks and sinks; each
registry entry's factory wrapped) and runs the batch once. The wrapper
notes, on trio's thread, a tick from one counter when a call's tool begins
and when it returns, so two calls *overlap* exactly when each began before
the other returned; nothing is timed. At every tick the wrapper also keeps
the count of calls in flight per tool and per routing class, and, given a
snapshot hook, compares the world's state with the state at the previous
tick: a change while only read-only calls were running was made by one of
them. After the batch the executor's ``statistics()`` and a trio instrument
show whether any permit, call or task was left behind.

This module does not import hypothesis: ``check_batch`` works without it.
"""

from __future__ import annotations

import inspect
import itertools
from collections import Counter
from typing import TYPE_CHECKING, Any, TypeAlias

import attrs
import trio
import trio.testing

from .._core._registry import ToolRegistry
from .._core._types import RoutingClass
from .._tools._function import FunctionTool

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence

    from .._core._batch import BatchOutcome
    from .._core._executor import ToolExecutor
    from .._core._limits import ExecutorStatistics
    from .._core._tool_protocol import Tool, ToolContext, ToolFactory
    from .._core._types import ToolCall, ToolDefinition, ToolOutput

__all__ = ["Change", "Recording", "Span", "record_batch"]

Snapshot: TypeAlias = "Callable[[], object]"


@attrs.define(eq=False)
class Span:
    """One executed call: when its tool began and returned, in recorder ticks."""

    index: int
    call_id: str
    tool: str
    routing: RoutingClass
    start: int
    end: int | None = None

    def overlaps(self, other: Span) -> bool:
        """Whether each began before the other returned (an unfinished span never ends)."""
        mine = self.end if self.end is not None else float("inf")
        theirs = other.end if other.end is not None else float("inf")
        return self.start < theirs and other.start < mine


@attrs.frozen
class Change:
    """The state changed while only these read-only calls were running."""

    spans: tuple[Span, ...]
    before: object
    after: object


@attrs.define(eq=False)
class Recording:
    """Everything one batch did, as the wrapped tools and the executor saw it."""

    calls: tuple[ToolCall, ...]
    routing: dict[str, RoutingClass] = attrs.field(factory=dict)
    spans: list[Span] = attrs.field(factory=list)
    active: dict[str, Span] = attrs.field(factory=dict)
    by_tool: Counter[str] = attrs.field(factory=Counter)
    by_class: Counter[RoutingClass] = attrs.field(factory=Counter)
    peak_tool: Counter[str] = attrs.field(factory=Counter)
    peak_class: Counter[RoutingClass] = attrs.field(factory=Counter)
    changes: list[Change] = attrs.field(factory=list)
    definitions: dict[str, ToolDefinition] = attrs.field(factory=dict)
    outcome: BatchOutcome | None = None
    statistics: ExecutorStatistics | None = None
    leftover_tasks: int = 0
    snapshot: Snapshot | None = None
    threads: int = 0
    _ticks: Iterator[int] = attrs.field(factory=itertools.count, repr=False)
    _last: object = None
    _wake: trio.Event = attrs.field(factory=trio.Event, repr=False)

    def index_of(self, call_id: str) -> int:
        """The position of a call in the batch (ids are unique)."""
        return next(i for i, call in enumerate(self.calls) if call.id == call_id)

    def enter(self, call_id: str, tool: str) -> Span:
        """Note a call's tool beginning."""
        self.look()
        routing = self.routing[call_id]
        span = Span(self.index_of(call_id), call_id, tool, routing, next(self._ticks))
        self.spans.append(span)
        self.active[call_id] = span
        self.by_tool[tool] += 1
        self.by_class[routing] += 1
        self.peak_tool[tool] = max(self.peak_tool[tool], self.by_tool[tool])
        self.peak_class[routing] = max(self.peak_class[routing], self.by_class[routing])
        return span

    def leave(self, span: Span) -> None:
        """Note a call's tool returning (or raising)."""
        self.look()
        span.end = next(self._ticks)
        del self.active[span.call_id]
        self.by_tool[span.tool] -= 1
        self.by_class[span.routing] -= 1

    def look(self) -> None:
        """Compare the world with the last look; blame the reads running alone."""
        if self.snapshot is None:
            return
        now = self.snapshot()
        running = tuple(self.active.values())
        if (
            now != self._last
            and running
            and all(s.routing is RoutingClass.READ_ONLY for s in running)
        ):
            self.changes.append(Change(running, self._last, now))
        self._last = now

    def start_looking(self) -> None:
        """Take the first snapshot, before the batch."""
        if self.snapshot is not None:
            self._last = self.snapshot()

    async def keep_clock_still(self) -> None:
        """Keep the mock clock from jumping while a sync tool's thread computes."""
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            # Spinning is the point: a task that is never blocked keeps the
            # mock clock from jumping to the next deadline meanwhile.
            while self.threads:
                await trio.lowlevel.checkpoint()

    def thread_started(self) -> None:
        """A sync function tool is about to run in a worker thread."""
        self.threads += 1
        self._wake.set()


@attrs.frozen
class _Recorded:
    """A tool that reports its calls to a recording, then runs the real one."""

    inner: Tool
    recording: Recording
    agent_path: str

    @property
    def definition(self) -> ToolDefinition:
        return self.inner.definition

    async def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        if ctx.agent_path != self.agent_path:  # a sub-agent's call: not this batch's
            return await self.inner.execute(arguments, ctx)
        recording = self.recording
        span = recording.enter(ctx.call_id, self.inner.definition.name)
        threaded = isinstance(self.inner, FunctionTool) and not inspect.iscoroutinefunction(
            self.inner.fn
        )
        if threaded:
            recording.thread_started()
        try:
            return await self.inner.execute(arguments, ctx)
        finally:
            if threaded:
                recording.threads -= 1
            recording.leave(span)


@attrs.frozen
class _RecordedFactory:
    """Makes the real tool, wrapped."""

    factory: ToolFactory
    recording: Recording
    agent_path: str

    def __call__(self) -> _Recorded:
        return _Recorded(self.factory(), self.recording, self.agent_path)


def _wrapped(registry: ToolRegistry, recording: Recording, agent_path: str) -> ToolRegistry:
    wrapped = ToolRegistry()
    for name in registry.names():
        entry = registry.lookup(name)
        assert entry is not None
        factory = entry.factory
        recording.definitions[name] = entry.definition
        wrapped.register(_RecordedFactory(factory, recording, agent_path))
    return wrapped


class _TaskCounter(trio.abc.Instrument):
    """Live trio tasks, to show that a batch leaves none behind."""

    def __init__(self) -> None:
        self.live: set[trio.lowlevel.Task] = set()

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.live.add(task)

    def task_exited(self, task: trio.lowlevel.Task) -> None:
        self.live.discard(task)


def record_batch(
    executor: ToolExecutor, calls: Sequence[ToolCall], snapshot: Snapshot | None = None
) -> Recording:
    """Run ``calls`` once through an instrumented copy of ``executor``.

    The run has its own ``trio.run`` with ``MockClock(autojump_threshold=0)``,
    so tools that sleep cost no wall time.
    """
    ids = [c.id for c in calls]
    if len(set(ids)) != len(ids):
        raise ValueError(f"every call in a checked batch needs its own id; got {ids}")
    recording = Recording(tuple(calls), snapshot=snapshot)
    instrumented = attrs.evolve(
        executor, registry=_wrapped(executor.registry, recording, executor.agent_path)
    )
    counter = _TaskCounter()

    async def main() -> None:
        batch = instrumented.prepare(calls)
        for run in batch.plan.runs:
            recording.routing.update(dict.fromkeys(run.call_ids, run.routing))
        recording.start_looking()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(recording.keep_clock_still)
            before = set(counter.live)
            recording.outcome = await batch.run()
            recording.look()
            recording.leftover_tasks = len(counter.live - before)
            recording.statistics = instrumented.statistics()
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0), instruments=[counter])
    return recording
