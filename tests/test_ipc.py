"""toolexec.ipc over in-memory streams: the protocol, batching, and hostile runners."""

from __future__ import annotations

import concurrent.futures
import io
import json
import os
from typing import TYPE_CHECKING, Any

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from toolexec import (
    ErrorClass,
    SideEffects,
    ToolExecutor,
    ToolRegistry,
    Workspace,
    function_tool,
    register_builtin_tools,
)
from toolexec.events import BatchPlanned, CallbackSink
from toolexec.ipc import (
    ERROR_CLASS_OF,
    SLUG_OF,
    LineSplitter,
    ProtocolError,
    RunnerClient,
    RunnerConfig,
    Supervisor,
    ToolResponse,
    TrioRunnerClient,
    decode_message,
)
from toolexec.policy import CallHook, Capabilities, PathGrant, Rewrite

if TYPE_CHECKING:
    from pathlib import Path

active: list[str] = []
overlaps: list[int] = []


@function_tool(side_effects=SideEffects.READ)
def echo(text: str) -> str:
    """Echo the text."""
    return text


@function_tool(side_effects=SideEffects.WRITE)
async def put(key: str) -> str:
    """Record a write, noting how many writes overlap."""
    active.append(key)
    overlaps.append(len(active))
    await trio.sleep(1)
    active.remove(key)
    return key


def registry() -> ToolRegistry:
    reg = ToolRegistry()
    reg.register(echo)
    reg.register(put)
    return reg


def call(cid: str, tool: str = "echo", **args: Any) -> bytes:
    line = {"op": "tool_call", "tool_call_id": cid, "tool": tool, "args": args or {"text": cid}}
    return json.dumps(line, ensure_ascii=False).encode() + b"\n"


async def exchange(payload: bytes, supervisor: Supervisor | None = None) -> list[dict[str, Any]]:
    """Send ``payload`` as a runner, wait for an answer to each of its lines, close, and
    return every line the supervisor answered.

    The runner closes only then: its output ending would cancel the calls still running.
    """
    supervisor = supervisor or Supervisor(ToolExecutor(registry()))
    to_sup, from_runner = trio.testing.memory_stream_one_way_pair()
    to_runner, from_sup = trio.testing.memory_stream_one_way_pair()

    async def serve() -> None:
        await supervisor.serve(RunnerConfig("r"), from_runner, to_runner)
        await to_runner.aclose()

    data = b""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve)
        await to_sup.send_all(payload)
        while data.count(b"\n") < payload.count(b"\n"):  # one answer a line
            data += await from_sup.receive_some()
        await to_sup.aclose()
        while chunk := await from_sup.receive_some():  # and one for an unfinished last line
            data += chunk
    assert data.endswith(b"\n") or not data
    return [json.loads(line) for line in data.split(b"\n")[:-1]]


def by_id(answers: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for a in answers:
        found.setdefault(a.get("tool_call_id", "?"), []).append(a)
    return found


# -- the slug table ----------------------------------------------------------------------


def test_every_error_class_has_one_slug_and_back() -> None:
    assert set(SLUG_OF) == set(ErrorClass)
    assert len(set(SLUG_OF.values())) == len(ErrorClass)
    for cls, slug in SLUG_OF.items():
        assert ERROR_CLASS_OF[slug] is cls
    assert ERROR_CLASS_OF["fs_denied"] is ErrorClass.PERMISSION_DENIED
    assert set(ERROR_CLASS_OF) == {*SLUG_OF.values(), "fs_denied"}


# -- decoding ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "slug"),
    [
        (b"not json", "invalid_json"),
        (
            b'{"op": "tool_call", "tool_call_id": "a", "tool": "echo", "args": {"x": NaN}}',
            "invalid_json",
        ),
        (
            b'{"op": "tool_call", "tool_call_id": "a", "tool": "echo", "args": {"x": -Infinity}}',
            "invalid_json",
        ),
        (b"\xff\xfe", "invalid_json"),
        (b"[1, 2]", "invalid_message"),
        (b'{"op": "shutdown"}', "unknown_op"),
        (b'{"tool_call_id": "a"}', "unknown_op"),
        (b'{"op": "tool_call", "tool": "echo"}', "invalid_message"),
        (b'{"op": "tool_call", "tool_call_id": "", "tool": "echo"}', "invalid_message"),
        (b'{"op": "tool_call", "tool_call_id": "a", "tool": 3}', "invalid_message"),
        (
            b'{"op": "tool_call", "tool_call_id": "a", "tool": "echo", "args": []}',
            "invalid_message",
        ),
        (b"[" * 100_000, "invalid_json"),
    ],
)
def test_bad_lines_are_protocol_errors_with_a_slug(line: bytes, slug: str) -> None:
    with pytest.raises(ProtocolError) as info:
        decode_message(line)
    assert info.value.slug == slug
    assert info.value.message


