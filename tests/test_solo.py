"""A batch of one call: run in the batch's own task, its deadline on the batch's scope.

The one-call batch is the commonest there is (a model asking for one tool,
a runner's call through the supervisor), so it skips the crew: no worker,
no second cancel scope. These tests pin down that it answers exactly as a
call in a longer batch does: deadlines from the call's start, the host's
cancel (also in the same instant as the deadline), an enclosing cancel, a
tool that ignores its cancellation, a permit it had to wait for, and no
permit or task left behind. Time is a mock clock.
"""

from __future__ import annotations

import trio
import trio.testing

from conftest import BATCHES, SpawnCounter, cancels_its_batch, stubborn
from toolexec import (
    Batched,
    BatchPlan,
    ConcurrencyConfig,
    ErrorClass,
    Parallel,
    RoutingClass,
    RunPlan,
    Sequential,
    SideEffects,
    ToolCall,
    ToolExecutor,
    ToolRegistry,
    function_tool,
)
from toolexec.events import CallbackSink, CallCompleted, CallFailed, CallStarted

STARTED: list[float] = []


@function_tool(side_effects=SideEffects.READ, timeout=5.0)
async def wait(seconds: float) -> str:
    """Wait, then answer."""
    STARTED.append(trio.current_time())
    await trio.sleep(seconds)
    return f"waited {seconds}"


@function_tool(side_effects=SideEffects.READ)
async def instant() -> str:
    """Return at once."""
    return "done"


def _executor(width: int = 4, **kwargs: object) -> ToolExecutor:
    registry = ToolRegistry()
    for tool in (wait, stubborn, instant, cancels_its_batch):
        registry.register(tool)
    return ToolExecutor(registry, ConcurrencyConfig(read_width=width), **kwargs)  # type: ignore[arg-type]


def _wait(seconds: float, call_id: str = "c1") -> ToolCall:
    return ToolCall(call_id, "wait", {"seconds": seconds})


def _borrowed(executor: ToolExecutor) -> int:
    stats = executor.statistics()
    assert stats.calls_in_flight == 0
    return stats.read.borrowed + stats.concurrent_mut.borrowed + stats.serial_mut.borrowed


async def test_a_one_call_batch_costs_no_task() -> None:
    counter = SpawnCounter()
    trio.lowlevel.add_instrument(counter)
    try:
        outcome = await _executor().execute_batch([ToolCall("c1", "instant", {})])
    finally:
        trio.lowlevel.remove_instrument(counter)
    assert outcome.results[0].text == "done"
    assert counter.spawned == 0


async def test_the_deadline_runs_from_the_call_start(
    autojump_clock: trio.testing.MockClock,
) -> None:
    executor = _executor()
    start = trio.current_time()
    outcome = await executor.execute_batch([_wait(60)])
    (result,) = outcome.results
    assert result.error_class is ErrorClass.TIMEOUT
    assert result.duration == 5.0
    assert trio.current_time() - start == 5.0
    assert not outcome.cancelled
    assert _borrowed(executor) == 0
    # The executor goes on: the next batch runs, and its deadline is its own.
    again = await executor.execute_batch([_wait(1, "c2")])
    assert again.results[0].text == "waited 1"


async def test_a_call_within_its_deadline_answers(autojump_clock: trio.testing.MockClock) -> None:
    outcome = await _executor().execute_batch([_wait(4.9)])
    assert outcome.results[0].text == "waited 4.9"
    assert outcome.results[0].duration == 4.9


async def test_the_host_cancel_answers_cancelled(autojump_clock: trio.testing.MockClock) -> None:
    executor = _executor()
    batch = executor.prepare([_wait(60)])
    outcome_box: list[object] = []
    async with trio.open_nursery() as nursery:

        async def run() -> None:
            outcome_box.append(await batch.run())

        nursery.start_soon(run)
        await trio.sleep(2)
        batch.cancel()
    (outcome,) = outcome_box
    assert outcome.cancelled  # type: ignore[attr-defined]
    assert outcome.results[0].error_class is ErrorClass.CANCELLED  # type: ignore[attr-defined]
    assert _borrowed(executor) == 0


