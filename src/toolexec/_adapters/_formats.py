"""Provider formats: the code behind ``toolexec.formats``, documented there."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, get_args

from .._agents._model import ModelResponse, ProviderBlock, Usage
from .._core._errors import ToolexecError
from .._core._types import ImageContent, ToolCall, block_text

if TYPE_CHECKING:
    from collections.abc import Iterable

    from .._core._types import ContentBlock, ToolDefinition, ToolResult

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

FormatName: TypeAlias = Literal["openai-chat", "openai-responses", "anthropic"]
FORMATS: tuple[FormatName, ...] = get_args(FormatName)

_IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
_ANTHROPIC_REASONING = frozenset({"thinking", "redacted_thinking"})


class FormatError(ToolexecError, ValueError):
    """A provider response (or a format name) is not what the format requires.

    ``path`` is the offending field, written like ``choices[0].message.tool_calls[1].id``
    (empty for the response as a whole); ``format`` is the format being read.
    """

    def __init__(self, message: str, *, path: str = "", format: str | None = None) -> None:
        where = [f"{format} response"] if format else []
        if path:
            where.append(f"field {path}")
        super().__init__(f"{', '.join(where)}: {message}" if where else message)
        self.path = path
        self.format = format


# -- reading ------------------------------------------------------------------


def _plain(response: Any) -> Any:
    """An SDK object as plain JSON data; plain data unchanged."""
    dump = getattr(response, "model_dump", None)
    if callable(dump) and not isinstance(response, Mapping):
        try:
            return dump(mode="json", by_alias=True, exclude_none=True, warnings=False)
        except TypeError:
            return dump()
    return response


class _Reader:
    """Typed access to a JSON tree that raises ``FormatError`` with the field path."""

    def __init__(self, format: FormatName) -> None:
        self.format = format
        self.ids: dict[str, str] = {}  # call id -> the path it was first seen at

    def call_id(self, parent: Mapping[str, Any], key: str, path: str) -> str:
        """A call's id: a non-empty string not used by an earlier call of the response."""
        value = self.text(parent, key, path)
        first = self.ids.setdefault(value, f"{path}.{key}")
        if first != f"{path}.{key}":
            raise self.fail(
                f"{path}.{key}",
                f"duplicate call id {value!r} (also at {first}); ids must be unique",
            )
        return value

    def fail(self, path: str, message: str) -> FormatError:
        return FormatError(message, path=path, format=self.format)

    def obj(self, value: Any, path: str) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.fail(path, f"expected an object, got {_kind(value)}")
        return value

    def items(self, value: Any, path: str) -> list[Any]:
        if not isinstance(value, list):
            raise self.fail(path, f"expected a list, got {_kind(value)}")
        return value

    def get(self, parent: Mapping[str, Any], key: str, path: str, kind: type) -> Any:
        here = f"{path}.{key}" if path else key
        if key not in parent:
            raise self.fail(here, f"missing (expected {kind.__name__})")
        value = parent[key]
        if kind is dict:
            return self.obj(value, here)
        if kind is list:
            return self.items(value, here)
        if not isinstance(value, kind):
            raise self.fail(here, f"expected {kind.__name__}, got {_kind(value)}")
        return value

    def kind(self, block: Mapping[str, Any], path: str) -> str | None:
        """A block's ``type``: a string, or ``None`` when absent."""
        value = block.get("type")
        if value is not None and not isinstance(value, str):
            raise self.fail(f"{path}.type", f"expected string, got {_kind(value)}")
        return value

    def text(self, parent: Mapping[str, Any], key: str, path: str) -> str:
        value: str = self.get(parent, key, path, str)
        if not value:
            raise self.fail(f"{path}.{key}" if path else key, "must not be empty")
        return value


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {dict: "object", list: "list", str: "string", bool: "boolean"}.get(
        type(value), type(value).__name__
    )


def _usage(data: Mapping[str, Any], input_key: str, output_key: str) -> Usage:
    usage = data.get("usage")
    if not isinstance(usage, Mapping):
        return Usage()
    ins, outs = usage.get(input_key, 0), usage.get(output_key, 0)
    return Usage(ins if isinstance(ins, int) else 0, outs if isinstance(outs, int) else 0)


