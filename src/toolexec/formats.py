"""Provider formats: tool calls out of an LLM response, results back into messages.

Three wire formats are supported, named by the strings of ``FORMATS``:

``"openai-chat"``
    OpenAI Chat Completions. Calls are the assistant message's ``tool_calls``
    (``function.arguments`` is a JSON *string*); each result becomes one
    ``{"role": "tool", "tool_call_id": ...}`` message.
``"openai-responses"``
    OpenAI Responses. Calls are the ``function_call`` items of ``output``;
    each result becomes one ``function_call_output`` input item.
``"anthropic"``
    Anthropic Messages. Calls are the ``tool_use`` content blocks; all the
    results of a batch become *one* user message of ``tool_result`` blocks,
    each carrying ``is_error``.

Reasoning state is kept and replayed: Anthropic ``thinking`` and
``redacted_thinking`` blocks and Responses ``reasoning`` items become
``ProviderBlock`` values of the ``ModelResponse``, which ``render_assistant``
sends back unchanged, where the provider requires them (first in the
Anthropic assistant turn; before the ``function_call`` items they led to in
Responses), and drops when rendering for another format.

A response may be a plain ``dict`` (parsed JSON) or an object of the
provider's official SDK (anything with ``model_dump()``). Call ids and call
order are preserved both ways. Where a provider sends arguments as a JSON
string, ``ToolCall.arguments`` keeps that string untouched: the executor
parses it, so malformed JSON becomes an ``invalid_arguments`` *result* for
the model rather than an exception here. A response whose *structure* is
wrong (a call without an id, a ``choices`` that is not a list) raises
``FormatError`` naming the field path.

Example::

    calls = formats.parse_calls(completion)            # format detected
    outcome = await executor.execute_batch(calls)
    messages += formats.render_results(outcome.results, "openai-chat")
"""

from __future__ import annotations

from ._adapters._formats import (
    FORMATS,
    FormatError,
    FormatName,
    detect_format,
    parse_calls,
    parse_response,
    render_assistant,
    render_results,
    render_tools,
)
from ._core._public import fixup_module_metadata as _fixup_module_metadata

__all__ = [
    "FORMATS",
    "FormatError",
    "FormatName",
    "detect_format",
    "parse_calls",
    "parse_response",
    "render_assistant",
    "render_results",
    "render_tools",
]

_fixup_module_metadata(__name__, __all__)
