"""Model adapters drive an AgentLoop through the official SDK clients against a local stub.

The stub is a real HTTP server on 127.0.0.1 speaking just enough of each
provider's API: it answers turn one with tool calls and turn two with text,
and records every request so the test can check what the SDK sent.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import attrs
import pytest
import trio
from pydantic import TypeAdapter

from toolexec import (
    AgentLoop,
    ImageContent,
    SideEffects,
    TextContent,
    ToolCall,
    ToolExecutor,
    ToolOutput,
    ToolRegistry,
    ToolResult,
    function_tool,
)
from toolexec.models import (
    AnthropicModel,
    Message,
    OpenAIChatModel,
    OpenAIResponsesModel,
    ProviderBlock,
)


def sdk(name: str) -> Any:
    """The provider's SDK (``openai``, ``anthropic``), imported when a test first needs it.

    Not at import: collection stays free of the SDKs, which take about a second
    to import.
    """
    return pytest.importorskip(name)


@attrs.define
class Stub:
    """Scripted provider: POSTs get the next scripted JSON body, in order."""

    replies: list[dict[str, Any]] = attrs.Factory(list)
    hold: threading.Event | None = None  # when set, requests wait for it before answering
    requests: list[tuple[str, dict[str, str], dict[str, Any]]] = attrs.Factory(list)
    port: int = 0


@pytest.fixture
def stub() -> Iterator[Stub]:
    state = Stub()
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            if state.hold is not None:
                state.hold.wait(timeout=30)
            with lock:
                headers = {k.lower(): v for k, v in self.headers.items()}
                state.requests.append((self.path, headers, body))
                reply = state.replies.pop(0) if state.replies else None
            payload = json.dumps(reply or {"error": {"message": "no reply scripted"}}).encode()
            self.send_response(200 if reply else 500)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield state
    finally:
        if state.hold is not None:
            state.hold.set()
        server.shutdown()
        server.server_close()
        thread.join()


def make_executor() -> tuple[ToolExecutor, dict[str, str]]:
    notes = {"todo": "buy milk"}

    @function_tool(side_effects=SideEffects.READ)
    def read_note(name: str) -> str:
        """Read a note."""
        return notes[name]

    @function_tool(side_effects=SideEffects.WRITE)
    def write_note(name: str, text: str) -> str:
        """Write a note."""
        notes[name] = text
        return f"wrote {name}"

    registry = ToolRegistry()
    registry.register(read_note)
    registry.register(write_note)
    return ToolExecutor(registry), notes


WRITE_ARGS = {"name": "todo", "text": "ship it"}
READ_ARGS = {"name": "todo"}


# -- per-provider scripts -------------------------------------------------------


def chat_replies() -> list[dict[str, Any]]:
    def completion(message: dict[str, Any], finish: str) -> dict[str, Any]:
        return {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1_760_000_000,
            "model": "gpt-test",
            "choices": [{"index": 0, "finish_reason": finish, "message": message}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }

    calls = [("call_w", "write_note", WRITE_ARGS), ("call_r", "read_note", READ_ARGS)]
    return [
        completion(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": i,
                        "type": "function",
                        "function": {"name": n, "arguments": json.dumps(a)},
                    }
                    for i, n, a in calls
                ],
            },
            "tool_calls",
        ),
        completion({"role": "assistant", "content": "The note says: ship it"}, "stop"),
    ]


def responses_replies() -> list[dict[str, Any]]:
    def response(output: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": "resp_1",
            "object": "response",
            "created_at": 1_760_000_000,
            "model": "gpt-test",
            "status": "completed",
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "output": output,
            "usage": {
                "input_tokens": 10,
                "output_tokens": 5,
                "total_tokens": 15,
                "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                "output_tokens_details": {"reasoning_tokens": 0},
            },
        }

    calls = [("call_w", "write_note", WRITE_ARGS), ("call_r", "read_note", READ_ARGS)]
    return [
        response(
            [
                {
                    "id": f"fc_{i}",
                    "type": "function_call",
                    "call_id": i,
                    "name": n,
                    "arguments": json.dumps(a),
                    "status": "completed",
                }
                for i, n, a in calls
            ]
        ),
        response(
            [
                {
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "status": "completed",
                    "content": [
                        {"type": "output_text", "text": "The note says: ship it", "annotations": []}
                    ],
                }
            ]
        ),
    ]


def anthropic_replies() -> list[dict[str, Any]]:
    def message(content: list[dict[str, Any]], stop: str) -> dict[str, Any]:
        return {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-test",
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 5},
        }

    return [
        message(
            [
                {"type": "text", "text": "On it."},
                {"type": "tool_use", "id": "call_w", "name": "write_note", "input": WRITE_ARGS},
                {"type": "tool_use", "id": "call_r", "name": "read_note", "input": READ_ARGS},
            ],
            "tool_use",
        ),
        message([{"type": "text", "text": "The note says: ship it"}], "end_turn"),
    ]


def tool_results_sent(path: str, body: dict[str, Any]) -> list[tuple[str, Any]]:
    """(call id, content) of the results in a second-turn request."""
    if path.endswith("/chat/completions"):
        return [(m["tool_call_id"], m["content"]) for m in body["messages"] if m["role"] == "tool"]
    if path.endswith("/responses"):
        return [
            (i["call_id"], i["output"])
            for i in body["input"]
            if i.get("type") == "function_call_output"
        ]
    last = body["messages"][-1]
    return [(b["tool_use_id"], b["content"][0]["text"]) for b in last["content"]]


def request_type(path: str) -> Any:
    if path.endswith("/chat/completions"):
        from openai.types.chat import ChatCompletionMessageParam

        return ("messages", list[ChatCompletionMessageParam])
    if path.endswith("/responses"):
        from openai.types.responses import ResponseInputParam

        return ("input", ResponseInputParam)
    from anthropic.types import MessageParam

    return ("messages", list[MessageParam])


Setup = Callable[[int], tuple[Any, Any]]

PROVIDERS: dict[str, tuple[Callable[[], list[dict[str, Any]]], Setup, str]] = {
    "openai-chat": (
        chat_replies,
        lambda port: (
            client := sdk("openai").AsyncOpenAI(
                base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-test", max_retries=0
            ),
            OpenAIChatModel("gpt-test", client),
        ),
        "/v1/chat/completions",
    ),
    "openai-responses": (
        responses_replies,
        lambda port: (
            client := sdk("openai").AsyncOpenAI(
                base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-test", max_retries=0
            ),
            OpenAIResponsesModel("gpt-test", client),
        ),
        "/v1/responses",
    ),
    "anthropic": (
        anthropic_replies,
        lambda port: (
            client := sdk("anthropic").AsyncAnthropic(
                base_url=f"http://127.0.0.1:{port}", api_key="sk-ant-test", max_retries=0
            ),
            AnthropicModel("claude-test", client, {"max_tokens": 512}),
        ),
        "/v1/messages",
    ),
}


@pytest.mark.parametrize("provider", list(PROVIDERS))
async def test_agent_loop_completes_two_turns_through_the_sdk(stub: Stub, provider: str) -> None:
    replies, setup, endpoint = PROVIDERS[provider]
    stub.replies = replies()
    client, model = setup(stub.port)
    executor, notes = make_executor()
    try:
        result = await AgentLoop(model, executor, system_prompt="Be brief.").run(
            "Set my todo note to 'ship it' and read it back."
        )
    finally:
        await client.close()

    assert result.finished
    assert result.text == "The note says: ship it"
    assert (result.turns, result.tool_calls) == (2, 2)
    assert (result.usage.input_tokens, result.usage.output_tokens) == (20, 10)
    assert notes["todo"] == "ship it"

    assert [path for path, _, _ in stub.requests] == [endpoint, endpoint]
    (_, headers, first), (path, _, second) = stub.requests
    credentials = headers.get("authorization", "") + headers.get("x-api-key", "")
    assert "sk-test" in credentials or "sk-ant-test" in credentials
    assert sorted(t.get("name") or t["function"]["name"] for t in first["tools"]) == [
        "read_note",
        "write_note",
    ]
    assert tool_results_sent(path, second) == [("call_w", "wrote todo"), ("call_r", "ship it")]
    key, param_type = request_type(path)
    adapter = TypeAdapter(param_type)
    validated = adapter.validate_python(second[key])
    assert len(list(validated)) == len(second[key])


# -- reasoning state survives the loop --------------------------------------------


def anthropic_thinking_replies() -> list[dict[str, Any]]:
    """Turn one as the SDK's own model objects: thinking, redacted thinking, text, tools."""
    from anthropic.types import Message as SDKMessage
    from anthropic.types import (
        RedactedThinkingBlock,
        TextBlock,
        ThinkingBlock,
        ToolUseBlock,
    )
    from anthropic.types import Usage as SDKUsage

    first = SDKMessage(
        id="msg_1",
        type="message",
        role="assistant",
        model="claude-test",
        content=[
            ThinkingBlock(type="thinking", thinking="Write, then read.", signature="c2lnLTE="),
            RedactedThinkingBlock(type="redacted_thinking", data="RU5DUllQVEVE"),
            TextBlock(type="text", text="On it."),
            ToolUseBlock(type="tool_use", id="call_w", name="write_note", input=dict(WRITE_ARGS)),
            ToolUseBlock(type="tool_use", id="call_r", name="read_note", input=dict(READ_ARGS)),
        ],
        stop_reason="tool_use",
        stop_sequence=None,
        usage=SDKUsage(input_tokens=10, output_tokens=5),
    )
    return [first.model_dump(mode="json"), anthropic_replies()[1]]