def _chat_message(r: _Reader, data: Mapping[str, Any]) -> tuple[Mapping[str, Any], str]:
    if "choices" not in data:
        return data, ""
    choices = r.get(data, "choices", "", list)
    if not choices:
        raise r.fail("choices", "is empty: the completion has no message to take calls from")
    choice = r.obj(choices[0], "choices[0]")
    return r.get(choice, "message", "choices[0]", dict), "choices[0].message"


def _parse_chat(r: _Reader, data: Mapping[str, Any]) -> ModelResponse:
    message, path = _chat_message(r, data)
    content = message.get("content")
    text = content if isinstance(content, str) else ""
    if isinstance(content, list):
        where = _join(path, "content")
        text = "".join(
            r.get(part, "text", f"{where}[{i}]", str)
            for i, part in enumerate(content)
            if isinstance(part, Mapping) and part.get("type") == "text"
        )
    calls = []
    raw_calls = message.get("tool_calls")
    raw_calls = [] if raw_calls is None else r.items(raw_calls, _join(path, "tool_calls"))
    for i, item in enumerate(raw_calls):
        here = _join(path, f"tool_calls[{i}]")
        item = r.obj(item, here)
        kind = item.get("type", "function")
        if kind != "function":
            raise r.fail(f"{here}.type", f"unsupported tool call type {kind!r} (only 'function')")
        function = r.get(item, "function", here, dict)
        calls.append(
            ToolCall(
                r.call_id(item, "id", here),
                r.text(function, "name", f"{here}.function"),
                _arguments(r, function, "arguments", f"{here}.function"),
            )
        )
    return ModelResponse(text, tuple(calls), _usage(data, "prompt_tokens", "completion_tokens"))


def _arguments(r: _Reader, parent: Mapping[str, Any], key: str, path: str) -> Any:
    value = parent.get(key, "")
    if isinstance(value, str | Mapping):
        return value
    raise r.fail(f"{path}.{key}", f"expected a JSON string or an object, got {_kind(value)}")


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _parse_responses(r: _Reader, data: Mapping[str, Any]) -> ModelResponse:
    texts: list[str] = []
    calls: list[ToolCall] = []
    blocks: list[ProviderBlock] = []
    for i, item in enumerate(r.get(data, "output", "", list)):
        here = f"output[{i}]"
        item = r.obj(item, here)
        kind = r.kind(item, here)
        if kind == "reasoning":
            blocks.append(ProviderBlock(r.format, item, len(calls)))
        elif kind == "function_call":
            calls.append(
                ToolCall(
                    r.call_id(item, "call_id", here),
                    r.text(item, "name", here),
                    _arguments(r, item, "arguments", here),
                )
            )
        elif kind == "custom_tool_call":
            raise r.fail(f"{here}.type", "unsupported tool call type 'custom_tool_call'")
        elif kind == "message":
            for j, part in enumerate(r.get(item, "content", here, list)):
                part = r.obj(part, f"{here}.content[{j}]")
                if part.get("type") == "output_text":
                    texts.append(r.get(part, "text", f"{here}.content[{j}]", str))
    usage = _usage(data, "input_tokens", "output_tokens")
    return ModelResponse("".join(texts), tuple(calls), usage, tuple(blocks))


def _parse_anthropic(r: _Reader, data: Mapping[str, Any]) -> ModelResponse:
    texts: list[str] = []
    calls: list[ToolCall] = []
    blocks: list[ProviderBlock] = []
    for i, block in enumerate(r.get(data, "content", "", list)):
        here = f"content[{i}]"
        block = r.obj(block, here)
        kind = r.kind(block, here)
        if kind in _ANTHROPIC_REASONING:
            blocks.append(ProviderBlock(r.format, block, len(calls)))
        elif kind == "tool_use":
            calls.append(
                ToolCall(
                    r.call_id(block, "id", here),
                    r.text(block, "name", here),
                    _arguments(r, block, "input", here),
                )
            )
        elif kind == "text":
            texts.append(r.get(block, "text", here, str))
    usage = _usage(data, "input_tokens", "output_tokens")
    return ModelResponse("".join(texts), tuple(calls), usage, tuple(blocks))


_PARSERS = {
    "openai-chat": _parse_chat,
    "openai-responses": _parse_responses,
    "anthropic": _parse_anthropic,
}


def _check_format(format: str) -> FormatName:
    if format not in FORMATS:
        raise FormatError(
            f"unknown format {format!r}; use one of: {', '.join(FORMATS)}",
        )
    return format


