"""Models: what an ``AgentLoop`` talks to, and adapters over the official SDKs.

A ``Model`` answers a conversation of ``Message`` values, given the tool
definitions, with a ``ModelResponse``: text, tool calls, ``Usage``, and
the provider's opaque reasoning state (``ProviderBlock`` values).
``OpenAIChatModel``, ``OpenAIResponsesModel`` and ``AnthropicModel`` are
models over the ``openai`` and ``anthropic`` async clients (extras
``openai`` and ``anthropic``; the SDK is imported only when an adapter
builds its own client). They speak the wire formats of ``toolexec.formats``.

Example::

    from toolexec.models import OpenAIChatModel

    model = OpenAIChatModel("gpt-4.1-mini")          # reads OPENAI_API_KEY
    result = await AgentLoop(model, executor).run("Summarise README.md")
    await model.aclose()
"""

from __future__ import annotations

from ._adapters._models import AnthropicModel, OpenAIChatModel, OpenAIResponsesModel
from ._agents._model import Message, Model, ModelResponse, ProviderBlock, Usage
from ._core._public import fixup_module_metadata as _fixup_module_metadata

__all__ = [
    "AnthropicModel",
    "Message",
    "Model",
    "ModelResponse",
    "OpenAIChatModel",
    "OpenAIResponsesModel",
    "ProviderBlock",
    "Usage",
]

_fixup_module_metadata(__name__, __all__)
