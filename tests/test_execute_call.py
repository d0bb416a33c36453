"""``ToolExecutor.execute_call``: one call, answered as ``execute_batch([call])`` answers it.

With nobody observing the executor, a call answered at plan time, or one
whose tool cannot block with a permit free, is answered without a batch;
everything else goes through one. These tests pin down that the caller
cannot tell which: the same result for every kind of call, the same batch
ids, the same events when there are sinks, a permit waited for, an
enclosing cancel, and no permit left behind.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
import pytest
import trio
import trio.testing

from toolexec import (
    ConcurrencyConfig,
    ErrorClass,
    SideEffects,
    ToolCall,
    ToolContext,
    ToolExecutor,
    ToolRegistry,
    ToolResult,
    function_tool,
)
from toolexec.events import CallbackSink
from toolexec.policy import Allow, Deny, ExecutionGrant

if TYPE_CHECKING:
    from collections.abc import Mapping

    from toolexec import ToolDefinition
    from toolexec.policy import Decision

RAN: list[str] = []


@function_tool(side_effects=SideEffects.READ)
async def quick(text: str) -> str:
    """Answer at once (no ``await``: it cannot block)."""
    RAN.append(text)
    return text


@function_tool(side_effects=SideEffects.READ, timeout=5.0)
async def slow(seconds: float) -> str:
    """Answer after a while (it may block)."""
    await trio.sleep(seconds)
    return f"slept {seconds}"


@function_tool(side_effects=SideEffects.READ)
async def failing(text: str) -> str:
    """Fail at once."""
    raise ValueError(f"no {text}")


@function_tool(side_effects=SideEffects.READ)
async def batch_of(ctx: ToolContext) -> str:
    """Name the batch the call ran in (it reads its context; no ``await``)."""
    return ctx.batch_id


@function_tool(side_effects=SideEffects.WRITE)
async def write(text: str) -> str:
    """A mutator that cannot block."""
    return text


class Rules:
    """Deny ``write``; cap the output of the rest at 4 characters."""

    def decide(
        self, definition: ToolDefinition, arguments: Mapping[str, Any], agent_path: str
    ) -> Decision:
        if definition.name == "write":
            return Deny("no writes here")
        return Allow(ExecutionGrant(max_output_chars=4))


def _executor(width: int = 4, **kwargs: Any) -> ToolExecutor:
    registry = ToolRegistry()
    for tool in (quick, slow, failing, batch_of, write):
        registry.register(tool)
    return ToolExecutor(registry, ConcurrencyConfig(read_width=width), **kwargs)


def _same(result: ToolResult) -> ToolResult:
    """The result without what differs from run to run (its duration, a traceback's frames)."""
    details = dict(result.details)
    if "traceback" in details:
        details["traceback"] = "..."
    return attrs.evolve(result, duration=0.0, details=details)


CALLS = {
    "quick": ToolCall("c1", "quick", {"text": "hello"}),
    "slow": ToolCall("c1", "slow", {"seconds": 0}),
    "failing": ToolCall("c1", "failing", {"text": "way"}),
    "unknown": ToolCall("c1", "nope", {}),
    "invalid": ToolCall("c1", "quick", {"text": 3}),
    "bad_json": ToolCall("c1", "quick", "{not json"),
    "json_text": ToolCall("c1", "quick", '{"text": "as text"}'),
    "context": ToolCall("c1", "batch_of", {}),
}


@pytest.mark.parametrize("policy", [None, Rules()], ids=["allow", "rules"])
@pytest.mark.parametrize("observed", [False, True], ids=["unobserved", "with_sink"])
@pytest.mark.parametrize("case", sorted(CALLS))
async def test_a_call_is_answered_as_a_batch_of_one_answers_it(
    case: str, observed: bool, policy: Rules | None
) -> None:
    results, events = [], []
    for run in ("call", "batch"):
        seen: list[Any] = []
        kwargs: dict[str, Any] = {"sinks": [CallbackSink(seen.append)]} if observed else {}
        if policy is not None:
            kwargs["policy"] = policy
        executor = _executor(**kwargs)
        if run == "call":
            result = await executor.execute_call(CALLS[case])
        else:
            (result,) = (await executor.execute_batch([CALLS[case]])).results
        results.append(_same(result))
        events.append([(type(e).__name__, getattr(e, "batch_id", None)) for e in seen])
        assert executor.statistics().calls_in_flight == 0
        assert executor.statistics().read.borrowed == 0
    assert results[0] == results[1]
    assert events[0] == events[1]


async def test_a_denied_call_is_answered_at_once_and_counts_a_batch() -> None:
    executor = _executor(policy=Rules())
    result = await executor.execute_call(ToolCall("c1", "write", {"text": "x"}))
    assert result.error_class is ErrorClass.PERMISSION_DENIED
    assert "no writes here" in result.text
    assert executor.prepare([]).id == "root:b1"  # the call was batch b0


async def test_batch_ids_are_those_of_batches() -> None:
    executor = _executor()
    first = await executor.execute_call(ToolCall("c1", "batch_of", {}))
    second = await executor.execute_call(ToolCall("c2", "batch_of", {}))
    third = (await executor.execute_batch([ToolCall("c3", "batch_of", {})])).results[0]
    assert [r.text for r in (first, second, third)] == ["root:b0", "root:b1", "root:b2"]


async def test_a_call_that_finds_no_permit_waits_for_one(
    autojump_clock: trio.testing.MockClock,
) -> None:
    RAN.clear()
    executor = _executor(width=1)
    results: list[ToolResult] = []

    async def one(call: ToolCall) -> None:
        results.append(await executor.execute_call(call))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(one, ToolCall("holder", "slow", {"seconds": 3}))
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(one, ToolCall("late", "quick", {"text": "late"}))
        await trio.testing.wait_all_tasks_blocked()
        assert RAN == []  # queued behind the holder
    assert [r.text for r in results] == ["slept 3", "late"]
    assert trio.current_time() == 3.0
    assert executor.statistics().read.borrowed == 0


async def test_a_call_under_a_cancelled_scope_never_starts() -> None:
    RAN.clear()
    executor = _executor()
    with trio.CancelScope() as outer:
        outer.cancel()
        await executor.execute_call(ToolCall("c1", "quick", {"text": "x"}))
    assert outer.cancelled_caught
    assert RAN == []
    assert executor.statistics().read.borrowed == 0


async def test_a_call_that_may_block_keeps_its_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    result = await _executor().execute_call(ToolCall("c1", "slow", {"seconds": 60}))
    assert result.error_class is ErrorClass.TIMEOUT
    assert result.duration == 5.0


async def test_a_call_is_refused_from_a_second_trio_run_while_the_first_runs() -> None:
    executor = _executor()
    entered, leave = trio.Event(), trio.Event()

    async def hold() -> None:
        batch = executor.prepare([ToolCall("h", "slow", {"seconds": 0})])
        executor._runtime.bind_run()  # as a batch running in this run holds it
        entered.set()
        await leave.wait()
        executor._runtime.release_run()
        await batch.run()

    def other_run() -> str:
        async def attempt() -> str:
            try:
                await executor.execute_call(ToolCall("c1", "quick", {"text": "x"}))
            except RuntimeError as exc:
                return str(exc)
            return "ran"

        return trio.run(attempt)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(hold)
        await entered.wait()
        message = await trio.to_thread.run_sync(other_run)
        leave.set()
    assert "another trio run" in message
