"""Feeds from provider streams: recorded event sequences, built with the SDKs' own types.

Each test replays a stream in which the model writes two tool calls
(arguments split over several deltas, text around them) and checks that
every call reaches the batch as soon as its last argument byte has arrived
(its tool has started before the rest of the stream is fed), with the id,
name and arguments it was written with, and that the stream's end closes
the batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
import trio
import trio.testing

from toolexec import ErrorClass, SideEffects, ToolExecutor, ToolRegistry, function_tool
from toolexec.streams import AnthropicFeed, OpenAIChatFeed, OpenAIResponsesFeed

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionChunk
    from openai.types.chat.chat_completion_chunk import ChoiceDeltaToolCall
    from openai.types.responses import ResponseFunctionToolCall

# The SDKs' types are imported in the functions that build them, not at import:
# collection stays free of the SDKs, which take about a second to import.


def _executor(started: list[str]) -> ToolExecutor:
    @function_tool(side_effects=SideEffects.READ)
    async def weather(city: str) -> str:
        """The weather in a city."""
        started.append(city)
        await trio.sleep(1)
        return f"sunny in {city}"

    registry = ToolRegistry()
    registry.register(weather)
    return ToolExecutor(registry)


async def _replay(feed_of: Any, events: list[tuple[Any, list[str]]]) -> Any:
    """Feed ``events``; before each, the tools started so far must be as listed."""
    started: list[str] = []
    batch = _executor(started).open_batch()
    feed = feed_of(batch)
    outcome: list[Any] = []
    async with trio.open_nursery() as nursery:

        async def run() -> None:
            outcome.append(await batch.run())

        nursery.start_soon(run)
        for event, expected in events:
            await trio.testing.wait_all_tasks_blocked()
            assert started == expected, event
            feed.feed(event)
    return outcome[0]


def _chat(
    tool_calls: list[ChoiceDeltaToolCall] | None = None,
    *,
    finish: Any = None,
    text: str | None = None,
) -> ChatCompletionChunk:
    from openai.types.chat import ChatCompletionChunk
    from openai.types.chat.chat_completion_chunk import Choice, ChoiceDelta

    delta = ChoiceDelta(role="assistant", content=text, tool_calls=tool_calls)
    return ChatCompletionChunk(
        id="chatcmpl-1",
        object="chat.completion.chunk",
        created=0,
        model="gpt-test",
        choices=[Choice(index=0, delta=delta, finish_reason=finish)],
    )


def _chat_call(
    index: int, *, id: str | None = None, name: str | None = None, args: str = ""
) -> list[ChoiceDeltaToolCall]:
    from openai.types.chat.chat_completion_chunk import (
        ChoiceDeltaToolCall,
        ChoiceDeltaToolCallFunction,
    )

    function = ChoiceDeltaToolCallFunction(name=name, arguments=args)
    return [
        ChoiceDeltaToolCall(index=index, id=id, type="function" if id else None, function=function)
    ]


async def test_openai_chat_chunks_add_each_call_once_the_next_begins(
    autojump_clock: trio.testing.MockClock,
) -> None:
    outcome = await _replay(
        OpenAIChatFeed,
        [
            (_chat(text="Checking."), []),
            (_chat(_chat_call(0, id="call_a", name="weather")), []),
            (_chat(_chat_call(0, args='{"city": ')), []),
            (_chat(_chat_call(0, args='"Paris"}')), []),
            (_chat(_chat_call(1, id="call_b", name="weather", args='{"ci')), []),
            (_chat(_chat_call(1, args='ty": "Oslo"}')), ["Paris"]),
            (_chat(finish="tool_calls"), ["Paris"]),
        ],
    )
    assert [(r.call_id, r.text) for r in outcome.results] == [
        ("call_a", "sunny in Paris"),
        ("call_b", "sunny in Oslo"),
    ]


def _item(
    item_id: str, call_id: str, arguments: str, status: Any = "in_progress"
) -> ResponseFunctionToolCall:
    from openai.types.responses import ResponseFunctionToolCall

    return ResponseFunctionToolCall(
        id=item_id,
        call_id=call_id,
        name="weather",
        arguments=arguments,
        type="function_call",
        status=status,
    )


async def test_openai_responses_events_add_each_call_when_its_arguments_are_done(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from openai.types.responses import (
        Response,
        ResponseCompletedEvent,
        ResponseFunctionCallArgumentsDeltaEvent,
        ResponseFunctionCallArgumentsDoneEvent,
        ResponseOutputItemAddedEvent,
        ResponseOutputItemDoneEvent,
    )

    response = Response.model_construct(id="resp_1", output=[], status="completed")
    outcome = await _replay(
        OpenAIResponsesFeed,
        [
            (
                ResponseOutputItemAddedEvent(
                    type="response.output_item.added",
                    output_index=0,
                    sequence_number=1,
                    item=_item("fc_1", "call_a", ""),
                ),
                [],
            ),
            (
                ResponseFunctionCallArgumentsDeltaEvent(
                    type="response.function_call_arguments.delta",
                    item_id="fc_1",
                    output_index=0,
                    sequence_number=2,
                    delta='{"city": "Pa',
                ),
                [],
            ),
            (
                ResponseFunctionCallArgumentsDeltaEvent(
                    type="response.function_call_arguments.delta",
                    item_id="fc_1",
                    output_index=0,
                    sequence_number=3,
                    delta='ris"}',
                ),
                [],
            ),
            (
                ResponseFunctionCallArgumentsDoneEvent(
                    type="response.function_call_arguments.done",
                    item_id="fc_1",
                    output_index=0,
                    sequence_number=4,
                    arguments='{"city": "Paris"}',
                ),
                [],
            ),
            (
                ResponseOutputItemDoneEvent(
                    type="response.output_item.done",
                    output_index=0,
                    sequence_number=5,
                    item=_item("fc_1", "call_a", '{"city": "Paris"}', "completed"),
                ),
                ["Paris"],
            ),
            (
                ResponseOutputItemAddedEvent(
                    type="response.output_item.added",
                    output_index=1,
                    sequence_number=6,
                    item=_item("fc_2", "call_b", ""),
                ),
                ["Paris"],
            ),
            (
                ResponseOutputItemDoneEvent(
                    type="response.output_item.done",
                    output_index=1,
                    sequence_number=7,
                    item=_item("fc_2", "call_b", '{"city": "Oslo"}', "completed"),
                ),
                ["Paris"],
            ),
            (
                ResponseCompletedEvent(
                    type="response.completed", sequence_number=8, response=response
                ),
                ["Paris", "Oslo"],
            ),
        ],
    )
    assert [(r.call_id, r.text) for r in outcome.results] == [
        ("call_a", "sunny in Paris"),
        ("call_b", "sunny in Oslo"),
    ]


async def test_anthropic_events_add_each_tool_use_block_at_its_stop(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from anthropic.types import (
        InputJSONDelta,
        Message,
        MessageDeltaUsage,
        RawContentBlockDeltaEvent,
        RawContentBlockStartEvent,
        RawContentBlockStopEvent,
        RawMessageDeltaEvent,
        RawMessageStartEvent,
        RawMessageStopEvent,
        TextBlock,
        TextDelta,
        ToolUseBlock,
        Usage,
    )
    from anthropic.types.raw_message_delta_event import Delta

    message = Message(
        id="msg_1", type="message", role="assistant", model="claude-test", content=[],
        stop_reason=None, stop_sequence=None, usage=Usage(input_tokens=1, output_tokens=1),
    )  # fmt: skip
    outcome = await _replay(
        AnthropicFeed,
        [
            (RawMessageStartEvent(type="message_start", message=message), []),
            (
                RawContentBlockStartEvent(
                    type="content_block_start",
                    index=0,
                    content_block=TextBlock(type="text", text=""),
                ),
                [],
            ),
            (
                RawContentBlockDeltaEvent(
                    type="content_block_delta",
                    index=0,
                    delta=TextDelta(type="text_delta", text="Checking."),
                ),
                [],
            ),
            (RawContentBlockStopEvent(type="content_block_stop", index=0), []),
            (
                RawContentBlockStartEvent(
                    type="content_block_start",
                    index=1,
                    content_block=ToolUseBlock(
                        type="tool_use", id="toolu_a", name="weather", input={}
                    ),
                ),
                [],
            ),
            (
                RawContentBlockDeltaEvent(
                    type="content_block_delta",
                    index=1,
                    delta=InputJSONDelta(type="input_json_delta", partial_json='{"city"'),
                ),
                [],
            ),
            (
                RawContentBlockDeltaEvent(
                    type="content_block_delta",
                    index=1,
                    delta=InputJSONDelta(type="input_json_delta", partial_json=': "Paris"}'),
                ),
                [],
            ),
            (RawContentBlockStopEvent(type="content_block_stop", index=1), []),
            (
                RawContentBlockStartEvent(
                    type="content_block_start",
                    index=2,
                    content_block=ToolUseBlock(
                        type="tool_use", id="toolu_b", name="weather", input={}
                    ),
                ),
                ["Paris"],
            ),
            (
                RawContentBlockDeltaEvent(
                    type="content_block_delta",
                    index=2,
                    delta=InputJSONDelta(type="input_json_delta", partial_json='{"city": "Oslo"}'),
                ),
                ["Paris"],
            ),
            (RawContentBlockStopEvent(type="content_block_stop", index=2), ["Paris"]),
            (
                RawMessageDeltaEvent(
                    type="message_delta",
                    delta=Delta(stop_reason="tool_use", stop_sequence=None),
                    usage=MessageDeltaUsage(output_tokens=9),
                ),
                ["Paris", "Oslo"],
            ),
            (RawMessageStopEvent(type="message_stop"), ["Paris", "Oslo"]),
        ],
    )
    assert [(r.call_id, r.text) for r in outcome.results] == [
        ("toolu_a", "sunny in Paris"),
        ("toolu_b", "sunny in Oslo"),
    ]


async def test_a_stream_cut_short_still_answers_the_call_it_was_writing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Plain dict events; the stream ends mid-arguments and the host closes the feed."""
    started: list[str] = []
    batch = _executor(started).open_batch()
    feed = AnthropicFeed(batch)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(batch.run)
        feed.feed(
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "tool_use", "id": "t1", "name": "weather", "input": {}},
            }
        )
        feed.feed(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": '{"city": "Pa'},
            }
        )
        feed.close()
        feed.close()  # closing twice does nothing
    assert batch.calls[0].arguments == '{"city": "Pa'
    assert started == []


