"""Fuzz the provider-format parsers: ``toolexec.formats.parse_response``.

Property: on any input, parsing gives a ``ModelResponse`` or raises
``FormatError``; nothing else escapes. A response that parses keeps its
calls through a round trip: rendered back as an assistant turn with
``render_assistant`` and parsed again, the calls have the same ids and
names in the same order (and, for OpenAI chat, the same argument text).
"""

from __future__ import annotations

import json
from typing import Any

from _draw import Draw

from toolexec.formats import (
    FORMATS,
    FormatError,
    detect_format,
    parse_response,
    render_assistant,
)

KEYS = [
    "choices",
    "message",
    "tool_calls",
    "function",
    "arguments",
    "name",
    "id",
    "type",
    "output",
    "call_id",
    "content",
    "input",
    "role",
    "text",
    "object",
    "usage",
    "prompt_tokens",
    "completion_tokens",
    "input_tokens",
    "output_tokens",
    "thinking",
    "signature",
    "summary",
    "encrypted_content",
    "index",
    "stop_reason",
    "status",
]
WORDS = [
    "assistant",
    "function",
    "function_call",
    "tool_use",
    "text",
    "message",
    "reasoning",
    "thinking",
    "redacted_thinking",
    "chat.completion",
    "response",
    "call_1",
    "read",
    "{}",
    '{"path": "a"}',
    "[1]",
    "",
    "tool_calls",
    "output_text",
]


def _response(draw: Draw) -> Any:
    if draw.below(3) == 0:
        raw = draw.rest()
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):
            return raw.decode("utf-8", "replace")
    return draw.json(KEYS, WORDS, depth=6)


def _round_trip(response: Any, name: str) -> None:
    parsed = parse_response(response, name)
    rendered = render_assistant(parsed.text, parsed.tool_calls, name)
    again: Any = {"output": rendered} if name == "openai-responses" else rendered[0]
    calls = parse_response(again, name).tool_calls
    assert [(c.id, c.name) for c in calls] == [(c.id, c.name) for c in parsed.tool_calls], (
        response,
        rendered,
    )
    if name == "openai-chat":
        assert [c.arguments for c in calls] == [c.arguments for c in parsed.tool_calls]


def test_one_input(data: bytes) -> None:
    draw = Draw(data)
    name = draw.pick([None, *FORMATS])
    response = _response(draw)
    try:
        parse_response(response, name)
    except FormatError:
        return
    _round_trip(response, name or detect_format(response))