def test_u2028_is_an_ordinary_character_inside_a_string() -> None:
    text = "a\u2028b\u2029c"
    line = json.dumps(
        {"op": "tool_call", "tool_call_id": "x", "tool": "echo", "args": {"text": text}},
        ensure_ascii=False,
    ).encode()
    splitter = LineSplitter(1024)
    (got,) = splitter.feed(line + b"\n")
    assert isinstance(got, bytes)
    assert decode_message(got).args == {"text": text}


def test_the_splitter_never_holds_more_than_the_limit() -> None:
    splitter = LineSplitter(1000)
    chunk = b"x" * 4096
    for _ in range(256):  # a 1 MiB line, fed in pieces
        assert splitter.feed(chunk) == []
        assert splitter.buffered <= 1000
    (refused, line) = splitter.feed(b"\n" + b"ok\n")
    assert isinstance(refused, ProtocolError)
    assert refused.slug == "line_too_long"
    assert str(4096 * 256) in refused.message
    assert line == b"ok"
    assert splitter.feed(b"tail") == []
    truncated = splitter.close()
    assert truncated is not None
    assert truncated.slug == "truncated_line"


def test_bad_settings_are_refused_with_what_is_allowed() -> None:
    with pytest.raises(ValueError, match="max_line_bytes must be an integer >= 1"):
        LineSplitter(0)
    with pytest.raises(ValueError, match="without '/'"):
        RunnerConfig("a/b")
    with pytest.raises(ValueError, match="max_batch_calls must be an integer >= 1"):
        Supervisor(max_batch_calls=0)


# -- hostile and broken runners ------------------------------------------------------------


async def test_a_non_json_line_is_refused_and_the_next_call_answered() -> None:
    answers = await exchange(b"hello there\n" + call("c1"))
    assert answers[0]["op"] == "protocol_error"
    assert answers[0]["error"] == "invalid_json"
    assert answers[0]["line"] == 1
    assert answers[1] == {
        "op": "tool_response",
        "tool_call_id": "c1",
        "ok": True,
        "result": {"text": "c1", "content": [{"text": "c1", "type": "text"}]},
    }


async def test_nan_and_infinity_are_refused() -> None:
    bad = b'{"op": "tool_call", "tool_call_id": "n", "tool": "echo", "args": {"text": NaN}}\n'
    answers = await exchange(bad + call("c1"))
    assert [a["op"] for a in answers] == ["protocol_error", "tool_response"]
    assert answers[0]["error"] == "invalid_json"


async def test_u2028_round_trips_and_stays_one_line() -> None:
    text = "line\u2028sep\u2029para"
    answers = await exchange(call("u", text=text))
    assert answers[0]["ok"] is True
    assert answers[0]["result"]["text"] == text


async def test_a_partial_line_at_eof_is_reported_and_earlier_calls_answered() -> None:
    answers = await exchange(call("c1") + b'{"op": "tool_call", "tool_ca')
    assert by_id(answers)["c1"][0]["ok"] is True
    (truncated,) = [a for a in answers if a["op"] == "protocol_error"]  # sent at once
    assert truncated["error"] == "truncated_line"
    assert truncated["line"] == 2


async def test_a_duplicate_tool_call_id_in_flight_is_refused_and_the_first_answered_once() -> None:
    answers = await exchange(call("same") + call("same") + call("other"))
    found = by_id(answers)
    assert len(found["same"]) == 1
    assert found["same"][0]["ok"] is True
    (dup,) = [a for a in answers if a["op"] == "protocol_error"]
    assert dup["error"] == "duplicate_tool_call_id"
    assert '"same"' in dup["message"]
    assert "tool_call_id" not in dup  # it must not be taken for the first call's answer
    assert found["other"][0]["ok"] is True


async def test_an_unknown_op_is_refused_naming_the_call() -> None:
    line = b'{"op": "tool_cancel", "tool_call_id": "k"}\n'
    answers = await exchange(line + call("c1"))
    found = by_id(answers)
    assert found["k"][0]["error"] == "unknown_op"
    assert "tool_cancel" in found["k"][0]["message"]
    assert found["c1"][0]["ok"] is True


