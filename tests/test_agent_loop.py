"""AgentLoop and ScriptedModel: turns, outcomes, steering, usage, cancellation."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import trio
import trio.testing

from conftest import live_tasks
from toolexec import (
    AgentLoop,
    ErrorClass,
    Sequential,
    SideEffects,
    StopReason,
    ToolContext,
    ToolExecutor,
    ToolRegistry,
    function_tool,
)
from toolexec.events import CallbackSink, CallFailed, Event
from toolexec.models import Message, Model, ModelResponse, Usage
from toolexec.testing import ScriptedModel, ScriptExhaustedError, tool_call

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from toolexec import AgentResult


def make_registry(log: list[str]) -> ToolRegistry:
    @function_tool(side_effects=SideEffects.READ)
    async def lookup(key: str) -> str:
        """Look a key up."""
        log.append(key)
        return f"value of {key}"

    @function_tool(side_effects=SideEffects.WRITE)
    async def note(text: str) -> str:
        """Write a note."""
        log.append(f"note:{text}")
        return "noted"

    registry = ToolRegistry()
    registry.register(lookup)
    registry.register(note)
    return registry


async def test_loop_runs_calls_and_returns_the_final_text() -> None:
    log: list[str] = []
    model = ScriptedModel(
        [
            ModelResponse(
                "let me look",
                (tool_call("lookup", {"key": "a"}), tool_call("lookup", {"key": "b"})),
                Usage(10, 3),
            ),
            lambda messages: ModelResponse(
                " + ".join(r.text for r in messages[-1].tool_results), usage=Usage(20, 5)
            ),
        ]
    )
    loop = AgentLoop(model, ToolExecutor(make_registry(log)), system_prompt="be terse")
    result = await loop.run("what are a and b?")

    assert result.stop_reason is StopReason.FINISHED
    assert result.finished
    assert result.text == "value of a + value of b"
    assert sorted(log) == ["a", "b"]
    assert result.usage == Usage(30, 8)
    assert (result.turns, result.tool_calls) == (2, 2)
    assert result.loop_id.startswith("loop-")
    assert result.agent_path == "root"
    roles = [m.role for m in result.transcript]
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    assert result.transcript[0].text == "be terse"
    assert [r.call_id for r in result.transcript[3].tool_results] == [
        c.id for c in result.transcript[2].tool_calls
    ]
    # The model was shown the registry's tools and the conversation so far.
    assert model.requests[0].tool_names == ("lookup", "note")
    assert len(model.requests[1].messages) == 4


async def test_each_run_gets_a_fresh_loop_id() -> None:
    ids = set()
    for _ in range(3):
        loop = AgentLoop(ScriptedModel(["done"]), ToolExecutor(ToolRegistry()))
        ids.add((await loop.run("hi")).loop_id)
    assert len(ids) == 3


async def test_max_turns_is_an_outcome_and_the_last_calls_still_get_results() -> None:
    log: list[str] = []
    model = ScriptedModel([tool_call("lookup", {"key": str(i)}) for i in range(5)])
    result = await AgentLoop(model, ToolExecutor(make_registry(log)), max_turns=3).run("go")

    assert result.stop_reason is StopReason.MAX_TURNS
    assert not result.finished
    assert result.turns == 3
    assert log == ["0", "1", "2"]
    assert model.remaining == 2
    # Every assistant call has its result: the transcript can be continued.
    last = result.transcript[-1]
    assert last.role == "tool"
    assert last.tool_results[0].text == "value of 2"


async def test_a_transcript_can_be_continued() -> None:
    log: list[str] = []
    first = await AgentLoop(
        ScriptedModel([tool_call("lookup", {"key": "x"})]),
        ToolExecutor(make_registry(log)),
        max_turns=1,
    ).run("start")
    model = ScriptedModel(["continued"])
    second = await AgentLoop(model, ToolExecutor(make_registry(log))).run(first.transcript)
    assert second.text == "continued"
    assert model.requests[0].messages == first.transcript
    assert second.transcript[: len(first.transcript)] == first.transcript


def test_max_turns_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_turns"):
        AgentLoop(ScriptedModel([]), ToolExecutor(ToolRegistry()), max_turns=0)


async def test_steering_skips_the_rest_and_becomes_a_user_message() -> None:
    log: list[str] = []
    polls: list[int] = []

    def steering() -> list[str]:
        polls.append(1)
        return ["stop writing notes, summarise"] if len(polls) == 1 else []

    executor = ToolExecutor(make_registry(log), strategy=Sequential(), steering=steering)
    model = ScriptedModel(
        [
            [tool_call("note", {"text": "one"}), tool_call("note", {"text": "two"})],
            lambda messages: f"ok: {messages[-1].text}",
        ]
    )
    result = await AgentLoop(model, executor).run("take notes")

    assert log == ["note:one"]
    assert [m.role for m in result.transcript] == ["user", "assistant", "tool", "user", "assistant"]
    tool_message = result.transcript[2]
    assert [r.error_class for r in tool_message.tool_results] == [None, ErrorClass.SKIPPED]
    assert result.transcript[3] == Message("user", "stop writing notes, summarise")
    assert result.text == "ok: stop writing notes, summarise"
    assert result.stop_reason is StopReason.FINISHED


async def test_host_cancel_of_a_batch_stops_the_loop_with_an_outcome() -> None:
    started = trio.Event()

    @function_tool(side_effects=SideEffects.READ)
    async def wait_forever() -> str:
        """Block."""
        started.set()
        await trio.sleep_forever()
        return "never"

    registry = ToolRegistry()
    registry.register(wait_forever)
    executor = ToolExecutor(registry)
    model = ScriptedModel([tool_call("wait_forever"), "unreachable"])
    box: list[AgentResult] = []

    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: _store(box, AgentLoop(model, executor).run("go")))
        await started.wait()
        executor.cancel_all()

    (result,) = box
    assert result.stop_reason is StopReason.CANCELLED
    assert result.transcript[-1].tool_results[0].error_class is ErrorClass.CANCELLED
    assert model.remaining == 1


async def _store(box: list[AgentResult], coro: Awaitable[AgentResult]) -> None:
    box.append(await coro)


async def test_outer_cancellation_answers_every_call_and_leaves_no_task() -> None:
    events: list[Event] = []
    running = 0

    @function_tool(side_effects=SideEffects.READ)
    async def slow(n: int) -> str:
        """Block."""
        nonlocal running
        running += 1
        try:
            await trio.sleep_forever()
        finally:
            running -= 1
        return "never"

    registry = ToolRegistry()
    registry.register(slow)
    executor = ToolExecutor(registry, sinks=[CallbackSink(events.append)])
    model = ScriptedModel([[tool_call("slow", {"n": i}) for i in range(4)]])
    before = live_tasks()

    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(AgentLoop(model, executor).run, "go")
            await trio.testing.wait_all_tasks_blocked()
            assert running == 4
            scope.cancel()
    assert scope.cancelled_caught
    assert running == 0
    assert live_tasks() == before
    failed = [e for e in events if isinstance(e, CallFailed)]
    assert len(failed) == 4
    assert {e.error_class for e in failed} == {ErrorClass.CANCELLED}


async def test_cancellation_propagates_as_plain_cancelled(autojump_clock: object) -> None:
    @function_tool(side_effects=SideEffects.READ)
    async def slow() -> str:
        """Block."""
        await trio.sleep_forever()
        return "never"

    registry = ToolRegistry()
    registry.register(slow)
    loop = AgentLoop(ScriptedModel([tool_call("slow")]), ToolExecutor(registry))
    raised: list[BaseException] = []
    with trio.move_on_after(1):
        try:
            await loop.run("go")
        except BaseException as exc:
            raised.append(exc)
            raise
    assert [type(e) for e in raised] == [trio.Cancelled]


async def test_a_loop_runs_inside_a_tool_call_on_the_same_executor(autojump_clock: object) -> None:
    """A loop runs its batch in the task that calls it. Started by a tool, that
    task is a worker holding the tool call's permit; the inner batch's workers
    take permits of their own from the same read pool, under an outer loop
    and under a plain batch alike."""
    log: list[str] = []
    registry = make_registry(log)

    @function_tool(side_effects=SideEffects.READ)
    async def delegate(ctx: ToolContext, key: str) -> str:
        """Ask an inner loop on this same executor."""
        executor = ctx.service(ToolExecutor)
        assert executor is not None
        calls = [tool_call("lookup", {"key": f"{key}{i}"}) for i in range(3)]
        result = await AgentLoop(ScriptedModel([calls, "inner done"]), executor).run(key)
        return f"{result.text}: {len(result.transcript[-2].tool_results)} results"

    registry.register(delegate)
    executor = ToolExecutor(registry)
    outer = [tool_call("delegate", {"key": k}) for k in "ab"]
    with trio.fail_after(60):
        result = await AgentLoop(ScriptedModel([outer, "outer done"]), executor).run("go")
        batch = await executor.execute_batch([tool_call("delegate", {"key": "c"})])
    assert result.finished
    texts = [r.text for r in result.transcript[-2].tool_results] + [batch.results[0].text]
    assert texts == ["inner done: 3 results"] * 3
    assert sorted(log) == sorted(f"{k}{i}" for k in "abc" for i in range(3))


async def test_progress_lines_per_turn() -> None:
    lines: list[str] = []
    model = ScriptedModel([[tool_call("lookup", {"key": "k"})], "done"])
    loop = AgentLoop(model, ToolExecutor(make_registry([])), on_progress=lines.append)
    await loop.run("go")
    assert lines == ["turn 1: 1 tool call(s): lookup", "turn 2: answered"]


async def test_model_errors_propagate() -> None:
    class Broken:
        async def respond(self, messages: object, tools: object) -> ModelResponse:
            raise ConnectionError("provider down")

    with pytest.raises(ConnectionError, match="provider down"):
        await AgentLoop(Broken(), ToolExecutor(ToolRegistry())).run("hi")


# -- ScriptedModel --------------------------------------------------------------


async def test_scripted_model_fails_loudly_when_the_script_runs_out() -> None:
    model = ScriptedModel([tool_call("lookup", {"key": "a"})])
    loop = AgentLoop(model, ToolExecutor(make_registry([])))
    with pytest.raises(ScriptExhaustedError, match=r"ran out of steps: it was asked a turn 2"):
        await loop.run("go")


async def test_scripted_model_accepts_every_step_form() -> None:
    async def later(messages: object) -> str:
        await trio.lowlevel.checkpoint()
        return "async text"

    call = tool_call("x", id="fixed")
    model = ScriptedModel(
        ["text", call, [call, call], ModelResponse("both", (call,)), lambda m: call, later]
    )
    answers = [await model.respond([], []) for _ in range(6)]
    assert answers[0] == ModelResponse("text")
    assert answers[1].tool_calls == (call,)
    assert answers[2].tool_calls == (call, call)
    assert answers[3] == ModelResponse("both", (call,))
    assert answers[4].tool_calls == (call,)
    assert answers[5].text == "async text"
    assert model.remaining == 0


async def test_scripted_model_rejects_a_bad_step() -> None:
    model = ScriptedModel([42])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="expected a str, a ToolCall"):
        await model.respond([], [])


def test_scripted_model_is_a_model() -> None:
    assert isinstance(ScriptedModel([]), Model)


def test_tool_call_ids_are_unique_unless_given() -> None:
    a, b = tool_call("t"), tool_call("t", {"k": 1})
    assert a.id != b.id
    assert b.arguments == {"k": 1}
    assert tool_call("t", id="mine").id == "mine"
