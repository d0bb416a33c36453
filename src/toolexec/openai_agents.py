"""OpenAI Agents SDK adapter (extra ``openai-agents``).

``function_tools`` shows an executor's tools to the SDK as its own
``FunctionTool`` objects, for ``Agent(tools=...)``. When the model asks for
several calls in one turn, ``Runner.run`` starts one asyncio task per call;
the tools hand their calls to a shared collector, so the turn's calls run as
**one** toolexec batch, in the order the SDK started them, with toolexec's
caps, read/write ordering, policies and timeouts holding across the batch
rather than per call.

Example::

    async with toolexec.aio.open_executor(registry) as executor:
        agent = Agent(name="helper", tools=function_tools(executor), model=...)
        result = await Runner.run(agent, "tidy the notes")

The model reads every result as text. A failed call (invalid arguments, a
tool error, a timeout, a denial) answers with toolexec's error message, so
the run goes on and the model can react; nothing raises into the runner.
The SDK's own per-tool features (approvals, guardrails, ``is_enabled``)
still apply before a call reaches toolexec. Calls that reach their tool in
the same loop turn form one batch; a call delayed by an SDK hook that waits
on I/O joins a later batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agents import FunctionTool

from ._adapters._collect import Collector
from ._core._public import fixup_module_metadata as _fixup_module_metadata
from ._core._types import ToolCall

if TYPE_CHECKING:
    from collections.abc import Iterable

    from agents import Tool, ToolContext

    from ._core._types import ToolDefinition
    from .aio import AsyncioExecutor

__all__ = ["function_tools"]


def function_tools(executor: AsyncioExecutor, names: Iterable[str] | None = None) -> list[Tool]:
    """The executor's tools as the SDK's ``FunctionTool`` objects (typed as its ``Tool``).

    Args:
        executor: the ``toolexec.aio`` executor the calls run on.
        names: the tools to expose (default: every registered tool, in
            registration order).

    The tools share one collector: calls the runner starts together run as
    one batch. Schemas are passed as they are, with the SDK's strict mode
    off (toolexec validates every call against the tool's schema itself).

    Raises:
        KeyError: a name is not registered with the executor's registry.
    """
    registry = executor.executor.registry
    if names is None:
        definitions = registry.definitions()
    else:
        definitions = []
        for name in names:
            if name not in registry:
                raise KeyError(
                    f"no tool named {name!r} in the executor's registry "
                    f"(registered: {', '.join(registry.names()) or 'none'})"
                )
            definitions.append(registry.definition(name))
    collector = Collector(executor)
    return [_function_tool(collector, definition) for definition in definitions]


def _function_tool(collector: Collector, definition: ToolDefinition) -> FunctionTool:
    name = definition.name

    async def invoke(context: ToolContext[Any], arguments: str) -> str:
        # The raw JSON text goes to toolexec: malformed JSON is an error result.
        result = await collector.run_call(ToolCall(context.tool_call_id, name, arguments))
        return result.text

    return FunctionTool(
        name=name,
        description=definition.description,
        params_json_schema=dict(definition.input_schema),
        on_invoke_tool=invoke,
        strict_json_schema=False,
    )


_fixup_module_metadata(__name__, __all__)
