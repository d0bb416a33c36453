"""The host's reader of a worker's response stream (``LineReader``), over every chunking.

Properties against a plain reference (``bytes.split`` of the whole stream):
the reader yields the same lines in the same order however the stream is cut
into chunks, holds at most ``max_line_bytes`` at any moment, refuses the
first line over the limit as soon as it passes it (after every line before
it), and says when the stream ended inside a line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolexec._backends._remote_wire import (
    MAX_LINE_BYTES,
    LineReader,
    WireError,
    encode_line,
    encode_output,
    parse_line,
)
from toolexec._core._types import TextContent

if TYPE_CHECKING:
    from collections.abc import Iterator


def chunked(data: bytes, cuts: list[int]) -> Iterator[bytes]:
    """``data`` cut at the given offsets (sorted, deduplicated, in range)."""
    start = 0
    for cut in sorted({c % (len(data) + 1) for c in cuts}):
        yield data[start:cut]
        start = cut
    yield data[start:]


def read_all(data: bytes, cuts: list[int], limit: int) -> tuple[list[bytes], str | None]:
    """What the reader makes of ``data`` cut at ``cuts``: its lines and its error, if any."""
    reader = LineReader(limit)
    lines: list[bytes] = []
    try:
        for chunk in chunked(data, cuts):
            lines.extend(reader.feed(chunk))
            assert reader.buffered <= limit
        reader.close()
    except WireError as exc:
        assert reader.buffered == 0
        return lines, str(exc)
    assert reader.buffered == 0
    return lines, None


def reference(data: bytes, limit: int) -> tuple[list[bytes], str | None]:
    """The same, from the whole stream at once."""
    *complete, tail = data.split(b"\n")
    lines: list[bytes] = []
    for line in complete:
        if len(line) > limit:
            return lines, "longer than the host's limit"
        lines.append(line)
    if len(tail) > limit:
        return lines, "longer than the host's limit"
    if tail.strip():
        return lines, "ended inside a line"
    return lines, None


# Streams of protocol lines, with hostile ones among them.
WELL_FORMED = st.sampled_from(
    [
        encode_line("heartbeat"),
        encode_line("progress", message="half way"),
        encode_line("update", output=encode_output((TextContent("partial"),), {}, False)),
        encode_line("result", result=encode_output((TextContent("done\nok"),), {}, False)),
        b"\n",
        b"  \n",
    ]
)
HOSTILE = st.sampled_from(
    [
        b"x" * 300,  # no newline: over any limit below tested
        b"y" * 40 + b"\n",
        b"[]," * 50 + b"\n",
        b"\xff\xfe\n",
        b'{"type": "result", "result": 1e999}\n',
        b"[" * 200 + b"\n",
        b"\r\n",
    ]
)
STREAMS = st.lists(st.one_of(WELL_FORMED, HOSTILE, st.binary(max_size=80)), max_size=12).map(
    b"".join
)
CUTS = st.lists(st.integers(min_value=0, max_value=10_000), max_size=20)
LIMITS = st.sampled_from([1, 16, 64, 256, 4096])


@settings(max_examples=300, deadline=None)
@given(STREAMS, CUTS, LIMITS)
def test_the_reader_agrees_with_splitting_the_whole_stream(
    data: bytes, cuts: list[int], limit: int
) -> None:
    got_lines, got_error = read_all(data, cuts, limit)
    want_lines, want_error = reference(data, limit)
    assert got_lines == want_lines
    if want_error is None:
        assert got_error is None
    else:
        assert got_error is not None
        assert want_error in got_error


@settings(max_examples=100, deadline=None)
@given(st.lists(WELL_FORMED, min_size=1, max_size=10).map(b"".join), CUTS)
def test_a_well_formed_stream_gives_its_lines_whatever_the_chunking(
    data: bytes, cuts: list[int]
) -> None:
    lines, error = read_all(data, cuts, MAX_LINE_BYTES)
    assert error is None
    assert lines == data.split(b"\n")[:-1]
    for line in lines:
        if line.strip():
            assert isinstance(parse_line(line)["type"], str)


@settings(max_examples=50, deadline=None)
@given(st.integers(min_value=1, max_value=4096), st.integers(min_value=1, max_value=5000))
def test_an_unterminated_line_is_refused_once_it_passes_the_limit(limit: int, step: int) -> None:
    reader = LineReader(limit)
    fed = 0
    while fed + step <= limit:
        assert list(reader.feed(b"z" * step)) == []
        fed += step
        assert reader.buffered == fed
    # refused in the chunk that passes the limit, and what was held is dropped
    with pytest.raises(WireError, match=f"longer than the host's limit of {limit} bytes"):
        list(reader.feed(b"z" * step))
    assert reader.buffered == 0


def test_lines_before_an_overlong_one_in_the_same_chunk_are_given_first() -> None:
    reader = LineReader(10)
    lines = reader.feed(b"one\ntwo\n" + b"x" * 11 + b"\nthree\n")
    assert next(lines) == b"one"
    assert next(lines) == b"two"
    with pytest.raises(WireError, match="longer than the host's limit of 10 bytes"):
        next(lines)


def test_a_line_of_exactly_the_limit_is_read() -> None:
    reader = LineReader(5)
    assert list(reader.feed(b"ab")) == []
    assert list(reader.feed(b"cde\nfghij\n")) == [b"abcde", b"fghij"]


@pytest.mark.parametrize("limit", [0, -1, True, 1.5, "10"])
def test_the_limit_is_a_positive_integer(limit: object) -> None:
    with pytest.raises(ValueError, match="max_line_bytes must be an integer >= 1"):
        LineReader(limit)  # type: ignore[arg-type]
