"""toolexec.openai_agents: the real SDK's ``Runner.run`` with toolexec tools.

The agent, runner and tool plumbing are the SDK's; the model is a small
implementation of the SDK's ``Model`` interface answering from a script.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest
import trio
from agents import Agent, Model, ModelResponse, RunConfig, Runner, Usage
from agents.testing import assistant_message, function_call

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
from toolexec.openai_agents import function_tools

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from agents.items import TResponseOutputItem


class ScriptedModel(Model):
    """Answers each ``get_response`` with the next scripted list of output items."""

    def __init__(self, turns: Sequence[list[TResponseOutputItem]]) -> None:
        self.turns = list(turns)
        self.inputs: list[Any] = []
        self.tool_names: list[str] = []

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        self.inputs.append(args[1] if len(args) > 1 else kwargs.get("input"))
        tools = args[3] if len(args) > 3 else kwargs.get("tools", [])
        self.tool_names = [t.name for t in tools]
        return ModelResponse(output=self.turns.pop(0), usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the scripted model does not stream")


def _outputs(items: Any) -> dict[str, str]:
    return {
        item["call_id"]: item["output"]
        for item in items
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    }


async def _run_agent(
    registry: ToolRegistry, turns: list[list[Any]], **kwargs: Any
) -> tuple[Any, ScriptedModel, list[BatchPlanned]]:
    batches: list[BatchPlanned] = []
    sink = CallbackSink(lambda e: batches.append(e) if isinstance(e, BatchPlanned) else None)
    model = ScriptedModel(turns)
    async with toolexec.aio.open_executor(registry, sinks=[sink], **kwargs) as executor:
        agent = Agent(name="helper", tools=list(function_tools(executor)), model=model)
        result = await Runner.run(agent, "go", run_config=RunConfig(tracing_disabled=True))
    return result, model, batches


def test_runner_completes_a_turn_with_tools_as_one_batch(tmp_path: Path) -> None:
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
            agent = Agent(name="helper", tools=function_tools(executor), model=ScriptedModel(turns))
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