THINKING = {"type": "thinking", "thinking": "Write, then read.", "signature": "c2lnLTE="}
REDACTED = {"type": "redacted_thinking", "data": "RU5DUllQVEVE"}


async def test_anthropic_thinking_blocks_go_back_first_and_unchanged(stub: Stub) -> None:
    from anthropic.types import MessageParam

    stub.replies = anthropic_thinking_replies()
    client, model = PROVIDERS["anthropic"][1](stub.port)
    executor, _ = make_executor()
    try:
        result = await AgentLoop(model, executor).run("Set my todo note and read it back.")
    finally:
        await client.close()

    assert result.finished
    assert result.transcript[1].provider_blocks == (
        ProviderBlock("anthropic", THINKING),
        ProviderBlock("anthropic", REDACTED),
    )
    _, _, second = stub.requests[1]
    user, assistant, results = second["messages"]
    assert user["role"] == "user"
    assert assistant["role"] == "assistant"
    assert assistant["content"][:2] == [THINKING, REDACTED]  # first, byte for byte
    assert [b["type"] for b in assistant["content"][2:]] == ["text", "tool_use", "tool_use"]
    assert results["role"] == "user"
    assert [b["type"] for b in results["content"]] == ["tool_result", "tool_result"]
    adapter = TypeAdapter(list[MessageParam])
    validated = adapter.validate_python(second["messages"])
    assert list(validated[1]["content"])[:2] == [THINKING, REDACTED]


