"""The supervisor's promise of one answer per call: what may name a call, and endings.

A line the supervisor refuses never names a call that is running or was just
answered; a runner whose stream ends has its calls cancelled at once (and
answered), not when it exits or at the next write; every call is one audit
record. Over in-memory streams, as tests/test_ipc.py, and over real pipes.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from typing import TYPE_CHECKING, Any

import attrs
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from toolexec import SideEffects, ToolExecutor, ToolRegistry, function_tool
from toolexec.ipc import RunnerConfig, Supervisor
from toolexec.policy import CallHook, Skip

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping
    from pathlib import Path


@attrs.define(eq=False)
class Tools:
    """``echo`` answers at once; ``hold`` waits for ``release()``; both note what they saw."""

    started: list[str] = attrs.field(factory=list)
    cancelled: list[str] = attrs.field(factory=list)
    ran: list[str] = attrs.field(factory=list)
    gate: trio.Event = attrs.field(factory=trio.Event)

    def release(self) -> None:
        self.gate.set()
        self.gate = trio.Event()

    def registry(self) -> ToolRegistry:
        tools = self

        @function_tool(side_effects=SideEffects.READ)
        async def echo(text: str) -> str:  # no await: it runs inline, never in a thread
            """Echo the text."""
            tools.ran.append(text)
            return text

        @function_tool(side_effects=SideEffects.READ, timeout=3600)
        async def hold(text: str) -> str:
            """Wait until released."""
            tools.started.append(text)
            try:
                await tools.gate.wait()
            except trio.Cancelled:
                tools.cancelled.append(text)
                raise
            tools.ran.append(text)
            return text

        reg = ToolRegistry()
        reg.register(echo)
        reg.register(hold)
        return reg


def call(cid: str, tool: str = "echo", text: str | None = None) -> bytes:
    line = {"op": "tool_call", "tool_call_id": cid, "tool": tool, "args": {"text": text or cid}}
    return json.dumps(line).encode() + b"\n"


#: Lines a supervisor refuses though they carry a readable ``tool_call_id``.
def bad_lines(cid: str) -> dict[str, bytes]:
    quoted = json.dumps(cid)
    return {
        "unknown_op": b'{"op": "tool_cancel", "tool_call_id": %s}\n' % quoted.encode(),
        "args_not_an_object": (
            b'{"op": "tool_call", "tool_call_id": %s, "tool": "echo", "args": [1]}\n'
            % quoted.encode()
        ),
        "no_tool": b'{"op": "tool_call", "tool_call_id": %s}\n' % quoted.encode(),
        "tool_not_a_string": (
            b'{"op": "tool_call", "tool_call_id": %s, "tool": 7}\n' % quoted.encode()
        ),
        "duplicate": call(cid),
    }


@attrs.define(eq=False)
class Peer:
    """The runner's side of a served session: what it sends, what it got."""

    to_sup: trio.testing.MemorySendStream
    answers: list[dict[str, Any]] = attrs.field(factory=list)
    stats: list[Any] = attrs.field(factory=list)

    async def send(self, data: bytes) -> None:
        await self.to_sup.send_all(data)
        await trio.testing.wait_all_tasks_blocked()

    def naming(self, cid: str) -> list[dict[str, Any]]:
        return [a for a in self.answers if a.get("tool_call_id") == cid]


async def _collect(receive: trio.abc.ReceiveStream, answers: list[dict[str, Any]]) -> None:
    data = b""
    while chunk := await receive.receive_some():
        data += chunk
        *lines, data = data.split(b"\n")
        answers.extend(json.loads(line) for line in lines)


@contextlib.asynccontextmanager
async def served(supervisor: Supervisor, name: str = "r") -> AsyncIterator[Peer]:
    """Serve one runner over memory streams; on exit its output ends and serve returns."""
    to_sup, from_runner = trio.testing.memory_stream_one_way_pair()
    to_runner, from_sup = trio.testing.memory_stream_one_way_pair()
    peer = Peer(to_sup)

    async def serve() -> None:
        peer.stats.append(await supervisor.serve(RunnerConfig(name), from_runner, to_runner))
        await to_runner.aclose()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve)
        nursery.start_soon(_collect, from_sup, peer.answers)
        yield peer
        with trio.fail_after(10):  # guards a hang: virtual time, under the autojump clock
            await to_sup.aclose()
            while not peer.stats:
                await trio.testing.wait_all_tasks_blocked()
                if not peer.stats:
                    await trio.sleep(1)


