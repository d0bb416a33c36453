"""The run path's shape: what a run of calls costs in tasks, and deadlines under it.

A run's calls are taken in order by at most ``min(N, width)`` workers, the
batch's own task first; a tool that returns without blocking costs no task,
and a call's deadline starts when the call does (not when its run did).
Tasks are counted with a trio instrument; time is a mock clock.
"""

from __future__ import annotations

import functools
from typing import Any

import trio
import trio.testing
from trio.abc import Instrument

from conftest import SpawnCounter
from toolexec import (
    ConcurrencyConfig,
    ErrorClass,
    SideEffects,
    ToolCall,
    ToolContext,
    ToolExecutor,
    ToolRegistry,
    function_tool,
)
from toolexec._core._registry import cannot_suspend


@function_tool(side_effects=SideEffects.READ)
async def instant(n: int) -> str:
    """Return at once."""
    return str(n)


@function_tool(side_effects=SideEffects.READ, timeout=5.0)
async def wait(seconds: float) -> str:
    """Wait, then answer."""
    await trio.sleep(seconds)
    return f"waited {seconds}"


def _executor(width: int = 128) -> ToolExecutor:
    registry = ToolRegistry()
    registry.register(instant)
    registry.register(wait)
    return ToolExecutor(registry, ConcurrencyConfig(read_width=width))


async def _count_spawns(executor: ToolExecutor, calls: list[ToolCall]) -> tuple[int, list[str]]:
    counter = SpawnCounter()
    trio.lowlevel.add_instrument(counter)
    try:
        outcome = await executor.execute_batch(calls)
    finally:
        trio.lowlevel.remove_instrument(counter)
    return counter.spawned, [r.text for r in outcome.results]


async def test_calls_that_never_block_cost_no_task() -> None:
    calls = [ToolCall(str(i), "instant", f'{{"n": {i}}}') for i in range(100)]
    spawned, texts = await _count_spawns(_executor(), calls)
    assert spawned == 0
    assert texts == [str(i) for i in range(100)]


async def test_blocking_calls_get_at_most_one_worker_each_within_the_width(
    autojump_clock: trio.testing.MockClock,
) -> None:
    calls = [ToolCall(str(i), "wait", {"seconds": 1}) for i in range(10)]
    spawned, _ = await _count_spawns(_executor(width=4), calls)
    assert spawned == 3  # the batch's task is the fourth worker
    start = trio.current_time()
    spawned, _ = await _count_spawns(_executor(width=128), calls)
    assert spawned == 10  # one task for each of the other nine, and their cohort's
    assert trio.current_time() - start == 1  # all ten waited at once


async def test_a_call_that_waited_for_a_permit_gets_its_whole_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Width 1: the second call starts at t=4; its 5 s deadline runs from then."""
    calls = [ToolCall("a", "wait", {"seconds": 4}), ToolCall("b", "wait", {"seconds": 4})]
    outcome = await _executor(width=1).execute_batch(calls)
    assert [r.text for r in outcome.results] == ["waited 4", "waited 4"]


async def test_after_a_timeout_the_worker_goes_on_with_a_fresh_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    calls = [
        ToolCall("a", "wait", {"seconds": 9}),
        ToolCall("b", "instant", {"n": 1}),
        ToolCall("c", "wait", {"seconds": 4.5}),
    ]
    outcome = await _executor(width=1).execute_batch(calls)
    assert [r.error_class for r in outcome.results] == [ErrorClass.TIMEOUT, None, None]
    assert outcome.results[0].duration == 5.0
    assert outcome.results[2].text == "waited 4.5"


class PassCounter(Instrument):
    def __init__(self) -> None:
        self.passes = 0

    def before_io_wait(self, timeout: float) -> None:
        self.passes += 1


async def test_a_run_that_cannot_block_takes_no_scheduling_pass() -> None:
    """A tool with no ``await`` cannot block: its run opens no nursery (whose exit is
    a checkpoint), so a hundred calls cost not one trip through trio's scheduler."""
    executor = _executor()
    calls = [ToolCall(str(i), "instant", {"n": i}) for i in range(100)]
    counter = PassCounter()
    trio.lowlevel.add_instrument(counter)
    try:
        outcome = await executor.execute_batch(calls)
    finally:
        trio.lowlevel.remove_instrument(counter)
    assert [r.text for r in outcome.results] == [str(i) for i in range(100)]
    assert counter.passes == 0


