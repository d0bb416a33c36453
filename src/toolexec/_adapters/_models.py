"""``Model`` adapters over the official ``openai`` and ``anthropic`` async clients.

Each adapter turns the provider-neutral conversation (``Message`` values)
and the tool definitions into one provider request, sends it with the
official SDK's async client, and reads the answer back with
``toolexec.formats``. The SDKs are imported only when an adapter builds its
own client, so toolexec works without them installed. Their async clients
run on anyio, so they work under trio as they do under asyncio.

Example::

    from toolexec.models import OpenAIChatModel

    model = OpenAIChatModel("gpt-4.1-mini")          # reads OPENAI_API_KEY
    result = await AgentLoop(model, executor).run("Summarise README.md")
    await model.aclose()
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any

import attrs

from . import _formats as formats

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from .._agents._model import Message, ModelResponse
    from .._core._types import ToolDefinition

__all__ = ["AnthropicModel", "OpenAIChatModel", "OpenAIResponsesModel"]


def _conversation(messages: Sequence[Message], fmt: formats.FormatName) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role in ("system", "user"):
            out.append({"role": message.role, "content": message.text})
        elif message.role == "assistant":
            out += formats.render_assistant(
                message.text, message.tool_calls, fmt, provider_blocks=message.provider_blocks
            )
        else:
            out += formats.render_results(message.tool_results, fmt)
    return out


def _anthropic_conversation(messages: Sequence[Message]) -> tuple[str, list[dict[str, Any]]]:
    """System text, and the turns with consecutive user content merged (tool results first)."""
    system = "\n\n".join(m.text for m in messages if m.role == "system" and m.text)
    turns: list[dict[str, Any]] = []
    for rendered in _conversation([m for m in messages if m.role != "system"], "anthropic"):
        content = rendered["content"]
        if isinstance(content, str):
            content = [{"type": "text", "text": content}] if content else []
        if not content:
            continue  # the API refuses empty turns
        if turns and turns[-1]["role"] == rendered["role"]:
            turns[-1]["content"].extend(content)
        else:
            turns.append({"role": rendered["role"], "content": list(content)})
    return system, turns


@attrs.define(eq=False)
class _Adapter(abc.ABC):
    model: str
    client: Any = None
    options: Mapping[str, Any] = attrs.field(factory=dict)
    _owns_client: bool = attrs.field(default=False, init=False, repr=False)

    def _client(self) -> Any:
        if self.client is None:
            self.client = self._default_client()
            self._owns_client = True
        return self.client

    @abc.abstractmethod
    def _default_client(self) -> Any:
        """The provider's async client, built from the environment."""

    async def aclose(self) -> None:
        """Close the client if this adapter created it (a client you passed is yours)."""
        if self._owns_client and self.client is not None:
            await self.client.close()
            self.client = None
            self._owns_client = False


@attrs.define(eq=False)
class _OpenAIAdapter(_Adapter):
    """The two OpenAI APIs: one client; the conversation goes under one key."""

    def _default_client(self) -> Any:
        import openai

        return openai.AsyncOpenAI()

    def _params(
        self,
        key: str,
        messages: Sequence[Message],
        tools: Sequence[ToolDefinition],
        fmt: formats.FormatName,
    ) -> dict[str, Any]:
        """The request: the model, the conversation under ``key``, the options and tools."""
        params: dict[str, Any] = {"model": self.model, key: _conversation(messages, fmt)}
        params.update(self.options)
        if tools:
            params["tools"] = formats.render_tools(tools, fmt)
        return params


@attrs.define(eq=False)
class OpenAIChatModel(_OpenAIAdapter):
    """A ``Model`` over OpenAI Chat Completions (``client.chat.completions.create``).

    Works with any server speaking that API (pass a client with its
    ``base_url``).

    Args:
        model: the model name sent with each request.
        client: an ``openai.AsyncOpenAI`` (or compatible); when ``None`` one is
            created on first use from the environment (``OPENAI_API_KEY``) and
            closed by ``aclose()``.
        options: extra request parameters (``temperature``, ``max_tokens``...).
    """

    async def respond(
        self, messages: Sequence[Message], tools: Sequence[ToolDefinition]
    ) -> ModelResponse:
        """Send the conversation and tools; return the text and tool calls."""
        params = self._params("messages", messages, tools, "openai-chat")
        completion = await self._client().chat.completions.create(**params)
        return formats.parse_response(completion, "openai-chat")


@attrs.define(eq=False)
class OpenAIResponsesModel(_OpenAIAdapter):
    """A ``Model`` over the OpenAI Responses API (``client.responses.create``).

    The whole conversation is sent as ``input`` on every turn (nothing is
    kept server-side between turns by this adapter). Arguments as for
    ``OpenAIChatModel``.
    """

    async def respond(
        self, messages: Sequence[Message], tools: Sequence[ToolDefinition]
    ) -> ModelResponse:
        """Send the conversation and tools; return the text and tool calls."""
        params = self._params("input", messages, tools, "openai-responses")
        response = await self._client().responses.create(**params)
        return formats.parse_response(response, "openai-responses")


@attrs.define(eq=False)
class AnthropicModel(_Adapter):
    """A ``Model`` over Anthropic Messages (``client.messages.create``).

    System messages become the ``system`` parameter; each batch's results
    become one user message of ``tool_result`` blocks (with ``is_error``).

    Args:
        model: the model name sent with each request.
        client: an ``anthropic.AsyncAnthropic``; when ``None`` one is created
            on first use from the environment (``ANTHROPIC_API_KEY``) and
            closed by ``aclose()``.
        options: extra request parameters; ``max_tokens`` defaults to 4096.
    """

    def _default_client(self) -> Any:
        import anthropic

        return anthropic.AsyncAnthropic()

    async def respond(
        self, messages: Sequence[Message], tools: Sequence[ToolDefinition]
    ) -> ModelResponse:
        """Send the conversation and tools; return the text and tool calls."""
        system, turns = _anthropic_conversation(messages)
        params: dict[str, Any] = {"model": self.model, "max_tokens": 4096, "messages": turns}
        if system:
            params["system"] = system
        if tools:
            params["tools"] = formats.render_tools(tools, "anthropic")
        params.update(self.options)
        message = await self._client().messages.create(**params)
        return formats.parse_response(message, "anthropic")
