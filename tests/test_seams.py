"""The seams inside the executor: backends by sandbox name, and services."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
import pytest
import trio
import trio.testing

from toolexec import (
    Allow,
    ErrorClass,
    RoutingClass,
    SideEffects,
    TextContent,
    ToolCall,
    ToolContext,
    ToolDefinition,
    ToolError,
    ToolExecutor,
    ToolOutput,
    ToolRegistry,
    function_tool,
)
from toolexec.backends import Backend, HostBackend
from toolexec.policy import ExecutionGrant

if TYPE_CHECKING:
    from collections.abc import Mapping

    from toolexec import Tool
    from toolexec.policy import Decision


@attrs.frozen
class SandboxPolicy:
    """Sends every call of the tools in ``sandboxed`` to ``sandbox``."""

    sandbox: str
    sandboxed: frozenset[str] = frozenset({"note"})

    def decide(
        self, definition: ToolDefinition, arguments: Mapping[str, Any], agent_path: str
    ) -> Decision:
        if definition.name in self.sandboxed:
            return Allow(ExecutionGrant(sandbox=self.sandbox, limits={"memory_mb": 64}))
        return Allow()


@attrs.define
class RecordingBackend:
    """Runs calls in this process and records what it was given and when."""

    log: list[tuple[str, str]] = attrs.field(factory=list)
    grants: list[ExecutionGrant] = attrs.field(factory=list)
    delay: float = 1.0

    async def run(self, tool: Tool, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        self.log.append(("enter", ctx.call_id))
        self.grants.append(ctx.grant)
        await trio.sleep(self.delay)
        output = await tool.execute(arguments, ctx)
        self.log.append(("exit", ctx.call_id))
        return attrs.evolve(output, details={**output.details, "ran_in": ctx.grant.sandbox})


@function_tool(side_effects=SideEffects.WRITE)
async def note(text: str) -> str:
    """Write a note."""
    await trio.lowlevel.checkpoint()
    return f"noted {text}"


@function_tool(side_effects=SideEffects.READ)
async def peek() -> str:
    """Read something."""
    await trio.lowlevel.checkpoint()
    return "peeked"


def registry() -> ToolRegistry:
    tools = ToolRegistry()
    tools.register(note)
    tools.register(peek)
    return tools


def call(cid: str, text: str = "x") -> ToolCall:
    return ToolCall(cid, "note", {"text": text})


async def test_a_grant_routes_a_call_to_the_backend_registered_under_its_sandbox_name() -> None:
    backend = RecordingBackend()
    executor = ToolExecutor(
        registry(), policy=SandboxPolicy("recorded"), backends={"recorded": backend}
    )
    outcome = await executor.execute_batch([call("1", "hi"), ToolCall("2", "peek")])

    first, second = outcome.results
    assert (first.is_error, first.text, first.details["ran_in"]) == (False, "noted hi", "recorded")
    assert backend.grants == [ExecutionGrant(sandbox="recorded", limits={"memory_mb": 64})]
    # The other tool, granted the host, never reached the backend.
    assert (second.text, backend.log) == ("peeked", [("enter", "1"), ("exit", "1")])


async def test_an_unknown_sandbox_is_an_error_result_that_names_it_and_nothing_runs() -> None:
    backend = RecordingBackend()
    executor = ToolExecutor(registry(), policy=SandboxPolicy("gvisor"), backends={"rec": backend})
    outcome = await executor.execute_batch([call("1"), ToolCall("2", "peek")])

    refused, ran = outcome.results
    assert refused.is_error
    assert refused.error_class is ErrorClass.EXECUTION_ERROR
    assert refused.routing is RoutingClass.SHORT_CIRCUIT
    assert refused.text == (
        "Tool 'note' cannot run: its grant names the sandbox 'gvisor', which this executor "
        "does not have (it has: host, rec)."
    )
    assert outcome.plan.short_circuited == (0,)
    assert not ran.is_error
    assert backend.log == []


async def test_admission_and_order_hold_whatever_the_backend(
    autojump_clock: trio.abc.Clock,
) -> None:
    backend = RecordingBackend()
    executor = ToolExecutor(registry(), policy=SandboxPolicy("rec"), backends={"rec": backend})
    outcome = await executor.execute_batch([call(str(i)) for i in range(4)])

    assert [r.call_id for r in outcome.results] == ["0", "1", "2", "3"]
    # Serial mutators stay serial and in emitted order on the backend too.
    expected = [(step, str(i)) for i in range(4) for step in ("enter", "exit")]
    assert backend.log == expected
    assert executor.statistics().serial_mut.borrowed == 0


async def test_the_deadline_bounds_a_backend(autojump_clock: trio.abc.Clock) -> None:
    backend = RecordingBackend(delay=1000.0)
    policy_grant = ExecutionGrant(sandbox="rec", timeout=5.0)

    @attrs.frozen
    class Tight:
        def decide(self, definition: ToolDefinition, arguments: Any, agent_path: str) -> Decision:
            return Allow(policy_grant)

    executor = ToolExecutor(registry(), policy=Tight(), backends={"rec": backend})
    start = trio.current_time()
    (result,) = (await executor.execute_batch([call("1")])).results
    assert result.error_class is ErrorClass.TIMEOUT
    assert trio.current_time() - start == pytest.approx(5.0)
    assert backend.log == [("enter", "1")]


@pytest.mark.parametrize(
    ("error", "error_class", "text"),
    [
        (ToolError("sandbox is full"), ErrorClass.EXECUTION_ERROR, "sandbox is full"),
        (OSError("no such namespace"), ErrorClass.EXECUTION_ERROR, "OSError: no such namespace"),
    ],
)
async def test_a_failing_backend_gives_an_error_result(
    error: Exception, error_class: ErrorClass, text: str
) -> None:
    @attrs.frozen
    class Failing:
        async def run(self, tool: Tool, arguments: Any, ctx: ToolContext) -> ToolOutput:
            raise error

    executor = ToolExecutor(registry(), policy=SandboxPolicy("f"), backends={"f": Failing()})
    (result,) = (await executor.execute_batch([call("1")])).results
    assert result.is_error
    assert result.error_class is error_class
    assert text in result.text
    assert executor.statistics().calls_in_flight == 0


async def test_forks_share_the_backends() -> None:
    backend = RecordingBackend(delay=0)
    parent = ToolExecutor(registry(), policy=SandboxPolicy("rec"), backends={"rec": backend})
    child = parent.fork_for_subagent("kid")
    (result,) = (await child.execute_batch([call("1")])).results
    assert result.details["ran_in"] == "rec"
    assert child.backends == parent.backends


async def test_the_host_backend_runs_the_tool_itself() -> None:
    ctx = ToolContext("c1", "note")
    output = await HostBackend().run(note(), {"text": "a"}, ctx)
    assert isinstance(HostBackend(), Backend)
    assert output.content == (TextContent("noted a"),)


@pytest.mark.parametrize(
    ("backends", "error", "message"),
    [
        ({"host": HostBackend()}, ValueError, "other than 'host'"),
        ({"": HostBackend()}, ValueError, "non-empty strings"),
        ({"box": object()}, TypeError, "has no async run"),
    ],
)
def test_bad_backends_are_refused_when_the_executor_is_built(
    backends: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        ToolExecutor(registry(), backends=backends)


# -- services ------------------------------------------------------------------


@attrs.define(eq=False)
class Budget:
    left: int


SPEND = ToolDefinition("spend", "Spend one unit.", side_effects=SideEffects.WRITE)


@attrs.frozen
class Spender:
    """A tool that finds its host's services through its context."""

    definition: ToolDefinition = SPEND

    def __call__(self) -> Spender:
        return self

    async def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        budget = ctx.service(Budget)
        executor = ctx.service(ToolExecutor)
        if budget is None or executor is None:
            raise ToolError("no budget")
        budget.left -= 1
        return ToolOutput.text(f"{executor.agent_path}: {budget.left} left")


