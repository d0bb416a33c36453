"""What a host and a remote worker say to each other over HTTP (``RemoteBackend``).

Theory of operation. One call is one ``POST /v1/calls`` with a JSON body
(``CallRequest``) and the shared token as a bearer credential. The worker
answers ``200`` with a stream of JSON lines (``application/x-ndjson``): zero
or more ``progress``, ``update`` and ``heartbeat`` lines, then exactly one
``result`` line, then the end of the body. A cancel is
``POST /v1/calls/<id>/cancel``, answered once the call has stopped; closing
the call's connection cancels it too. Anything else is refused with a
status and a JSON ``{"error": ...}`` body saying why.

Neither side trusts the other's bytes. The host cuts the response stream
into lines with ``LineReader``, which scans each byte once and holds at most
``max_line_bytes`` (``MAX_LINE_BYTES`` by default) of an unfinished line;
both sides decode JSON through ``_core._json_bounds`` (a bounded number of
values and depth, checked before decoding; no NaN or infinity), and a line
or body over a bound is a ``WireError`` like any malformed one.

This module only encodes and decodes; it does no I/O and imports no HTTP
library, so both sides share it.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

import attrs

from .._core._json_bounds import JsonBoundsError, loads_bounded
from .._core._messages import bounded
from .._core._types import (
    ContentBlock,
    ErrorClass,
    ImageContent,
    JsonContent,
    TextContent,
    ToolOutput,
)

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

__all__ = [
    "CALLS_PATH",
    "MAX_LINE_BYTES",
    "NDJSON",
    "TOKEN_ENV",
    "CallRequest",
    "LineReader",
    "WireError",
    "decode_output",
    "encode_line",
    "encode_output",
    "parse_line",
    "parse_request",
]

CALLS_PATH = "/v1/calls"
NDJSON = "application/x-ndjson"
#: The environment variable a worker and ``RemoteBackend`` read the shared token from.
TOKEN_ENV = "TOOLEXEC_WORKER_TOKEN"
#: The longest line a host reads from a worker's response by default (1 MiB,
#: the newline excluded): a result or update bigger than this is refused.
MAX_LINE_BYTES = 1024 * 1024


class WireError(ValueError):
    """A message that does not follow the protocol; the text says what is wrong.

    The text quotes what the peer sent, so it is bounded as every message
    toolexec sends is (``MESSAGE_CHARS``, its two ends kept).
    """

    def __init__(self, message: str) -> None:
        super().__init__(bounded(message))


@attrs.frozen
class CallRequest:
    """One call as the host sends it.

    ``id`` is the host's id for this request (unique per worker, used to
    cancel it); ``call_id`` is the model's id for the call; ``timeout`` is
    how many seconds the host will still wait (``None``: no deadline).
    """

    id: str
    call_id: str
    tool: str
    arguments: Mapping[str, Any]
    timeout: float | None = None
    agent_path: str = "root"
    session_id: str = ""

    def to_json(self) -> bytes:
        """The request body."""
        return json.dumps(attrs.asdict(self), ensure_ascii=False).encode()


def _string(data: Mapping[str, Any], key: str, default: str | None = None) -> str:
    value = data.get(key, default)
    if not isinstance(value, str) or (default is None and not value):
        raise WireError(f"{key!r} must be a non-empty string, got {value!r}")
    return value


def parse_request(body: bytes) -> CallRequest:
    """The call a request body asks for; ``WireError`` says what is malformed."""
    try:
        data = loads_bounded(body)
    except JsonBoundsError as exc:
        raise WireError(f"the request body is too large to decode: {exc}") from None
    except ValueError as exc:  # not UTF-8 JSON, NaN or an infinity, a 5000-digit integer
        raise WireError(f"the request body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise WireError(f"the request body must be a JSON object, got {type(data).__name__}")
    arguments = data.get("arguments")
    if not isinstance(arguments, dict):
        raise WireError(f"'arguments' must be a JSON object, got {type(arguments).__name__}")
    timeout = data.get("timeout")
    if timeout is not None and (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise WireError(f"'timeout' must be a positive number of seconds or null, got {timeout!r}")
    return CallRequest(
        id=_string(data, "id"),
        call_id=_string(data, "call_id"),
        tool=_string(data, "tool"),
        arguments=arguments,
        timeout=timeout,
        agent_path=_string(data, "agent_path", "root"),
        session_id=_string(data, "session_id", ""),
    )


_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, default=repr)
_LENIENT = json.JSONEncoder(ensure_ascii=False, default=repr)
_ASCII = json.JSONEncoder(allow_nan=False, default=repr)


def encode_line(kind: str, **fields: Any) -> bytes:
    """One line of the response stream: ``{"type": kind, ...fields}`` and a newline.

    A value JSON cannot hold (in a result's details) is sent as its ``repr``,
    a NaN or an infinity (which the host refuses) as the text ``"NaN"`` or
    ``"Infinity"``, and a text with a lone surrogate (which UTF-8 cannot
    hold) with every character past ASCII escaped.
    """
    message = {"type": kind, **fields}
    try:
        text = _ENCODER.encode(message)
    except ValueError:  # NaN or an infinity: as text (and a circular value raises again)
        message = json.loads(_LENIENT.encode(message), parse_constant=str)
        text = _ENCODER.encode(message)
    try:
        return text.encode() + b"\n"
    except UnicodeEncodeError:
        return _ASCII.encode(message).encode() + b"\n"


def _block(block: ContentBlock) -> dict[str, Any]:
    if isinstance(block, TextContent):
        return {"type": "text", "text": block.text}
    if isinstance(block, ImageContent):
        return {"type": "image", "data": block.data, "mime_type": block.mime_type}
    return {"type": "json", "value": block.value}


def encode_output(
    content: tuple[ContentBlock, ...],
    details: Mapping[str, Any],
    is_error: bool,
    error_class: ErrorClass | None = None,
) -> dict[str, Any]:
    """A result or partial output as a JSON object."""
    return {
        "content": [_block(b) for b in content],
        "details": dict(details),
        "is_error": is_error,
        "error_class": None if error_class is None else error_class.value,
    }


def _decode_block(data: Any) -> ContentBlock:
    if not isinstance(data, dict):
        raise WireError(f"a content block must be an object, got {data!r}")
    kind = data.get("type")
    try:
        if kind == "text":
            return TextContent(data["text"])
        if kind == "image":
            return ImageContent(data["data"], data["mime_type"])
        if kind == "json":
            return JsonContent(data["value"])
    except (KeyError, TypeError) as exc:
        raise WireError(f"malformed {kind} content block: {exc}") from None
    raise WireError(f"unknown content block type {kind!r}")


def decode_output(data: Any) -> tuple[ToolOutput, ErrorClass | None]:
    """The output a ``result`` or ``update`` line carries, and its error class."""
    if not isinstance(data, dict):
        raise WireError(f"an output must be an object, got {data!r}")
    content = data.get("content")
    details = data.get("details", {})
    is_error = data.get("is_error", False)
    if not isinstance(content, list) or not isinstance(details, dict):
        raise WireError("an output needs a 'content' list and a 'details' object")
    if not isinstance(is_error, bool):
        raise WireError(f"'is_error' must be true or false, got {is_error!r}")
    error_class: ErrorClass | None = None
    if data.get("error_class") is not None:
        try:
            error_class = ErrorClass(data["error_class"])
        except ValueError:
            raise WireError(f"unknown error class {data['error_class']!r}") from None
    blocks = tuple(_decode_block(b) for b in content)
    return ToolOutput(blocks, details, is_error), error_class


def parse_line(line: bytes | str) -> dict[str, Any]:
    """One line of the response stream as an object with a string ``type``.

    Decoded within the bounds of ``_core._json_bounds``, finite numbers only;
    anything else is a ``WireError``.
    """
    try:
        data = loads_bounded(line)
    except JsonBoundsError as exc:
        raise WireError(f"a line is too large to decode: {exc}") from None
    except ValueError as exc:  # not UTF-8 JSON, NaN or an infinity, a 5000-digit integer
        raise WireError(f"a line is not JSON ({exc}): {line[:200]!r}") from None
    if not isinstance(data, dict) or not isinstance(data.get("type"), str):
        raise WireError(f"a line is not an object with a 'type': {line[:200]!r}")
    return data


@attrs.define(eq=False)
class LineReader:
    """Cut a worker's response stream into lines, holding at most ``max_line_bytes`` of one.

    ``feed(chunk)`` yields the lines (``bytes``, without the ``\\n``) the
    chunk completes, in order. Each byte is looked at once: the scan for the
    next newline starts in the new chunk, never again in the part of a line
    already held, so reading a stream is linear in its length. A line that
    grows past ``max_line_bytes`` is a ``WireError`` as soon as it does,
    raised after the lines before it were yielded, and what it held is
    dropped. ``close()`` raises ``WireError`` when the stream
    ended inside a line.
    """

    max_line_bytes: int = MAX_LINE_BYTES
    _partial: bytearray = attrs.field(factory=bytearray, init=False)

    def __attrs_post_init__(self) -> None:
        if isinstance(self.max_line_bytes, bool) or not (
            isinstance(self.max_line_bytes, int) and self.max_line_bytes >= 1
        ):
            raise ValueError(f"max_line_bytes must be an integer >= 1, got {self.max_line_bytes!r}")

    @property
    def buffered(self) -> int:
        """Bytes of an unfinished line held now (never over ``max_line_bytes``)."""
        return len(self._partial)

    def feed(self, chunk: bytes) -> Iterator[bytes]:
        """The lines ``chunk`` completes; ``WireError`` at a line over the limit."""
        start, size, held = 0, len(chunk), self._partial
        while (end := chunk.find(b"\n", start)) >= 0:
            self._check(len(held) + end - start)
            if held:
                held += chunk[start:end]
                line = bytes(held)
                held.clear()
            else:
                line = chunk[start:end]
            start = end + 1
            yield line
        self._check(len(held) + size - start)
        held += chunk[start:]

    def close(self) -> None:
        """Check the stream ended between lines; ``WireError`` if inside one."""
        held = bytes(self._partial)
        self._partial.clear()
        if held.strip():
            raise WireError(f"the response ended inside a line: {held[:200]!r}")

    def _check(self, length: int) -> None:
        if length > self.max_line_bytes:
            self._partial.clear()
            raise WireError(
                f"a line is longer than the host's limit of {self.max_line_bytes} bytes "
                "(RemoteBackend max_line_bytes); it was not read further"
            )
