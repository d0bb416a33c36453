"""toolexec.langgraph: ToolexecNode in a real LangGraph graph, with a scripted chat model.

The graph, the messages and the tools are LangGraph's and LangChain's own;
only the model is scripted (a ``GenericFakeChatModel`` that accepts
``bind_tools``). The ``ToolNode`` behaviours ported from LangGraph's own tests
are marked "ToolNode:" in the test names' docstrings.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

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
    from collections.abc import Awaitable, Callable, Sequence
    from pathlib import Path

    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
    from langchain_core.runnables import Runnable

# LangChain and LangGraph (and ``toolexec.langgraph``, which imports them) are
# imported in the functions that use them, not at import: collection stays
# free of them, and they take about half a second to import.


def scripted_chat_model(messages: list[AIMessage], bound: list[str]) -> GenericFakeChatModel:
    """LangChain's fake chat model, answering in turn; ``bind_tools`` records the
    tools' names in ``bound``."""
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    class ScriptedChatModel(GenericFakeChatModel):
        def bind_tools(  # type: ignore[override]
            self, tools: Sequence[Any], **kwargs: Any
        ) -> Runnable[Any, BaseMessage]:
            bound[:] = [getattr(t, "name", "") for t in tools]
            return self

    return ScriptedChatModel(messages=iter(messages))


def _calls(*calls: tuple[str, str, dict[str, Any]]) -> AIMessage:
    from langchain_core.messages import AIMessage

    return AIMessage(
        content="",
        tool_calls=[{"id": i, "name": n, "args": a, "type": "tool_call"} for i, n, a in calls],
    )


def _registry(root: Path) -> ToolRegistry:
    registry = ToolRegistry()
    register_builtin_tools(registry, Workspace(root))

    @function_tool(side_effects=SideEffects.NONE)
    def fail(reason: str) -> str:
        """Always fails."""
        raise ValueError(reason)

    registry.register(fail)
    return registry


