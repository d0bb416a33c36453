"""Corners where a promise could break: odd outputs, odd exceptions, odd host inputs,
concurrent prompt_once questions, and the order calls are admitted in."""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, Any

import attrs
import pytest
import trio
import trio.testing

from conftest import KVTool, Recorder
from toolexec import (
    AgentLoop,
    ConcurrencyConfig,
    ErrorClass,
    JsonContent,
    RoutingClass,
    Sequential,
    SideEffects,
    TextContent,
    ToolCall,
    ToolContext,
    ToolDefinition,
    ToolExecutor,
    ToolOutput,
    ToolRegistry,
    function_tool,
)
from toolexec.approval import ApprovalAnswer, ApprovalConfig, ApprovalMode, ApprovalRequest
from toolexec.backends import SubprocessBackend
from toolexec.policy import CallHook, Capabilities, Rewrite
from toolexec.testing import ScriptedModel, tool_call

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from toolexec.mcp import MCPServerConfig


def single(fn: Callable[..., Any]) -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(function_tool(side_effects=SideEffects.READ)(fn))
    return registry


async def run_one(registry: ToolRegistry, name: str, **kw: Any) -> Any:
    (result,) = (await ToolExecutor(registry, **kw).execute_batch([ToolCall("1", name)])).results
    return result


# -- 1. a result is what the model can read, or an error ---------------------------


async def returns_object() -> Any:
    """Return something JSON cannot hold."""
    return object()


async def returns_set() -> Any:
    """Return a set."""
    return {1, 2}


async def returns_nan() -> Any:
    """Return NaN."""
    return float("nan")


async def returns_self_reference() -> Any:
    """Return a list that holds itself."""
    loop: list[Any] = []
    loop.append(loop)
    return loop


async def returns_bytes() -> Any:
    """Return bytes."""
    return b"raw"


@pytest.mark.parametrize(
    ("fn", "named"),
    [
        (returns_object, "returned object, which JSON cannot represent"),
        (returns_set, "returned set, which JSON cannot represent"),
        (returns_nan, "returned float, which JSON cannot represent"),
        (returns_self_reference, "returned list, which JSON cannot represent"),
        (returns_bytes, "returned bytes, which JSON cannot represent"),
    ],
)
async def test_a_value_json_cannot_hold_is_an_execution_error_naming_its_type(
    fn: Callable[..., Any], named: str
) -> None:
    result = await run_one(single(fn), fn.__name__)
    assert result.is_error
    assert result.error_class is ErrorClass.EXECUTION_ERROR
    assert f"Tool '{fn.__name__}' {named}" in result.text


async def test_a_forgotten_await_is_named_and_leaves_no_never_awaited_warning() -> None:
    async def inner() -> str:
        return "x"

    async def forgets() -> Any:
        """Forget to await: return the coroutine instead of its result."""
        return inner()

    result = await run_one(single(forgets), "forgets")  # filterwarnings=error would fail here
    assert result.error_class is ErrorClass.EXECUTION_ERROR
    assert "returned a coroutine (did you forget `await`?)" in result.text


async def test_json_values_still_pass() -> None:
    async def values() -> Any:
        """Return JSON."""
        return {"a": [1, 2.5, True, None, "é"], "b": (1, 2)}

    result = await run_one(single(values), "values")
    assert not result.is_error
    assert result.text == '{"a": [1, 2.5, true, null, "é"], "b": [1, 2]}'


OUT = ToolDefinition("out", "Out.", side_effects=SideEffects.READ)