def detect_format(response: Any) -> FormatName:
    """Tell which provider format a response is in.

    Recognised: a Chat Completion (``choices``) or a bare assistant message
    with ``tool_calls``; a Responses object (``output``); an Anthropic
    Message (``type: "message"`` or a ``content`` list of typed blocks).

    Raises:
        FormatError: none of the three shapes matches.
    """
    data = _plain(response)
    if isinstance(data, Mapping):
        if "choices" in data or data.get("object") == "chat.completion":
            return "openai-chat"
        if "output" in data or data.get("object") == "response":
            return "openai-responses"
        if data.get("role") == "assistant" and "tool_calls" in data:
            return "openai-chat"
        if data.get("type") == "message" or isinstance(data.get("content"), list):
            return "anthropic"
    raise FormatError(
        f"cannot tell the provider format of {_kind(data)} "
        f"(keys: {sorted(data)[:8] if isinstance(data, Mapping) else '-'}): expected "
        "'choices' (openai-chat), 'output' (openai-responses) or a 'content' list "
        "(anthropic); name the format explicitly"
    )


def parse_response(response: Any, format: FormatName | str | None = None) -> ModelResponse:
    """Read a provider response into text, tool calls (in order) and token usage.

    Args:
        response: a ``dict`` or an official SDK object (``ChatCompletion``,
            ``Response``, ``anthropic.types.Message``); for ``openai-chat`` an
            assistant message alone is also accepted.
        format: one of ``FORMATS``; detected when ``None``.

    Raises:
        FormatError: the response does not have the format's structure; the
            message names the offending field.
    """
    data = _plain(response)
    name = detect_format(data) if format is None else _check_format(format)
    r = _Reader(name)
    return _PARSERS[name](r, r.obj(data, ""))


def parse_calls(response: Any, format: FormatName | str | None = None) -> tuple[ToolCall, ...]:
    """The tool calls of a provider response, in the order the model emitted them.

    Same arguments and errors as ``parse_response``.
    """
    return parse_response(response, format).tool_calls


# -- writing ------------------------------------------------------------------


def _json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _result_text(result: ToolResult) -> str:
    text = result.text
    return f"Error: {text}" if result.is_error else text


def _anthropic_block(block: ContentBlock) -> dict[str, Any] | None:
    if isinstance(block, ImageContent) and block.mime_type in _IMAGE_TYPES:
        source = {"type": "base64", "media_type": block.mime_type, "data": block.data}
        return {"type": "image", "source": source}
    text = block_text(block)
    return {"type": "text", "text": text} if text else None


def _anthropic_result(result: ToolResult) -> dict[str, Any]:
    rendered: dict[str, Any] = {"type": "tool_result", "tool_use_id": result.call_id}
    blocks = [b for b in map(_anthropic_block, result.content) if b is not None]
    if blocks:
        rendered["content"] = blocks
    rendered["is_error"] = result.is_error
    return rendered


def _sendable_image(block: ContentBlock) -> bool:
    return isinstance(block, ImageContent) and block.mime_type in _IMAGE_TYPES


def _responses_part(block: ContentBlock) -> dict[str, Any]:
    if isinstance(block, ImageContent) and _sendable_image(block):
        url = f"data:{block.mime_type};base64,{block.data}"
        return {"type": "input_image", "image_url": url}
    return {"type": "input_text", "text": block_text(block)}


def _responses_output(result: ToolResult) -> str | list[dict[str, Any]]:
    """Text alone as a string; with an image, a list of input_text/input_image parts."""
    if not any(map(_sendable_image, result.content)):
        return _result_text(result)
    parts = [_responses_part(b) for b in result.content]
    if result.is_error:
        parts.insert(0, {"type": "input_text", "text": "Error:"})
    return parts