def responses_reasoning_replies() -> list[dict[str, Any]]:
    """Turn one as the SDK's own model objects: a reasoning item, then two calls."""
    from openai.types.responses import (
        Response,
        ResponseFunctionToolCall,
        ResponseReasoningItem,
    )
    from openai.types.responses.response_reasoning_item import Summary

    template = responses_replies()[0]
    first = Response.model_validate(
        {
            **template,
            "output": [
                ResponseReasoningItem(
                    id="rs_1",
                    type="reasoning",
                    summary=[Summary(type="summary_text", text="Write, then read.")],
                    encrypted_content="gAAAAB-opaque-state",
                ),
                *(
                    ResponseFunctionToolCall(
                        id=f"fc_{i}",
                        type="function_call",
                        call_id=i,
                        name=n,
                        arguments=json.dumps(a),
                        status="completed",
                    )
                    for i, n, a in [
                        ("call_w", "write_note", WRITE_ARGS),
                        ("call_r", "read_note", READ_ARGS),
                    ]
                ),
            ],
        }
    )
    return [first.model_dump(mode="json"), responses_replies()[1]]


REASONING = {
    "id": "rs_1",
    "type": "reasoning",
    "summary": [{"type": "summary_text", "text": "Write, then read."}],
    "encrypted_content": "gAAAAB-opaque-state",
}


async def test_responses_reasoning_item_precedes_its_calls_unchanged(stub: Stub) -> None:
    from openai.types.responses import ResponseInputParam

    stub.replies = responses_reasoning_replies()
    client, model = PROVIDERS["openai-responses"][1](stub.port)
    executor, _ = make_executor()
    try:
        result = await AgentLoop(model, executor).run("Set my todo note and read it back.")
    finally:
        await client.close()

    assert result.finished
    assert result.transcript[1].provider_blocks == (ProviderBlock("openai-responses", REASONING),)
    _, _, second = stub.requests[1]
    kinds = [item.get("type", item.get("role")) for item in second["input"]]
    assert kinds == [
        "user",
        "reasoning",
        "function_call",
        "function_call",
        "function_call_output",
        "function_call_output",
    ]
    assert second["input"][1] == REASONING  # unchanged, encrypted_content included
    adapter = TypeAdapter(ResponseInputParam)
    validated: list[Any] = list(adapter.validate_python(second["input"]))
    assert validated[1]["encrypted_content"] == "gAAAAB-opaque-state"


