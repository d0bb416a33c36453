"""One call lifecycle, whoever drives it: the state machine and each call's own context."""

from __future__ import annotations

import contextvars
from typing import Any
from unittest import mock

import pytest
import trio

import toolexec._core._batch as batch_module
from toolexec import (
    SideEffects,
    ToolCall,
    ToolExecutor,
    ToolRegistry,
    function_tool,
)
from toolexec._core._errors import InternalError
from toolexec._core._lifecycle import CallSlot, State

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
