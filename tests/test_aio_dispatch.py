"""toolexec.aio in guest mode: the dispatcher task that runs batches inline.

A batch submitted while the dispatcher waits runs in it (no task spawned);
one submitted while it is busy gets a task of its own, so batches from
several asyncio tasks still overlap. Sync tests calling ``asyncio.run``;
ordering comes from events and the bridge's futures, never from sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import types
from typing import TYPE_CHECKING

import pytest
import trio

import toolexec.aio
from conftest import Gate
from toolexec import (
    ConcurrencyConfig,
    SideEffects,
    ToolCall,
    ToolRegistry,
    function_tool,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Generator


def _texts(outcome: toolexec.BatchOutcome) -> list[str]:
    return [r.content[0].text for r in outcome.results]  # type: ignore[union-attr]


def _batch_tasks(ex: toolexec.aio.AsyncioExecutor) -> set[trio.lowlevel.Task]:
    """The trio tasks running batches now, the dispatcher included while it runs one."""
    guest = ex._guest
    assert guest.nursery is not None
    tasks = set(guest.nursery.child_tasks)
    if guest.dispatcher is not None and guest.idle:
        tasks.discard(guest.dispatcher)
    return tasks


def _gate_registry(gate: Gate) -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(function_tool(name="gate", side_effects=SideEffects.READ)(gate.__call__))
    return registry


GATE = [ToolCall("g", "gate", {})]


def test_back_to_back_batches_run_in_the_dispatcher_without_a_task_each() -> None:
    seen: list[tuple[set[trio.lowlevel.Task], bool]] = []
    executor: list[toolexec.aio.AsyncioExecutor] = []

    @function_tool(side_effects=SideEffects.READ)
    async def look() -> str:
        """Record which batch tasks exist while this call runs."""
        seen.append((_batch_tasks(executor[0]), executor[0]._guest.idle))
        return "seen"

    registry = ToolRegistry()
    registry.register(look)

    async def main() -> None:
        async with toolexec.aio.open_executor(registry) as ex:
            executor.append(ex)
            for i in range(3):
                assert _texts(await ex.execute_batch([ToolCall(str(i), "look", {})])) == ["seen"]
            dispatcher = ex._guest.dispatcher
            assert dispatcher is not None
            assert seen == [({dispatcher}, False)] * 3  # one task, busy: the batch ran in it
            assert _batch_tasks(ex) == set()

    asyncio.run(main())


def test_a_batch_submitted_while_the_dispatcher_is_busy_gets_a_task_and_overlaps() -> None:
    gate = Gate(expected=2)
    config = ConcurrencyConfig(per_tool={"gate": 2})

    async def main() -> None:
        async with toolexec.aio.open_executor(_gate_registry(gate), config=config) as ex:
            first = asyncio.create_task(ex.execute_batch(GATE))
            await asyncio.sleep(0)  # the first batch is handed to the dispatcher
            assert not ex._guest.idle
            second = asyncio.create_task(ex.execute_batch(GATE))
            await gate.entered.wait()  # both calls inside at once
            tasks = _batch_tasks(ex)
            assert len(tasks) == 2
            assert ex._guest.dispatcher in tasks
            ex.trio_token.run_sync_soon(gate.release.set)
            assert [_texts(o) for o in await asyncio.gather(first, second)] == [["ok"], ["ok"]]
            assert gate.peak == 2
            assert _batch_tasks(ex) == set()
            assert _texts(await ex.execute_batch([])) == []  # the dispatcher serves on

    asyncio.run(main())


@pytest.mark.parametrize("cancelled", ["inline", "own task"])
def test_cancelling_one_of_two_overlapping_batches_leaves_the_other_running(
    cancelled: str,
) -> None:
    gate = Gate(expected=2)
    config = ConcurrencyConfig(per_tool={"gate": 2})

    async def main() -> None:
        async with toolexec.aio.open_executor(_gate_registry(gate), config=config) as ex:
            inline = asyncio.create_task(ex.execute_batch(GATE))
            await asyncio.sleep(0)
            own = asyncio.create_task(ex.execute_batch(GATE))
            await gate.entered.wait()
            victim, survivor = (inline, own) if cancelled == "inline" else (own, inline)
            victim.cancel()
            with pytest.raises(asyncio.CancelledError):
                await victim
            # The cancelled batch has ended; the other is still inside the gate.
            assert gate.active == 1
            assert len(_batch_tasks(ex)) == 1
            assert not survivor.done()
            ex.trio_token.run_sync_soon(gate.release.set)
            assert _texts(await survivor) == ["ok"]
            assert _batch_tasks(ex) == set()
            assert ex._guest.idle
            assert ex.executor.statistics().calls_in_flight == 0

    asyncio.run(main())


def test_a_batch_cancelled_before_the_dispatcher_takes_it_gives_cancelled_results() -> None:
    async def main() -> None:
        async with toolexec.aio.open_executor(_gate_registry(Gate(1))) as ex:
            task = asyncio.create_task(ex.execute_batch(GATE))
            await asyncio.sleep(0)  # handed over; the dispatcher has not run yet
            assert ex._guest.handed is not None
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert ex._guest.idle
            assert ex.executor.statistics().calls_in_flight == 0

    asyncio.run(main())


def test_a_batch_submitted_as_the_executor_closes_fails_instead_of_hanging() -> None:
    calls = [ToolCall("1", "gate", {})]
    late: list[asyncio.Task[toolexec.BatchOutcome]] = []

    async def main() -> None:
        async with toolexec.aio.open_executor(_gate_registry(Gate(1))) as ex:
            # Submitted in the loop turn after ``close`` asked the run to stop.
            late.append(asyncio.create_task(ex.execute_batch(calls)))
        with pytest.raises(RuntimeError, match="trio run stopped"):
            await late[0]

    asyncio.run(main())


def test_a_batch_handed_over_as_the_batches_are_cancelled_fails_instead_of_hanging() -> None:
    async def main() -> None:
        async with toolexec.aio.open_executor(_gate_registry(Gate(1))) as ex:
            assert ex._guest.nursery is not None
            await ex.execute_batch([])  # the dispatcher has started: it waits now
            # What closing asks of the run, done here between two guest steps:
            # the batch is handed over, and the dispatcher meets the cancel first.
            ex._guest.nursery.cancel_scope.cancel()
            with pytest.raises(RuntimeError, match="stopped before the batch"):
                await ex.execute_batch(GATE)

    asyncio.run(main())


def test_a_batch_submitted_while_contexts_are_left_fails_instead_of_hanging() -> None:
    leaving = asyncio.Event()
    gate = trio.Event()

    @contextlib.asynccontextmanager
    async def slow_to_close() -> AsyncIterator[None]:
        yield
        leaving.set()  # the batches' nursery is closed by now
        await gate.wait()

    async def late(ex: toolexec.aio.AsyncioExecutor) -> None:
        await leaving.wait()
        try:
            with pytest.raises(RuntimeError, match="trio run stopped"):
                await ex.execute_batch([])
        finally:
            ex.trio_token.run_sync_soon(gate.set)

    async def main() -> None:
        async with toolexec.aio.open_executor(ToolRegistry()) as ex:
            await ex.enter(slow_to_close())
            waiting = asyncio.create_task(late(ex))
        await waiting

    asyncio.run(main())


def test_closing_cancels_a_batch_the_dispatcher_runs() -> None:
    gate = Gate(expected=1)
    batch: list[asyncio.Task[toolexec.BatchOutcome]] = []

    async def main() -> None:
        async with toolexec.aio.open_executor(_gate_registry(gate)) as ex:
            batch.append(asyncio.create_task(ex.execute_batch(GATE)))
            await gate.entered.wait()
            assert ex._guest.dispatcher in _batch_tasks(ex)
        assert gate.active == 0
        with pytest.raises(RuntimeError, match="stopped during the batch"):
            await batch[0]

    asyncio.run(main())


MARK: contextvars.ContextVar[str] = contextvars.ContextVar("mark", default="-")


def test_context_variables_a_batch_sets_stay_in_that_batch() -> None:
    @function_tool(side_effects=SideEffects.READ)
    async def swap() -> str:
        """Return the mark, then change it."""
        before = MARK.get()
        MARK.set("changed by a batch")
        return before

    registry = ToolRegistry()
    registry.register(swap)

    async def main() -> list[str]:
        MARK.set("asyncio side")
        async with toolexec.aio.open_executor(registry) as ex:
            seen = [_texts(await ex.execute_batch([ToolCall(str(i), "swap", {})]))[0] for i in "ab"]
        assert MARK.get() == "asyncio side"
        return seen

    assert asyncio.run(main()) == ["asyncio side", "asyncio side"]


@types.coroutine
def _suspend(message: str) -> Generator[str, str, str]:
    return (yield message)


def test_in_context_steps_the_coroutine_in_the_context_and_passes_a_close_on() -> None:
    seen: list[tuple[str, str]] = []

    async def inner() -> str:
        try:
            sent = await _suspend("first")
            seen.append(("sent", f"{sent} {MARK.get()}"))
            await _suspend("second")
        finally:
            seen.append(("finally", MARK.get()))
        return "unreached"  # pragma: no cover

    context = contextvars.copy_context()
    context.run(MARK.set, "in the copy")
    outer = toolexec._adapters._aio_guest._in_context(context, inner())
    assert outer.send(None) == "first"
    assert outer.send("hello") == "second"
    outer.close()  # as trio does to a task's coroutine when the run is abandoned
    assert seen == [("sent", "hello in the copy"), ("finally", "in the copy")]
    assert MARK.get() == "-"


def test_a_batch_needing_no_trio_pass_finishes_without_a_loop_turn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The dispatcher stays awake between the batches however slow the machine.
    monkeypatch.setattr(toolexec.aio, "LINGER", 3600.0)
    registry = ToolRegistry()
    registry.register(function_tool(name="noop", side_effects=SideEffects.READ)(_noop))

    async def main() -> None:
        async with toolexec.aio.open_executor(registry) as ex:
            await ex.execute_batch([])  # wakes the run; it stays awake from now on
            loop = asyncio.get_running_loop()
            for calls in ([], [ToolCall("1", "noop", {})]):
                turns: list[int] = []
                loop.call_soon(turns.append, 1)  # runs at the next loop turn
                outcome = await ex.execute_batch(calls)
                assert _texts(outcome) == ["done"] * len(calls)
                assert turns == []  # no loop turn: the batch ran from this call
                await asyncio.sleep(0)
                assert turns == [1]

    asyncio.run(main())


async def _noop() -> str:
    """Do nothing."""
    return "done"
