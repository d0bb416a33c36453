"""Fuzz the remote host's reader of a worker's response stream with arbitrary bytes.

``test_one_input(data)`` takes a chunk size and a line limit from the first
two bytes, cuts the rest into chunks and feeds them through ``LineReader``
and the host's handling of each line (``RemoteBackend._lines``: decode it
within the JSON bounds, act on progress, updates and the result), the way
``RemoteBackend`` reads a response. It checks that:

- the reader never holds more than the limit, and yields exactly the lines
  that splitting the whole stream at its newlines gives, up to the first
  line over the limit, which is a ``WireError``;
- each line ends as a documented outcome: nothing (a heartbeat, progress,
  an update, a blank line), the call's output, a ``ToolError`` (the tool
  failed on the worker) or a ``WireError`` (the line breaks the protocol);
  never another exception;
- whatever was decoded holds only finite numbers.

It needs no atheris: a fuzzer or a test calls it directly.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, cast

from _draw import Draw

from toolexec._backends._remote import RemoteBackend
from toolexec._backends._remote_wire import LineReader, WireError
from toolexec._core._errors import ToolError
from toolexec._core._types import JsonContent, ToolOutput

if TYPE_CHECKING:
    from toolexec._core._tool_protocol import ToolContext

LIMITS = (1, 16, 64, 256, 4096)
BACKEND = RemoteBackend("http://fuzz.invalid", token="fuzz-token-0123456789")


class _Context:
    """What the host's handling of a line calls on the call's context."""

    def __init__(self) -> None:
        self.seen: list[Any] = []

    def report_progress(self, message: str) -> None:
        assert isinstance(message, str)
        self.seen.append(message)

    def update(self, output: ToolOutput) -> None:
        assert isinstance(output, ToolOutput)
        self.seen.append(output)


def _finite(output: ToolOutput) -> None:
    values = [b.value for b in output.content if isinstance(b, JsonContent)]
    json.dumps([values, dict(output.details)], allow_nan=False)


def _expected(stream: bytes, limit: int) -> tuple[list[bytes], bool]:
    """The lines of the whole stream up to the first over ``limit``, and whether one is."""
    *complete, tail = stream.split(b"\n")
    lines: list[bytes] = []
    for line in complete:
        if len(line) > limit:
            return lines, True
        lines.append(line)
    return lines, len(tail) > limit


def test_one_input(data: bytes) -> None:
    """Feed ``data`` through the reader and the host's line handling; check the outcomes."""
    draw = Draw(data)
    step = draw.below(64) + 1
    limit = draw.pick(LIMITS)
    stream = draw.rest()
    reader, ctx = LineReader(limit), _Context()
    context = cast("ToolContext", ctx)
    lines: list[bytes] = []
    refusal = ""
    for start in range(0, len(stream), step):
        try:
            for line in reader.feed(stream[start : start + step]):
                assert b"\n" not in line
                assert len(line) <= limit
                lines.append(line)
                # What RemoteBackend does with each line it reads (a private step of its read).
                outcome = BACKEND._lines(LineReader(), line + b"\n", context)  # noqa: SLF001
                assert outcome is None or isinstance(outcome, ToolOutput | ToolError | WireError)
                if isinstance(outcome, ToolOutput):
                    _finite(outcome)
        except WireError as exc:
            refusal = str(exc)
            break
        assert reader.buffered <= limit
    over = "longer than the host's limit" in refusal
    assert over or not refusal
    if not over:
        try:
            reader.close()
        except WireError as exc:
            refusal = str(exc)
        assert not refusal or "ended inside a line" in refusal
    assert reader.buffered == 0
    assert (lines, over) == _expected(stream, limit)
    for seen in ctx.seen:
        if isinstance(seen, ToolOutput):
            _finite(seen)


if __name__ == "__main__":  # pragma: no cover
    import sys

    for path in sys.argv[1:]:
        with open(path, "rb") as f:
            test_one_input(f.read())
