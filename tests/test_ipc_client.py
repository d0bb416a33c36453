"""The runner side's reading of what a supervisor sends: answers, refusals,
and a channel that breaks or closes while calls wait (``_ipc_client``)."""

from __future__ import annotations

import json

import pytest
import trio
import trio.testing

from toolexec._ipc._client import parse_answer
from toolexec.ipc import ProtocolError, TrioRunnerClient


@pytest.mark.parametrize(
    ("line", "slug", "words"),
    [
        (b"{not json\n", "invalid_json", "not JSON"),
        (b"[1, 2]\n", "invalid_message", "not an object"),
        (b'{"op": "gossip"}\n', "unknown_op", "unknown message"),
        (
            b'{"op": "protocol_error", "error": "line_too_long", "line": 3}\n',
            "line_too_long",
            "line 3",
        ),
    ],
)
def test_a_line_that_is_not_an_answer_is_a_protocol_error(
    line: bytes, slug: str, words: str
) -> None:
    with pytest.raises(ProtocolError, match=words) as caught:
        parse_answer(line)
    assert caught.value.slug == slug


def test_a_refusal_naming_a_call_is_that_calls_answer() -> None:
    line = {"op": "protocol_error", "tool_call_id": "c1", "error": "invalid_args", "message": "no"}
    answer = parse_answer(json.dumps(line).encode())
    assert (answer.tool_call_id, answer.ok, answer.error, answer.message) == (
        "c1",
        False,
        "invalid_args",
        "no",
    )


async def _supervisor_says(lines: bytes) -> BaseException:
    """Open a client whose supervisor answers ``lines`` to the first call, then closes."""
    to_supervisor, from_client = trio.testing.memory_stream_one_way_pair()
    to_client, from_supervisor = trio.testing.memory_stream_one_way_pair()
    async with TrioRunnerClient.open(from_supervisor, to_supervisor) as client:

        async def supervisor() -> None:
            await from_client.receive_some()
            await to_client.send_all(lines)
            await to_client.aclose()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(supervisor)
            with pytest.raises((EOFError, ProtocolError)) as caught:
                await client.call("echo", {"text": "hi"})
            failure = caught.value
            # Once the channel failed, later calls fail at once with the same error.
            with pytest.raises(type(failure)):
                await client.call("echo")
        return failure


async def test_a_supervisor_closing_before_answering_is_an_eof_error() -> None:
    failure = await _supervisor_says(b"")
    assert isinstance(failure, EOFError)
    assert "closed the channel" in str(failure)


async def test_a_refusal_naming_no_call_fails_the_waiting_calls() -> None:
    failure = await _supervisor_says(b'{"op": "protocol_error", "error": "invalid_json"}\n')
    assert isinstance(failure, ProtocolError)
    assert failure.slug == "invalid_json"
