"""The supervisor's two ways to answer: a call alone, and a call among others.

A batch of one call (a runner waiting on each answer) takes a shorter way
through the supervisor than a batch of several; its answers are written
from a template around the JSON of the text; lines that arrive whole are
cut straight out of the chunk read. These tests pin down that each short
way says exactly what the general one says: the same answer bytes and the
same audit records for every kind of call, the same line for every text,
the same lines for every way a stream can be cut.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from toolexec import (
    SideEffects,
    TextContent,
    ToolExecutor,
    ToolOutput,
    ToolRegistry,
    ToolResult,
    Workspace,
    function_tool,
    register_builtin_tools,
)
from toolexec._ipc._protocol import decode_call, encode, response_message
from toolexec.events import JsonlAuditSink
from toolexec.ipc import LineSplitter, ProtocolError, RunnerConfig, Supervisor, decode_message
from toolexec.policy import Allow, Capabilities, Decision, Deny, PathGrant

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from toolexec import ToolDefinition


@function_tool(side_effects=SideEffects.READ)
async def say(text: str) -> str:
    """Say the text back (no ``await``: it cannot block)."""
    return text


@function_tool(side_effects=SideEffects.READ)
async def nap(text: str) -> str:
    """Echo the text after a checkpoint (it may block)."""
    await trio.lowlevel.checkpoint()
    return text


@function_tool(side_effects=SideEffects.READ)
async def broken(text: str) -> str:
    """Fail."""
    raise RuntimeError(f"broken: {text}")


@function_tool(side_effects=SideEffects.READ)
async def detailed(text: str) -> ToolOutput:
    """Answer with two blocks and details."""
    return ToolOutput((TextContent(text), TextContent("more")), details={"n": 2})


@function_tool(side_effects=SideEffects.READ)
async def forbidden(text: str) -> str:
    """Never runs: the executor's policy denies it."""
    return text


@function_tool(side_effects=SideEffects.READ)
async def hidden(text: str) -> str:
    """Never runs: the runner is not granted it."""
    return text


class DenyForbidden:
    """The host's policy: ``forbidden`` is denied, the rest allowed."""

    def decide(
        self, definition: ToolDefinition, arguments: Mapping[str, Any], agent_path: str
    ) -> Decision:
        return Deny("the host forbids it") if definition.name == "forbidden" else Allow()


def _line(cid: str, tool: str, args: Any) -> bytes:
    message = {"op": "tool_call", "tool_call_id": cid, "tool": tool, "args": args}
    return json.dumps(message, ensure_ascii=False).encode() + b"\n"


# Every kind of answer: (tool, args) of the probe call.
CASES = {
    "granted": ("say", {"text": 'hi \u2028 \u00e9 "q" \\ \x01'}),
    "granted_may_block": ("nap", {"text": "slept"}),
    "unknown": ("no_such_tool", {}),
    "not_granted": ("hidden", {"text": "x"}),
    "fs_denied": ("read_file", {"path": "secret.txt"}),
    "fs_granted": ("read_file", {"path": "notes/a.txt"}),
    "policy_denied": ("forbidden", {"text": "x"}),
    "failing": ("broken", {"text": "x"}),
    "invalid": ("say", {"text": 5}),
    "details": ("detailed", {"text": "x"}),
}


async def _serve(
    tmp_path: Path, payload: bytes, *, audit: bool, tag: str
) -> tuple[bytes, list[Any]]:
    """Serve ``payload`` to a runner; every answer line, and the audit records."""
    workspace = Workspace(tmp_path)
    registry = ToolRegistry()
    register_builtin_tools(registry, workspace)
    for tool in (say, nap, broken, detailed, forbidden, hidden):
        registry.register(tool)
    log = tmp_path / f"audit-{tag}.jsonl"
    sinks = [JsonlAuditSink.open(log)] if audit else []
    executor = ToolExecutor(registry, workspace=workspace, policy=DenyForbidden(), sinks=sinks)
    runner = RunnerConfig(
        "r",
        Capabilities(
            ["say", "nap", "broken", "detailed", "forbidden", "read_file"], [PathGrant("notes")]
        ),
    )
    to_sup, from_runner = trio.testing.memory_stream_one_way_pair()
    to_runner, from_sup = trio.testing.memory_stream_one_way_pair()

    async def serve() -> None:
        await Supervisor(executor).serve(runner, from_runner, to_runner)
        await to_runner.aclose()

    data = b""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve)
        await to_sup.send_all(payload)
        # The runner's output ends only once each line is answered: its end would
        # cancel the calls still running.
        while data.count(b"\n") < payload.count(b"\n"):
            data += await from_sup.receive_some()
        await to_sup.aclose()
        while chunk := await from_sup.receive_some():
            data += chunk
    for sink in sinks:
        sink.close()
    records = [json.loads(r) for r in log.read_text().split("\n")[:-1]] if audit else []
    return data, records


