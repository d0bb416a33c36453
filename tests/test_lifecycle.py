"""One call lifecycle, whoever drives it: the state machine and each call's own context."""

from __future__ import annotations

import contextlib
import contextvars
from typing import TYPE_CHECKING, Any
from unittest import mock

import attrs
import pytest
import trio
import trio.testing

import toolexec._core._batch as batch_module
from toolexec import (
    ConcurrencyConfig,
    ErrorClass,
    SideEffects,
    ToolCall,
    ToolContext,
    ToolDefinition,
    ToolExecutor,
    ToolOutput,
    ToolRegistry,
    function_tool,
)
from toolexec._core._call import begin, execute
from toolexec._core._errors import InternalError
from toolexec._core._lifecycle import CallSlot, State

if TYPE_CHECKING:
    from collections.abc import Mapping

SEEN: contextvars.ContextVar[str] = contextvars.ContextVar("SEEN", default="unset")

DRIVERS = [
    batch_module.INLINE,
    batch_module.WORKERS,
    batch_module.WORKERS_AND_TASKS,
    batch_module.TASKS,
    batch_module.IN_ORDER,
]


def _registry(side_effects: SideEffects, blocks: bool) -> ToolRegistry:
    @function_tool(side_effects=side_effects)
    async def tag(name: str) -> str:
        """Report the context variable, then set it to ``name``."""
        before = SEEN.get()
        if blocks:
            await trio.sleep(0)
        SEEN.set(name)
        return before

    registry = ToolRegistry()
    registry.register(tag)
    return registry


def _forced(driver: str) -> Any:
    def choose(pools: Any, run: Any, slots: Any, *, alone: bool = False) -> str:
        if driver == batch_module.INLINE and not alone:
            return batch_module.WORKERS  # inline drives only a batch's only call
        return driver

    return mock.patch.object(batch_module, "choose_driver", choose)


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("side_effects", [SideEffects.READ, SideEffects.WRITE])
@pytest.mark.parametrize("blocks", [False, True])
async def test_a_context_variable_set_by_one_call_is_not_seen_by_the_next(
    driver: str, side_effects: SideEffects, blocks: bool
) -> None:
    executor = ToolExecutor(_registry(side_effects, blocks))
    SEEN.set("host")
    calls = [ToolCall(str(i), "tag", {"name": f"call {i}"}) for i in range(4)]
    with _forced(driver):
        if driver == batch_module.INLINE:  # a batch of one call, three times over
            results = [(await executor.execute_batch([c])).results[0] for c in calls]
        else:
            results = list((await executor.execute_batch(calls)).results)
    assert [r.text for r in results] == ["host"] * 4
    assert SEEN.get() == "host"  # nor by the host after the batch


def test_the_state_machine_refuses_a_skipped_step() -> None:
    slot = CallSlot(0, ToolCall("1", "t", {}))
    with pytest.raises(InternalError, match="illegal transition planned -> running"):
        slot.advance(State.RUNNING)
    slot.advance(State.QUEUED)
    with pytest.raises(InternalError, match="illegal transition queued -> running"):
        slot.advance(State.RUNNING)


# -- the rarer paths of the lifecycle, each reached for real -------------------


_ODD = ToolDefinition("odd", "Odd.", side_effects=SideEffects.READ)


@attrs.frozen
class _Returns:
    """A class-based tool returning a value that is not a ``ToolOutput``."""

    definition: ToolDefinition = _ODD

    def __call__(self) -> _Returns:
        return self

    async def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        value: Any = "plain text"
        return value  # type: ignore[no-any-return]


@pytest.mark.parametrize("driver", DRIVERS)
async def test_a_tool_returning_something_else_is_an_execution_error(driver: str) -> None:
    registry = ToolRegistry()
    registry.register(_Returns())
    with _forced(driver):
        outcome = await ToolExecutor(registry).execute_batch([ToolCall("1", "odd", {})])
    (result,) = outcome.results
    assert result.error_class is ErrorClass.EXECUTION_ERROR
    assert "odd" in result.text


@pytest.mark.parametrize("driver", [batch_module.WORKERS, batch_module.IN_ORDER])
async def test_a_tool_that_swallows_its_deadline_times_out_and_the_next_call_runs(
    driver: str, autojump_clock: trio.testing.MockClock
) -> None:
    ran: list[str] = []

    @function_tool(side_effects=SideEffects.READ, timeout=1.0)
    async def stubborn(name: str) -> str:
        """Sleep past the deadline, swallowing the cancel, when asked to."""
        if name == "late":
            with contextlib.suppress(trio.Cancelled):  # swallows its deadline's cancel
                await trio.sleep(5)
        ran.append(name)
        return name

    registry = ToolRegistry()
    registry.register(stubborn)
    executor = ToolExecutor(registry, config=ConcurrencyConfig(read_width=1))
    calls = [
        ToolCall("1", "stubborn", {"name": "late"}),
        ToolCall("2", "stubborn", {"name": "on time"}),
    ]
    with _forced(driver):
        outcome = await executor.execute_batch(calls)
    first, second = outcome.results
    assert first.error_class is ErrorClass.TIMEOUT
    assert (second.is_error, second.text) == (False, "on time")
    assert ran == ["late", "on time"]


async def test_a_call_cancelled_waiting_for_its_class_permit_gives_back_its_tool_permit() -> None:
    gate = trio.Event()

    @function_tool(side_effects=SideEffects.READ)
    async def hold() -> str:
        """Wait for the gate."""
        await gate.wait()
        return "held"

    registry = ToolRegistry()
    registry.register(hold)
    executor = ToolExecutor(registry, config=ConcurrencyConfig(read_width=1, per_tool={"hold": 2}))
    batch = executor.prepare([ToolCall("1", "hold", {}), ToolCall("2", "hold", {})])
    async with trio.open_nursery() as nursery:
        nursery.start_soon(batch.run)
        await trio.testing.wait_all_tasks_blocked()
        stats = executor.statistics()
        assert (stats.per_tool["hold"].borrowed, stats.read.borrowed) == (2, 1)
        batch.cancel()
    stats = executor.statistics()
    assert (stats.per_tool["hold"].borrowed, stats.read.borrowed) == (0, 0)


async def test_closing_a_driver_mid_call_closes_the_tool() -> None:
    closed: list[bool] = []

    @function_tool(side_effects=SideEffects.READ)
    async def waits() -> str:
        """Block once; note being closed."""
        try:
            await trio.sleep(0)
        except GeneratorExit:
            closed.append(True)
            raise
        return "done"

    registry = ToolRegistry()
    registry.register(waits)
    executor = ToolExecutor(registry)
    batch = executor.prepare([ToolCall("1", "waits", {})])
    slot = batch._slots[0]
    rt = batch._runtime
    report = batch._report
    begin(slot, report)
    driver = execute(rt, slot, report)
    driver.send(None)  # the tool's first trap: it is suspended now
    assert rt.in_flight == 1
    driver.close()
    assert closed == [True]
    assert rt.in_flight == 0