# -- counterfeit answers -------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(bad_lines("x")))
async def test_a_refused_line_reusing_a_running_calls_id_names_no_call(
    kind: str, autojump_clock: trio.abc.Clock
) -> None:
    tools = Tools()
    async with served(Supervisor(ToolExecutor(tools.registry()))) as peer:
        await peer.send(call("x", "hold"))
        assert tools.started == ["x"]
        await peer.send(bad_lines("x")[kind])
        (refused,) = peer.answers  # at once, while x runs
        assert refused["op"] == "protocol_error"
        assert "tool_call_id" not in refused
        tools.release()
        await trio.testing.wait_all_tasks_blocked()
        (answer,) = peer.naming("x")
        assert (answer["op"], answer["ok"]) == ("tool_response", True)
    assert tools.ran == ["x"]


@pytest.mark.parametrize("kind", sorted(bad_lines("x")))
async def test_a_refused_line_in_the_same_read_as_its_call_names_no_call(
    kind: str, autojump_clock: trio.abc.Clock
) -> None:
    tools = Tools()
    async with served(Supervisor(ToolExecutor(tools.registry()))) as peer:
        await peer.send(call("x", "hold") + bad_lines("x")[kind])
        tools.release()
        await trio.testing.wait_all_tasks_blocked()
        (answer,) = peer.naming("x")
        assert (answer["op"], answer["ok"]) == ("tool_response", True)
        assert [a["op"] for a in peer.answers].count("protocol_error") == 1


@pytest.mark.parametrize("kind", sorted(set(bad_lines("x")) - {"duplicate"}))
async def test_a_refused_line_reusing_an_answered_id_names_no_call(
    kind: str, autojump_clock: trio.abc.Clock
) -> None:
    tools = Tools()
    async with served(Supervisor(ToolExecutor(tools.registry()))) as peer:
        await peer.send(call("x"))
        await peer.send(bad_lines("x")[kind])
        (answer,) = peer.naming("x")
        assert answer["op"] == "tool_response"
        assert [a["op"] for a in peer.answers] == ["tool_response", "protocol_error"]


async def test_a_refused_line_with_a_fresh_id_is_that_lines_answer(
    autojump_clock: trio.abc.Clock,
) -> None:
    tools = Tools()
    async with served(Supervisor(ToolExecutor(tools.registry()))) as peer:
        await peer.send(call("x", "hold"))
        await peer.send(bad_lines("fresh")["unknown_op"])
        (refused,) = peer.naming("fresh")
        assert (refused["op"], refused["error"]) == ("protocol_error", "unknown_op")
        tools.release()


async def test_calls_sent_while_a_batch_runs_form_the_next_batch(
    autojump_clock: trio.abc.Clock,
) -> None:
    tools = Tools()
    async with served(Supervisor(ToolExecutor(tools.registry()))) as peer:
        await peer.send(call("x", "hold"))
        await peer.send(call("a"))
        await peer.send(call("b"))
        assert peer.answers == []
        assert tools.ran == []  # nothing overtakes the call sent before it
        tools.release()
        await trio.testing.wait_all_tasks_blocked()
    assert tools.ran == ["x", "a", "b"]
    assert [a["tool_call_id"] for a in peer.answers] == ["x", "a", "b"]


# -- endings -------------------------------------------------------------------------------


async def test_a_runner_whose_output_ends_has_its_running_calls_cancelled_and_answered(
    autojump_clock: trio.abc.Clock,
) -> None:
    tools = Tools()
    supervisor = Supervisor(ToolExecutor(tools.registry()))
    to_sup, from_runner = trio.testing.memory_stream_one_way_pair()
    to_runner, from_sup = trio.testing.memory_stream_one_way_pair()
    answers: list[dict[str, Any]] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_collect, from_sup, answers)
        async with trio.open_nursery() as serving:
            serving.start_soon(supervisor.serve, RunnerConfig("r"), from_runner, to_runner)
            await to_sup.send_all(call("x", "hold"))
            await trio.testing.wait_all_tasks_blocked()
            assert tools.started == ["x"]
            await to_sup.send_all(call("later") + call("hold-later", "hold"))
            await trio.testing.wait_all_tasks_blocked()
            await to_sup.aclose()  # the runner's output ends; its input stays open
            with trio.fail_after(10):  # virtual time: the tool's deadline is an hour
                await trio.testing.wait_all_tasks_blocked()
                while supervisor.statistics():
                    await trio.sleep(1)
        await to_runner.aclose()
    assert tools.cancelled == ["x"]
    assert tools.ran == []  # the calls that had not started never do
    assert [(a["tool_call_id"], a["error"]) for a in answers] == [
        ("x", "cancelled"),
        ("later", "cancelled"),
        ("hold-later", "cancelled"),
    ]


