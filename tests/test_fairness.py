"""Sibling sub-agents take turns in the pools the tree shares.

Each test starts sibling sub-agents in one batch of the root and records, in
every tool call, which sibling's subtree it belongs to, at the moment the
call was admitted (a tool starts right after its permits are taken). Tools
hold their permit for one second of a virtual clock (``autojump_clock``), so
whenever the pool is full every sibling has calls waiting, and the recorded
order is the order the pool admitted them in.
"""

from __future__ import annotations

import pytest
import trio
import trio.testing

from toolexec import (
    ConcurrencyConfig,
    SideEffects,
    SubAgentTool,
    ToolCall,
    ToolExecutor,
    ToolRegistry,
    function_tool,
)
from toolexec._core._fairness import FairLimiter, Lane
from toolexec.testing import ScriptedModel, Step


def longest_streak(order: list[str], sibling: str) -> int:
    """The most admissions in a row that went to ``sibling`` while another still waited."""
    longest = streak = 0
    for i, who in enumerate(order):
        others_left = any(o != sibling for o in order[i + 1 :])
        streak = streak + 1 if who == sibling else 0
        if others_left:
            longest = max(longest, streak)
    return longest


def tree(config: ConcurrencyConfig, tool: str, plan: dict[str, list[list[int]]]) -> list[str]:
    """Run sibling sub-agents; return the sibling each admitted call came from.

    ``plan[sibling]`` lists the sibling's batches: ``[n]`` is a batch of ``n``
    calls of ``tool``; ``[n, m, ...]`` is one batch of grandchild sub-agents,
    making ``n``, ``m``, ... calls of ``tool`` each.
    """
    admitted: list[str] = []

    @function_tool(side_effects=SideEffects.WRITE)
    async def serial(tag: str) -> str:
        """A serial mutator: holds the serial pool for one second."""
        admitted.append(tag)
        await trio.sleep(1)
        return "ok"

    @function_tool(side_effects=SideEffects.READ)
    async def read(tag: str) -> str:
        """A reader: holds a read permit for one second."""
        admitted.append(tag)
        await trio.sleep(1)
        return "ok"

    registry = ToolRegistry()
    registry.register(serial)
    registry.register(read)

    def calls(sibling: str, n: int, prefix: str) -> list[ToolCall]:
        return [ToolCall(f"{prefix}{i}", tool, {"tag": sibling}) for i in range(n)]

    def agent(name: str, steps: list[Step]) -> SubAgentTool:
        return SubAgentTool(
            name=name,
            description="works",
            system_prompt="work",
            model=lambda: ScriptedModel([*steps, "done"]),
        )

    root_calls = []
    for sibling, batches in plan.items():
        steps: list[Step] = []
        for b, batch in enumerate(batches):
            if len(batch) == 1:
                steps.append(calls(sibling, batch[0], f"{sibling}{b}-"))
            else:  # grandchildren, one per number
                names = []
                for g, n in enumerate(batch):
                    name = f"{sibling}_g{g}"
                    registry.register(agent(name, [calls(sibling, n, f"{name}-")]))
                    names.append(ToolCall(f"{sibling}{b}-g{g}", name, {"task": "go"}))
                steps.append(names)
        registry.register(agent(sibling, steps))
        root_calls.append(ToolCall(sibling, sibling, {"task": "go"}))

    executor = ToolExecutor(registry, config=config)

    async def main() -> None:
        outcome = await executor.execute_batch(root_calls)
        assert not any(r.is_error for r in outcome.results), [r.text for r in outcome.results]

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    return admitted


def test_siblings_alternate_in_the_serial_pool_whatever_their_subtrees() -> None:
    # A fans out to four grandchildren with four writes each; B makes its
    # sixteen writes itself, four per turn. Under a first-come-first-served
    # pool A's subtree holds four queue places to B's one and B gets one turn
    # in five; taking turns by subtree, they alternate.
    order = tree(
        ConcurrencyConfig(),
        "serial",
        {"A": [[4, 4, 4, 4]], "B": [[4], [4], [4], [4]]},
    )
    assert sorted(order) == ["A"] * 16 + ["B"] * 16
    assert longest_streak(order, "A") <= 1, "".join(order)
    assert longest_streak(order, "B") <= 1, "".join(order)


def test_a_sibling_queueing_many_calls_at_once_does_not_crowd_out_the_others() -> None:
    # Per-tool caps make each call of a run queue in its own task, so a
    # sibling's whole batch of reads queues at once in the shared read pool
    # (one wide here). The others still get every third turn or better.
    order = tree(
        ConcurrencyConfig(read_width=1, per_tool={"read": 8}),
        "read",
        {"A": [[8], [8]], "B": [[8], [8]], "C": [[8], [8]]},
    )
    assert sorted(order) == ["A"] * 16 + ["B"] * 16 + ["C"] * 16
    for sibling in "ABC":
        assert longest_streak(order, sibling) <= 1, "".join(order)


async def test_fair_limiter_turns_cancellation_and_statistics() -> None:
    limiter = FairLimiter(1)
    a, b = limiter.lane(), limiter.lane()
    a1 = a.child()
    a.acquire_on_behalf_of_nowait("held")
    got: list[str] = []

    async def wait(lane: Lane, who: str, scope: trio.CancelScope | None = None) -> None:
        with scope or trio.CancelScope():
            await lane.acquire_on_behalf_of(who)
            got.append(who)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait, a, "a-own")
        await trio.testing.wait_all_tasks_blocked()
        gone = trio.CancelScope()
        nursery.start_soon(wait, a1, "a1", gone)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(wait, b, "b")
        await trio.testing.wait_all_tasks_blocked()
        assert limiter.statistics().tasks_waiting == 3
        gone.cancel()  # a cancelled waiter leaves its lane's turns
        await trio.testing.wait_all_tasks_blocked()
        assert limiter.statistics().tasks_waiting == 2
        with pytest.raises(trio.WouldBlock):  # nobody takes a token past a waiter
            b.acquire_on_behalf_of_nowait("barger")
        limiter.release("held")  # b has not been served yet; a's subtree has
        await trio.testing.wait_all_tasks_blocked()
        assert got == ["b"]
        limiter.release("b")
        await trio.testing.wait_all_tasks_blocked()
        assert got == ["b", "a-own"]
        limiter.release("a-own")
    assert limiter.statistics().tasks_waiting == 0
    assert limiter.borrowed_tokens == 0


async def test_fair_limiter_refuses_misuse_clearly() -> None:
    with pytest.raises(ValueError, match="total_tokens must be an integer >= 1, got 0"):
        FairLimiter(0)
    limiter = FairLimiter(2)
    lane = limiter.lane()
    await lane.acquire_on_behalf_of("x")  # a free token: taken at once
    assert (lane.total_tokens, lane.borrowed_tokens, lane.available_tokens) == (2, 1, 1)
    assert lane.statistics().borrowers == ["x"]
    with pytest.raises(RuntimeError, match="already holds"):
        lane.acquire_on_behalf_of_nowait("x")
    lane.release_on_behalf_of("x")
    with pytest.raises(RuntimeError, match="does not hold"):
        lane.release_on_behalf_of("x")
