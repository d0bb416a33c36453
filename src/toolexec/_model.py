"""The provider-neutral conversation an agent loop keeps, and the ``Model`` protocol.

A model adapter (OpenAI, Anthropic, a scripted test model) turns these
messages and the tool definitions into a provider request, and the
provider's answer back into a ``ModelResponse``: text and tool calls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

import attrs

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ._types import ToolCall, ToolDefinition, ToolResult

__all__ = ["Message", "Model", "ModelResponse", "Usage"]


@attrs.frozen
class Usage:
    """Token counts a model reports for one response (zeros if unknown)."""

    input_tokens: int = 0
    output_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens
        )


@attrs.frozen
class Message:
    """One turn of the conversation.

    ``system`` and ``user`` messages carry text; an ``assistant`` message
    carries text and the tool calls it asked for; a ``tool`` message carries
    the results of one batch, in call order.
    """

    role: Literal["system", "user", "assistant", "tool"]
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_results: tuple[ToolResult, ...] = ()


@attrs.frozen
class ModelResponse:
    """What a model answered: text, and the tool calls it wants run (maybe none)."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = Usage()


@runtime_checkable
class Model(Protocol):
    """An LLM: messages and tool definitions in, text and tool calls out."""

    async def respond(
        self, messages: Sequence[Message], tools: Sequence[ToolDefinition]
    ) -> ModelResponse:
        """Answer the conversation so far."""
        ...