def _runner_script(tmp_path: Path, closes: str) -> str:
    """A runner that sends a ``hold`` call, closes one end once it runs, and waits."""
    line = call("h", "hold")
    return f"""
import os, time

def wait_for(name):
    while not os.path.exists(os.path.join({str(tmp_path)!r}, name)):
        time.sleep(0.02)

os.write(1, {line!r})
wait_for("started")
os.close({1 if closes == "output" else 0})
wait_for("cancelled")
"""


@pytest.mark.parametrize("closes", ["output", "input"])
async def test_a_runner_process_that_closes_an_end_and_stays_has_its_calls_cancelled(
    closes: str, tmp_path: Path
) -> None:
    @function_tool(side_effects=SideEffects.READ, timeout=3600)
    async def hold(text: str) -> str:
        """Wait forever; note the start and the cancel."""
        (tmp_path / "started").write_text("yes")
        try:
            await trio.sleep_forever()
        finally:
            (tmp_path / "cancelled").write_text("yes")
        return text  # pragma: no cover

    reg = ToolRegistry()
    reg.register(hold)
    supervisor = Supervisor(ToolExecutor(reg))
    command = [sys.executable, "-c", _runner_script(tmp_path, closes)]
    with trio.fail_after(60):  # a guard against a hang, not a timing: the runner exits at once
        status = await supervisor.run_process(command, RunnerConfig("r"))
    assert (tmp_path / "cancelled").exists()
    assert status == 0