async def test_an_overlong_line_is_refused_and_the_stream_goes_on() -> None:
    supervisor = Supervisor(ToolExecutor(registry()), max_line_bytes=256)
    answers = await exchange(call("big", text="x" * 10_000) + call("c1"), supervisor)
    assert answers[0]["error"] == "line_too_long"
    assert "256" in answers[0]["message"]
    assert answers[1]["tool_call_id"] == "c1"


async def test_every_well_formed_call_is_answered_exactly_once_among_garbage(
    autojump_clock: trio.abc.Clock,
) -> None:
    payload = b"".join(
        [
            call("a"),
            b"\x00\x01garbage\n",
            b"{}\n",
            call("b", tool="nope"),
            b'{"op": "tool_call", "tool_call_id": "c", "tool": "echo", "args": {"text": 1}}\n',
            b"\n",
            call("d"),
            call("e", tool="put", key="k"),
        ]
    )
    answers = await exchange(payload)
    found = by_id(answers)
    for cid in "abcde":
        assert len(found[cid]) == 1, cid
    assert found["b"][0]["error"] == "tool_not_found"
    assert found["c"][0]["error"] == "invalid_args"
    assert found["e"][0]["ok"] is True


async def test_a_runner_that_never_reads_meets_back_pressure_not_growth() -> None:
    supervisor = Supervisor(ToolExecutor(registry()), max_batch_calls=8)
    to_sup, from_runner = trio.testing.lockstep_stream_one_way_pair()
    to_runner, _never_read = trio.testing.lockstep_stream_one_way_pair()
    sent = 0

    async def flood() -> None:
        nonlocal sent
        for i in range(100_000):
            await to_sup.send_all(call(f"c{i}"))
            sent += 1

    async with trio.open_nursery() as nursery:
        nursery.start_soon(supervisor.serve, RunnerConfig("r"), from_runner, to_runner)
        nursery.start_soon(flood)
        await trio.testing.wait_all_tasks_blocked()
        (stats,) = supervisor.statistics()
        assert sent < 64  # the runner's own writes stopped: back-pressure
        assert stats.writes_waiting <= 1
        assert stats.calls_in_flight <= 8
        assert stats.bytes_buffered < 1024
        nursery.cancel_scope.cancel()


async def test_a_served_runner_cancelled_mid_call_leaves_nothing_running() -> None:
    """What ``run_process`` does when its runner exits: cancel the session."""
    started, cancelled = trio.Event(), []

    @function_tool(side_effects=SideEffects.READ)
    async def hang(text: str) -> str:
        """Wait forever."""
        started.set()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            cancelled.append(True)
            raise
        return ""  # pragma: no cover

    reg = ToolRegistry()
    reg.register(hang)
    executor = ToolExecutor(reg)
    supervisor = Supervisor(executor)
    to_sup, from_runner = trio.testing.memory_stream_one_way_pair()
    to_runner, _from_sup = trio.testing.memory_stream_one_way_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(supervisor.serve, RunnerConfig("r"), from_runner, to_runner)
        await to_sup.send_all(call("h", tool="hang"))
        await started.wait()
        assert supervisor.statistics()[0].calls_in_flight == 1
        nursery.cancel_scope.cancel()
    assert cancelled == [True]
    assert supervisor.statistics() == ()
    assert executor.statistics().calls_in_flight == 0


async def test_a_runner_that_closed_its_input_ends_the_session_at_the_next_answer() -> None:
    supervisor = Supervisor(ToolExecutor(registry()))
    to_sup, from_runner = trio.testing.memory_stream_one_way_pair()
    to_runner, from_sup = trio.testing.memory_stream_one_way_pair()
    await from_sup.aclose()  # it will never read
    await to_sup.send_all(call("a"))  # and its output stays open
    stats = await supervisor.serve(RunnerConfig("r"), from_runner, to_runner)
    assert stats.calls_received == 1
    assert stats.calls_in_flight == 1  # never answered: nobody to answer


# -- batching ------------------------------------------------------------------------------


async def test_calls_that_arrive_together_form_one_ordered_batch(
    autojump_clock: trio.abc.Clock,
) -> None:
    plans: list[Any] = []
    sink = CallbackSink(lambda e: plans.append(e.plan) if isinstance(e, BatchPlanned) else None)
    supervisor = Supervisor(ToolExecutor(registry(), sinks=[sink]))
    payload = (
        call("r1") + call("w1", tool="put", key="a") + call("r2") + call("w2", tool="put", key="b")
    )
    answers = await exchange(payload, supervisor)
    assert [a["tool_call_id"] for a in answers] == ["r1", "w1", "r2", "w2"]  # call order
    (plan,) = plans
    assert [run.call_ids for run in plan.runs] == [("r1",), ("w1",), ("r2",), ("w2",)]