async def test_reasoning_state_is_dropped_for_another_provider(stub: Stub) -> None:
    """A thinking block is signed for Anthropic: a Chat Completions request never carries it."""
    stub.replies = chat_replies()[1:]
    client, model = PROVIDERS["openai-chat"][1](stub.port)
    conversation = [
        Message("user", "hi"),
        Message("assistant", "Hello.", provider_blocks=(ProviderBlock("anthropic", THINKING),)),
        Message("user", "and now?"),
    ]
    try:
        await model.respond(conversation, [])
    finally:
        await client.close()
    _, _, body = stub.requests[0]
    assert body["messages"][1] == {"role": "assistant", "content": "Hello."}


PNG = "iVBORw0KGgo="


def screenshot_executor() -> ToolExecutor:
    @function_tool(side_effects=SideEffects.READ)
    def screenshot() -> ToolOutput:
        """Take a screenshot."""
        return ToolOutput((TextContent("the page"), ImageContent(PNG, "image/png")))

    registry = ToolRegistry()
    registry.register(screenshot)
    return ToolExecutor(registry)


async def test_an_image_result_reaches_responses_as_input_image(stub: Stub) -> None:
    from openai.types.responses import ResponseInputParam

    call = {
        "id": "fc_s",
        "type": "function_call",
        "call_id": "call_s",
        "name": "screenshot",
        "arguments": "{}",
        "status": "completed",
    }
    stub.replies = [{**responses_replies()[0], "output": [call]}, responses_replies()[1]]
    client, model = PROVIDERS["openai-responses"][1](stub.port)
    try:
        result = await AgentLoop(model, screenshot_executor()).run("What does the page show?")
    finally:
        await client.close()

    assert result.finished
    _, _, second = stub.requests[1]
    (output,) = [i for i in second["input"] if i.get("type") == "function_call_output"]
    assert output["output"] == [
        {"type": "input_text", "text": "the page"},
        {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}"},
    ]
    adapter = TypeAdapter(ResponseInputParam)
    validated: list[Any] = list(adapter.validate_python(second["input"]))
    assert [part["type"] for part in validated[-1]["output"]] == ["input_text", "input_image"]


async def test_anthropic_system_and_steering_turns_are_merged() -> None:
    from toolexec._adapters._models import _anthropic_conversation

    result = ToolResult("t1", "read_note", (TextContent("ok"),))
    system, turns = _anthropic_conversation(
        [
            Message("system", "Be brief."),
            Message("user", "go"),
            Message("assistant", "", (ToolCall("t1", "read_note", {"name": "a"}),)),
            Message("tool", tool_results=(result,)),
            Message("user", "actually, stop"),
            Message("assistant", ""),
        ]
    )
    assert system == "Be brief."
    assert [t["role"] for t in turns] == ["user", "assistant", "user"]
    assert [b["type"] for b in turns[2]["content"]] == ["tool_result", "text"]


async def test_adapter_runs_under_trio_and_closes_its_own_client(
    stub: Stub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{stub.port}/v1")
    stub.replies = chat_replies()[1:]
    model = OpenAIChatModel("gpt-test", options={"temperature": 0})
    response = await model.respond([Message("user", "hi")], [])
    assert response.text == "The note says: ship it"
    assert model.client is not None
    await model.aclose()
    assert model.client is None
    _, headers, body = stub.requests[0]
    assert headers["authorization"] == "Bearer sk-env"
    assert body["temperature"] == 0
    assert "tools" not in body
    assert trio.lowlevel.current_trio_token() is not None


@pytest.mark.parametrize("provider", list(PROVIDERS))
async def test_cancelling_a_request_in_flight_is_not_swallowed(
    stub: Stub, provider: str, autojump_clock: object
) -> None:
    stub.hold = threading.Event()  # the provider never answers
    _, setup, _ = PROVIDERS[provider]
    client, model = setup(stub.port)
    try:
        with trio.move_on_after(30) as scope:
            await model.respond([Message("user", "hi")], [])
    finally:
        stub.hold.set()
        await client.close()
    assert scope.cancelled_caught  # the SDK let trio's Cancelled through
