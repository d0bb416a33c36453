"""Random arrivals and cancels through the collector the framework adapters share.

Theory of operation. The OpenAI Agents SDK, pydantic-ai and LangChain-tool
adapters hand toolexec one call per asyncio task; ``_collect.Collector``
gathers the calls that arrive in one loop turn into one bridged batch.
Hypothesis draws *waves* of callers: each wave starts a few asyncio tasks
at once, each calling one tool through the collector, after a gap of 0 - 3
loop turns; some callers are cancelled after 0 - 5 loop turns (zero: before
the task first runs). The executor runs in guest or thread mode, and the
collector hands its batches to it through a recorder that notes which calls
each batch holds, and when.

The tools: ``noop`` returns its tag; ``hop`` yields to trio a few times
first; ``write``, a serial mutator, hops and then appends its tag to a log;
``stuck`` waits until its 3 ms tool timeout ends it.

The checks, for every example:

- every call is handed to the executor at most once, and a batch holds its
  calls in the order their tasks were started;
- a caller that was never cancelled gets its own call's result (its id; its
  tag, or ``timeout`` for ``stuck``), and its tool ran;
- a cancelled caller either got its result first or raised
  ``CancelledError``; once its ``CancelledError`` has surfaced, its call is
  never handed over (a call whose caller left before its batch started
  never runs);
- only calls handed over ran, each at most once; a batch's writes reach the
  log in call order;
- no caller hangs (the example has a deadline); afterwards the executor
  holds no permit and has no call in flight, and no asyncio task outlives
  the example.

Real time: asyncio has no mock clock; the stuck tool's timeout is a few
milliseconds.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import TYPE_CHECKING, Literal, cast

import attrs
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

import toolexec.aio
from stress.conftest import stress_profile
from toolexec import ErrorClass, SideEffects, ToolCall, ToolRegistry, ToolResult, function_tool
from toolexec._adapters._collect import Collector

if TYPE_CHECKING:
    from collections.abc import Sequence

    from toolexec import BatchOutcome

Tool = Literal["noop", "hop", "write", "stuck"]
STUCK_TIMEOUT = 0.003  # seconds: the stuck tool's own timeout
DEADLINE = 60.0  # seconds for a whole example: a hang is a failure


@attrs.frozen
class Caller:
    tool: Tool
    hops: int
    cancel_after: int | None  # loop turns after its wave starts; None: never cancelled


@attrs.frozen
class Wave:
    gap: int  # loop turns before the wave starts
    callers: tuple[Caller, ...]


@attrs.frozen
class Workload:
    mode: toolexec.aio.Mode
    waves: tuple[Wave, ...]


callers = st.builds(
    Caller,
    tool=st.sampled_from(("noop", "hop", "write", "stuck")),
    hops=st.integers(0, 3),
    cancel_after=st.none() | st.integers(0, 5),
)
waves = st.builds(
    Wave, gap=st.integers(0, 3), callers=st.lists(callers, min_size=1, max_size=5).map(tuple)
)
workloads = st.builds(
    Workload,
    mode=st.sampled_from(("guest", "thread")),
    waves=st.lists(waves, min_size=1, max_size=4).map(tuple),
)


@attrs.define
class World:
    """What the tools, the recorder and the callers saw."""

    seq: itertools.count[int] = attrs.field(factory=itertools.count)
    ran: list[str] = attrs.field(factory=list)
    log: list[str] = attrs.field(factory=list)
    batches: list[list[str]] = attrs.field(factory=list)
    handed: dict[str, int] = attrs.field(factory=dict)  # call id -> when handed over
    cancelled: dict[str, int] = attrs.field(factory=dict)  # call id -> when it surfaced
    results: dict[str, ToolResult] = attrs.field(factory=dict)


def registry_for(world: World) -> ToolRegistry:
    registry = ToolRegistry()

    @function_tool(side_effects=SideEffects.NONE)
    def noop(tag: str, hops: int) -> str:
        """Return at once."""
        world.ran.append(tag)
        return tag

    @function_tool(side_effects=SideEffects.READ)
    async def hop(tag: str, hops: int) -> str:
        """Yield to trio ``hops`` times."""
        world.ran.append(tag)
        for _ in range(hops):
            await trio.sleep(0)
        return tag

    @function_tool(side_effects=SideEffects.WRITE)
    async def write(tag: str, hops: int) -> str:
        """Hop, then append to the log."""
        world.ran.append(tag)
        for _ in range(hops):
            await trio.sleep(0)
        world.log.append(tag)
        return tag

    @function_tool(side_effects=SideEffects.READ, timeout=STUCK_TIMEOUT)
    async def stuck(tag: str, hops: int) -> str:
        """Wait until the timeout."""
        world.ran.append(tag)
        await trio.sleep_forever()
        return "never"

    for tool in (noop, hop, write, stuck):
        registry.register(tool)
    return registry


@attrs.define
class Recorder:
    """Stands in for the executor: notes each batch's calls, then runs it."""

    executor: toolexec.aio.AsyncioExecutor
    world: World

    async def execute_batch(self, calls: Sequence[ToolCall]) -> BatchOutcome:
        when = next(self.world.seq)
        for call in calls:
            assert call.id not in self.world.handed, f"{call.id} was handed over twice"
            self.world.handed[call.id] = when
        self.world.batches.append([c.id for c in calls])
        return await self.executor.execute_batch(calls)


