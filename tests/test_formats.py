"""Provider formats round-trip through the executor, checked by the official SDK types."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import TypeAdapter

from toolexec import (
    ErrorClass,
    ImageContent,
    JsonContent,
    SideEffects,
    TextContent,
    ToolCall,
    ToolError,
    ToolExecutor,
    ToolRegistry,
    ToolResult,
    formats,
    function_tool,
)
from toolexec.formats import FormatError
from toolexec.models import ProviderBlock

# Slow (tests/README.md): the SDKs' types, imported and validated with pydantic.
pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True, scope="module")
def _sdks_installed() -> None:
    """Skip where the SDKs are missing; their types are imported by the tests that use them.

    Not at import: collection stays free of the SDKs, which take about a second
    to import.
    """
    pytest.importorskip("openai.types")
    pytest.importorskip("anthropic.types")


# -- helpers ------------------------------------------------------------------


def _materialize(value: Any) -> Any:
    """Walk a pydantic-validated TypedDict, forcing its lazily validated iterables."""
    if isinstance(value, dict):
        return {k: _materialize(v) for k, v in value.items()}
    if isinstance(value, str | int | float | bool | type(None)):
        return value
    if isinstance(value, list | tuple | Iterator) or hasattr(value, "__next__"):
        return [_materialize(v) for v in value]
    return value


def assert_valid_param(param_type: Any, value: Any) -> None:
    """``value`` validates as the SDK request type and loses no key doing so."""
    adapter = TypeAdapter(param_type)  # alive while its lazy iterators are consumed
    validated = _materialize(adapter.validate_python(value))
    assert validated == value


def make_registry() -> tuple[ToolRegistry, dict[str, str]]:
    notes = {"todo": "buy milk"}

    @function_tool(side_effects=SideEffects.READ)
    def read_note(name: str) -> str:
        """Read a note."""
        if name not in notes:
            raise ToolError(f"No note named {name!r}.")
        return notes[name]

    @function_tool(side_effects=SideEffects.WRITE)
    def write_note(name: str, text: str) -> str:
        """Write a note."""
        notes[name] = text
        return f"wrote {name}"

    @function_tool(side_effects=SideEffects.NONE)
    def stats() -> dict[str, int]:
        """Count the notes."""
        return {"notes": len(notes)}

    registry = ToolRegistry()
    for tool in (read_note, write_note, stats):
        registry.register(tool)
    return registry, notes


# -- responses as the providers send them -----------------------------------


def chat_completion() -> dict[str, Any]:
    calls = [
        ("call_a1", "read_note", '{"name": "todo"}'),
        ("call_b2", "write_note", '{"name": "todo", "text": "buy oat milk"}'),
        ("call_c3", "read_note", '{"name": "todo"}'),
        ("call_d4", "read_note", '{"name": '),  # truncated JSON from the model
        ("call_e5", "delete_note", "{}"),
        ("call_f6", "stats", ""),
    ]
    return {
        "id": "chatcmpl-9x",
        "object": "chat.completion",
        "created": 1_760_000_000,
        "model": "gpt-4.1-mini",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "logprobs": None,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "refusal": None,
                    "tool_calls": [
                        {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                        for i, n, a in calls
                    ],
                },
            }
        ],
        "usage": {"prompt_tokens": 120, "completion_tokens": 80, "total_tokens": 200},
    }


def responses_response() -> dict[str, Any]:
    calls = [
        ("call_r1", "read_note", '{"name": "todo"}'),
        ("call_r2", "write_note", '{"name": "todo", "text": "buy oat milk"}'),
        ("call_r3", "read_note", '{"name": "missing"}'),
    ]
    return {
        "id": "resp_01",
        "object": "response",
        "created_at": 1_760_000_000,
        "model": "gpt-4.1-mini",
        "status": "completed",
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "output": [
            {
                "id": "msg_01",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "Checking.", "annotations": []}],
            },
            *[
                {
                    "id": f"fc_{i}",
                    "type": "function_call",
                    "call_id": i,
                    "name": n,
                    "arguments": a,
                    "status": "completed",
                }
                for i, n, a in calls
            ],
        ],
        "usage": {
            "input_tokens": 50,
            "output_tokens": 30,
            "total_tokens": 80,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }


def anthropic_message() -> dict[str, Any]:
    return {
        "id": "msg_01A",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "content": [
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "toolu_1", "name": "read_note", "input": {"name": "todo"}},
            {
                "type": "tool_use",
                "id": "toolu_2",
                "name": "write_note",
                "input": {"name": "todo", "text": "buy oat milk"},
            },
            {"type": "tool_use", "id": "toolu_3", "name": "read_note", "input": {"name": "nope"}},
            {"type": "tool_use", "id": "toolu_4", "name": "write_note", "input": {"name": 3}},
        ],
        "usage": {"input_tokens": 40, "output_tokens": 25},
    }


# -- round trips --------------------------------------------------------------


async def test_openai_chat_round_trip() -> None:
    from openai.types.chat import ChatCompletion, ChatCompletionMessageParam

    raw = chat_completion()
    sdk = ChatCompletion.model_validate(raw)
    assert formats.detect_format(sdk) == "openai-chat"
    parsed = formats.parse_response(sdk)
    assert parsed == formats.parse_response(raw, "openai-chat")
    assert parsed.usage.input_tokens == 120
    calls = parsed.tool_calls
    assert [c.id for c in calls] == [f"call_{x}" for x in ("a1", "b2", "c3", "d4", "e5", "f6")]
    assert calls[0].arguments == '{"name": "todo"}'  # the raw string, for the executor

    registry, notes = make_registry()
    outcome = await ToolExecutor(registry).execute_batch(calls)
    messages = formats.render_results(outcome.results, "openai-chat")

    assert [m["tool_call_id"] for m in messages] == [c.id for c in calls]
    texts = [m["content"] for m in messages]
    assert texts[0] == "buy milk"
    assert texts[2] == "buy oat milk"  # the write ran between the two reads
    assert texts[3].startswith("Error: Invalid arguments for tool 'read_note'")
    assert texts[4].startswith("Error: Tool 'delete_note' not found")
    assert json.loads(texts[5]) == {"notes": 1}
    assert notes == {"todo": "buy oat milk"}
    for message in messages:
        assert_valid_param(ChatCompletionMessageParam, message)
    history = [
        {"role": "user", "content": "tidy my notes"},
        *formats.render_assistant(parsed.text, calls, "openai-chat"),
        *messages,
    ]
    assert_valid_param(list[ChatCompletionMessageParam], history)


async def test_openai_responses_round_trip() -> None:
    from openai.types.responses import Response, ResponseInputItemParam

    raw = responses_response()
    sdk = Response.model_validate(raw)
    assert formats.detect_format(sdk) == "openai-responses"
    parsed = formats.parse_response(sdk)
    assert parsed == formats.parse_response(raw)
    assert parsed.text == "Checking."
    assert [c.id for c in parsed.tool_calls] == ["call_r1", "call_r2", "call_r3"]

    registry, _ = make_registry()
    outcome = await ToolExecutor(registry).execute_batch(parsed.tool_calls)
    items = formats.render_results(outcome.results, "openai-responses")

    assert [i["call_id"] for i in items] == ["call_r1", "call_r2", "call_r3"]
    assert [i["output"] for i in items] == [
        "buy milk",
        "wrote todo",
        "Error: No note named 'missing'.",
    ]
    history = [
        {"role": "user", "content": "tidy my notes"},
        *formats.render_assistant(parsed.text, parsed.tool_calls, "openai-responses"),
        *items,
    ]
    for item in history:
        assert_valid_param(ResponseInputItemParam, item)


async def test_anthropic_round_trip_carries_is_error() -> None:
    from anthropic.types import Message as AnthropicMessage
    from anthropic.types import MessageParam

    raw = anthropic_message()
    sdk = AnthropicMessage.model_validate(raw)
    assert formats.detect_format(sdk) == "anthropic"
    parsed = formats.parse_response(sdk)
    assert parsed == formats.parse_response(raw)
    assert parsed.text == "Let me look."
    assert parsed.tool_calls[1] == ToolCall(
        "toolu_2", "write_note", {"name": "todo", "text": "buy oat milk"}
    )

    registry, _ = make_registry()
    outcome = await ToolExecutor(registry).execute_batch(parsed.tool_calls)
    assert outcome.results[3].error_class is ErrorClass.INVALID_ARGUMENTS
    rendered = formats.render_results(outcome.results, "anthropic")

    assert len(rendered) == 1
    assert rendered[0]["role"] == "user"
    blocks = rendered[0]["content"]
    assert [b["tool_use_id"] for b in blocks] == ["toolu_1", "toolu_2", "toolu_3", "toolu_4"]
    assert [b["is_error"] for b in blocks] == [False, False, True, True]
    assert blocks[2]["content"] == [{"type": "text", "text": "No note named 'nope'."}]
    history = [
        {"role": "user", "content": "tidy my notes"},
        *formats.render_assistant(parsed.text, parsed.tool_calls, "anthropic"),
        *rendered,
    ]
    assert_valid_param(list[MessageParam], history)


def test_bare_chat_message_and_mapping_arguments() -> None:
    message = {
        "role": "assistant",
        "content": "ok",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "x", "arguments": {"a": 1}}}
        ],
    }
    assert formats.detect_format(message) == "openai-chat"
    parts = {**message, "content": [{"type": "text", "text": "ok"}]}
    assert formats.detect_format(parts) == "openai-chat"
    assert formats.parse_response(parts).text == "ok"
    assert formats.parse_calls(message) == (ToolCall("c1", "x", {"a": 1}),)
    rendered = formats.render_assistant("", formats.parse_calls(message), "openai-chat")
    assert rendered[0]["tool_calls"][0]["function"]["arguments"] == '{"a": 1}'


def test_text_only_responses_have_no_calls() -> None:
    from openai.types.chat import ChatCompletion

    chat = chat_completion()
    chat["choices"][0]["message"] = {"role": "assistant", "content": "Done."}
    assert formats.parse_response(ChatCompletion.model_validate(chat)).text == "Done."
    assert formats.parse_calls(chat) == ()
    assert formats.render_results([], "anthropic") == []


# -- content rendering --------------------------------------------------------


def test_content_blocks_render_per_provider() -> None:
    from anthropic.types import MessageParam
    from openai.types.responses.response_input_item_param import FunctionCallOutput

    png = "iVBORw0KGgo="
    result = ToolResult(
        "c1",
        "shot",
        (TextContent("see"), JsonContent({"w": 2}), ImageContent(png, "image/png")),
    )
    chat = formats.render_results([result], "openai-chat")[0]
    assert chat["content"] == 'see\n{"w": 2}\n[image image/png, 8 bytes, not shown]'
    block = formats.render_results([result], "anthropic")[0]["content"][0]
    assert block["content"] == [
        {"type": "text", "text": "see"},
        {"type": "text", "text": '{"w": 2}'},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}},
    ]
    assert_valid_param(MessageParam, formats.render_results([result], "anthropic")[0])
    item = formats.render_results([result], "openai-responses")[0]
    assert item["output"] == [
        {"type": "input_text", "text": "see"},
        {"type": "input_text", "text": '{"w": 2}'},
        {"type": "input_image", "image_url": f"data:image/png;base64,{png}"},
    ]
    assert_valid_param(FunctionCallOutput, item)
    empty = ToolResult("c2", "quiet", (TextContent(""),))
    assert formats.render_results([empty], "anthropic")[0]["content"] == [
        {"type": "tool_result", "tool_use_id": "c2", "is_error": False}
    ]


def test_an_error_with_an_image_opens_with_an_error_part_in_responses() -> None:
    from openai.types.chat import ChatCompletionToolMessageParam
    from openai.types.responses.response_input_item_param import FunctionCallOutput

    shot = ImageContent("iVBORw0KGgo=", "image/webp")
    failed = ToolResult("c1", "shot", (shot,), is_error=True)
    (item,) = formats.render_results([failed], "openai-responses")
    assert item["output"] == [
        {"type": "input_text", "text": "Error:"},
        {"type": "input_image", "image_url": "data:image/webp;base64,iVBORw0KGgo="},
    ]
    assert_valid_param(FunctionCallOutput, item)
    (chat,) = formats.render_results([failed], "openai-chat")
    assert chat["content"] == "Error: [image image/webp, 8 bytes, not shown]"  # the PNG magic
    assert_valid_param(ChatCompletionToolMessageParam, chat)


def test_tool_definitions_render_as_each_provider_schema() -> None:
    from anthropic.types import ToolParam
    from openai.types.chat import ChatCompletionFunctionToolParam
    from openai.types.responses import FunctionToolParam

    registry, _ = make_registry()
    definitions = registry.definitions()
    chat = formats.render_tools(definitions, "openai-chat")
    responses = formats.render_tools(definitions, "openai-responses")
    anthropic = formats.render_tools(definitions, "anthropic")
    assert [t["function"]["name"] for t in chat] == ["read_note", "write_note", "stats"]
    for tool in chat:
        assert_valid_param(ChatCompletionFunctionToolParam, tool)
    for tool in responses:
        assert_valid_param(FunctionToolParam, tool)
    for tool in anthropic:
        assert_valid_param(ToolParam, tool)
    assert anthropic[0]["input_schema"] == dict(definitions[0].input_schema)
    assert anthropic[0]["description"] == "Read a note."


# -- malformed responses ------------------------------------------------------


@pytest.mark.parametrize(
    ("mutate", "fmt", "path"),
    [
        (lambda r: r["choices"][0]["message"]["tool_calls"][1].pop("id"), "openai-chat",
         "choices[0].message.tool_calls[1].id"),
        (lambda r: r.update(choices={}), "openai-chat", "choices"),
        (lambda r: r.update(choices=[]), "openai-chat", "choices"),
        (lambda r: r["choices"][0]["message"]["tool_calls"][0]["function"].update(arguments=3),
         "openai-chat", "choices[0].message.tool_calls[0].function.arguments"),
        (lambda r: r["output"][2].update(name=None), "openai-responses", "output[2].name"),
        (lambda r: r.update(output="nope"), "openai-responses", "output"),
        (lambda r: r["content"][1].pop("name"), "anthropic", "content[1].name"),
        (lambda r: r["content"].append("tool_use"), "anthropic", "content[5]"),
        (lambda r: r["content"][3].update(id="toolu_1"), "anthropic", "content[3].id"),
        (lambda r: r["output"][3].update(call_id="call_r1"), "openai-responses",
         "output[3].call_id"),
    ],
)  # fmt: skip
def test_malformed_responses_name_the_field(mutate: Any, fmt: str, path: str) -> None:
    response = {
        "openai-chat": chat_completion,
        "openai-responses": responses_response,
        "anthropic": anthropic_message,
    }[fmt]()
    mutate(response)
    with pytest.raises(FormatError) as info:
        formats.parse_calls(response, fmt)
    assert info.value.path == path
    assert info.value.format == fmt
    assert f"field {path}:" in str(info.value)
    assert isinstance(info.value, ValueError)


def test_undetectable_and_unknown_formats() -> None:
    with pytest.raises(FormatError, match="cannot tell the provider format"):
        formats.detect_format({"hello": "world"})
    with pytest.raises(FormatError, match="cannot tell"):
        formats.parse_calls([1, 2])
    with pytest.raises(FormatError, match="unknown format 'gemini'; use one of"):
        formats.render_results([], "gemini")


def test_formats_doc_examples_run() -> None:
    page = (Path(__file__).parent.parent / "docs" / "formats.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, flags=re.DOTALL)
    assert len(blocks) == 5
    namespace: dict[str, Any] = {"__name__": "formats_doc"}
    for block in blocks:
        exec(compile(block, "docs/formats.md", "exec"), namespace)


@pytest.mark.parametrize(
    ("content", "text"),
    [
        ((JsonContent(5),), "5"),
        ((JsonContent({"n": "é"}),), '{"n": "é"}'),
        ((TextContent("a"), JsonContent([1, 2])), "a\n[1, 2]"),
        ((ImageContent("AAAA", "image/bmp"),), "[image image/bmp, 3 bytes, not shown]"),
        # The exact decoded size: padding and line breaks are not data (a BMP is a
        # note in every format).
        (
            (ImageContent("eHh4eHh4eHh4eA==", "image/bmp"),),
            "[image image/bmp, 10 bytes, not shown]",
        ),
        ((ImageContent("eHg=", "image/bmp"),), "[image image/bmp, 2 bytes, not shown]"),
        ((ImageContent("eHg", "image/bmp"),), "[image image/bmp, 2 bytes, not shown]"),
        ((ImageContent("eHh4\neHh4\n", "image/bmp"),), "[image image/bmp, 6 bytes, not shown]"),
        ((), ""),
    ],
)
def test_result_text_is_what_the_model_reads(content: tuple[Any, ...], text: str) -> None:
    result = ToolResult("c1", "t", content)
    assert result.text == text
    for name in ("openai-chat", "openai-responses"):
        (message,) = formats.render_results([result], name)
        assert message.get("content", message.get("output")) == text
    error = ToolResult("c1", "t", content, is_error=True, error_class=ErrorClass.EXECUTION_ERROR)
    (message,) = formats.render_results([error], "openai-chat")
    assert message["content"] == f"Error: {text}"


async def test_a_tool_returning_a_number_reads_the_same_in_text_and_message() -> None:
    @function_tool(side_effects=SideEffects.READ)
    async def five() -> int:
        """Five."""
        return 5

    registry = ToolRegistry()
    registry.register(five)
    (result,) = (await ToolExecutor(registry).execute_batch([ToolCall("1", "five")])).results
    assert result.text == "5"
    assert formats.render_results([result], "openai-chat")[0]["content"] == "5"


# -- reasoning state ------------------------------------------------------------

THINKING = {"type": "thinking", "thinking": "Read first.", "signature": "c2lnLTE="}
REDACTED = {"type": "redacted_thinking", "data": "RU5DUllQVEVE"}


def anthropic_thinking_message() -> dict[str, Any]:
    raw = anthropic_message()
    raw["content"] = [THINKING, REDACTED, *raw["content"][:3]]
    return raw


def reasoning(n: int) -> dict[str, Any]:
    return {
        "id": f"rs_{n}",
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": f"step {n}"}],
        "encrypted_content": f"gAAAA-{n}",
    }


def test_anthropic_thinking_round_trips_first_and_unchanged() -> None:
    from anthropic.types import Message as AnthropicMessage
    from anthropic.types import MessageParam

    parsed = formats.parse_response(AnthropicMessage.model_validate(anthropic_thinking_message()))
    assert parsed.provider_blocks == (
        ProviderBlock("anthropic", THINKING),
        ProviderBlock("anthropic", REDACTED),
    )
    (turn,) = formats.render_assistant(
        parsed.text, parsed.tool_calls, "anthropic", provider_blocks=parsed.provider_blocks
    )
    assert turn["content"][:3] == [THINKING, REDACTED, {"type": "text", "text": "Let me look."}]
    assert [b["type"] for b in turn["content"][3:]] == ["tool_use", "tool_use"]
    assert_valid_param(MessageParam, turn)
    again = formats.parse_response(turn, "anthropic")
    assert (again.text, again.tool_calls, again.provider_blocks) == (
        parsed.text,
        parsed.tool_calls,
        parsed.provider_blocks,
    )


def test_responses_reasoning_round_trips_before_the_calls_it_led_to() -> None:
    from openai.types.responses import Response, ResponseInputItemParam

    raw = responses_response()
    fc1, fc2, fc3 = raw["output"][1:]
    raw["output"] = [reasoning(1), fc1, fc2, reasoning(2), fc3]
    parsed = formats.parse_response(Response.model_validate(raw))
    assert [(b.data["id"], b.position) for b in parsed.provider_blocks] == [
        ("rs_1", 0),
        ("rs_2", 2),
    ]
    items = formats.render_assistant(
        "", parsed.tool_calls, "openai-responses", provider_blocks=parsed.provider_blocks
    )
    assert [i.get("id", i.get("call_id")) for i in items] == [
        "rs_1",
        "call_r1",
        "call_r2",
        "rs_2",
        "call_r3",
    ]
    assert items[0] == reasoning(1)
    for item in items:
        assert_valid_param(ResponseInputItemParam, item)
    again = formats.parse_response({"output": items}, "openai-responses")
    assert again == parsed.__class__(
        parsed.text, parsed.tool_calls, again.usage, parsed.provider_blocks
    )


def test_reasoning_opens_the_responses_turn_before_its_text() -> None:
    blocks = (ProviderBlock("openai-responses", reasoning(1)),)
    items = formats.render_assistant("Done.", (), "openai-responses", provider_blocks=blocks)
    assert items == [reasoning(1), {"role": "assistant", "content": "Done."}]


@pytest.mark.parametrize("fmt", formats.FORMATS)
def test_reasoning_of_another_provider_is_dropped(fmt: str) -> None:
    blocks = (
        ProviderBlock("anthropic", THINKING),
        ProviderBlock("openai-responses", reasoning(1)),
    )
    call = ToolCall("c1", "read_note", {"name": "todo"})
    kept = formats.render_assistant("", (call,), fmt, provider_blocks=blocks)
    plain = formats.render_assistant("", (call,), fmt)
    sent = json.dumps(kept)
    markers = {"anthropic": THINKING["signature"], "openai-responses": "gAAAA-1"}
    assert {f for f, marker in markers.items() if marker in sent} == {fmt} & set(markers)
    if fmt == "openai-chat":
        assert kept == plain


def test_a_provider_block_is_a_private_copy_of_json() -> None:
    data: dict[str, Any] = {
        "type": "thinking",
        "thinking": "x",
        "signature": "s",
        "extra": {"k": [1]},
    }
    block = ProviderBlock("anthropic", data)
    data["extra"]["k"].append(2)
    assert block.data["extra"] == {"k": [1]}
    (turn,) = formats.render_assistant("", (), "anthropic", provider_blocks=(block,))
    turn["content"][0]["extra"]["k"].append(3)
    assert block.data["extra"] == {"k": [1]}
    with pytest.raises(TypeError, match="JSON object"):
        ProviderBlock("anthropic", ["thinking"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="position must be an integer >= 0"):
        ProviderBlock("anthropic", data, -1)


@pytest.mark.parametrize(
    ("response", "format", "where"),
    [
        ({"content": [{"type": ["tool_use"]}]}, "anthropic", "content[0].type"),
        ({"output": [{"type": {"x": 1}}]}, "openai-responses", "output[0].type"),
    ],
)
def test_a_block_type_that_is_not_a_string_is_a_format_error(
    response: dict[str, object], format: str, where: str
) -> None:
    # Found by fuzz/fuzz_formats.py: an unhashable "type" raised TypeError.
    with pytest.raises(FormatError, match=r"expected string, got (list|object)") as caught:
        formats.parse_response(response, format)
    assert caught.value.path == where


def test_a_text_part_that_is_not_a_string_is_a_format_error() -> None:
    # Found by fuzz/fuzz_formats.py: a chat content part {"type": "text",
    # "text": true} raised TypeError while the text was joined.
    message = {"role": "assistant", "content": [{"type": "text", "text": True}], "tool_calls": []}
    with pytest.raises(FormatError, match="expected str, got boolean") as caught:
        formats.parse_response(message, "openai-chat")
    assert caught.value.path == "content[0].text"
    ok = {"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "text"}]}
    with pytest.raises(FormatError, match="missing"):
        formats.parse_response({**ok, "tool_calls": []}, "openai-chat")