def _answer_of(data: bytes, cid: str) -> bytes:
    (line,) = [x for x in data.split(b"\n")[:-1] if json.loads(x).get("tool_call_id") == cid]
    answer = json.loads(line)
    if "traceback" in answer.get("details", {}):  # it shows the way the call took
        answer["details"]["traceback"] = "..."
        return json.dumps(answer).encode()
    return line


def _records_of(records: list[Any], cid: str) -> list[Any]:
    varying = {"time", "batch_id", "duration"}  # when, and in which batch
    return [
        {k: v for k, v in r.items() if k not in varying}
        for r in records
        if r.get("tool_call_id", r.get("call_id")) == cid
    ]


@pytest.mark.parametrize("audit", [False, True], ids=["plain", "audited"])
@pytest.mark.parametrize("case", sorted(CASES))
async def test_a_call_alone_is_answered_as_among_others(
    tmp_path: Path, case: str, audit: bool
) -> None:
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("fine")
    (tmp_path / "secret.txt").write_text("hunter2")
    tool, args = CASES[case]
    probe = _line("probe", tool, args)
    alone, alone_records = await _serve(tmp_path, probe, audit=audit, tag="alone")
    among = _line("before", "say", {"text": "b"}) + probe + _line("after", "nap", {"text": "a"})
    together, together_records = await _serve(tmp_path, among, audit=audit, tag="together")
    assert alone.count(b"\n") == 1  # the probe alone was a batch of one
    assert together.count(b"\n") == 3
    assert _answer_of(alone, "probe") == _answer_of(together, "probe")
    assert _records_of(alone_records, "probe") == _records_of(together_records, "probe")
    answer = json.loads(_answer_of(alone, "probe"))
    assert answer["ok"] is (case in ("granted", "granted_may_block", "fs_granted", "details"))
    if audit:
        assert _records_of(alone_records, "probe")  # the decision is on record


# -- the answer line --------------------------------------------------------------------------


def _general(call_id: str, text: str) -> bytes:
    """The answer to one text as the general path writes it: the message, encoded."""
    content = [{"text": text, "type": "text"}]
    return encode(
        {
            "op": "tool_response",
            "tool_call_id": call_id,
            "ok": True,
            "result": {"text": text, "content": content},
        }
    )


@settings(max_examples=200, deadline=None)
@given(st.text(), st.text(min_size=1))
def test_the_template_writes_what_the_encoder_writes(text: str, call_id: str) -> None:
    result = ToolResult(call_id, "echo", (TextContent(text),), False, None)
    line = response_message(call_id, result)
    assert line == _general(call_id, text)
    assert line.count(b"\n") == 1
    assert json.loads(line)["result"]["text"] == text


@pytest.mark.parametrize("text", ["\udcff", "a\ud800b", "caf\u00e9 \udc80"])
def test_a_lone_surrogate_is_written_escaped_and_read_back(text: str) -> None:
    """UTF-8 cannot hold a lone surrogate (a file name that is not UTF-8 has them)."""
    result = ToolResult("c", "echo", (TextContent(text),), False, None)
    line = response_message("c", result)
    line.decode("ascii")  # escaped, every character past ASCII
    assert json.loads(line)["result"]["text"] == text


