"""Calls that start together share one deadline: a cohort (``_workers.WorkerPool._cohort``).

When the first call of a run blocks and the width lets every call left have
a task of its own, those calls start in one scheduling pass, one task each,
with no worker loop and no cancel scope of their own: one deadline, the
latest start's plus their shared timeout, serves them all. These tests pin
down that each call is still answered as under its own deadline (time is a
mock clock, so the calls of a cohort start in the same instant), that the
host's cancel and an enclosing cancel win as elsewhere, and that calls with
different timeouts, or a pool short of permits, go the general way.
"""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from conftest import BATCHES, SpawnCounter, cancels_its_batch, stubborn
from toolexec import (
    Allow,
    Ask,
    ConcurrencyConfig,
    ErrorClass,
    SideEffects,
    ToolCall,
    ToolExecutor,
    ToolRegistry,
    function_tool,
)
from toolexec._core._workers import _MEMBER_NAME, WorkerPool
from toolexec.approval import ApprovalAnswer


@function_tool(side_effects=SideEffects.READ, timeout=5.0)
async def wait(seconds: float) -> str:
    """Wait, then answer."""
    await trio.sleep(seconds)
    return f"waited {seconds}"


@function_tool(side_effects=SideEffects.READ, timeout=2.0)
async def short(seconds: float) -> str:
    """Wait, then answer; a shorter timeout."""
    await trio.sleep(seconds)
    return f"short {seconds}"


def _executor(width: int = 128) -> ToolExecutor:
    registry = ToolRegistry()
    for tool in (wait, short, stubborn, cancels_its_batch):
        registry.register(tool)
    return ToolExecutor(registry, ConcurrencyConfig(read_width=width))


def _left_clean(executor: ToolExecutor) -> None:
    stats = executor.statistics()
    assert stats.calls_in_flight == 0
    assert stats.read.borrowed == 0


async def _run_counting(executor: ToolExecutor, calls: list[ToolCall]) -> tuple[int, list[object]]:
    counter = SpawnCounter()
    trio.lowlevel.add_instrument(counter)
    try:
        outcome = await executor.execute_batch(calls)
    finally:
        trio.lowlevel.remove_instrument(counter)
    return counter.spawned, list(outcome.results)


async def test_each_call_is_answered_as_under_its_own_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    executor = _executor()
    seconds = [1, 60, 4.5, 60, 5.5, 2]
    calls = [ToolCall(f"c{i}", "wait", {"seconds": s}) for i, s in enumerate(seconds)]
    start = trio.current_time()
    spawned, results = await _run_counting(executor, calls)
    assert spawned == len(calls)  # one task for each call after the first, and their cohort's
    answers = [(r.error_class, r.duration) for r in results]  # type: ignore[attr-defined]
    assert answers == [
        (None, 1),
        (ErrorClass.TIMEOUT, 5.0),
        (None, 4.5),
        (ErrorClass.TIMEOUT, 5.0),
        (ErrorClass.TIMEOUT, 5.0),
        (None, 2),
    ]
    assert trio.current_time() - start == 5.0
    _left_clean(executor)


async def test_a_tool_that_outlives_the_shared_deadline_times_out(
    autojump_clock: trio.testing.MockClock,
) -> None:
    executor = _executor()
    calls = [ToolCall("a", "wait", {"seconds": 1}), ToolCall("b", "stubborn", {"seconds": 8})]
    outcome = await executor.execute_batch(calls)
    assert outcome.results[0].text == "waited 1"
    assert outcome.results[1].error_class is ErrorClass.TIMEOUT
    assert outcome.results[1].duration == 8.0
    _left_clean(executor)


async def test_the_host_cancel_answers_the_cohort_cancelled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    executor = _executor()
    batch = executor.prepare([ToolCall(f"c{i}", "wait", {"seconds": 60}) for i in range(4)])
    outcomes = []

    async def run() -> None:
        outcomes.append(await batch.run())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        await trio.sleep(3)
        batch.cancel()
    assert outcomes[0].cancelled
    assert [r.error_class for r in outcomes[0].results] == [ErrorClass.CANCELLED] * 4
    _left_clean(executor)