async def test_a_cut_short_call_gets_an_invalid_arguments_result() -> None:
    batch = _executor([]).open_batch()
    feed = OpenAIChatFeed(batch)
    feed.feed(
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "c1",
                                "function": {"name": "weather", "arguments": '{"ci'},
                            }
                        ]
                    },
                }
            ]
        }
    )
    feed.close()
    outcome = await batch.run()
    assert [r.error_class for r in outcome.results] == [ErrorClass.INVALID_ARGUMENTS]


def _anthropic_past_the_brace() -> list[dict[str, Any]]:
    def delta(text: str) -> dict[str, Any]:
        return {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": text},
        }

    start = {"type": "tool_use", "id": "t1", "name": "weather", "input": {}}
    return [
        {"type": "content_block_start", "index": 0, "content_block": start},
        delta('{"city": "Paris"}'),
        delta("}"),
        {"type": "content_block_stop", "index": 0},
        {"type": "message_stop"},
    ]


def _chat_past_the_brace() -> list[dict[str, Any]]:
    def chunk(call: dict[str, Any] | None, finish: str | None = None) -> dict[str, Any]:
        delta = {"tool_calls": [call]} if call else {}
        return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    return [
        chunk({"index": 0, "id": "t1", "function": {"name": "weather", "arguments": ""}}),
        chunk({"index": 0, "function": {"arguments": '{"city": "Paris"}'}}),
        chunk({"index": 0, "function": {"arguments": "}"}}),
        chunk(None, "tool_calls"),
    ]