async def test_a_lone_surrogate_in_a_call_is_answered_not_fatal(tmp_path: Path) -> None:
    """A runner may send ``\\ud800`` escapes: the answer names them and the session goes on."""
    bad_name = b'{"op":"tool_call","tool_call_id":"s","tool":"\\ud800"}\n'
    bad_text = b'{"op":"tool_call","tool_call_id":"t","tool":"say","args":{"text":"\\udcff"}}\n'
    data, _ = await _serve(
        tmp_path, bad_name + bad_text + _line("ok", "say", {"text": "x"}), audit=False, tag="s"
    )
    answers = [json.loads(x) for x in data.split(b"\n")[:-1]]
    assert [a["tool_call_id"] for a in answers] == ["s", "t", "ok"]
    assert answers[0]["error"] == "tool_not_found"
    assert answers[1]["result"]["text"] == "\udcff"
    assert answers[2]["ok"] is True


# -- cutting lines ----------------------------------------------------------------------------


def _expected(lines: list[bytes], limit: int) -> list[bytes | str]:
    return [line if len(line) <= limit else f"line_too_long {len(line)}" for line in lines]


def _seen(items: list[bytes | ProtocolError]) -> list[bytes | str]:
    out: list[bytes | str] = []
    for item in items:
        if isinstance(item, ProtocolError):
            out.append(f"{item.slug} {item.message.split()[3]}")
        else:
            out.append(item)
    return out


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")), max_size=10),
    st.lists(st.integers(1, 40), min_size=1, max_size=8),
    st.integers(1, 20),
    st.booleans(),
)
def test_lines_are_cut_alike_however_the_stream_is_chunked(
    lines: list[bytes], cuts: list[int], limit: int, as_bytearray: bool
) -> None:
    stream = b"".join(line + b"\n" for line in lines)
    splitter = LineSplitter(limit)
    got: list[bytes | ProtocolError] = []
    start, k = 0, 0
    while start < len(stream):
        size = cuts[k % len(cuts)]
        piece = stream[start : start + size]
        got += splitter.feed(bytearray(piece) if as_bytearray else piece)
        assert splitter.buffered <= limit
        start, k = start + size, k + 1
    assert all(type(item) is bytes for item in got if not isinstance(item, ProtocolError))
    assert _seen(got) == _expected(lines, limit)
    assert splitter.close() is None


# -- decoding ---------------------------------------------------------------------------------

CALL = b'{"op":"tool_call","tool_call_id":"x","tool":"say","args":{"text":"t"}}'


@pytest.mark.parametrize(
    "line", [CALL, b" " + CALL, CALL + b" \t", CALL + b"\r", b"\t" + CALL + b"\r"], ids=repr
)
def test_a_call_decodes_alike_with_or_without_whitespace_around(line: bytes) -> None:
    call = decode_call(line)
    assert (call.id, call.name, call.arguments) == ("x", "say", {"text": "t"})
    message = decode_message(line)
    assert (message.tool_call_id, message.tool, message.args) == ("x", "say", {"text": "t"})


@pytest.mark.parametrize("line", [CALL + b"x", CALL + b" {}", CALL[:-1], b"{" + CALL], ids=repr)
def test_data_around_a_call_is_invalid_json(line: bytes) -> None:
    with pytest.raises(ProtocolError) as info:
        decode_call(line)
    assert info.value.slug == "invalid_json"
    assert "send one JSON object per line" in info.value.message


async def test_a_write_stuck_on_a_runner_that_does_not_read_is_counted() -> None:
    registry = ToolRegistry()
    registry.register(say)
    supervisor = Supervisor(ToolExecutor(registry))
    to_sup, from_runner = trio.testing.memory_stream_one_way_pair()
    to_runner, from_sup = trio.testing.lockstep_stream_one_way_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(supervisor.serve, RunnerConfig("r"), from_runner, to_runner)
        await to_sup.send_all(_line("c1", "say", {"text": "x"}))
        await trio.testing.wait_all_tasks_blocked()
        (stats,) = supervisor.statistics()
        assert (stats.writes_waiting, stats.calls_in_flight) == (1, 1)
        answer = await from_sup.receive_some()  # the runner reads at last
        await trio.testing.wait_all_tasks_blocked()
        (stats,) = supervisor.statistics()
        assert (stats.writes_waiting, stats.calls_in_flight, stats.calls_answered) == (0, 0, 1)
        assert json.loads(answer)["result"]["text"] == "x"
        await to_sup.aclose()
