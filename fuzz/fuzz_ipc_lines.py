"""Fuzz the IPC line reader and message decoder with arbitrary bytes.

``test_one_input(data)`` cuts ``data`` into chunks (the first byte picks the
chunk size), feeds them through ``LineSplitter`` with a small line limit,
decodes every line, and checks that each outcome is a documented one: a
``ToolCallMessage`` with well-typed fields, or a ``ProtocolError`` whose
slug is in ``PROTOCOL_SLUGS`` and whose ``protocol_error`` line is one JSON
object naming the id the error carries (a valid one, or none) with a
message within the bound every message keeps. Any other exception is a bug.
It needs no atheris: a fuzzer or a test calls it directly.
"""

from __future__ import annotations

import json

from toolexec._core._messages import MESSAGE_CHARS
from toolexec._ipc._protocol import protocol_error_message
from toolexec.ipc import (
    PROTOCOL_SLUGS,
    LineSplitter,
    ProtocolError,
    ToolCallMessage,
    decode_message,
)

MAX_LINE = 512


def _check_call(message: ToolCallMessage) -> None:
    assert isinstance(message.tool_call_id, str)
    assert 0 < len(message.tool_call_id) <= 256
    assert isinstance(message.tool, str)
    assert message.tool
    assert isinstance(message.args, dict)
    # What was decoded encodes again (no NaN, nothing JSON cannot hold).
    json.dumps(message.args, allow_nan=False)


def _check_refusal(error: ProtocolError) -> None:
    assert error.slug in PROTOCOL_SLUGS, error.slug
    assert error.message
    line = protocol_error_message(error, 7)
    assert line.endswith(b"\n")
    assert b"\n" not in line[:-1]
    answer = json.loads(line)
    assert (answer["op"], answer["error"], answer["line"]) == ("protocol_error", error.slug, 7)
    assert 0 < len(answer["message"]) <= MESSAGE_CHARS
    named = answer.get("tool_call_id")
    assert named == error.tool_call_id
    assert named is None or 0 < len(named) <= 256


def _check_line(line: bytes) -> None:
    assert b"\n" not in line
    assert len(line) <= MAX_LINE
    outcome: ToolCallMessage | ProtocolError
    try:
        outcome = decode_message(line)
    except ProtocolError as exc:
        outcome = exc
    if isinstance(outcome, ProtocolError):
        _check_refusal(outcome)
    else:
        _check_call(outcome)


def test_one_input(data: bytes) -> None:
    """Feed ``data`` through the reader and decoder; assert only documented outcomes."""
    step = (data[0] % 64 + 1) if data else 1
    splitter = LineSplitter(MAX_LINE)
    for start in range(0, len(data), step):
        for item in splitter.feed(data[start : start + step]):
            if isinstance(item, ProtocolError):
                assert item.slug == "line_too_long", item.slug
            else:
                _check_line(item)
        assert splitter.buffered <= MAX_LINE
    end = splitter.close()
    assert end is None or end.slug == "truncated_line"
    assert splitter.buffered == 0


if __name__ == "__main__":  # pragma: no cover
    import sys

    for path in sys.argv[1:]:
        with open(path, "rb") as f:
            test_one_input(f.read())