def render_results(results: Iterable[ToolResult], format: FormatName | str) -> list[dict[str, Any]]:
    """Render results as the messages (or input items) to send back, in call order.

    - ``openai-chat``: one ``tool`` message per result, ``tool_call_id`` set.
    - ``openai-responses``: one ``function_call_output`` item per result.
    - ``anthropic``: one ``user`` message holding a ``tool_result`` block per
      result, with ``is_error``; an empty list when there are no results.

    The OpenAI formats have no error flag, so an error result's text is
    prefixed with ``"Error: "`` (an ``"Error:"`` text part first when the
    output is a list of parts). JSON content is sent as JSON text. A PNG,
    JPEG, GIF or WebP image is sent as an image to Anthropic (an ``image``
    block) and to Responses (the output becomes a list of ``input_text`` and
    ``input_image`` parts, the image as a ``data:`` URL); Chat Completions
    tool messages take text only, so there (and for other image types) an
    image is a short note such as ``[image image/png, 9 bytes, not shown]``.
    """
    name = _check_format(format)
    results = list(results)
    if name == "openai-chat":
        return [
            {"role": "tool", "tool_call_id": r.call_id, "content": _result_text(r)} for r in results
        ]
    if name == "openai-responses":
        return [
            {"type": "function_call_output", "call_id": r.call_id, "output": _responses_output(r)}
            for r in results
        ]
    if not results:
        return []
    return [{"role": "user", "content": [_anthropic_result(r) for r in results]}]


def _schema(definition: ToolDefinition) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(_json_text(definition.input_schema))
    return schema


def render_tools(
    definitions: Iterable[ToolDefinition], format: FormatName | str
) -> list[dict[str, Any]]:
    """Render tool definitions as the provider's ``tools`` request parameter.

    Only what the model needs crosses: name, description and input schema.
    Side effects, timeouts and classifiers stay with the executor.
    """
    name = _check_format(format)
    if name == "openai-chat":
        return [
            {
                "type": "function",
                "function": {
                    "name": d.name,
                    "description": d.description,
                    "parameters": _schema(d),
                },
            }
            for d in definitions
        ]
    if name == "openai-responses":
        return [
            {
                "type": "function",
                "name": d.name,
                "description": d.description,
                "parameters": _schema(d),
                "strict": False,
            }
            for d in definitions
        ]
    return [
        {"name": d.name, "description": d.description, "input_schema": _schema(d)}
        for d in definitions
    ]


def _arguments_text(call: ToolCall) -> str:
    return call.arguments if isinstance(call.arguments, str) else _json_text(dict(call.arguments))


def _arguments_object(call: ToolCall) -> dict[str, Any]:
    if not isinstance(call.arguments, str):
        return dict(call.arguments)
    try:
        value = json.loads(call.arguments) if call.arguments.strip() else {}
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _placed(
    blocks: Sequence[ProviderBlock], opening: list[dict[str, Any]], calls: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Blocks in place: position 0 before the opening, position i after the i-th call."""
    slots: list[list[dict[str, Any]]] = [[] for _ in range(len(calls) + 1)]
    for block in blocks:
        slots[min(block.position, len(calls))].append(copy.deepcopy(dict(block.data)))
    placed = slots[0] + opening
    for call, after in zip(calls, slots[1:], strict=True):
        placed += [call, *after]
    return placed


def render_assistant(
    text: str,
    calls: Sequence[ToolCall],
    format: FormatName | str,
    *,
    provider_blocks: Sequence[ProviderBlock] = (),
) -> list[dict[str, Any]]:
    """Render an assistant turn (its text and tool calls) for the conversation history.

    Use it to replay a model's turn in the next request, before the results
    of ``render_results``. Returns a list because the Responses format sends
    one input item per call; the other formats return one message.

    ``provider_blocks`` (a ``ModelResponse``'s or ``Message``'s) are sent back
    unchanged when they belong to ``format``, in the order they came: a
    block that came before every call opens the turn (Anthropic requires a
    thinking turn to start with its ``thinking`` blocks; a Responses
    ``reasoning`` item precedes the items it led to), a later one follows
    the call it came after. Blocks of another format are dropped: reasoning
    state is only valid for the provider that signed it.
    """
    name = _check_format(format)
    mine = [b for b in provider_blocks if b.format == name]
    if name == "openai-chat":
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            message["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": _arguments_text(c)},
                }
                for c in calls
            ]
        return [message]
    if name == "openai-responses":
        items = [
            {
                "type": "function_call",
                "call_id": c.id,
                "name": c.name,
                "arguments": _arguments_text(c),
            }
            for c in calls
        ]
        return _placed(mine, [{"role": "assistant", "content": text}] if text else [], items)
    uses = [
        {"type": "tool_use", "id": c.id, "name": c.name, "input": _arguments_object(c)}
        for c in calls
    ]
    blocks = _placed(mine, [{"type": "text", "text": text}] if text else [], uses)
    return [{"role": "assistant", "content": blocks}]
