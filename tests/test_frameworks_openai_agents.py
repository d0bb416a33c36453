"""toolexec.openai_agents: the real SDK's ``Runner.run`` with toolexec tools.

The agent, runner and tool plumbing are the SDK's; the model is a small
implementation of the SDK's ``Model`` interface answering from a script.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import attrs
import pytest
import trio

import toolexec.aio
from toolexec import (
    ConcurrencyConfig,
    SideEffects,
    ToolRegistry,
    Workspace,
    function_tool,
    register_builtin_tools,
)
from toolexec.events import BatchPlanned, CallbackSink

if TYPE_CHECKING:
    from pathlib import Path

    from agents import Model
    from agents.items import TResponseOutputItem

# The SDK (``agents``, and ``toolexec.openai_agents`` which imports it) is
# imported in the functions that use it, not at import: collection stays free
# of it, and it takes over a second to import.


@attrs.define
class Script:
    """The scripted model's turns, and what it was sent on each."""

    turns: list[list[TResponseOutputItem]]
    inputs: list[Any] = attrs.Factory(list)
    tool_names: list[str] = attrs.Factory(list)


def scripted_model(script: Script) -> Model:
    """An SDK ``Model`` answering each ``get_response`` with the next scripted turn."""
    from agents import Model, ModelResponse, Usage

    class ScriptedModel(Model):
        async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
            script.inputs.append(args[1] if len(args) > 1 else kwargs.get("input"))
            tools = args[3] if len(args) > 3 else kwargs.get("tools", [])
            script.tool_names = [t.name for t in tools]
            return ModelResponse(output=script.turns.pop(0), usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError("the scripted model does not stream")

    return ScriptedModel()


def _outputs(items: Any) -> dict[str, str]:
    return {
        item["call_id"]: item["output"]
        for item in items
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    }


async def _run_agent(
    registry: ToolRegistry, turns: list[list[Any]], **kwargs: Any
) -> tuple[Any, Script, list[BatchPlanned]]:
    from agents import Agent, RunConfig, Runner

    from toolexec.openai_agents import function_tools

    batches: list[BatchPlanned] = []
    sink = CallbackSink(lambda e: batches.append(e) if isinstance(e, BatchPlanned) else None)
    script = Script(list(turns))
    model = scripted_model(script)
    async with toolexec.aio.open_executor(registry, sinks=[sink], **kwargs) as executor:
        agent = Agent(name="helper", tools=list(function_tools(executor)), model=model)
        result = await Runner.run(agent, "go", run_config=RunConfig(tracing_disabled=True))
    return result, script, batches


def test_runner_completes_a_turn_with_tools_as_one_batch(tmp_path: Path) -> None:
    from agents.testing import assistant_message, function_call

    (tmp_path / "a.txt").write_text("v1\n")
    registry = ToolRegistry()
    register_builtin_tools(registry, Workspace(tmp_path))
    turns = [
        [
            function_call("read_file", {"path": "a.txt"}, call_id="r1"),
            function_call("write_file", {"path": "a.txt", "content": "v2\n"}, call_id="w1"),
            function_call("read_file", {"path": "a.txt"}, call_id="r2"),
            function_call("echo", "{not json", call_id="bad"),
            function_call("echo", {"text": "hi"}, call_id="e1"),
        ],
        [assistant_message("all done")],
    ]
    result, model, batches = asyncio.run(
        _run_agent(registry, turns, config=ConcurrencyConfig(read_width=8))
    )
    assert result.final_output == "all done"
    assert "read_file" in model.tool_names
    outputs = _outputs(model.inputs[1])
    assert list(outputs) == ["r1", "w1", "r2", "bad", "e1"]
    assert "v1" in outputs["r1"]
    assert "v2" in outputs["r2"]
    assert "JSON" in outputs["bad"] or "json" in outputs["bad"]
    assert outputs["e1"] == "hi"
    assert len(batches) == 1
    assert (tmp_path / "a.txt").read_text() == "v2\n"


def test_a_per_tool_cap_holds_across_the_turn() -> None:
    """Four calls of a tool capped at two: never more than two run at once, recorded
    from inside the tools."""
    from agents.testing import assistant_message, function_call

    running = 0
    peak = 0
    registry = ToolRegistry()

    @function_tool(side_effects=SideEffects.READ)
    async def probe(n: int) -> int:
        """Record how many probes overlap."""
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await trio.lowlevel.checkpoint()
        await trio.testing.wait_all_tasks_blocked()
        running -= 1
        return n

    registry.register(probe)
    turns = [
        [function_call("probe", {"n": i}, call_id=f"p{i}") for i in range(4)],
        [assistant_message("ok")],
    ]
    result, model, batches = asyncio.run(
        _run_agent(registry, turns, config=ConcurrencyConfig(per_tool={"probe": 2}))
    )
    assert result.final_output == "ok"
    assert list(_outputs(model.inputs[1]).values()) == ["0", "1", "2", "3"]
    assert len(batches) == 1
    assert peak == 2


def test_names_pick_the_tools_and_unknown_names_are_refused(tmp_path: Path) -> None:
    from toolexec.openai_agents import function_tools

    registry = ToolRegistry()
    register_builtin_tools(registry, Workspace(tmp_path))

    async def main(names: list[str]) -> list[str]:
        async with toolexec.aio.open_executor(registry) as executor:
            return [t.name for t in function_tools(executor, names=names)]

    assert asyncio.run(main(["echo", "read_file"])) == ["echo", "read_file"]
    with pytest.raises(KeyError, match="no tool named 'nope'"):
        asyncio.run(main(["nope"]))


def test_cancelling_the_run_cancels_the_batch() -> None:
    """Cancelling Runner.run cancels the toolexec batch: no call is left in flight."""
    from agents import Agent, RunConfig, Runner
    from agents.testing import function_call

    from toolexec.openai_agents import function_tools

    registry = ToolRegistry()

    @function_tool(side_effects=SideEffects.READ)
    async def wait() -> str:
        """Wait until cancelled."""
        await trio.sleep_forever()
        return "never"

    registry.register(wait)
    turns = [[function_call("wait", {}, call_id=f"w{i}") for i in range(2)]]

    async def main() -> int:
        async with toolexec.aio.open_executor(registry) as executor:
            model = scripted_model(Script(list(turns)))
            agent = Agent(name="helper", tools=function_tools(executor), model=model)
            config = RunConfig(tracing_disabled=True)
            run = asyncio.create_task(Runner.run(agent, "go", run_config=config))
            while executor.executor.statistics().calls_in_flight < 2:
                await asyncio.sleep(0)
            run.cancel()
            with pytest.raises(asyncio.CancelledError):
                await run
            # The SDK cancels its tool tasks without waiting for them, so the batch
            # ends a few loop turns after Runner.run raised (bounded: a hang guard).
            for _ in range(10_000):
                if not executor.executor.statistics().calls_in_flight:
                    break
                await asyncio.sleep(0)
            return executor.executor.statistics().calls_in_flight

    assert asyncio.run(main()) == 0