async def test_tools_find_the_services_and_their_executor_through_the_context() -> None:
    tools = ToolRegistry()
    tools.register(Spender())
    budget = Budget(3)
    parent = ToolExecutor(tools, services=[budget])
    child = parent.fork_for_subagent("kid")
    outcome = await parent.execute_batch([ToolCall("1", "spend")])
    child_outcome = await child.execute_batch([ToolCall("2", "spend")])
    assert outcome.results[0].text == "root: 2 left"
    assert child_outcome.results[0].text == "root/kid: 1 left"
    assert child.service(Budget) is parent.service(Budget) is budget


async def test_a_missing_service_is_none_or_installed_for_the_whole_tree() -> None:
    parent = ToolExecutor(registry())
    child = parent.fork_for_subagent()
    ctx = ToolContext("c1", "note", services=child.services)
    assert ctx.service(Budget) is None
    made = ctx.service(Budget, lambda: Budget(7))
    assert parent.service(Budget) is made
    assert ctx.service(Budget, lambda: Budget(0)) is made


def test_two_services_of_one_type_are_refused() -> None:
    with pytest.raises(ValueError, match="two services of type Budget"):
        ToolExecutor(registry(), services=[Budget(1), Budget(2)])


def test_an_executor_cannot_be_changed_after_it_is_built() -> None:
    executor = ToolExecutor(registry())
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        executor.policy = SandboxPolicy("x")  # type: ignore[misc]
