"""Concurrent ``prompt_once`` calls across batches and sibling agents ask once.

Theory of operation. Hypothesis draws a number of sibling agents (forks of
one root, sharing its approval memory), a batch of calls of one
``prompt_once`` tool for each (the tool promoted, so a batch's calls run at
once, or not), a human who answers yes or no after a delay, and an approval
timeout that the delay may exceed. Every agent runs its batch at the same
time on ``MockClock(autojump_threshold=0)``.

The checks: when the human answers in time, they were asked exactly once,
and every call got that answer (run, or ``user_denied``); when they never
answer in time, the questions came one after another (never two open at
once), each call that asked got ``confirmation_timeout``; every result is
in call order; nothing is left open in the memory and no permit is held.
"""

from __future__ import annotations

from typing import Any

import attrs
import trio
import trio.testing
from hypothesis import event, given, settings
from hypothesis import strategies as st

from stress.conftest import stress_profile
from toolexec import (
    ConcurrencyConfig,
    ErrorClass,
    SideEffects,
    ToolCall,
    ToolExecutor,
    ToolRegistry,
    function_tool,
)
from toolexec.approval import ApprovalAnswer, ApprovalConfig, ApprovalMode, ApprovalRequest


@attrs.frozen
class Case:
    agents: int
    calls: tuple[int, ...]  # calls per agent
    promoted: bool
    approved: bool
    delay: int
    timeout: float


@st.composite
def cases(draw: st.DrawFn) -> Case:
    agents = draw(st.integers(1, 4))
    return Case(
        agents=agents,
        calls=tuple(draw(st.lists(st.integers(1, 4), min_size=agents, max_size=agents))),
        promoted=draw(st.booleans()),
        approved=draw(st.booleans()),
        delay=draw(st.integers(0, 6)),
        timeout=draw(st.sampled_from([2.5, 10.5])),
    )


@attrs.define
class Human:
    case: Case
    asked: list[str] = attrs.field(factory=list)
    open_now: int = 0
    open_peak: int = 0

    async def request(self, request: ApprovalRequest) -> ApprovalAnswer:
        self.asked.append(request.call_id)
        self.open_now += 1
        self.open_peak = max(self.open_peak, self.open_now)
        try:
            await trio.sleep(self.case.delay)
            return ApprovalAnswer(self.case.approved, by="ann")
        finally:
            self.open_now -= 1


@function_tool(side_effects=SideEffects.WRITE)
async def put(key: str) -> str:
    """Write a key."""
    await trio.sleep(1)
    return f"put {key}"


@settings(settings.get_profile(stress_profile()))
@given(case=cases())
def test_prompt_once_asks_once_across_batches_and_agents(case: Case) -> None:
    registry = ToolRegistry()
    registry.register(put)
    human = Human(case)
    root = ToolExecutor(
        registry,
        config=ConcurrencyConfig(promoted=frozenset({"put"}) if case.promoted else frozenset()),
        approver=human,
        approval=ApprovalConfig(per_tool={"put": ApprovalMode.PROMPT_ONCE}, timeout=case.timeout),
    )
    agents = [root.fork_for_subagent(f"a{i}") for i in range(case.agents)]
    outcomes: dict[int, Any] = {}

    async def agent(i: int) -> None:
        calls = [ToolCall(f"a{i}c{j}", "put", {"key": f"{i}.{j}"}) for j in range(case.calls[i])]
        outcomes[i] = await agents[i].execute_batch(calls)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for i in range(case.agents):
                nursery.start_soon(agent, i)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))

    results = [r for i in range(case.agents) for r in outcomes[i].results]
    for i in range(case.agents):
        ids = [r.call_id for r in outcomes[i].results]
        assert ids == [f"a{i}c{j}" for j in range(case.calls[i])]
    assert human.open_peak == 1, "two prompt_once questions for one tool were open at once"
    in_time = case.delay < case.timeout
    if in_time:
        assert len(human.asked) == 1
        want = None if case.approved else ErrorClass.USER_DENIED
        assert [r.error_class for r in results] == [want] * len(results)
    else:
        assert len(human.asked) == len(results)
        assert {r.error_class for r in results} == {ErrorClass.CONFIRMATION_TIMEOUT}
    assert root._memory.open == {}
    for executor in (root, *agents):
        stats = executor.statistics()
        assert stats.concurrent_mut.borrowed == stats.serial_mut.borrowed == 0
    event(f"in_time={in_time} approved={case.approved} agents={case.agents}")