async def test_a_host_cancel_in_the_deadline_instant_answers_cancelled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    executor = _executor()
    calls = [ToolCall("a", "wait", {"seconds": 1}), ToolCall("b", "cancels_its_batch", {})]
    batch = executor.prepare(calls)
    BATCHES[:] = [batch]
    outcome = await batch.run()
    assert outcome.results[0].text == "waited 1"
    assert outcome.results[1].error_class is ErrorClass.CANCELLED
    assert outcome.cancelled
    assert trio.current_time() == 5.0
    _left_clean(executor)


async def test_an_enclosing_cancel_leaves_nothing_running(
    autojump_clock: trio.testing.MockClock,
) -> None:
    executor = _executor()
    with trio.move_on_after(5.0) as outer:  # the instant of the cohort's deadline
        await executor.execute_batch([ToolCall(f"c{i}", "wait", {"seconds": 60}) for i in range(3)])
    assert outer.cancelled_caught
    _left_clean(executor)


def test_a_member_task_has_the_name_trio_would_give_it() -> None:
    member = WorkerPool._member
    assert f"{member.__module__}.{member.__qualname__}" == _MEMBER_NAME


async def test_calls_with_different_timeouts_get_workers_of_their_own(
    autojump_clock: trio.testing.MockClock,
) -> None:
    executor = _executor()
    calls = [
        ToolCall("a", "wait", {"seconds": 60}),
        ToolCall("b", "short", {"seconds": 60}),
        ToolCall("c", "wait", {"seconds": 60}),
    ]
    spawned, results = await _run_counting(executor, calls)
    assert spawned == 2  # hired workers, no cohort
    answers = [(r.error_class, r.duration) for r in results]  # type: ignore[attr-defined]
    assert answers == [
        (ErrorClass.TIMEOUT, 5.0),
        (ErrorClass.TIMEOUT, 2.0),
        (ErrorClass.TIMEOUT, 5.0),
    ]
    _left_clean(executor)


async def test_a_pool_short_of_permits_admits_in_order_the_general_way(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Another batch holds 2 of the 4 read permits: the run's calls wait their turn."""
    executor = _executor(width=4)
    started: list[str] = []

    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            executor.execute_batch,
            [ToolCall("x", "wait", {"seconds": 3}), ToolCall("y", "wait", {"seconds": 3})],
        )
        await trio.testing.wait_all_tasks_blocked()
        calls = [ToolCall(f"c{i}", "wait", {"seconds": 1}) for i in range(4)]
        start = trio.current_time()
        outcome = await executor.execute_batch(calls)
        started.append(str(trio.current_time() - start))
    assert [r.text for r in outcome.results] == ["waited 1"] * 4
    assert started == ["2.0"]  # two at once, the other two when those let go
    _left_clean(executor)


class AskForSecond:
    """A policy asking a human before every call of ``second``."""

    def decide(self, definition: Any, arguments: Any, agent_path: str) -> Any:
        return Ask("check it") if definition.name == "second" else Allow()


@function_tool(side_effects=SideEffects.READ, timeout=5.0)
async def second() -> str:
    """Answer; asked for by the policy first."""
    await trio.lowlevel.checkpoint()
    return "second ran"


class Refuses:
    async def request(self, request: Any) -> ApprovalAnswer:
        return ApprovalAnswer(False, "ann", "no")


async def test_a_streamed_call_that_waits_for_a_human_never_joins_a_cohort(
    autojump_clock: trio.testing.MockClock,
) -> None:
    registry = ToolRegistry()
    registry.register(wait)
    registry.register(second)
    executor = ToolExecutor(registry, policy=AskForSecond(), approver=Refuses())
    batch = executor.open_batch()
    batch.add(ToolCall("a", "wait", {"seconds": 1}))
    batch.add(ToolCall("b", "second", {}))
    batch.close()
    outcome = await batch.run()
    assert outcome.results[0].text == "waited 1"
    assert outcome.results[1].error_class is ErrorClass.USER_DENIED