def _responses_past_the_brace() -> list[dict[str, Any]]:
    item = {"type": "function_call", "id": "fc_1", "call_id": "t1", "name": "weather"}
    return [
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        {"type": "response.function_call_arguments.delta", "item_id": "fc_1", "delta": '{"city"'},
        {
            "type": "response.function_call_arguments.delta",
            "item_id": "fc_1",
            "delta": ': "Paris"}',
        },
        {"type": "response.function_call_arguments.delta", "item_id": "fc_1", "delta": "}"},
        {
            "type": "response.function_call_arguments.done",
            "item_id": "fc_1",
            "arguments": '{"city": "Paris"}}',
        },
        {"type": "response.completed"},
    ]


@pytest.mark.parametrize(
    ("feed_of", "events"),
    [
        (AnthropicFeed, _anthropic_past_the_brace()),
        (OpenAIChatFeed, _chat_past_the_brace()),
        (OpenAIResponsesFeed, _responses_past_the_brace()),
    ],
)
async def test_a_call_the_model_writes_on_past_its_closing_brace_is_invalid_as_written(
    feed_of: Any, events: list[dict[str, Any]]
) -> None:
    """A feed reads a call ahead once its text looks complete, but the call that is
    added, and answered, is the text the stream ended it with."""
    started: list[str] = []
    batch = _executor(started).open_batch()
    feed = feed_of(batch)
    for event in events:
        feed.feed(event)
    outcome = await batch.run()
    assert [r.error_class for r in outcome.results] == [ErrorClass.INVALID_ARGUMENTS]
    assert batch.calls[0].arguments == '{"city": "Paris"}}'
    assert started == []


