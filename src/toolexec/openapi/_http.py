"""One call of an operation: the request, the response, and every failure as a result.

Theory of operation. The request is filled in from the operation's plan
(``_operations.Operation``): path parameters are percent-encoded as whole
segments (``a/b`` and ``..`` cannot change the path), query and header
values rendered as text (``true``/``false`` for booleans, arrays repeated or
comma-joined), the credentials added last. The body is streamed up to the
source's cap. Every failure (HTTP 3xx-5xx, a timeout, a refused connection,
a malformed response, a body over the cap) raises ``ToolError`` naming the
operation and the server; the executor turns it into an error result.
Every text that leaves (content, error messages) passes through the
source's redaction, so a secret a server echoes back is never shown.
Cancellation from outside is never caught: only this call's own deadline
(``trio.move_on_after``) is.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote

import httpx2
import trio

from .._core._errors import ToolError
from .._core._types import ErrorClass, TextContent, ToolOutput
from ._operations import Param

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ._operations import Operation

__all__ = ["ERROR_BODY_LIMIT", "Call", "send"]

#: How much of an error response's body an error result quotes, in bytes.
ERROR_BODY_LIMIT = 2000


class Call(Protocol):
    """What ``send`` needs of the source; ``OpenAPISource`` provides it."""

    @property
    def client(self) -> httpx2.AsyncClient:
        """The source's one HTTP client."""
        ...

    server: str
    timeout: float
    connect_timeout: float
    max_response_bytes: int

    def redact(self, text: str) -> str:
        """``text`` with every secret replaced."""
        ...


def _text(value: Any) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    return "" if value is None else str(value)


def _segment(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(_segment(v) for v in value)
    text = quote(_text(value), safe="")
    # "." and ".." are dot segments, which URL normalisation would resolve.
    return text.replace(".", "%2E") if text in (".", "..") else text


def _url(op: Operation, arguments: Mapping[str, Any]) -> str:
    parts: list[str] = []
    for piece in op.path:
        if isinstance(piece, Param):
            segment = _segment(arguments[piece.argument])
            if not segment:
                raise ToolError(
                    f"path parameter {piece.name!r} must not be empty",
                    error_class=ErrorClass.INVALID_ARGUMENTS,
                )
            parts.append(segment)
        else:
            parts.append(piece)
    return "".join(parts)


def _fields(
    op: Operation, arguments: Mapping[str, Any]
) -> tuple[list[tuple[str, str]], dict[str, str], list[str]]:
    query: list[tuple[str, str]] = []
    headers: dict[str, str] = {}
    cookies: list[str] = []
    for param in op.params:
        if param.argument not in arguments:
            continue
        value = arguments[param.argument]
        values = value if isinstance(value, list) else [value]
        if param.location == "query" and param.explode:
            query.extend((param.name, _text(v)) for v in values)
            continue
        text = ",".join(map(_text, values))
        if param.location == "query":
            query.append((param.name, text))
        elif param.location == "header":
            headers[param.name] = text
        else:
            cookies.append(f"{param.name}={text}")
    return query, headers, cookies


def build_request(source: Call, op: Operation, arguments: Mapping[str, Any]) -> httpx2.Request:
    """The request for one call, credentials included."""
    query, headers, cookies = _fields(op, arguments)
    credentials = op.credentials
    query.extend(credentials.query)
    headers.update(credentials.headers)
    cookies.extend(f"{k}={v}" for k, v in credentials.cookies)
    if cookies:
        headers["Cookie"] = "; ".join(cookies)
    return source.client.build_request(
        op.method,
        _url(op, arguments),
        params=tuple(query) or None,
        headers=headers or None,
        json=arguments["body"] if op.body and "body" in arguments else None,
    )


async def send(source: Call, op: Operation, arguments: Mapping[str, Any]) -> ToolOutput:
    """Make one call; return its output or raise ``ToolError`` (see the module docstring)."""
    request = build_request(source, op, arguments)
    where = f"operation {op.label!r} on server {source.server}"
    with trio.move_on_after(source.timeout):
        try:
            response = await source.client.send(request, stream=True)
            try:
                return await _output(source, response, where)
            finally:
                await response.aclose()
        except httpx2.ConnectTimeout:
            # The only timeout of the client's that can come before the call's
            # own deadline: the others start later and are no shorter.
            raise ToolError(
                f"{where} failed: could not connect within {source.connect_timeout:g}s",
                error_class=ErrorClass.TIMEOUT,
            ) from None
        except httpx2.HTTPError as exc:
            raise ToolError(source.redact(f"{where} failed: {_describe(exc)}")) from None
    raise ToolError(f"{where} timed out after {source.timeout:g}s", error_class=ErrorClass.TIMEOUT)


def _describe(exc: httpx2.HTTPError) -> str:
    if isinstance(exc, httpx2.ConnectError):
        return f"could not connect: {exc}"
    if isinstance(exc, httpx2.RemoteProtocolError | httpx2.DecodingError):
        return f"malformed response: {exc}"
    return f"{type(exc).__name__}: {exc}"


async def _output(source: Call, response: httpx2.Response, where: str) -> ToolOutput:
    status = response.status_code
    media = response.headers.get("content-type", "").split(";")[0].strip().lower()
    details = {"http_status": status, "content_type": media}
    if status >= 300:
        body, _ = await _read(response, ERROR_BODY_LIMIT)
        text = source.redact(body.decode(response.encoding or "utf-8", errors="replace"))
        quoted = f": {text}" if text else ""
        raise ToolError(
            f"{where} answered HTTP {status} {response.reason_phrase}{quoted}", details=details
        )
    body, over = await _read(response, source.max_response_bytes)
    if over:
        raise ToolError(
            f"{where}: the response body is larger than the cap of "
            f"{source.max_response_bytes} bytes ({media or 'no content type'}); nothing returned",
            details=details,
        )
    return ToolOutput((TextContent(_content(source, body, media, response)),), details)


def _content(source: Call, body: bytes, media: str, response: httpx2.Response) -> str:
    if not body:
        return f"HTTP {response.status_code} {response.reason_phrase}, no content"
    if (
        media.startswith("text/")
        or media == "application/json"
        or media.endswith(("+json", "/xml", "+xml", "/yaml", "/x-yaml"))
    ):
        return source.redact(body.decode(response.encoding or "utf-8", errors="replace"))
    return f"[{media or 'untyped'} response, {len(body)} bytes, not shown]"


async def _read(response: httpx2.Response, limit: int) -> tuple[bytes, bool]:
    """At most ``limit`` bytes of the body, and whether there was more."""
    chunks: list[bytes] = []
    size = 0
    async with contextlib.aclosing(response.aiter_bytes()) as stream:
        async for chunk in stream:
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                return b"".join(chunks)[:limit], True
    return b"".join(chunks), False
