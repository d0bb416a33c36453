"""LangGraph and LangChain adapters (extra ``langgraph``).

``ToolexecNode`` is a graph node that runs the tool calls of the latest
``AIMessage`` as one toolexec batch and answers with one ``ToolMessage`` per
call, in call order: it takes the place of LangGraph's prebuilt ``ToolNode``.
``as_langchain_tools`` shows toolexec tools to LangChain as ``BaseTool``
objects, for ``model.bind_tools(...)`` or for any code that runs LangChain
tools (a ``ToolNode`` of them gathers each turn's calls into one batch).

Both run through a ``toolexec.aio`` executor, so the graph runs with
``ainvoke``/``astream`` on asyncio.

Example::

    async with toolexec.aio.open_executor(registry) as executor:
        builder.add_node("tools", ToolexecNode(executor))
        model = chat_model.bind_tools(as_langchain_tools(executor))
        ...
        await graph.ainvoke({"messages": [HumanMessage("hi")]})

Errors never raise into the graph: a failed call (unknown tool, invalid
arguments, a tool error, a timeout, a denial) becomes a ``ToolMessage`` with
``status="error"`` carrying toolexec's message, as ``ToolNode`` does for the
errors it handles.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool, ToolException

from ._adapters._collect import Collector
from ._core._public import fixup_module_metadata as _fixup_module_metadata
from ._core._types import ToolCall

if TYPE_CHECKING:
    from ._core._types import ToolResult
    from .aio import AsyncioExecutor

__all__ = ["ToolexecNode", "as_langchain_tools", "to_tool_message"]


def to_tool_message(result: ToolResult) -> ToolMessage:
    """The ``ToolMessage`` answering a toolexec result.

    ``content`` is the text the model reads, ``status`` is ``"error"`` for a
    failed call, and ``artifact`` holds the result's ``details`` (for the
    host, not sent to the model), or ``None`` when there are none.
    """
    return ToolMessage(
        content=result.text,
        name=result.tool_name,
        tool_call_id=result.call_id,
        status="error" if result.is_error else "success",
        artifact=dict(result.details) if result.details else None,
    )


class ToolexecNode:
    """A LangGraph node running the latest ``AIMessage``'s tool calls through toolexec.

    It accepts what the prebuilt ``ToolNode`` accepts: the graph state (a
    mapping, or an object with the messages attribute), a list of messages,
    a list of tool-call dicts, or one tool call sent with ``Send``. Like
    ``ToolNode``, it answers a list of messages with a list and anything else
    with ``{messages_key: [...]}``: one ``ToolMessage`` per call, in call
    order. The calls run as one toolexec
    batch, so caps, read/write ordering and policies hold across the turn.
    Calls LangChain could not parse (``AIMessage.invalid_tool_calls``) are
    answered too, after the others, as ``invalid_arguments`` errors.

    Args:
        executor: the ``toolexec.aio`` executor the batches run on.
        messages_key: the state key holding the messages.
    """

    def __init__(self, executor: AsyncioExecutor, *, messages_key: str = "messages") -> None:
        self.executor = executor
        self.messages_key = messages_key

    async def __call__(self, input: Any) -> Any:
        """Run the calls; the ``ToolMessage``s, shaped as the input was."""
        calls, as_list = self._parse(input)
        outcome = await self.executor.execute_batch(calls)
        messages = [to_tool_message(result) for result in outcome.results]
        return messages if as_list else {self.messages_key: messages}

    def _parse(self, input: Any) -> tuple[list[ToolCall], bool]:
        if isinstance(input, list) and input and _is_tool_call(input[-1]):
            return [_call(c, f"tool call {i}") for i, c in enumerate(input)], False
        if isinstance(input, Mapping) and input.get("__type") == "tool_call_with_context":
            return [_call(input["tool_call"], "the Send's tool call")], False  # Send API input
        messages: Any
        if isinstance(input, list):
            messages, as_list = input, True
        elif isinstance(input, Mapping):
            messages, as_list = input.get(self.messages_key), False
        else:
            messages, as_list = getattr(input, self.messages_key, None), False
        if not messages:
            raise ValueError(
                f"ToolexecNode: no messages in the input (expected a list of messages, "
                f"a state with a non-empty {self.messages_key!r}, or a list of tool calls); "
                f"got {type(input).__name__}"
            )
        message = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
        if message is None:
            raise ValueError("ToolexecNode: no AIMessage in the input messages")
        calls = [_call(c, f"AIMessage.tool_calls[{i}]") for i, c in enumerate(message.tool_calls)]
        for bad in message.invalid_tool_calls:
            if bad.get("id"):
                calls.append(ToolCall(str(bad["id"]), bad.get("name") or "", bad.get("args") or ""))
        return calls, as_list


def _is_tool_call(value: Any) -> bool:
    return isinstance(value, Mapping) and value.get("type") == "tool_call"


def _call(call: Mapping[str, Any], where: str) -> ToolCall:
    call_id = call.get("id")
    if not isinstance(call_id, str) or not call_id:
        raise ValueError(
            f"ToolexecNode: {where} has no id (got {call_id!r}); every call needs a "
            "non-empty string id to be answered"
        )
    args = call.get("args")
    return ToolCall(call_id, str(call.get("name", "")), args if args is not None else {})


def as_langchain_tools(executor: AsyncioExecutor) -> list[BaseTool]:
    """The executor's tools as LangChain tools, in registration order.

    Each tool's schema is the toolexec tool's JSON Schema; calling it runs
    the call through toolexec (calls made together, as ``ToolNode`` makes a
    turn's calls, run as one batch). A failed call raises ``ToolException``,
    which the tool turns into an error ``ToolMessage`` (``status="error"``)
    when invoked with a tool call. Tools are async only (``ainvoke``).
    """
    collector = Collector(executor)
    return [
        _langchain_tool(collector, definition.name, definition.description, definition.input_schema)
        for definition in executor.executor.registry.definitions()
    ]


def _langchain_tool(
    collector: Collector, name: str, description: str, schema: Mapping[str, Any]
) -> BaseTool:
    async def run(**arguments: Any) -> tuple[str, dict[str, Any] | None]:
        result = await collector.run_call(ToolCall(_call_id(), name, arguments))
        if result.is_error:
            raise ToolException(result.text)
        return result.text, dict(result.details) if result.details else None

    return StructuredTool(
        name=name,
        description=description,
        args_schema=dict(schema),
        coroutine=run,
        response_format="content_and_artifact",
        handle_tool_error=True,
    )


_counter = iter(range(1 << 62))


def _call_id() -> str:
    # LangChain does not hand the tool its call id; toolexec only needs one unique per batch.
    return f"lc-{next(_counter)}"


_fixup_module_metadata(__name__, __all__)