@attrs.frozen
class ReturnsOutput:
    """A class-based tool returning whatever ``make`` builds."""

    make: Callable[[], Any]
    definition: ToolDefinition = OUT

    def __call__(self) -> ReturnsOutput:
        return self

    async def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        output: ToolOutput = self.make()
        return output


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda: ToolOutput("x"), "got str; for plain text use ToolOutput.text(...)"),  # type: ignore[arg-type]
        (lambda: ToolOutput((None,)), "item 0 is NoneType"),  # type: ignore[arg-type]
        (lambda: ToolOutput([TextContent("a")]), "got list"),  # type: ignore[arg-type]
        (lambda: ToolOutput((JsonContent(object()),)), "got object"),
        (lambda: ToolOutput.text(5), "TextContent.text must be a str, got int"),  # type: ignore[arg-type]
        (lambda: ToolOutput.text("a", is_error=False).__class__((), None), "details"),  # type: ignore[arg-type]
    ],
)
async def test_a_malformed_output_fails_where_it_is_made(
    make: Callable[[], Any], says: str
) -> None:
    registry = ToolRegistry()
    registry.register(ReturnsOutput(make))
    result = await run_one(registry, "out")
    assert result.error_class is ErrorClass.EXECUTION_ERROR
    assert says in result.text
    # What the host renders from it never fails later.
    from toolexec import formats

    assert formats.render_results([result], "anthropic")


# -- 2. nothing but cancellation and KeyboardInterrupt leaves the executor ----------


class Odd(BaseException):
    """A BaseException that is neither cancellation nor an interrupt."""


def exits() -> str:
    """Exit like argparse does on bad input (a sync tool, in a worker thread)."""
    sys.exit(2)


async def generator_exit() -> str:
    """Raise GeneratorExit."""
    raise GeneratorExit


async def odd() -> str:
    """Raise an odd BaseException."""
    raise Odd("strange")


async def odd_group() -> str:
    """Raise a group of a SystemExit and an error, as a tool's own nursery might."""
    raise BaseExceptionGroup("tool's nursery", [SystemExit(3), ValueError("v")])


@pytest.mark.parametrize(
    ("fn", "text"),
    [
        (exits, "SystemExit: 2"),
        (generator_exit, "GeneratorExit"),
        (odd, "Odd: strange"),
        (odd_group, "BaseExceptionGroup: tool's nursery"),
    ],
)
async def test_base_exceptions_of_a_tool_are_execution_errors(
    fn: Callable[..., Any], text: str
) -> None:
    registry = single(fn)
    registry.register(function_tool(side_effects=SideEffects.READ)(returns_set))
    executor = ToolExecutor(registry)
    outcome = await executor.execute_batch(
        [ToolCall("1", fn.__name__), ToolCall("2", fn.__name__), ToolCall("3", "returns_set")]
    )
    assert [r.error_class for r in outcome.results] == [ErrorClass.EXECUTION_ERROR] * 3
    assert text in outcome.results[0].text
    assert executor.statistics().calls_in_flight == 0


async def generator_exit_after_blocking() -> str:
    """Block once, then raise GeneratorExit."""
    await trio.sleep(0)
    raise GeneratorExit


@pytest.mark.parametrize(
    ("n", "config"),
    [
        (1, ConcurrencyConfig()),  # the batch's own task
        (4, ConcurrencyConfig()),  # a worker, then a cohort of tasks
        (4, ConcurrencyConfig(read_width=1)),  # one worker
        (3, ConcurrencyConfig(per_tool={"generator_exit_after_blocking": 2})),  # a task each
    ],
)
async def test_a_tools_own_generator_exit_after_blocking_is_an_execution_error(
    n: int, config: ConcurrencyConfig
) -> None:
    executor = ToolExecutor(single(generator_exit_after_blocking), config)
    calls = [ToolCall(str(i), "generator_exit_after_blocking") for i in range(n)]
    outcome = await executor.execute_batch(calls)
    assert [r.error_class for r in outcome.results] == [ErrorClass.EXECUTION_ERROR] * n
    assert all("GeneratorExit" in r.text for r in outcome.results)
    assert executor.statistics().calls_in_flight == 0


async def interrupts() -> str:
    """Raise KeyboardInterrupt."""
    raise KeyboardInterrupt


