"""The supervisor/runner wire format: JSON lines, their slugs, a bounded line splitter.

Theory of operation. Everything here is free of I/O. A runner and a
supervisor exchange UTF-8 JSON objects, one per line, ended by ``\\n`` (the
only line separator: U+2028 and U+2029 are ordinary characters inside a
JSON string). ``LineSplitter`` cuts a byte stream into lines while holding at
most ``max_line_bytes`` of an unfinished line: a longer line is *refused*,
its bytes dropped as they arrive up to the next ``\\n``, so a runner cannot
make the supervisor buffer more than the limit. ``decode_message`` turns one
line into a ``ToolCallMessage`` or raises ``ProtocolError`` with a slug
(``PROTOCOL_SLUGS``) and a message saying what was wrong and what is allowed.
A line is decoded only within the bounds of ``_core._json_bounds`` (at most
``MAX_JSON_VALUES`` values, ``MAX_JSON_DEPTH`` levels, finite numbers), checked
before any value is built: a line over them is ``invalid_json``.

Error slugs of a ``tool_response`` map one to one onto ``ErrorClass``
(``SLUG_OF`` / ``ERROR_CLASS_OF``), with one addition: ``fs_denied`` is a
``permission_denied`` whose cause is a path argument outside the runner's
filesystem grants.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import attrs

from .._core._errors import ToolexecError
from .._core._json_bounds import DECODER, JsonBoundsError, check_bounds
from .._core._messages import bounded, clip
from .._core._types import ErrorClass, TextContent, ToolCall

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from .._core._types import ToolResult

__all__ = [
    "DEFAULT_MAX_LINE_BYTES",
    "ERROR_CLASS_OF",
    "PROTOCOL_SLUGS",
    "SLUG_OF",
    "LineSplitter",
    "ProtocolError",
    "ToolCallMessage",
    "decode_call",
    "decode_message",
    "encode",
    "protocol_error_message",
    "response_message",
]

#: The longest line either side reads by default (16 MiB, the newline excluded).
DEFAULT_MAX_LINE_BYTES = 16 * 1024 * 1024
#: The longest ``tool_call_id`` a supervisor accepts, in characters.
MAX_ID_CHARS = 256

#: The slug a ``tool_response`` carries for each error class.
SLUG_OF: Mapping[ErrorClass, str] = {
    ErrorClass.NOT_FOUND: "tool_not_found",
    ErrorClass.INVALID_ARGUMENTS: "invalid_args",
    ErrorClass.PERMISSION_DENIED: "permission_denied",
    ErrorClass.USER_DENIED: "user_denied",
    ErrorClass.CONFIRMATION_TIMEOUT: "confirmation_timeout",
    ErrorClass.TIMEOUT: "timeout",
    ErrorClass.EXECUTION_ERROR: "tool_failed",
    ErrorClass.CANCELLED: "cancelled",
    ErrorClass.SKIPPED: "skipped",
}
FS_DENIED = "fs_denied"
#: The error class of each slug; ``fs_denied`` is a permission denial.
ERROR_CLASS_OF: Mapping[str, ErrorClass] = {
    **{slug: cls for cls, slug in SLUG_OF.items()},
    FS_DENIED: ErrorClass.PERMISSION_DENIED,
}

#: Slugs of a ``protocol_error`` message: a line the supervisor could not take as a call.
PROTOCOL_SLUGS = (
    "line_too_long",
    "invalid_json",
    "invalid_message",
    "unknown_op",
    "duplicate_tool_call_id",
    "truncated_line",
)


class ProtocolError(ToolexecError, ValueError):
    """A line that breaks the IPC protocol: ``slug`` says how, the message what to do.

    ``tool_call_id`` is the id of the call the line carried, when it could
    be read.
    """

    def __init__(self, slug: str, message: str, tool_call_id: str | None = None) -> None:
        super().__init__(message)
        self.slug = slug
        self.message = message
        self.tool_call_id = tool_call_id


@attrs.frozen
class ToolCallMessage:
    """A decoded ``tool_call``: the runner's id, the tool, its arguments."""

    tool_call_id: str
    tool: str
    args: dict[str, Any]


# -- lines ---------------------------------------------------------------------------