async def test_a_cancel_in_the_deadline_instant_answers_cancelled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The host cancels the batch while the call unwinds from its deadline: cancelled wins."""
    executor = _executor()
    batch = executor.prepare([ToolCall("c1", "cancels_its_batch", {})])
    BATCHES[:] = [batch]
    outcome = await batch.run()
    assert outcome.results[0].error_class is ErrorClass.CANCELLED
    assert outcome.cancelled
    assert trio.current_time() == 5.0


async def test_a_cancel_before_the_run_starts_no_tool() -> None:
    STARTED.clear()
    batch = _executor().prepare([_wait(1)])
    batch.cancel()
    outcome = await batch.run()
    assert outcome.results[0].error_class is ErrorClass.CANCELLED
    assert STARTED == []


async def test_an_enclosing_cancel_propagates_and_answers_cancelled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[object] = []
    executor = _executor(sinks=[CallbackSink(seen.append)])
    with trio.move_on_after(2) as outer:
        await executor.execute_batch([_wait(60)])
    assert outer.cancelled_caught
    failed = [e for e in seen if isinstance(e, CallFailed)]
    assert [e.error_class for e in failed] == [ErrorClass.CANCELLED]
    assert _borrowed(executor) == 0


async def test_an_enclosing_cancel_in_the_deadline_instant_wins(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[object] = []
    executor = _executor(sinks=[CallbackSink(seen.append)])
    with trio.move_on_after(5.0) as outer:
        await executor.execute_batch([_wait(60)])
    assert outer.cancelled_caught
    failed = [e for e in seen if isinstance(e, CallFailed)]
    assert [e.error_class for e in failed] == [ErrorClass.CANCELLED]


async def test_a_tool_that_outlives_its_deadline_times_out(
    autojump_clock: trio.testing.MockClock,
) -> None:
    outcome = await _executor().execute_batch([ToolCall("c1", "stubborn", {"seconds": 8})])
    (result,) = outcome.results
    assert result.error_class is ErrorClass.TIMEOUT
    assert result.duration == 8.0


async def test_waiting_for_a_permit_is_not_on_the_clock(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The read pool is full: the call waits 3 s for a permit, then gets its full 5 s."""
    STARTED.clear()
    executor = _executor(width=1)
    results = []

    async def one(call: ToolCall) -> None:
        results.append((await executor.execute_batch([call])).results[0])

    async with trio.open_nursery() as nursery:
        nursery.start_soon(one, _wait(3, "holder"))
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(one, _wait(60, "waiter"))
    holder, waiter = results
    assert holder.text == "waited 3"
    assert waiter.error_class is ErrorClass.TIMEOUT
    assert STARTED == [0.0, 3.0]
    assert waiter.duration == 5.0
    assert _borrowed(executor) == 0


async def test_a_cancel_while_waiting_for_a_permit_leaks_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    executor = _executor(width=1)
    waiting = executor.prepare([_wait(1, "waiter")])
    outcomes = []

    async def run_waiting() -> None:
        outcomes.append(await waiting.run())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(executor.execute_batch, [_wait(3, "holder")])
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(run_waiting)
        await trio.testing.wait_all_tasks_blocked()
        waiting.cancel()
    assert outcomes[0].results[0].error_class is ErrorClass.CANCELLED
    assert _borrowed(executor) == 0


async def test_events_match_a_longer_batch(autojump_clock: trio.testing.MockClock) -> None:
    seen: list[object] = []
    executor = _executor(sinks=[CallbackSink(seen.append)])
    await executor.execute_batch([_wait(1)])
    kinds = [type(e) for e in seen if isinstance(e, CallStarted | CallCompleted | CallFailed)]
    assert kinds == [CallStarted, CallCompleted]
    names = [type(e).__name__ for e in seen]
    assert names[0] == "BatchPlanned"
    assert names[-1] == "BatchFinished"
    assert names.index("RunStarted") < names.index("CallStarted") < names.index("RunFinished")


def test_the_plan_of_one_call_is_the_same_under_every_strategy() -> None:
    for strategy in (Parallel(), Sequential(), Batched(3)):
        executor = _executor(strategy=strategy)
        plan = executor.prepare([_wait(1)]).plan
        assert plan == BatchPlan(
            (RunPlan(0, RoutingClass.READ_ONLY, (0,), ("c1",), ("wait",)),), ()
        )
        plan = executor.prepare([ToolCall("c9", "no_such_tool", {})]).plan
        assert plan == BatchPlan((), (0,), ("c9",))
        assert "answered without running: c9" in plan.describe()