async def run_workload(workload: Workload) -> None:
    world = World()
    tasks: list[tuple[asyncio.Task[None], Caller, ToolCall]] = []
    cancellers: list[asyncio.Task[None]] = []

    async def call(collector: Collector, c: ToolCall) -> None:
        try:
            world.results[c.id] = await collector.run_call(c)
        except asyncio.CancelledError:
            world.cancelled[c.id] = next(world.seq)
            raise

    async def cancel_later(task: asyncio.Task[None], turns: int) -> None:
        for _ in range(turns):
            await asyncio.sleep(0)
        task.cancel()

    async with toolexec.aio.open_executor(registry_for(world), mode=workload.mode) as ex:
        collector = Collector(cast("toolexec.aio.AsyncioExecutor", Recorder(ex, world)))
        async with asyncio.timeout(DEADLINE):
            n = 0
            for wave in workload.waves:
                for _ in range(wave.gap):
                    await asyncio.sleep(0)
                for caller in wave.callers:
                    c = ToolCall(f"c{n}", caller.tool, {"tag": f"c{n}", "hops": caller.hops})
                    n += 1
                    task = asyncio.create_task(call(collector, c))
                    tasks.append((task, caller, c))
                    if caller.cancel_after is not None:
                        cancellers.append(
                            asyncio.create_task(cancel_later(task, caller.cancel_after))
                        )
            await asyncio.gather(*(t for t, _, _ in tasks), *cancellers, return_exceptions=True)
        stats = ex.executor.statistics()
        assert stats.calls_in_flight == 0, stats
        for pool in (stats.read, stats.concurrent_mut, stats.serial_mut):
            assert (pool.borrowed, pool.waiting) == (0, 0), stats
    check(world, tasks)
    assert asyncio.all_tasks() == {asyncio.current_task()}


def check(world: World, tasks: list[tuple[asyncio.Task[None], Caller, ToolCall]]) -> None:
    order = {c.id: i for i, (_, _, c) in enumerate(tasks)}
    for batch in world.batches:
        assert batch == sorted(batch, key=order.__getitem__), f"batch out of start order: {batch}"
    for _, caller, c in tasks:
        result = world.results.get(c.id)
        if caller.cancel_after is None:
            assert result is not None, f"{c.id} was never cancelled and got no result"
        if result is not None:
            assert c.id not in world.cancelled
            assert result.call_id == c.id
            if caller.tool == "stuck":
                assert result.error_class is ErrorClass.TIMEOUT, result
            else:
                assert (result.is_error, result.text) == (False, c.id), result
                assert c.id in world.ran
        else:
            assert c.id in world.cancelled, f"{c.id} neither returned nor was cancelled"
            handed = world.handed.get(c.id)
            assert handed is None or handed < world.cancelled[c.id], (
                f"{c.id} was handed over after its caller had left"
            )
    assert len(world.ran) == len(set(world.ran)), f"a call ran twice: {world.ran}"
    assert set(world.ran) <= set(world.handed), "a call ran that was never handed over"
    for batch in world.batches:
        writes = [i for i in batch if i in set(world.log)]
        assert [t for t in world.log if t in set(batch)] == writes, (batch, world.log)


@settings(settings.get_profile(stress_profile()))
@given(workloads)
def test_collected_calls_run_once_in_order_and_never_after_their_caller_left(
    workload: Workload,
) -> None:
    asyncio.run(run_workload(workload))
