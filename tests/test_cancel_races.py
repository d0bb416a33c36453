"""Regression tests: a cancelled batch must not start calls that had not started."""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio
import trio.testing

from toolexec import (
    ConcurrencyConfig,
    ErrorClass,
    SideEffects,
    ToolCall,
    ToolExecutor,
    ToolRegistry,
    function_tool,
)
from toolexec.events import CallbackSink, CallCompleted

if TYPE_CHECKING:
    from toolexec import Batch


def _registry(ran: list[str]) -> ToolRegistry:
    @function_tool(side_effects=SideEffects.READ)
    async def peek(key: str) -> str:
        """Return a key, without awaiting anything (a checkpoint-free tool)."""
        ran.append(key)
        return key

    @function_tool(side_effects=SideEffects.WRITE)
    async def put(key: str) -> str:
        """Write a key, without awaiting anything (a checkpoint-free tool)."""
        ran.append(key)
        return "ok"

    registry = ToolRegistry()
    registry.register(peek)
    registry.register(put)
    return registry


async def test_cancel_before_run_starts_nothing() -> None:
    """A batch cancelled before ``run()`` executes no call and answers all ``cancelled``."""
    ran: list[str] = []
    executor = ToolExecutor(_registry(ran))
    batch = executor.prepare(
        [ToolCall("c1", "peek", {"key": "a"}), ToolCall("c2", "put", {"key": "b"})]
    )
    batch.cancel()
    outcome = await batch.run()
    assert outcome.cancelled
    assert ran == []
    assert [r.error_class for r in outcome.results] == [ErrorClass.CANCELLED] * 2


async def test_cancel_from_event_sink_stops_the_serial_run() -> None:
    """A host that cancels on the first completed call stops the calls after it."""
    ran: list[str] = []
    batches: list[Batch] = []

    def on_event(event: object) -> None:
        if isinstance(event, CallCompleted) and event.call_id == "c1":
            batches[0].cancel()

    executor = ToolExecutor(_registry(ran), sinks=[CallbackSink(on_event)])
    calls = [ToolCall(f"c{i}", "put", {"key": f"k{i}"}) for i in (1, 2, 3)]
    batches.append(executor.prepare(calls))
    outcome = await batches[0].run()
    assert ran == ["k1"]
    assert [r.error_class for r in outcome.results] == [
        None,
        ErrorClass.CANCELLED,
        ErrorClass.CANCELLED,
    ]


async def test_cancel_as_a_run_ends_starts_no_reader(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A cancel landing in the same instant a run ends keeps the next run from starting."""
    ran: list[str] = []

    @function_tool(side_effects=SideEffects.WRITE)
    async def slow_put(key: str) -> str:
        """Write a key after one second."""
        await trio.sleep(1)
        ran.append(key)
        return "ok"

    registry = _registry(ran)
    registry.register(slow_put)
    executor = ToolExecutor(registry)
    calls = [ToolCall("w", "slow_put", {"key": "w"})] + [
        ToolCall(f"r{i}", "peek", {"key": f"r{i}"}) for i in range(3)
    ]
    for _ in range(20):  # trio varies the wake-up order; try both
        ran.clear()
        batch = executor.prepare(calls)
        async with trio.open_nursery() as nursery:

            async def cancel_at_one(batch: Batch = batch) -> None:
                await trio.sleep_until(trio.current_time() + 1)
                batch.cancel()

            nursery.start_soon(cancel_at_one)
            outcome = await batch.run()
        assert [c for c in ran if c.startswith("r")] == []
        assert all(r.error_class is ErrorClass.CANCELLED for r in outcome.results[1:])


async def test_cancel_while_waiting_for_a_permit_starts_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A call still waiting for its permit when the host cancels never runs."""
    ran: list[str] = []

    @function_tool(side_effects=SideEffects.READ)
    async def first_is_slow(key: str) -> str:
        """The first call to start sleeps a second; later ones do not await."""
        if not ran:
            ran.append(key)
            await trio.sleep(1)
        else:
            ran.append(key)
        return key

    registry = ToolRegistry()
    registry.register(first_is_slow)
    batches: list[Batch] = []

    def on_event(event: object) -> None:
        if isinstance(event, CallCompleted):
            batches[0].cancel()

    executor = ToolExecutor(
        registry, ConcurrencyConfig(read_width=1), sinks=[CallbackSink(on_event)]
    )
    calls = [ToolCall(f"c{i}", "first_is_slow", {"key": f"k{i}"}) for i in (1, 2)]
    batches.append(executor.prepare(calls))
    outcome = await batches[0].run()
    assert outcome.cancelled
    assert len(ran) == 1
    classes = sorted(str(r.error_class) for r in outcome.results)
    assert classes == ["ErrorClass.CANCELLED", "None"]


async def test_a_cancel_by_a_sink_mid_batch_ends_it_alike_with_or_without_steering() -> None:
    """A batch whose calls cannot block runs outside its cancel scope unless steering
    is polled: a cancel from a sink at any call must end both ways the same, with the
    same results and the same events (no ``RunFinished`` for the run it cut short)."""
    calls = [
        ToolCall("r1", "peek", {"key": "r1"}),
        ToolCall("r2", "peek", {"key": "r2"}),
        ToolCall("w1", "put", {"key": "w1"}),
        ToolCall("r3", "peek", {"key": "r3"}),
    ]

    async def run(cut_at: str, steered: bool) -> tuple[list[str], list[object], list[str]]:
        ran: list[str] = []
        seen: list[str] = []
        batches: list[Batch] = []

        def on_event(event: object) -> None:
            seen.append(type(event).__name__ + ":" + str(getattr(event, "call_id", "")))
            if isinstance(event, CallCompleted) and event.call_id == cut_at:
                batches[0].cancel()

        executor = ToolExecutor(_registry(ran), sinks=[CallbackSink(on_event)])
        batches.append(executor.prepare(calls))
        outcome = await batches[0].run(steering=(lambda: None) if steered else None)
        assert outcome.cancelled
        return ran, [(r.call_id, r.error_class, r.text) for r in outcome.results], seen

    for cut_at in ("r1", "r2", "w1", "r3"):
        inert, scoped = await run(cut_at, steered=False), await run(cut_at, steered=True)
        assert inert == scoped
        ran = inert[0]
        assert ran == [c.id for c in calls][: [c.id for c in calls].index(cut_at) + 1]