@pytest.mark.parametrize("n", [1, 2, 5])
async def test_keyboard_interrupt_comes_out_bare_whatever_the_batch_size(n: int) -> None:
    registry = single(interrupts)
    executor = ToolExecutor(registry)
    with pytest.raises(KeyboardInterrupt) as caught:
        await executor.execute_batch([ToolCall(str(i), "interrupts") for i in range(n)])
    assert type(caught.value) is KeyboardInterrupt
    assert executor.statistics().read.borrowed == 0


async def test_keyboard_interrupt_comes_out_bare_from_an_agent_loop() -> None:
    executor = ToolExecutor(single(interrupts))
    model = ScriptedModel([[tool_call("interrupts", {}), tool_call("interrupts", {})]])
    with pytest.raises(KeyboardInterrupt) as caught:
        await AgentLoop(model, executor).run("go")
    assert type(caught.value) is KeyboardInterrupt


# -- 3. host inputs are validated, and the gate fails closed ------------------------


@function_tool(side_effects=SideEffects.READ)
async def echo(text: str = "") -> str:
    """Echo."""
    return text


def echo_registry() -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(echo)
    return registry


class Returns(CallHook):
    def __init__(self, value: Any) -> None:
        self.value = value

    def before_call(self, call: ToolCall, arguments: Mapping[str, Any], agent_path: str) -> Any:
        return self.value


@pytest.mark.parametrize(
    ("decision", "says"),
    [
        (False, "a safety check gave no valid decision (bool)"),
        ("deny", "a safety check gave no valid decision (str)"),
        ({"text": "x"}, "a safety check gave no valid decision (dict)"),
        (Rewrite(None), "the host rewrote the arguments to NoneType"),  # type: ignore[arg-type]
        (Rewrite([("text", "x")]), "the host rewrote the arguments to list"),  # type: ignore[arg-type]
    ],
)
async def test_a_hook_without_a_valid_decision_denies_only_that_call(
    decision: Any, says: str, caplog: pytest.LogCaptureFixture
) -> None:
    class OnlyFirst(Returns):
        def before_call(self, call: ToolCall, arguments: Any, agent_path: str) -> Any:
            return self.value if call.id == "1" else None

    executor = ToolExecutor(echo_registry(), hooks=[OnlyFirst(decision)])
    with caplog.at_level(logging.ERROR, logger="toolexec"):
        outcome = await executor.execute_batch(
            [ToolCall("1", "echo", {"text": "a"}), ToolCall("2", "echo", {"text": "b"})]
        )
    denied, ran = outcome.results
    assert denied.error_class is ErrorClass.PERMISSION_DENIED
    assert says in denied.text
    assert ran.text == "b"
    assert "denying" in caplog.text


@pytest.mark.parametrize(
    ("answer", "messages"),
    [
        ("stop", ("stop",)),
        (["a", "b"], ("a", "b")),
        (("a",), ("a",)),
        (None, ()),
        ([], ()),
        ("", ()),
        (5, ("5",)),
        ([{"role": "user"}], ("{'role': 'user'}",)),
        (object, ("<class 'object'>",)),
    ],
)
async def test_steering_answers_of_every_type(answer: Any, messages: tuple[str, ...]) -> None:
    executor = ToolExecutor(echo_registry(), strategy=Sequential(), steering=lambda: answer)
    outcome = await executor.execute_batch(
        [ToolCall("1", "echo", {"text": "a"}), ToolCall("2", "echo", {"text": "b"})],
    )
    assert outcome.steering_messages == messages
    skipped = [r.error_class is ErrorClass.SKIPPED for r in outcome.results]
    assert skipped == [False, bool(messages)]


