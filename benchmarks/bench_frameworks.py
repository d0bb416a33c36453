"""Each framework's own tool path against the same framework with toolexec's adapter.

Run: ``python benchmarks/bench_frameworks.py`` (``--quick`` for fewer
repeats). In one process, interleaved, for N = 10 and 100 calls of one cheap
async tool in a model turn (async, so that no framework runs it in a
thread), it times a whole tool turn in each framework two ways:

- LangGraph: a compiled graph ``START -> tools -> END`` given an
  ``AIMessage`` with N tool calls, the node being the prebuilt ``ToolNode``
  (over a ``@tool`` function) or ``toolexec.langgraph.ToolexecNode``;
- OpenAI Agents SDK: ``Runner.run`` with a scripted model answering N
  function calls then a final message, the tool being the SDK's
  ``@function_tool`` or ``toolexec.openai_agents.function_tools``;
- pydantic-ai: ``Agent.run`` with a ``FunctionModel`` answering N tool calls
  then text, the tool being ``@agent.tool_plain`` or
  ``toolexec.pydantic_ai.ToolexecToolset``.

Both sides of a row run the same framework machinery (graph, runner, agent,
scripted model), so the difference is the tool path. It prints microseconds
per call for each and the ratio (own / toolexec: above 1 means the toolexec
adapter is faster), with the load average before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from typing import TYPE_CHECKING, Any

from agents import Agent as OAAgent
from agents import Model, ModelResponse, RunConfig, Runner, Usage
from agents import function_tool as oa_function_tool
from agents.testing import assistant_message, function_call
from langchain_core.messages import AIMessage
from langchain_core.tools import tool as lc_tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from pydantic_ai import Agent as PAAgent
from pydantic_ai.messages import ModelMessage, TextPart, ToolCallPart
from pydantic_ai.messages import ModelResponse as PAResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel

import toolexec.aio
from toolexec import ConcurrencyConfig, SideEffects, ToolRegistry, function_tool
from toolexec.langgraph import ToolexecNode
from toolexec.openai_agents import function_tools
from toolexec.pydantic_ai import ToolexecToolset

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Coroutine

SIZES = (10, 100)
CALLS_PER_SAMPLE = 400


async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _registry() -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(function_tool(side_effects=SideEffects.NONE)(add))
    return registry


def _config(n: int) -> ConcurrencyConfig:
    # Room for the whole turn at once, as the frameworks give it.
    return ConcurrencyConfig(read_width=n, concurrent_mut_width=n)


def _args(i: int) -> dict[str, int]:
    return {"a": i, "b": 1}


async def _time_turns(turn: Callable[[], Awaitable[Any]], n: int) -> float:
    """Seconds per call over enough turns of ``n`` calls (after one warm-up turn)."""
    turns = max(2, CALLS_PER_SAMPLE // n)
    await turn()
    start = time.perf_counter()
    for _ in range(turns):
        await turn()
    return (time.perf_counter() - start) / (turns * n)


# -- LangGraph ---------------------------------------------------------------------


def _graph(node: Any) -> Any:
    builder = StateGraph(MessagesState)
    builder.add_node("tools", node)
    builder.add_edge(START, "tools")
    builder.add_edge("tools", END)
    return builder.compile()


def _ai_message(n: int) -> AIMessage:
    calls = [
        {"id": f"c{i}", "name": "add", "args": _args(i), "type": "tool_call"} for i in range(n)
    ]
    return AIMessage(content="", tool_calls=calls)


async def langgraph_own(n: int) -> float:
    graph, message = _graph(ToolNode([lc_tool(add)])), _ai_message(n)
    return await _time_turns(lambda: graph.ainvoke({"messages": [message]}), n)


async def langgraph_toolexec(n: int) -> float:
    async with toolexec.aio.open_executor(_registry(), config=_config(n)) as executor:
        graph, message = _graph(ToolexecNode(executor)), _ai_message(n)
        return await _time_turns(lambda: graph.ainvoke({"messages": [message]}), n)


# -- OpenAI Agents SDK ---------------------------------------------------------------


class TurnModel(Model):
    """Answers a turn of ``n`` calls of ``add``, then a final message, forever."""

    def __init__(self, n: int) -> None:
        self.calls = [function_call("add", _args(i), call_id=f"c{i}") for i in range(n)]
        self.final = [assistant_message("done")]
        self.next_is_calls = True

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        output, self.next_is_calls = (
            (self.calls, False) if self.next_is_calls else (self.final, True)
        )
        return ModelResponse(output=list(output), usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


async def _runner_turns(tools: list[Any], n: int) -> float:
    agent = OAAgent(name="bench", tools=tools, model=TurnModel(n))
    config = RunConfig(tracing_disabled=True)
    return await _time_turns(lambda: Runner.run(agent, "go", run_config=config), n)


async def agents_own(n: int) -> float:
    return await _runner_turns([oa_function_tool(add)], n)


async def agents_toolexec(n: int) -> float:
    async with toolexec.aio.open_executor(_registry(), config=_config(n)) as executor:
        return await _runner_turns(list(function_tools(executor)), n)


# -- pydantic-ai ---------------------------------------------------------------------


def _function_model(n: int) -> FunctionModel:
    calls = [ToolCallPart("add", json.dumps(_args(i)), tool_call_id=f"c{i}") for i in range(n)]

    def answer(messages: list[ModelMessage], info: AgentInfo) -> PAResponse:
        # A fresh run has one message (the prompt): call the tools; then answer.
        return PAResponse(parts=list(calls) if len(messages) == 1 else [TextPart("done")])

    return FunctionModel(answer)


async def pydantic_ai_own(n: int) -> float:
    agent = PAAgent(_function_model(n))
    agent.tool_plain(add)
    return await _time_turns(lambda: agent.run("go"), n)


async def pydantic_ai_toolexec(n: int) -> float:
    async with toolexec.aio.open_executor(_registry(), config=_config(n)) as executor:
        agent = PAAgent(_function_model(n), toolsets=[ToolexecToolset(executor)])
        return await _time_turns(lambda: agent.run("go"), n)


ROWS: list[
    tuple[
        str,
        str,
        Callable[[int], Coroutine[Any, Any, float]],
        Callable[[int], Coroutine[Any, Any, float]],
    ]
] = [
    ("LangGraph", "graph.ainvoke: ToolNode vs ToolexecNode", langgraph_own, langgraph_toolexec),
    ("OpenAI Agents SDK", "Runner.run: function_tool vs toolexec", agents_own, agents_toolexec),
    (
        "pydantic-ai",
        "Agent.run: tool_plain vs ToolexecToolset",
        pydantic_ai_own,
        pydantic_ai_toolexec,
    ),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 repeats instead of 7")
    repeats = 3 if parser.parse_args().quick else 7
    print("load average before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    print(f"framework tool paths, own vs toolexec adapter: median of {repeats} repeats\n")
    print("| framework | path | N | own us/call | toolexec us/call | own / toolexec |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, path, own, adapted in ROWS:
        for n in SIZES:
            mine: list[float] = []
            theirs: list[float] = []
            for _ in range(repeats):  # interleaved, so noise hits both alike
                theirs.append(asyncio.run(own(n)))
                mine.append(asyncio.run(adapted(n)))
            o, t = statistics.median(theirs) * 1e6, statistics.median(mine) * 1e6
            print(f"| {name} | {path} | {n} | {o:.1f} | {t:.1f} | {o / t:.2f}x |")
    print("\nload average after: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))


if __name__ == "__main__":
    main()