# -- a tool that cannot block: run outside the batch's scope -------------------------

INSTANT_RUNS: list[str] = []


@function_tool(side_effects=SideEffects.READ)
async def counted(tag: str) -> str:
    """Note the call, then answer (no ``await``: it cannot block)."""
    INSTANT_RUNS.append(tag)
    return tag


@function_tool(side_effects=SideEffects.READ)
async def breaks(tag: str) -> str:
    """Fail at once (no ``await``)."""
    raise RuntimeError(f"broken {tag}")


def _unblocking_executor(width: int = 4, **kwargs: object) -> ToolExecutor:
    registry = ToolRegistry()
    for tool in (wait, counted, breaks):
        registry.register(tool)
    assert registry.lookup("counted").never_suspends  # type: ignore[union-attr]
    return ToolExecutor(registry, ConcurrencyConfig(read_width=width), **kwargs)  # type: ignore[arg-type]


async def test_an_unblocking_call_answers_and_gives_its_permit_back() -> None:
    INSTANT_RUNS.clear()
    seen: list[object] = []
    executor = _unblocking_executor(sinks=[CallbackSink(seen.append)])
    outcome = await executor.execute_batch([ToolCall("c1", "counted", {"tag": "a"})])
    assert outcome.results[0].text == "a"
    assert INSTANT_RUNS == ["a"]
    assert _borrowed(executor) == 0
    names = [type(e).__name__ for e in seen]
    assert names.index("RunStarted") < names.index("CallStarted") < names.index("CallCompleted")
    assert names.index("CallCompleted") < names.index("RunFinished")


async def test_an_unblocking_call_that_raises_is_a_failed_result() -> None:
    executor = _unblocking_executor()
    outcome = await executor.execute_batch([ToolCall("c1", "breaks", {"tag": "x"})])
    (result,) = outcome.results
    assert result.error_class is ErrorClass.EXECUTION_ERROR
    assert "broken x" in result.text
    assert _borrowed(executor) == 0


async def test_an_unblocking_call_cancelled_before_the_run_never_starts() -> None:
    INSTANT_RUNS.clear()
    executor = _unblocking_executor()
    batch = executor.prepare([ToolCall("c1", "counted", {"tag": "a"})])
    batch.cancel()
    outcome = await batch.run()
    assert outcome.cancelled
    assert outcome.results[0].error_class is ErrorClass.CANCELLED
    assert INSTANT_RUNS == []
    assert _borrowed(executor) == 0


async def test_an_enclosing_cancel_stops_an_unblocking_call_before_it_starts() -> None:
    INSTANT_RUNS.clear()
    seen: list[object] = []
    executor = _unblocking_executor(sinks=[CallbackSink(seen.append)])
    with trio.CancelScope() as outer:
        outer.cancel()
        await executor.execute_batch([ToolCall("c1", "counted", {"tag": "a"})])
    assert outer.cancelled_caught
    assert INSTANT_RUNS == []
    failed = [e for e in seen if isinstance(e, CallFailed)]
    assert [e.error_class for e in failed] == [ErrorClass.CANCELLED]
    assert _borrowed(executor) == 0


async def test_an_unblocking_call_waits_for_a_taken_permit(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The read pool is full: the call that cannot block still queues, then runs."""
    INSTANT_RUNS.clear()
    executor = _unblocking_executor(width=1)
    results = []

    async def one(call: ToolCall) -> None:
        results.append((await executor.execute_batch([call])).results[0])

    async with trio.open_nursery() as nursery:
        nursery.start_soon(one, _wait(3, "holder"))
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(one, ToolCall("c2", "counted", {"tag": "late"}))
        await trio.testing.wait_all_tasks_blocked()
        assert INSTANT_RUNS == []  # queued behind the holder
    holder, late = results
    assert holder.text == "waited 3"
    assert late.text == "late"
    assert trio.current_time() == 3.0
    assert _borrowed(executor) == 0