@attrs.define(eq=False)
class LineSplitter:
    """Cut bytes into ``\\n``-ended lines, never holding more than ``max_line_bytes``.

    ``feed(chunk)`` returns the items the chunk completes, in order: a line
    (``bytes``, without its ``\\n``), or a ``ProtocolError`` with slug
    ``line_too_long`` for a line over the limit (once, when its end arrives;
    its bytes are dropped as they come). ``close()`` returns the
    ``truncated_line`` error when the stream ended inside a line.
    """

    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    _partial: bytearray = attrs.field(factory=bytearray, init=False)
    _skipping: int = attrs.field(default=0, init=False)  # bytes dropped of an overlong line

    def __attrs_post_init__(self) -> None:
        if isinstance(self.max_line_bytes, bool) or not (
            isinstance(self.max_line_bytes, int) and self.max_line_bytes >= 1
        ):
            raise ValueError(f"max_line_bytes must be an integer >= 1, got {self.max_line_bytes!r}")

    @property
    def buffered(self) -> int:
        """Bytes of an unfinished line held now (never over ``max_line_bytes``)."""
        return len(self._partial)

    def feed(self, chunk: bytes | bytearray) -> list[bytes | ProtocolError]:
        """The lines (and refusals) that ``chunk`` completes."""
        out: list[bytes | ProtocolError] = []
        start, size = 0, len(chunk)
        while start < size:
            end = chunk.find(b"\n", start)
            if end < 0:
                self._take(chunk, start, size)
                break
            if self._partial or self._skipping or end - start > self.max_line_bytes:
                self._take(chunk, start, end)
                out.append(self._end_line())
            else:  # a whole line in this chunk: cut it out, with no copy through the buffer
                out.append(bytes(chunk[start:end]))
            start = end + 1
        return out

    def close(self) -> ProtocolError | None:
        """The error for an unfinished last line, if the stream ended inside one."""
        held = len(self._partial) + self._skipping
        self._partial.clear()
        self._skipping = 0
        if not held:
            return None
        return ProtocolError(
            "truncated_line",
            f"the stream ended inside a line ({held} bytes after the last newline); "
            "end every message with '\\n'",
        )

    def _take(self, chunk: bytes | bytearray, start: int, end: int) -> None:
        if self._skipping:
            self._skipping += end - start
        elif len(self._partial) + end - start > self.max_line_bytes:
            self._skipping = len(self._partial) + end - start
            self._partial.clear()
        else:
            self._partial += chunk[start:end]

    def _end_line(self) -> bytes | ProtocolError:
        if self._skipping:
            size, self._skipping = self._skipping, 0
            return ProtocolError(
                "line_too_long",
                f"a line of {size} bytes is over the limit of {self.max_line_bytes} bytes "
                "and was dropped unread; send smaller messages",
            )
        line = bytes(self._partial)
        self._partial.clear()
        return line


# -- messages --------------------------------------------------------------------------


_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"), default=str)
# What ``_ENCODER`` writes for a ``str``: the quoted, escaped string.
_string: Callable[[str], str] = json.encoder.encode_basestring
_ASCII_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"), default=str)