@pytest.mark.parametrize(
    ("kw", "error", "says"),
    [
        ({"hooks": [lambda call: None]}, TypeError, "hooks[0] must be call hooks"),
        ({"sinks": [print]}, TypeError, "sinks[0] must be event sinks (with emit)"),
        ({"policy": object()}, TypeError, "policy must be a policy (with decide)"),
        ({"approver": "ann"}, TypeError, "approver must be an approver (with request)"),
        ({"steering": ["stop"]}, TypeError, "steering must be callable or None"),
        ({"grace_period": -1}, ValueError, "grace_period must be seconds >= 0"),
        (
            {"approval": ApprovalMode.PROMPT},
            TypeError,
            "approval must be an ApprovalConfig or None; got <ApprovalMode.PROMPT",
        ),
        (
            {"config": {"read_width": 2}},
            TypeError,
            "config must be a ConcurrencyConfig (ConcurrencyConfig(...)); got {'read_width': 2}",
        ),
        (
            {"strategy": "parallel"},
            TypeError,
            "strategy must be an ExecutionStrategy: Parallel(), Sequential() or Batched(n);"
            " got 'parallel' (str)",
        ),
        ({"agent_path": None}, TypeError, "agent_path must be a string; got None (NoneType)"),
        ({"resource_conflicts": 1}, TypeError, "resource_conflicts must be True or False"),
    ],
)
def test_bad_host_inputs_are_refused_when_the_executor_is_built(
    kw: dict[str, Any], error: type[Exception], says: str
) -> None:
    with pytest.raises(error, match=re_escape(says)):
        ToolExecutor(echo_registry(), **kw)


def mcp_server_config(args: Any) -> MCPServerConfig:
    """An MCP server's configuration; ``toolexec.mcp`` (and the MCP SDK, which it
    imports) only when a test builds one, not at collection."""
    from toolexec.mcp import MCPServerConfig

    return MCPServerConfig("notes", command="server", args=args)


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda v: ConcurrencyConfig(promoted=v), "promoted"),
        (lambda v: Capabilities(tools=v), "Capabilities.tools"),
        (lambda v: ApprovalConfig(trusted_workspaces=v), "trusted_workspaces"),
        (lambda v: mcp_server_config(v), "an MCP server's args"),
        (lambda v: SubprocessBackend(env_allow=v), "env_allow"),
    ],
)
def test_a_field_of_several_names_refuses_one_string(make: Any, field: str) -> None:
    # Capabilities(tools="read_*") would have granted "*", every tool;
    # trusted_workspaces="/home/me/project" would have trusted "/".
    with pytest.raises(
        TypeError,
        match=re_escape(
            f"{field} must be a collection of strings, got the string 'read_*'; write ['read_*']"
        ),
    ):
        make("read_*")
    with pytest.raises(TypeError, match=re_escape(f"{field} must hold strings, got 1 (int)")):
        make(["a", 1])
    make(["read_*"])  # the list form is accepted


def re_escape(text: str) -> str:
    import re

    return re.escape(text)


# -- 4. prompt_once asks once --------------------------------------------------------


@attrs.define
class SlowHuman:
    """Answers after a while, and counts the questions."""

    approved: bool = True
    asked: list[str] = attrs.field(factory=list)
    delay: float = 10.0

    async def request(self, request: ApprovalRequest) -> ApprovalAnswer:
        self.asked.append(request.call_id)
        await trio.sleep(self.delay)
        return ApprovalAnswer(self.approved, by="ann")


def promoted_writes() -> tuple[ToolRegistry, Recorder]:
    rec = Recorder()
    registry = ToolRegistry()
    registry.register(lambda: KVTool(rec, "put", SideEffects.WRITE))
    return registry, rec


def puts(n: int) -> list[ToolCall]:
    return [ToolCall(str(i), "put", {"key": f"k{i}", "value": "v"}) for i in range(n)]


ONCE = ApprovalConfig(per_tool={"put": ApprovalMode.PROMPT_ONCE})