async def test_one_tool_that_may_block_keeps_the_crew_ready_to_hire(
    autojump_clock: trio.testing.MockClock,
) -> None:
    calls = [ToolCall(str(i), "instant", {"n": i}) for i in range(5)]
    calls += [ToolCall(f"w{i}", "wait", {"seconds": 1}) for i in range(5)]
    start = trio.current_time()
    spawned, texts = await _count_spawns(_executor(), calls)
    assert texts == [str(i) for i in range(5)] + ["waited 1"] * 5
    assert spawned == 5  # the first wait blocks: a task for each other, and their cohort's
    assert trio.current_time() - start == 1


def test_which_tools_cannot_suspend() -> None:
    async def plain(n: int) -> str:
        return str(n)

    async def awaits() -> None:
        await trio.lowlevel.checkpoint()

    async def iterates(items: Any) -> None:
        async for _ in items:
            pass

    async def enters(cm: Any) -> None:
        async with cm:
            pass

    async def comprehends(items: Any) -> list[Any]:
        return [await item for item in items]

    def sync(n: int) -> int:
        return n

    @functools.wraps(plain)
    async def wrapped(n: int) -> str:
        return await plain(n)

    assert cannot_suspend(plain)
    for fn in (awaits, iterates, enters, comprehends, sync, wrapped, None, print):
        assert not cannot_suspend(fn), fn
    registry = ToolRegistry()
    registry.register(instant)
    registry.register(wait)
    assert registry.lookup("instant").never_suspends  # type: ignore[union-attr]
    assert not registry.lookup("wait").never_suspends  # type: ignore[union-attr]


async def test_a_cancelled_run_that_cannot_block_starts_no_call() -> None:
    executor = _executor()
    batch = executor.prepare([ToolCall(str(i), "instant", {"n": i}) for i in range(5)])
    batch.cancel()
    outcome = await batch.run()
    assert [r.error_class for r in outcome.results] == [ErrorClass.CANCELLED] * 5
    assert all(r.duration == 0 for r in outcome.results)


async def test_a_tool_run_by_a_worker_can_run_a_batch_on_the_same_pools() -> None:
    """A worker's permit belongs to the worker, not to its task: a tool it runs may
    run a nested batch through the same read pool (``ctx.service(ToolExecutor)``)."""
    registry = ToolRegistry()

    @function_tool(side_effects=SideEffects.READ)
    async def leaf(x: int) -> str:
        """Return x."""
        await trio.lowlevel.checkpoint()
        return str(x)

    @function_tool(side_effects=SideEffects.READ)
    async def outer(ctx: ToolContext, n: int) -> str:
        """Run two leaves as a batch of this executor's own."""
        calls = [ToolCall(f"{n}a", "leaf", {"x": n}), ToolCall(f"{n}b", "leaf", {"x": n + 10})]
        executor = ctx.service(ToolExecutor)
        assert executor is not None
        inner = await executor.execute_batch(calls)
        return ",".join(r.text for r in inner.results)

    registry.register(leaf)
    registry.register(outer)
    executor = ToolExecutor(registry)
    outcome = await executor.execute_batch([ToolCall(str(n), "outer", {"n": n}) for n in (1, 2, 3)])
    assert [r.text for r in outcome.results] == ["1,11", "2,12", "3,13"]
    assert executor.statistics().calls_in_flight == 0
