"""toolexec.pydantic_ai: the real ``Agent.run`` with a toolexec toolset.

The agent, its tool manager and messages are pydantic-ai's; the model is its
``FunctionModel``, answering from a script.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest

import toolexec.aio
from toolexec import ConcurrencyConfig, ToolRegistry, Workspace, register_builtin_tools
from toolexec.events import BatchPlanned, CallbackSink

if TYPE_CHECKING:
    from pathlib import Path

    from pydantic_ai.messages import ModelMessage, RetryPromptPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

# pydantic-ai (and ``toolexec.pydantic_ai``, which imports it) is imported in
# the functions that use it, not at import: collection stays free of it.


def _script(*turns: list[ToolCallPart] | str) -> tuple[FunctionModel, list[list[ModelMessage]]]:
    from pydantic_ai.messages import ModelResponse, TextPart
    from pydantic_ai.models.function import FunctionModel

    seen: list[list[ModelMessage]] = []
    queue = list(turns)

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        turn = queue.pop(0)
        if isinstance(turn, str):
            return ModelResponse(parts=[TextPart(turn)])
        return ModelResponse(parts=list(turn))

    return FunctionModel(answer), seen


def _replies(messages: list[ModelMessage]) -> list[ToolReturnPart | RetryPromptPart]:
    from pydantic_ai.messages import ModelRequest, RetryPromptPart, ToolReturnPart

    last = messages[-1]
    assert isinstance(last, ModelRequest)
    return [p for p in last.parts if isinstance(p, ToolReturnPart | RetryPromptPart)]


def _registry(root: Path) -> ToolRegistry:
    registry = ToolRegistry()
    register_builtin_tools(registry, Workspace(root))
    return registry


async def _run(
    registry: ToolRegistry, model: FunctionModel, **toolset_kwargs: Any
) -> tuple[str, list[BatchPlanned], list[str]]:
    from pydantic_ai import Agent

    from toolexec.pydantic_ai import ToolexecToolset

    batches: list[BatchPlanned] = []
    sink = CallbackSink(lambda e: batches.append(e) if isinstance(e, BatchPlanned) else None)
    async with toolexec.aio.open_executor(
        registry, sinks=[sink], config=ConcurrencyConfig(read_width=8)
    ) as executor:
        toolset = ToolexecToolset(executor, **toolset_kwargs)
        names = list(await toolset.get_tools(None))  # type: ignore[arg-type]
        result = await Agent(model, toolsets=[toolset]).run("go")
    return result.output, batches, names


def test_agent_run_completes_a_turn_with_tools_as_one_batch(tmp_path: Path) -> None:
    from pydantic_ai.messages import ToolCallPart, ToolReturnPart

    (tmp_path / "a.txt").write_text("v1\n")
    model, seen = _script(
        [
            ToolCallPart("read_file", {"path": "a.txt"}, tool_call_id="r1"),
            ToolCallPart("write_file", {"path": "a.txt", "content": "v2\n"}, tool_call_id="w1"),
            ToolCallPart("read_file", {"path": "a.txt"}, tool_call_id="r2"),
            ToolCallPart("echo", {"text": "hi"}, tool_call_id="e1"),
        ],
        "done",
    )
    output, batches, names = asyncio.run(_run(_registry(tmp_path), model))
    assert output == "done"
    assert "write_file" in names
    replies = _replies(seen[1])
    assert [p.tool_call_id for p in replies] == ["r1", "w1", "r2", "e1"]
    assert all(isinstance(p, ToolReturnPart) for p in replies)
    assert "v1" in str(replies[0].content)
    assert "v2" in str(replies[2].content)
    assert replies[3].content == "hi"
    assert len(batches) == 1


def test_a_failed_call_reaches_the_model_as_a_failure(tmp_path: Path) -> None:
    from pydantic_ai.messages import ToolCallPart, ToolReturnPart

    model, seen = _script(
        [
            ToolCallPart("echo", {"text": 3}, tool_call_id="bad"),
            ToolCallPart("read_file", {"path": "missing.txt"}, tool_call_id="gone"),
            ToolCallPart("echo", {"text": "ok"}, tool_call_id="good"),
        ],
        "done",
    )
    output, _, _ = asyncio.run(_run(_registry(tmp_path), model))
    assert output == "done"
    replies = {p.tool_call_id: p for p in _replies(seen[1])}
    assert replies["good"].content == "ok"
    for call_id in ("bad", "gone"):
        part = replies[call_id]
        assert isinstance(part, ToolReturnPart)
        assert part.outcome == "failed"
    assert "text" in str(replies["bad"].content)


def test_errors_retry_asks_the_model_to_correct_the_call(tmp_path: Path) -> None:
    from pydantic_ai.messages import ToolCallPart, ToolReturnPart

    model, seen = _script(
        [ToolCallPart("echo", {"text": 3}, tool_call_id="bad")],
        [ToolCallPart("echo", {"text": "3"}, tool_call_id="fixed")],
        "done",
    )
    output, batches, _ = asyncio.run(_run(_registry(tmp_path), model, errors="retry"))
    assert output == "done"
    (retry,) = _replies(seen[1])
    assert isinstance(retry, ToolReturnPart)
    assert retry.outcome == "retried"
    assert "text" in str(retry.content)
    (fixed,) = _replies(seen[2])
    assert isinstance(fixed, ToolReturnPart)
    assert fixed.content == "3"
    assert len(batches) == 2


def test_bad_arguments_to_the_toolset_are_refused(tmp_path: Path) -> None:
    from toolexec.pydantic_ai import ToolexecToolset

    async def main(**kwargs: Any) -> None:
        async with toolexec.aio.open_executor(_registry(tmp_path)) as executor:
            ToolexecToolset(executor, **kwargs)

    with pytest.raises(KeyError, match="no tool named 'nope'"):
        asyncio.run(main(names=["nope"]))
    with pytest.raises(ValueError, match="errors must be 'fail' or 'retry'"):
        asyncio.run(main(errors="raise"))