@pytest.mark.skipif(sys.platform != "linux", reason="a pipe's closed reader is seen on Linux")
async def test_a_runner_that_stops_reading_a_pipe_is_seen_without_a_write() -> None:
    tools = Tools()
    supervisor = Supervisor(ToolExecutor(tools.registry()))
    calls_r, calls_w = os.pipe()
    answers_r, answers_w = os.pipe()
    async with (
        trio.lowlevel.FdStream(calls_r) as receive,
        trio.lowlevel.FdStream(answers_w) as send,
        trio.lowlevel.FdStream(calls_w) as runner_out,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(supervisor.serve, RunnerConfig("r"), receive, send)
        await runner_out.send_all(call("x", "hold"))
        await trio.testing.wait_all_tasks_blocked()
        assert tools.started == ["x"]
        os.close(answers_r)  # the runner's input: closed, and its output still open
        await trio.testing.wait_all_tasks_blocked()
        assert tools.cancelled == ["x"]
        assert supervisor.statistics() == ()


# -- audit -------------------------------------------------------------------------------


@attrs.define(eq=False)
class Audit:
    records: list[tuple[str, str, str | None]] = attrs.field(factory=list)

    def record(self, kind: str, fields: Mapping[str, Any]) -> None:
        self.records.append((kind, fields["tool_call_id"], fields.get("error")))


class SkipSkipped(CallHook):
    def before_call(self, call: Any, arguments: Any, agent_path: str) -> Skip | None:
        return Skip("not today") if arguments.get("text") == "skip" else None


@pytest.mark.parametrize("together", [False, True])
async def test_a_call_skipped_by_a_hook_is_one_audit_record(
    together: bool, autojump_clock: trio.abc.Clock
) -> None:
    tools, audit = Tools(), Audit()
    executor = ToolExecutor(tools.registry(), hooks=[SkipSkipped()])
    async with served(Supervisor(executor, audit=[audit])) as peer:
        lines = [call("s", text="skip"), call("k")]
        if together:
            await peer.send(b"".join(lines))
        else:
            for line in lines:
                await peer.send(line)
        assert peer.naming("s")[0]["error"] == "skipped"
    assert sorted(audit.records) == [
        ("tool.call.denied", "s", "skipped"),
        ("tool.call.dispatched", "k", None),
    ]


async def test_every_call_is_one_audit_record_whatever_becomes_of_it(
    autojump_clock: trio.abc.Clock,
) -> None:
    tools, audit = Tools(), Audit()
    executor = ToolExecutor(tools.registry(), hooks=[SkipSkipped()])
    async with served(Supervisor(executor, audit=[audit])) as peer:
        await peer.send(
            call("ok")
            + call("skipped", text="skip")
            + call("missing", "nope")
            + b'{"op": "tool_call", "tool_call_id": "bad", "tool": "echo", "args": {"t": 1}}\n'
        )
        await peer.send(call("held", "hold"))
        await peer.send(call("waiting") + call("x", "hold"))
    ids = [cid for _, cid, _ in audit.records]
    assert sorted(ids) == sorted(["ok", "skipped", "missing", "bad", "held", "waiting", "x"])
    assert {cid: error for _, cid, error in audit.records if error} == {
        "skipped": "skipped",
        "missing": "tool_not_found",
        "bad": "invalid_args",
        "waiting": "cancelled",
        "x": "cancelled",
    }


async def test_calls_waiting_when_the_runner_goes_away_are_still_audited() -> None:
    tools, audit = Tools(), Audit()
    supervisor = Supervisor(ToolExecutor(tools.registry()), audit=[audit])
    to_sup, from_runner = trio.testing.memory_stream_one_way_pair()
    to_runner, _from_sup = trio.testing.memory_stream_one_way_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(supervisor.serve, RunnerConfig("r"), from_runner, to_runner)
        await to_sup.send_all(call("x", "hold"))
        await trio.testing.wait_all_tasks_blocked()
        await to_sup.send_all(call("a") + call("b"))
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()  # what run_process does when its runner exits
    assert tools.cancelled == ["x"]
    assert sorted(audit.records) == [
        ("tool.call.denied", "a", "cancelled"),
        ("tool.call.denied", "b", "cancelled"),
        ("tool.call.dispatched", "x", None),
    ]


# -- the property --------------------------------------------------------------------------

IDS = st.sampled_from(["a", "b", "c"])
LINES = st.one_of(
    st.tuples(st.just("call"), IDS, st.sampled_from(["echo", "hold"])),
    st.tuples(st.just("bad"), IDS, st.sampled_from(sorted(set(bad_lines("x")) - {"duplicate"}))),
    st.tuples(st.just("garbage"), st.just(""), st.sampled_from(["not json", "[]", "{}"])),
    st.tuples(st.just("release"), st.just(""), st.just("")),
)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(LINES, st.booleans()), max_size=16),
    st.booleans(),
    st.integers(1, 1024),
)
def test_one_answer_per_accepted_call_and_no_refusal_names_a_running_call(
    steps: list[tuple[tuple[str, str, str], bool]], release_at_end: bool, batch: int
) -> None:
    """Writes of calls, refused lines (some reusing ids) and releases, in any order.

    The runner keeps the books: an id is in flight from the write of a call
    the supervisor takes to the arrival of its answer. Every call taken gets
    exactly one answer; a refusal names an id only when it was not in flight.
    """
    tools = Tools()
    supervisor = Supervisor(ToolExecutor(tools.registry()), max_batch_calls=batch)
    in_flight: dict[str, int] = {}  # id -> calls taken and not yet answered
    taken: dict[str, int] = {}
    line_ids: dict[int, tuple[str, bool]] = {}  # line number -> (id, in flight when sent)

    async def main() -> list[dict[str, Any]]:
        lines_sent, seen = 0, 0
        async with served(supervisor) as peer:
            pending = b""
            for (kind, cid, what), flush in steps:
                if kind == "release":
                    await peer.send(pending)  # what was written before the release
                    pending = b""
                    tools.release()
                elif kind == "garbage":
                    lines_sent += 1
                    pending += what.encode() + b"\n"
                else:
                    lines_sent += 1
                    running = in_flight.get(cid, 0) > 0
                    line_ids[lines_sent] = (cid, running)
                    if kind == "call" and not running:
                        in_flight[cid] = 1
                        taken[cid] = taken.get(cid, 0) + 1
                    pending += call(cid, what) if kind == "call" else bad_lines(cid)[what]
                if flush or kind == "release":
                    if pending:
                        await peer.send(pending)
                        pending = b""
                    await trio.testing.wait_all_tasks_blocked()
                    for answer in peer.answers[seen:]:
                        if answer["op"] == "tool_response":
                            in_flight[answer["tool_call_id"]] -= 1
                    seen = len(peer.answers)
            if pending:
                await peer.send(pending)
            if release_at_end:
                tools.release()
        return peer.answers

    answers = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    responses: dict[str, int] = {}
    for answer in answers:
        if answer["op"] == "tool_response":
            responses[answer["tool_call_id"]] = responses.get(answer["tool_call_id"], 0) + 1
        elif "tool_call_id" in answer:
            cid, running = line_ids[answer["line"]]
            assert answer["tool_call_id"] == cid
            assert not running, f"a refusal named {cid}, which was in flight"
    assert responses == taken
