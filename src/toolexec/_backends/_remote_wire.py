"""What a host and a remote worker say to each other over HTTP (``RemoteBackend``).

Theory of operation. One call is one ``POST /v1/calls`` with a JSON body
(``CallRequest``) and the shared token as a bearer credential. The worker
answers ``200`` with a stream of JSON lines (``application/x-ndjson``): zero
or more ``progress``, ``update`` and ``heartbeat`` lines, then exactly one
``result`` line, then the end of the body. A cancel is
``POST /v1/calls/<id>/cancel``, answered once the call has stopped; closing
the call's connection cancels it too. Anything else is refused with a
status and a JSON ``{"error": ...}`` body saying why.

This module only encodes and decodes; it does no I/O and imports no HTTP
library, so both sides share it.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

import attrs

from .._core._types import (
    ContentBlock,
    ErrorClass,
    ImageContent,
    JsonContent,
    TextContent,
    ToolOutput,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "CALLS_PATH",
    "NDJSON",
    "TOKEN_ENV",
    "CallRequest",
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


class WireError(ValueError):
    """A message that does not follow the protocol; the text says what is wrong."""


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
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
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


def encode_line(kind: str, **fields: Any) -> bytes:
    """One line of the response stream: ``{"type": kind, ...fields}`` and a newline.

    A value JSON cannot hold (in a result's details) is sent as its ``repr``.
    """
    return json.dumps({"type": kind, **fields}, ensure_ascii=False, default=repr).encode() + b"\n"


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


def parse_line(line: str) -> dict[str, Any]:
    """One line of the response stream as an object with a string ``type``."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise WireError(f"a line is not JSON ({exc}): {line[:200]!r}") from None
    if not isinstance(data, dict) or not isinstance(data.get("type"), str):
        raise WireError(f"a line is not an object with a 'type': {line[:200]!r}")
    return data