def _decode_json(line: bytes) -> Any:
    try:
        check_bounds(line)
        text = line.decode("utf-8")
        if text[:1] == "{":  # no whitespace before: the scanner alone, if none after
            value, end = DECODER.raw_decode(text)
            if end == len(text):
                return value
        return DECODER.decode(text)  # whitespace around, or the error for what is after
    except UnicodeDecodeError as exc:
        raise ProtocolError(
            "invalid_json", f"the line is not UTF-8 (byte {exc.start}); send UTF-8 JSON"
        ) from None
    except JsonBoundsError as exc:
        raise ProtocolError("invalid_json", str(exc)) from None
    except RecursionError:
        raise ProtocolError("invalid_json", "the JSON is nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, NaN/infinities/1e999, over-long integers
        raise ProtocolError(
            "invalid_json", f"the line is not a JSON object: {exc}; send one JSON object per line"
        ) from None


def decode_message(line: bytes) -> ToolCallMessage:
    """Decode one line from a runner.

    Raises:
        ProtocolError: the line is not JSON (``invalid_json``), not a
            ``tool_call`` object (``unknown_op``, ``invalid_message``); the
            error carries the ``tool_call_id`` when one could be read.
    """
    call = decode_call(line)
    return ToolCallMessage(call.id, call.name, call.arguments)  # type: ignore[arg-type]


def decode_call(line: bytes) -> ToolCall:
    """Decode one line from a runner into the ``ToolCall`` the executor takes.

    The same checks and errors as ``decode_message``; ``arguments`` is the
    decoded ``dict`` itself, so nothing is parsed twice.
    """
    value = _decode_json(line)
    if not isinstance(value, dict):
        raise ProtocolError(
            "invalid_message", f"a message is a JSON object, got {type(value).__name__}"
        )
    raw_id = value.get("tool_call_id")
    call_id = raw_id if isinstance(raw_id, str) and 0 < len(raw_id) <= MAX_ID_CHARS else None
    op = value.get("op")
    if op != "tool_call":
        shown = clip(json.dumps(op)) if isinstance(op, str) else repr(type(op).__name__)
        raise ProtocolError(
            "unknown_op", f"unknown op {shown}; a runner sends only op 'tool_call'", call_id
        )
    if call_id is None:
        raise ProtocolError(
            "invalid_message",
            f"tool_call_id must be a string of 1 to {MAX_ID_CHARS} characters",
        )
    tool, args = value.get("tool"), value.get("args", {})
    if not isinstance(tool, str) or not tool:
        raise ProtocolError("invalid_message", "tool must be a non-empty string", call_id)
    if not isinstance(args, dict):
        raise ProtocolError(
            "invalid_message", f"args must be a JSON object, got {type(args).__name__}", call_id
        )
    return ToolCall(call_id, tool, args)


def encode(message: Mapping[str, Any]) -> bytes:
    """One message as a line: compact UTF-8 JSON and ``\\n``.

    Raw U+2028/U+2029 are kept (JSON allows them); values JSON cannot hold
    are written as text, and NaN or infinities (which JSON has no words
    for) make the message a ``ValueError``. A message with a lone surrogate
    (which UTF-8 cannot hold: a file name that is not UTF-8, say) is
    written with every character past ASCII as a ``\\u`` escape.
    """
    text = _ENCODER.encode(message)
    try:
        return text.encode("utf-8") + b"\n"
    except UnicodeEncodeError:
        return _ASCII_ENCODER.encode(message).encode("ascii") + b"\n"


def _block(block: Any) -> dict[str, Any]:
    if isinstance(block, TextContent):  # the common case, without attrs.asdict
        return {"text": block.text, "type": "text"}
    return attrs.asdict(block)


def response_message(call_id: str, result: ToolResult, *, slug: str | None = None) -> bytes:
    """The ``tool_response`` line for one result (``slug`` overrides the table)."""
    content = result.content
    if (
        not result.is_error
        and not result.details
        and len(content) == 1
        and type(content[0]) is TextContent
    ):
        # The common answer, one text and nothing else: the same bytes as the
        # general path below, built around the JSON of the id and the text.
        try:
            text = _string(content[0].text)
            return (
                f'{{"op":"tool_response","tool_call_id":{_string(call_id)},"ok":true,'
                f'"result":{{"text":{text},"content":[{{"text":{text},"type":"text"}}]}}}}\n'
            ).encode()
        except UnicodeEncodeError:  # a lone surrogate: the general path escapes it
            pass
    message: dict[str, Any] = {"op": "tool_response", "tool_call_id": call_id}
    if result.is_error:
        assert result.error_class is not None
        message |= {
            "ok": False,
            "error": slug or SLUG_OF[result.error_class],
            "message": result.text,
        }
    elif len(result.content) == 1 and type(result.content[0]) is TextContent:
        text = result.content[0].text  # the common case: one text block
        message |= {"ok": True, "result": {"text": text, "content": [_block(result.content[0])]}}
    else:
        blocks = [_block(b) for b in result.content]
        message |= {"ok": True, "result": {"text": result.text, "content": blocks}}
    if result.details:
        message["details"] = dict(result.details)
    try:
        return encode(message)
    except (ValueError, TypeError, RecursionError):  # details JSON cannot hold
        message.pop("details", None)
        return encode(message)


def protocol_error_message(error: ProtocolError, line_number: int) -> bytes:
    """The ``protocol_error`` line telling a runner a line was refused."""
    message: dict[str, Any] = {
        "op": "protocol_error",
        "error": error.slug,
        "message": bounded(error.message),
        "line": line_number,
    }
    if error.tool_call_id is not None:
        message["tool_call_id"] = error.tool_call_id
    return encode(message)