async def test_the_responses_done_event_s_arguments_are_the_ones_used(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The deltas read ahead one call; ``arguments.done`` says another: it is run."""
    started: list[str] = []
    batch = _executor(started).open_batch()
    feed = OpenAIResponsesFeed(batch)
    item = {"type": "function_call", "id": "fc_1", "call_id": "t1", "name": "weather"}
    feed.feed({"type": "response.output_item.added", "output_index": 0, "item": item})
    for text in ('{"city": ', '"Paris"}'):
        feed.feed(
            {"type": "response.function_call_arguments.delta", "item_id": "fc_1", "delta": text}
        )
    done = {"item_id": "fc_1", "arguments": '{"city": "Oslo"}'}
    feed.feed({"type": "response.function_call_arguments.done", **done})
    feed.feed({"type": "response.completed"})
    outcome = await batch.run()
    assert [r.text for r in outcome.results] == ["sunny in Oslo"]
    assert started == ["Oslo"]


async def test_a_tool_use_block_whose_start_carries_its_input_whole_is_added_with_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """No delta follows such a block: its input is the one the start gave; where deltas
    do follow, they are the arguments (the start's input is then the usual ``{}``)."""
    started: list[str] = []
    batch = _executor(started).open_batch()
    feed = AnthropicFeed(batch)
    whole = {"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "Oslo"}}
    feed.feed({"type": "content_block_start", "index": 0, "content_block": whole})
    feed.feed({"type": "content_block_stop", "index": 0})
    streamed = {"type": "tool_use", "id": "t2", "name": "weather", "input": {"city": "Rome"}}
    feed.feed({"type": "content_block_start", "index": 1, "content_block": streamed})
    delta = {"type": "input_json_delta", "partial_json": '{"city": "Lima"}'}
    feed.feed({"type": "content_block_delta", "index": 1, "delta": delta})
    feed.feed({"type": "content_block_stop", "index": 1})
    feed.feed({"type": "message_stop"})
    outcome = await batch.run()
    assert [r.text for r in outcome.results] == ["sunny in Oslo", "sunny in Lima"]
    assert started == ["Oslo", "Lima"]