async def test_serial_mutators_stay_serial_across_runners(autojump_clock: trio.abc.Clock) -> None:
    overlaps.clear()
    supervisor = Supervisor(ToolExecutor(registry()))
    results: list[list[Any]] = []

    async def runner(name: str) -> None:
        to_sup, from_runner = trio.testing.memory_stream_one_way_pair()
        to_runner, from_sup = trio.testing.memory_stream_one_way_pair()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(supervisor.serve, RunnerConfig(name), from_runner, to_runner)
            async with TrioRunnerClient.open(from_sup, to_sup) as client:
                got = await client.call_many([("put", {"key": f"{name}{i}"}) for i in range(3)])
                results.append(got)
            await to_sup.aclose()

    async with trio.open_nursery() as nursery:
        for name in ("a", "b", "c"):
            nursery.start_soon(runner, name)
    assert len(overlaps) == 9
    assert max(overlaps) == 1  # the serial-mutator pool is shared by every runner's fork
    assert all(r.ok for got in results for r in got)


async def test_a_runner_sees_only_its_granted_tools_and_gets_permission_denied() -> None:
    supervisor = Supervisor(ToolExecutor(registry()))
    to_sup, from_runner = trio.testing.memory_stream_one_way_pair()
    to_runner, from_sup = trio.testing.memory_stream_one_way_pair()
    runner = RunnerConfig("r", Capabilities(["echo"]))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(supervisor.serve, runner, from_runner, to_runner)
        async with TrioRunnerClient.open(from_sup, to_sup) as client:
            denied, missing, fine = await client.call_many(
                [("put", {"key": "k"}), ("nope", {}), ("echo", {"text": "hi"}, "mine")]
            )
        await to_sup.aclose()
    assert denied.error == "permission_denied"
    assert denied.error_class is ErrorClass.PERMISSION_DENIED
    assert missing.error == "tool_not_found"
    assert "Available: echo" in missing.message  # not the tools it may not use
    assert (fine.tool_call_id, fine.ok, fine.text) == ("mine", True, "hi")


async def test_the_trio_client_reports_a_closed_channel() -> None:
    to_sup, _from_runner = trio.testing.memory_stream_one_way_pair()
    to_runner, from_sup = trio.testing.memory_stream_one_way_pair()
    await to_runner.aclose()
    async with TrioRunnerClient.open(from_sup, to_sup) as client:
        with pytest.raises(EOFError):
            await client.call("echo", {"text": "x"})
        with pytest.raises(EOFError):
            await client.call("echo", {"text": "y"})


async def test_grants_hold_after_a_hook_rewrites_a_path(tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("fine")
    (tmp_path / "secret.txt").write_text("hunter2")
    workspace = Workspace(tmp_path)

    class Redirect(CallHook):
        def before_call(self, call: Any, arguments: Any, agent_path: str) -> Rewrite:
            return Rewrite({"path": "secret.txt"})

    reg = ToolRegistry()
    register_builtin_tools(reg, workspace)
    supervisor = Supervisor(ToolExecutor(reg, workspace=workspace, hooks=[Redirect()]))
    to_sup, from_runner = trio.testing.memory_stream_one_way_pair()
    to_runner, from_sup = trio.testing.memory_stream_one_way_pair()
    runner = RunnerConfig("r", Capabilities(["read_file"], [PathGrant("notes")]))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(supervisor.serve, runner, from_runner, to_runner)
        async with TrioRunnerClient.open(from_sup, to_sup) as client:
            answer = await client.call("read_file", {"path": "notes/a.txt"})
        await to_sup.aclose()
    assert answer.error == "permission_denied"
    assert "secret.txt" in answer.message
    assert "hunter2" not in answer.message


GARBAGE = st.sampled_from(
    [
        b"not json",
        b"{}",
        b"[]",
        b'{"op": "tool_call"}',
        b'{"op": "x", "tool_call_id": "g"}',
        b'{"op": "tool_call", "tool_call_id": "n", "tool": "echo", "args": {"t": NaN}}',
        b"\xff",
        b"",
    ]
)


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.one_of(GARBAGE, st.sampled_from(["echo", "put", "nope"])), max_size=12),
    st.integers(1, 40),
)
def test_each_well_formed_call_gets_exactly_one_answer(items: list[Any], cut: int) -> None:
    payload, ids = b"", []
    for i, item in enumerate(items):
        if isinstance(item, bytes):
            payload += item + b"\n"
        else:
            ids.append(f"id{i}")
            payload += (
                call(f"id{i}", tool=item, key="k") if item == "put" else call(f"id{i}", tool=item)
            )

    async def main() -> list[dict[str, Any]]:
        supervisor = Supervisor(ToolExecutor(registry()))
        to_sup, from_runner = trio.testing.memory_stream_one_way_pair()
        to_runner, from_sup = trio.testing.memory_stream_one_way_pair()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(supervisor.serve, RunnerConfig("r"), from_runner, to_runner)
            for start in range(0, len(payload), cut):  # arriving in pieces
                await to_sup.send_all(payload[start : start + cut])
                await trio.testing.wait_all_tasks_blocked()
            await to_sup.aclose()
        await to_runner.aclose()
        data = b""
        while chunk := await from_sup.receive_some():
            data += chunk
        return [json.loads(line) for line in data.split(b"\n")[:-1]]

    answers = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    responses = [a["tool_call_id"] for a in answers if a["op"] == "tool_response"]
    assert sorted(responses) == sorted(ids)  # each once, and nothing else answered as a call


