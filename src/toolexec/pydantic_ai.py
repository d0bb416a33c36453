"""pydantic-ai adapter (extra ``pydantic-ai``).

``ToolexecToolset`` is a pydantic-ai toolset holding an executor's tools:
give it to ``Agent(toolsets=[...])``. pydantic-ai starts one asyncio task
per call of a model turn; the toolset hands the calls to a collector, so
the calls that reach it together run as **one** toolexec batch, in the order
pydantic-ai started them, with toolexec's caps, read/write ordering,
policies and timeouts holding across the turn.

Example::

    async with toolexec.aio.open_executor(registry) as executor:
        agent = Agent(model, toolsets=[ToolexecToolset(executor)])
        result = await agent.run("tidy the notes")

A successful call returns the result's text. A failed call raises
pydantic-ai's ``ToolFailed`` with toolexec's message: the model sees a
failed tool result and can adapt, and the tool's retry budget is not spent
(``errors="retry"`` raises ``ModelRetry`` instead, asking the model to
correct the call). Arguments are checked by toolexec against the tool's
JSON Schema, so pydantic-ai passes them through as they come.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any, Literal

from pydantic_ai import ModelRetry, ToolFailed
from pydantic_ai.tools import ToolDefinition as PydanticToolDefinition
from pydantic_ai.toolsets import AbstractToolset, ToolsetTool
from pydantic_core import SchemaValidator, core_schema

from ._adapters._collect import Collector
from ._core._public import fixup_module_metadata as _fixup_module_metadata
from ._core._types import ToolCall

if TYPE_CHECKING:
    from collections.abc import Iterable

    from pydantic_ai import RunContext

    from .aio import AsyncioExecutor

__all__ = ["ToolexecToolset"]

# toolexec validates arguments itself (an invalid call is an error result).
_ANY = SchemaValidator(core_schema.any_schema())


class ToolexecToolset(AbstractToolset[Any]):
    """A pydantic-ai toolset whose calls run through a ``toolexec.aio`` executor.

    Args:
        executor: the executor the calls run on.
        names: the tools to expose (default: every registered tool).
        id: the toolset's id among the agent's toolsets (pydantic-ai needs
            one for durable execution).
        errors: ``"fail"`` (default) reports a failed call with
            ``ToolFailed``; ``"retry"`` with ``ModelRetry``.
        max_retries: the retries pydantic-ai allows a tool (``"retry"``).

    Raises:
        KeyError: a name is not registered with the executor's registry.
        ValueError: ``errors`` is neither ``"fail"`` nor ``"retry"``.
    """

    def __init__(
        self,
        executor: AsyncioExecutor,
        *,
        names: Iterable[str] | None = None,
        id: str | None = None,
        errors: Literal["fail", "retry"] = "fail",
        max_retries: int = 1,
    ) -> None:
        if errors not in ("fail", "retry"):
            raise ValueError(f"errors must be 'fail' or 'retry', got {errors!r}")
        registry = executor.executor.registry
        selected = registry.names() if names is None else list(names)
        for name in selected:
            if name not in registry:
                raise KeyError(
                    f"no tool named {name!r} in the executor's registry "
                    f"(registered: {', '.join(registry.names()) or 'none'})"
                )
        self.executor = executor
        self._id = id
        self._errors = errors
        self._max_retries = max_retries
        self._definitions = [
            PydanticToolDefinition(
                name=d.name,
                description=d.description,
                parameters_json_schema=dict(d.input_schema),
            )
            for d in map(registry.definition, selected)
        ]
        self._collector = Collector(executor)
        self._ids = itertools.count()

    @property
    def id(self) -> str | None:
        """The id given to the constructor."""
        return self._id

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        """The exposed tools, by name."""
        return {
            d.name: ToolsetTool(
                toolset=self, tool_def=d, max_retries=self._max_retries, args_validator=_ANY
            )
            for d in self._definitions
        }

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        """Run one call through the executor (batched with its siblings); its text."""
        call_id = ctx.tool_call_id or f"pai-{next(self._ids)}"
        result = await self._collector.run_call(ToolCall(call_id, name, tool_args))
        if result.is_error:
            if self._errors == "retry":
                raise ModelRetry(result.text)
            raise ToolFailed(result.text)
        return result.text


_fixup_module_metadata(__name__, __all__)