def _graph(node: Any, model: GenericFakeChatModel, tools: list[Any]) -> Any:
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import tools_condition

    bound = model.bind_tools(tools)

    async def agent(state: MessagesState) -> dict[str, list[BaseMessage]]:
        return {"messages": [await bound.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", node)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile()


def _run(
    root: Path, body: Callable[[toolexec.aio.AsyncioExecutor], Awaitable[Any]], **kwargs: Any
) -> Any:
    async def main() -> Any:
        async with toolexec.aio.open_executor(_registry(root), **kwargs) as executor:
            return await body(executor)

    return asyncio.run(main())


def test_two_turn_conversation_results_in_call_order(tmp_path: Path) -> None:
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    from toolexec.langgraph import ToolexecNode, as_langchain_tools

    (tmp_path / "a.txt").write_text("old\n")
    bound: list[str] = []
    model = scripted_chat_model(
        [
            _calls(("c1", "echo", {"text": "one"}), ("c2", "echo", {"text": "two"})),
            # Turn two: read, write, read of one file.
            _calls(
                ("r1", "read_file", {"path": "a.txt"}),
                ("w1", "write_file", {"path": "a.txt", "content": "new\n"}),
                ("r2", "read_file", {"path": "a.txt"}),
            ),
            AIMessage(content="done"),
        ],
        bound,
    )

    async def body(executor: toolexec.aio.AsyncioExecutor) -> Any:
        graph = _graph(ToolexecNode(executor), model, as_langchain_tools(executor))
        return await graph.ainvoke({"messages": [HumanMessage("go")]})

    state = _run(tmp_path, body)
    assert "echo" in bound
    assert "read_file" in bound
    messages = state["messages"]
    tool_messages = [m for m in messages if isinstance(m, ToolMessage)]
    assert [m.tool_call_id for m in tool_messages] == ["c1", "c2", "r1", "w1", "r2"]
    assert [m.content for m in tool_messages[:2]] == ["one", "two"]
    assert all(m.status == "success" for m in tool_messages)
    assert "old" in str(tool_messages[2].content)
    assert "new" in str(tool_messages[4].content)
    assert messages[-1].content == "done"
    assert (tmp_path / "a.txt").read_text() == "new\n"


def test_read_write_read_batch_keeps_its_order_under_a_cap(tmp_path: Path) -> None:
    """Even with room for many reads at once, the write waits for the first read and
    the second read waits for the write."""
    from toolexec.langgraph import ToolexecNode

    (tmp_path / "a.txt").write_text("v1\n")
    calls = [
        ("r1", "read_file", {"path": "a.txt"}),
        ("w1", "write_file", {"path": "a.txt", "content": "v2\n"}),
        ("r2", "read_file", {"path": "a.txt"}),
        ("w2", "write_file", {"path": "a.txt", "content": "v3\n"}),
        ("r3", "read_file", {"path": "a.txt"}),
    ]

    async def main() -> list[ToolMessage]:
        registry = _registry(tmp_path)
        async with toolexec.aio.open_executor(
            registry, config=ConcurrencyConfig(read_width=8)
        ) as executor:
            out = await ToolexecNode(executor)([_calls(*calls)])
            assert isinstance(out, list)
            return out

    out = asyncio.run(main())
    assert [m.tool_call_id for m in out] == ["r1", "w1", "r2", "w2", "r3"]
    assert ["v1" in str(out[0].content), "v2" in str(out[2].content)] == [True, True]
    assert "v3" in str(out[4].content)


# -- ToolNode's behaviours, ported ------------------------------------------------


def _node_run(root: Path, input: Any) -> Any:
    from toolexec.langgraph import ToolexecNode

    async def body(executor: toolexec.aio.AsyncioExecutor) -> Any:
        return await ToolexecNode(executor)(input)

    return _run(root, body)


def test_input_shapes_like_tool_node(tmp_path: Path) -> None:
    """ToolNode: a state gives {"messages": [...]}, a message list gives a list, a list
    of tool-call dicts gives a list; the latest AIMessage is the one answered."""
    from langchain_core.messages import HumanMessage

    message = _calls(("1", "echo", {"text": "hi"}))
    older = _calls(("0", "echo", {"text": "old"}))
    state = _node_run(tmp_path, {"messages": [older, HumanMessage("x"), message]})
    assert list(state) == ["messages"]
    assert [m.tool_call_id for m in state["messages"]] == ["1"]
    as_list = _node_run(tmp_path, [message])
    assert [m.content for m in as_list] == ["hi"]
    direct = _node_run(tmp_path, list(message.tool_calls))
    assert [(m.tool_call_id, m.name) for m in direct["messages"]] == [("1", "echo")]
    sent = {"__type": "tool_call_with_context", "tool_call": message.tool_calls[0], "state": {}}
    assert [m.content for m in _node_run(tmp_path, sent)["messages"]] == ["hi"]
    state_object = MessagesStateObject([message])
    assert [m.content for m in _node_run(tmp_path, state_object)["messages"]] == ["hi"]


class MessagesStateObject:
    def __init__(self, messages: list[BaseMessage]) -> None:
        self.messages = messages


def test_structured_content_is_json_text_like_tool_node(tmp_path: Path) -> None:
    """ToolNode: a tool returning a list of dicts gives that list as JSON text."""
    from toolexec.langgraph import ToolexecNode

    registry = ToolRegistry()

    @function_tool(side_effects=SideEffects.NONE)
    def pairs(some_val: int, some_other_val: str) -> list[dict[str, Any]]:
        """Two records."""
        return [{"key_1": some_val, "key_2": "foo"}, {"key_1": some_other_val, "key_2": "baz"}]

    registry.register(pairs)

    async def main() -> Any:
        async with toolexec.aio.open_executor(registry) as executor:
            call = ("some 2", "pairs", {"some_val": 2, "some_other_val": "bar"})
            return await ToolexecNode(executor)({"messages": [_calls(call)]})

    (message,) = asyncio.run(main())["messages"]
    assert message.content == '[{"key_1": 2, "key_2": "foo"}, {"key_1": "bar", "key_2": "baz"}]'
    assert message.tool_call_id == "some 2"


def test_custom_messages_key(tmp_path: Path) -> None:
    """ToolNode: messages_key names the state key read and written."""
    from toolexec.langgraph import ToolexecNode

    async def body(executor: toolexec.aio.AsyncioExecutor) -> Any:
        node = ToolexecNode(executor, messages_key="history")
        return await node({"history": [_calls(("1", "echo", {"text": "k"}))]})

    out = _run(tmp_path, body)
    assert [m.content for m in out["history"]] == ["k"]


def test_errors_become_error_tool_messages(tmp_path: Path) -> None:
    """ToolNode: a tool error, an unknown tool and invalid arguments each give a
    ToolMessage with status="error", the call's id and name; nothing raises."""
    message = _calls(
        ("1", "fail", {"reason": "boom"}),
        ("2", "no_such_tool", {}),
        ("3", "echo", {"text": 5}),
        ("4", "echo", {}),
        ("5", "echo", {"text": "fine"}),
    )
    out = _node_run(tmp_path, [message])
    assert [(m.tool_call_id, m.name, m.status) for m in out] == [
        ("1", "fail", "error"),
        ("2", "no_such_tool", "error"),
        ("3", "echo", "error"),
        ("4", "echo", "error"),
        ("5", "echo", "success"),
    ]
    assert "boom" in out[0].content
    assert "no_such_tool" in out[1].content
    assert "echo" in out[1].content  # names the tools there are
    assert "text" in out[2].content
    assert out[4].content == "fine"


def test_invalid_tool_calls_are_answered(tmp_path: Path) -> None:
    """Beyond ToolNode: a call LangChain could not parse still gets an answer."""
    from langchain_core.messages import AIMessage

    message = AIMessage(
        content="",
        tool_calls=[{"id": "1", "name": "echo", "args": {"text": "ok"}, "type": "tool_call"}],
        invalid_tool_calls=[
            {
                "id": "2",
                "name": "echo",
                "args": "{oops",
                "error": "bad json",
                "type": "invalid_tool_call",
            }
        ],
    )
    out = _node_run(tmp_path, [message])
    assert [(m.tool_call_id, m.status) for m in out] == [("1", "success"), ("2", "error")]


def test_bad_input_is_a_clear_error(tmp_path: Path) -> None:
    """ToolNode: no messages, or no AIMessage, raises ValueError."""
    from langchain_core.messages import HumanMessage

    with pytest.raises(ValueError, match="no messages"):
        _node_run(tmp_path, {"messages": []})
    with pytest.raises(ValueError, match="no AIMessage"):
        _node_run(tmp_path, [HumanMessage("x")])
    with pytest.raises(ValueError, match="has no id"):
        _node_run(tmp_path, [{"name": "echo", "args": {}, "id": None, "type": "tool_call"}])


def test_no_tool_calls_gives_no_messages(tmp_path: Path) -> None:
    from langchain_core.messages import AIMessage

    assert _node_run(tmp_path, [AIMessage(content="nothing to do")]) == []


def test_langchain_tools_in_the_prebuilt_tool_node_run_as_one_batch(tmp_path: Path) -> None:
    """as_langchain_tools: the prebuilt ToolNode's gathered calls reach toolexec as one
    batch; errors come back as error ToolMessages."""
    from langchain_core.messages import AIMessage, ToolMessage
    from langgraph.prebuilt import ToolNode

    from toolexec.langgraph import as_langchain_tools

    message = _calls(
        ("1", "echo", {"text": "a"}),
        ("2", "fail", {"reason": "bad"}),
        ("3", "echo", {"text": "c"}),
    )
    batches: list[BatchPlanned] = []

    model = scripted_chat_model([message, AIMessage(content="done")], [])

    async def body(executor: toolexec.aio.AsyncioExecutor) -> Any:
        tools = as_langchain_tools(executor)
        state = await _graph(ToolNode(tools), model, tools).ainvoke({"messages": []})
        return {"messages": [m for m in state["messages"] if isinstance(m, ToolMessage)]}

    sink = CallbackSink(lambda e: batches.append(e) if isinstance(e, BatchPlanned) else None)
    out = _run(tmp_path, body, sinks=[sink])
    assert [(m.tool_call_id, m.status) for m in out["messages"]] == [
        ("1", "success"),
        ("2", "error"),
        ("3", "success"),
    ]
    assert "bad" in out["messages"][1].content
    assert len(batches) == 1


def test_langchain_tool_has_the_toolexec_schema(tmp_path: Path) -> None:
    from toolexec.langgraph import as_langchain_tools

    async def body(executor: toolexec.aio.AsyncioExecutor) -> Any:
        return {t.name: t for t in as_langchain_tools(executor)}

    tools = _run(tmp_path, body)
    assert list(tools["echo"].args) == ["text"]
    assert tools["echo"].description


def test_cancelling_the_graph_leaves_no_call_in_flight(tmp_path: Path) -> None:
    from toolexec.langgraph import ToolexecNode

    registry = ToolRegistry()

    @function_tool(side_effects=SideEffects.READ)
    async def wait() -> str:
        """Wait forever."""
        await trio.sleep_forever()
        return "never"

    registry.register(wait)

    async def main() -> int:
        async with toolexec.aio.open_executor(registry) as executor:
            node = ToolexecNode(executor)
            task = asyncio.create_task(node([_calls(("1", "wait", {}), ("2", "wait", {}))]))
            while executor.executor.statistics().calls_in_flight < 2:
                await asyncio.sleep(0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return executor.executor.statistics().calls_in_flight

    assert asyncio.run(main()) == 0
