"""The collector the framework adapters share: sibling asyncio calls become one batch."""

from __future__ import annotations

import asyncio

import pytest
import trio

import toolexec.aio
from toolexec import SideEffects, ToolCall, ToolRegistry, ToolResult, function_tool
from toolexec._adapters._collect import Collector


def _registry() -> ToolRegistry:
    registry = ToolRegistry()

    @function_tool(side_effects=SideEffects.READ)
    async def wait() -> str:
        """Wait until cancelled."""
        await trio.sleep_forever()
        return "never"

    @function_tool(side_effects=SideEffects.NONE)
    def echo(text: str) -> str:
        """Echo."""
        return text

    registry.register(wait)
    registry.register(echo)
    return registry


def test_sibling_tasks_form_one_batch_in_start_order() -> None:
    async def main() -> tuple[list[str], int]:
        async with toolexec.aio.open_executor(_registry()) as executor:
            collector = Collector(executor)
            tasks = [
                asyncio.create_task(collector.run_call(ToolCall(str(i), "echo", {"text": str(i)})))
                for i in range(5)
            ]
            results = await asyncio.gather(*tasks)
            late = await collector.run_call(ToolCall("late", "echo", {"text": "late"}))
            return [r.text for r in [*results, late]], collector.batches

    texts, batches = asyncio.run(main())
    assert texts == ["0", "1", "2", "3", "4", "late"]
    assert batches == 2


def test_a_batch_is_cancelled_only_when_every_caller_left() -> None:
    async def main() -> tuple[int, int]:
        async with toolexec.aio.open_executor(_registry()) as executor:
            collector = Collector(executor)
            first = asyncio.create_task(collector.run_call(ToolCall("1", "wait", {})))
            second = asyncio.create_task(collector.run_call(ToolCall("2", "wait", {})))
            while executor.executor.statistics().calls_in_flight < 2:
                await asyncio.sleep(0)
            first.cancel()
            with pytest.raises(asyncio.CancelledError):
                await first
            still = executor.executor.statistics().calls_in_flight
            second.cancel()
            with pytest.raises(asyncio.CancelledError):
                await second
            return still, executor.executor.statistics().calls_in_flight

    assert asyncio.run(main()) == (2, 0)


def test_callers_cancelled_before_the_flush_run_nothing() -> None:
    async def main() -> tuple[int, str, int]:
        async with toolexec.aio.open_executor(_registry()) as executor:
            collector = Collector(executor)
            task = asyncio.create_task(collector.run_call(ToolCall("1", "wait", {})))
            await asyncio.sleep(0)  # the call is parked; the flush has not run it yet
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            in_flight = executor.executor.statistics().calls_in_flight
            after = await collector.run_call(ToolCall("2", "echo", {"text": "next"}))
            return in_flight, after.text, collector.batches

    assert asyncio.run(main()) == (0, "next", 1)


def test_a_closed_executor_fails_every_caller() -> None:
    async def main() -> list[BaseException | ToolResult]:
        async with toolexec.aio.open_executor(_registry()) as executor:
            collector = Collector(executor)
        calls = [collector.run_call(ToolCall(str(i), "echo", {"text": "x"})) for i in range(2)]
        return list(await asyncio.gather(*calls, return_exceptions=True))

    errors = asyncio.run(main())
    assert all(isinstance(e, RuntimeError) and "closed" in str(e) for e in errors)


def test_a_caller_cancelled_before_the_flush_is_left_out_of_its_siblings_batch() -> None:
    ran: list[str] = []
    registry = _registry()

    @function_tool(side_effects=SideEffects.NONE)
    def note(text: str) -> str:
        """Record that the call ran."""
        ran.append(text)
        return text

    registry.register(note)

    async def main() -> tuple[str, int]:
        async with toolexec.aio.open_executor(registry) as executor:
            collector = Collector(executor)
            calls = [ToolCall(str(i), "note", {"text": t}) for i, t in enumerate(["left", "stays"])]
            left, stays = (asyncio.create_task(collector.run_call(c)) for c in calls)
            await asyncio.sleep(0)  # both calls are parked; the flush has not run them yet
            left.cancel()
            with pytest.raises(asyncio.CancelledError):
                await left
            return (await stays).text, collector.batches

    assert asyncio.run(main()) == ("stays", 1)
    assert ran == ["stays"]  # the call whose caller left never ran


def test_a_caller_arriving_as_the_last_one_leaves_still_gets_its_result() -> None:
    async def main() -> str:
        async with toolexec.aio.open_executor(_registry()) as executor:
            collector = Collector(executor)
            first = asyncio.create_task(collector.run_call(ToolCall("1", "wait", {})))
            await asyncio.sleep(0)  # parked; the flush task is scheduled
            first.cancel()  # the group's only caller leaves: its flush is cancelled ...
            second = asyncio.create_task(collector.run_call(ToolCall("2", "echo", {"text": "x"})))
            # ... and a caller arriving in the same loop turn must not join the dying group
            with pytest.raises(asyncio.CancelledError):
                await first
            async with asyncio.timeout(30):  # a guard against a hang, not a timing
                return (await second).text

    assert asyncio.run(main()) == "x"