@pytest.mark.parametrize("approved", [True, False])
async def test_concurrent_prompt_once_calls_ask_once_and_share_the_answer(
    approved: bool, autojump_clock: trio.abc.Clock
) -> None:
    registry, rec = promoted_writes()
    human = SlowHuman(approved)
    executor = ToolExecutor(
        registry,
        config=ConcurrencyConfig(promoted=frozenset({"put"})),
        approver=human,
        approval=ONCE,
    )
    outcome = await executor.execute_batch(puts(3))
    assert len(human.asked) == 1
    expected = None if approved else ErrorClass.USER_DENIED
    assert [r.error_class for r in outcome.results] == [expected] * 3
    assert len(rec.store) == (3 if approved else 0)


async def test_sibling_agents_ask_once_too(autojump_clock: trio.abc.Clock) -> None:
    registry, _ = promoted_writes()
    human = SlowHuman()
    root = ToolExecutor(registry, approver=human, approval=ONCE)
    children = [root.fork_for_subagent(f"kid{i}") for i in range(3)]
    async with trio.open_nursery() as nursery:
        for i, child in enumerate(children):
            nursery.start_soon(child.execute_batch, [ToolCall(f"c{i}", "put", {"key": f"{i}"})])
    assert len(human.asked) == 1


async def test_when_the_first_question_times_out_the_next_call_asks_again(
    autojump_clock: trio.abc.Clock,
) -> None:
    registry, _ = promoted_writes()
    human = SlowHuman(delay=100.0)
    config = ApprovalConfig(per_tool={"put": ApprovalMode.PROMPT_ONCE}, timeout=30.0)
    executor = ToolExecutor(
        registry,
        config=ConcurrencyConfig(promoted=frozenset({"put"})),
        approver=human,
        approval=config,
    )
    outcome = await executor.execute_batch(puts(2))
    assert len(human.asked) == 2  # one after the other, not at once
    assert [r.error_class for r in outcome.results] == [ErrorClass.CONFIRMATION_TIMEOUT] * 2


# -- 7. admission order is deterministic ----------------------------------------------


@pytest.mark.parametrize(
    "config",
    [
        ConcurrencyConfig(per_tool={"get": 1}),
        ConcurrencyConfig(per_tool={"get": 2}),
        ConcurrencyConfig(read_width=3),
    ],
)
async def test_waiting_calls_are_admitted_in_emitted_order(
    config: ConcurrencyConfig, autojump_clock: trio.abc.Clock
) -> None:
    rec = Recorder()
    registry = ToolRegistry()
    registry.register(lambda: KVTool(rec, "get", SideEffects.READ))
    executor = ToolExecutor(registry, config=config)
    # Distinct durations: permits come free one at a time, so the start order
    # is the admission order.
    calls = [ToolCall(str(i), "get", {"key": "k", "delay": 1 + i / 100}) for i in range(12)]
    first = max(1, min(config.read_width, *config.per_tool.values(), 12))
    for _ in range(20):  # trio varies the start order of tasks on every run
        rec.log.clear()
        await executor.execute_batch(calls)
        started = rec.order("start")
        # The calls admitted at once start in the same scheduling step, in any
        # order; every call after them was admitted, and started, in emitted order.
        assert sorted(started[:first], key=int) == [str(i) for i in range(first)]
        assert started[first:] == [str(i) for i in range(first, 12)]


async def test_a_run_that_cannot_wait_needs_no_turns(autojump_clock: trio.abc.Clock) -> None:
    from toolexec._core._drive import may_wait
    from toolexec._core._lifecycle import CallSlot

    executor = ToolExecutor(echo_registry())
    slots = [CallSlot(i, ToolCall(str(i), "echo")) for i in range(5)]
    for slot in slots:
        slot.routing = RoutingClass.READ_ONLY
    assert not may_wait(executor.pools, slots)
    capped = ToolExecutor(echo_registry(), config=ConcurrencyConfig(per_tool={"echo": 9}))
    assert may_wait(capped.pools, slots)