async def test_the_blocking_client_over_real_pipes() -> None:
    supervisor = Supervisor(ToolExecutor(registry()))
    calls_r, calls_w = os.pipe()
    answers_r, answers_w = os.pipe()
    client = RunnerClient(os.fdopen(answers_r, "rb", buffering=0), os.fdopen(calls_w, "wb"))

    def agent() -> list[ToolResponse]:
        together = client.call_many([("echo", {"text": "a"}), ("nope", {}, "mine")])
        alone = client.call("echo", {"text": "b"})
        client.close()
        return [*together, alone]

    async with (
        trio.lowlevel.FdStream(calls_r) as receive,
        trio.lowlevel.FdStream(answers_w) as send,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(supervisor.serve, RunnerConfig("r"), receive, send)
        got = await trio.to_thread.run_sync(agent)
    assert [(r.tool_call_id, r.ok, r.error, r.text) for r in got] == [
        ("call-0", True, None, "a"),
        ("mine", False, "tool_not_found", "Tool 'nope' not found. Available: echo, put"),
        ("call-1", True, None, "b"),
    ]
    assert got[1].error_class is ErrorClass.NOT_FOUND


async def test_threads_sharing_the_blocking_client_each_get_their_own_answers() -> None:
    supervisor = Supervisor(ToolExecutor(registry()))
    calls_r, calls_w = os.pipe()
    answers_r, answers_w = os.pipe()
    client = RunnerClient(os.fdopen(answers_r, "rb", buffering=0), os.fdopen(calls_w, "wb"))

    def worker(n: int) -> list[str]:
        texts = []
        for i in range(25):
            if i % 5 == 4:  # some calls go together, as one batch
                answers = client.call_many([("echo", {"text": f"{n}.{i}.{j}"}) for j in "ab"])
                texts += [a.text for a in answers]
            else:
                texts.append(client.call("echo", {"text": f"{n}.{i}"}).text)
        return texts

    def agents() -> list[list[str]]:
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            got = list(pool.map(worker, range(8)))
        client.close()
        return got

    async with (
        trio.lowlevel.FdStream(calls_r) as receive,
        trio.lowlevel.FdStream(answers_w) as send,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(supervisor.serve, RunnerConfig("r"), receive, send)
        with trio.fail_after(60):  # a guard against a hang, not a timing
            got = await trio.to_thread.run_sync(agents)
    for n, texts in enumerate(got):
        want = []
        for i in range(25):
            want += [f"{n}.{i}.a", f"{n}.{i}.b"] if i % 5 == 4 else [f"{n}.{i}"]
        assert texts == want


def test_the_blocking_client_reports_an_early_close_and_refusals() -> None:
    answers = io.BytesIO(
        b'{"op": "protocol_error", "error": "unknown_op", "message": "m", "tool_call_id": "x"}\n'
        b'{"op": "protocol_error", "error": "invalid_json", "message": "bad", "line": 2}\n'
    )
    client = RunnerClient(answers, io.BytesIO())
    refused = client.receive("x")
    assert (refused.ok, refused.error, refused.error_class) == (False, "unknown_op", None)
    with pytest.raises(ProtocolError, match="refused line 2: bad"):
        client.receive("y")
    with pytest.raises(EOFError):
        client.receive("y")
    with pytest.raises(ProtocolError, match="over max_line_bytes"):
        RunnerClient(io.BytesIO(b"x" * 100), io.BytesIO(), max_line_bytes=10).receive("z")
