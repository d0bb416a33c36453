"""The provider-neutral conversation an agent loop keeps, and the ``Model`` protocol.

A model adapter (OpenAI, Anthropic, a scripted test model) turns these
messages and the tool definitions into a provider request, and the
provider's answer back into a ``ModelResponse``: text and tool calls.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

import attrs

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .._core._types import ToolCall, ToolDefinition, ToolResult

__all__ = ["Message", "Model", "ModelResponse", "ProviderBlock", "Usage"]


@attrs.frozen
class Usage:
    """Token counts a model reports for one response (zeros if unknown)."""

    input_tokens: int = 0
    output_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens
        )


def _json_copy(value: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise TypeError(f"a provider block is a JSON object, got {type(value).__name__}")
    return copy.deepcopy(dict(value))


def _non_negative(_inst: object, _attr: object, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"position must be an integer >= 0, got {value!r}")


@attrs.frozen
class ProviderBlock:
    """One provider-specific piece of a model turn, kept opaque and replayed unchanged.

    Reasoning models hand back state that must return, byte for byte, with
    the next request: Anthropic ``thinking`` (with its ``signature``) and
    ``redacted_thinking`` (with ``data``) blocks, OpenAI Responses
    ``reasoning`` items (with ``encrypted_content``). ``formats.parse_response``
    keeps them as ``ProviderBlock`` values, and rendering the conversation for
    the same ``format`` puts them back where that provider requires; other
    formats drop them.

    Example::

        response = formats.parse_response(anthropic_message)
        response.provider_blocks[0].data["type"]      # "thinking"
        formats.render_assistant(response.text, response.tool_calls, "anthropic",
                                 provider_blocks=response.provider_blocks)

    Attributes:
        format: the ``formats.FORMATS`` name the block belongs to.
        data: the block's JSON as the provider sent it (a private copy).
        position: how many of the turn's tool calls came before it (0: it
            opens the turn, before the text and every call).
    """

    format: str
    data: Mapping[str, Any] = attrs.field(converter=_json_copy)
    position: int = attrs.field(default=0, validator=_non_negative)


@attrs.frozen
class Message:
    """One turn of the conversation.

    ``system`` and ``user`` messages carry text; an ``assistant`` message
    carries text, the tool calls it asked for, and the provider's reasoning
    state (``provider_blocks``, replayed to the same provider); a ``tool``
    message carries the results of one batch, in call order.
    """

    role: Literal["system", "user", "assistant", "tool"]
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_results: tuple[ToolResult, ...] = ()
    provider_blocks: tuple[ProviderBlock, ...] = ()


@attrs.frozen
class ModelResponse:
    """What a model answered: text, and the tool calls it wants run (maybe none).

    ``provider_blocks`` holds the provider's opaque reasoning state; an agent
    loop copies it into the assistant ``Message`` so the next request carries it.
    """

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = Usage()
    provider_blocks: tuple[ProviderBlock, ...] = ()


@runtime_checkable
class Model(Protocol):
    """An LLM: messages and tool definitions in, text and tool calls out."""

    async def respond(
        self, messages: Sequence[Message], tools: Sequence[ToolDefinition]
    ) -> ModelResponse:
        """Answer the conversation so far."""
        ...
