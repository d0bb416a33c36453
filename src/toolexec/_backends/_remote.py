"""``RemoteBackend``: run an admitted call on a remote worker over HTTP.

Theory of operation. The executor admits the call here, on the host, as
for any backend: order, caps and the one-result rule hold whatever the
worker does. ``run`` then sends the call (``_remote_wire``) and reads the
worker's stream of JSON lines: progress and updates are re-emitted through
the call's context, heartbeats only keep the read deadline from firing,
and the one ``result`` line becomes the call's output (or a ``ToolError``
with the worker's error class).

Every failure names the worker and becomes a ``ToolError``, hence an error
result: a refused or timed-out connection, a refused token, a worker that
went silent past ``read_timeout``, a connection that closed before the
result (the worker died), and anything that does not follow the protocol.

Nothing the worker sends is trusted to be small. The body is read raw (no
content decoding, so nothing is inflated), cut into lines by ``LineReader``
(linear, at most ``max_line_bytes`` held), each line decoded within the
bounds of ``_core._json_bounds``; a refusal's body is read only to its first
2,000 bytes, and what follows the result at most to ``_DRAIN_LIMIT``.

When the call is cancelled (its deadline, a host cancel), the connection
is closed, which cancels the call on the worker, and a cancel request is
sent under ``ctx.cleanup_scope()``: it returns once the worker's call has
stopped, so a cancelled result on the host means the worker's tool is no
longer running (unless the grace period ran out first).
"""

from __future__ import annotations

import contextlib
import math
import os
import uuid
from typing import TYPE_CHECKING, Any, NoReturn

import attrs
import trio

from .._core._errors import ToolError
from .._core._json_bounds import loads_bounded
from .._core._types import ErrorClass, block_text
from ._remote_wire import (
    CALLS_PATH,
    MAX_LINE_BYTES,
    TOKEN_ENV,
    CallRequest,
    LineReader,
    WireError,
    decode_output,
    parse_line,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from types import TracebackType

    import httpx2

    from .._core._tool_protocol import Tool, ToolContext
    from .._core._types import ToolOutput

__all__ = ["RemoteBackend"]

#: How much a worker may send after the result (or a malformed line) before it is cut off.
_DRAIN_LIMIT = 64 * 1024
#: How much of a refusal's body is read (and quoted).
_REFUSAL_LIMIT = 2000


def _seconds(_inst: object, attr: attrs.Attribute[Any], value: object) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not value > 0
    ):
        raise ValueError(
            f"RemoteBackend {attr.name} must be a positive number of seconds, got {value!r}"
        )


def _url(_inst: object, _attr: object, value: str) -> None:
    if not isinstance(value, str) or not value.startswith(("http://", "https://")):
        raise ValueError(
            f"RemoteBackend url must be the worker's http:// or https:// base URL "
            f"(as 'toolexec serve --http' prints it), got {value!r}"
        )


@attrs.define(eq=False)
class RemoteBackend:
    """Runs calls on a remote worker (``toolexec serve --http HOST:PORT``).

    Open it for as long as calls may be sent (it holds one HTTP connection
    pool), and give it to the executor under a sandbox name; a policy's
    grant sends calls there::

        class OnTheWorker:
            def decide(self, definition, arguments, agent_path):
                return Allow(ExecutionGrant(sandbox="remote"))

        async with RemoteBackend("http://10.0.0.5:8750", token=token) as remote:
            executor = ToolExecutor(
                registry, policy=OnTheWorker(), backends={"remote": remote}
            )
            outcome = await executor.execute_batch(calls)

    The host's registry must hold the tools too (the executor validates
    arguments and routes calls by their definitions); the worker runs its
    own copy, found by name, under its own policy.

    Args:
        url: the worker's base URL.
        token: the shared secret; by default the ``TOOLEXEC_WORKER_TOKEN``
            environment variable.
        name: how error results name the worker (default: its URL).
        connect_timeout: seconds to connect (and to send a request).
        read_timeout: seconds the worker may stay silent during a call; it
            sends a heartbeat every few seconds while a call runs, so this
            only fires on a worker that hangs or a network that drops.
        max_connections: open connections at most; calls beyond wait for
            one (the executor's caps usually bound them first).
        max_line_bytes: the longest line of a response read (``MAX_LINE_BYTES``,
            1 MiB, by default): a result or update longer than this ends the
            call with an error result naming the worker. Raise it for tools
            whose output is larger.
    """

    url: str = attrs.field(validator=_url)
    token: str | None = attrs.field(default=None, repr=False)
    name: str = ""
    connect_timeout: float = attrs.field(default=5.0, validator=_seconds)
    read_timeout: float = attrs.field(default=30.0, validator=_seconds)
    max_connections: int = 100
    max_line_bytes: int = MAX_LINE_BYTES
    _client: httpx2.AsyncClient | None = attrs.field(default=None, init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        self.url = self.url.rstrip("/")
        token = self.token if self.token is not None else os.environ.get(TOKEN_ENV)
        if not token:
            raise ValueError(
                f"RemoteBackend for {self.url} needs the worker's token: pass token=... "
                f"or set {TOKEN_ENV}"
            )
        self.token = token.strip()
        if not self.name:
            self.name = self.url
        if isinstance(self.max_connections, bool) or not (
            isinstance(self.max_connections, int) and self.max_connections > 0
        ):
            raise ValueError(
                "RemoteBackend max_connections must be a positive int, "
                f"got {self.max_connections!r}"
            )
        if isinstance(self.max_line_bytes, bool) or not (
            isinstance(self.max_line_bytes, int) and self.max_line_bytes > 0
        ):
            raise ValueError(
                f"RemoteBackend max_line_bytes must be a positive int, got {self.max_line_bytes!r}"
            )

    async def __aenter__(self) -> RemoteBackend:
        """Open the connection pool."""
        try:
            import httpx2
        except ImportError as exc:
            raise ImportError(
                f"RemoteBackend needs the remote extra ({exc}); install it: "
                "pip install 'toolexec[remote]'"
            ) from None
        if self._client is not None:
            raise RuntimeError(f"RemoteBackend for {self.name} is already open")
        self._client = httpx2.AsyncClient(
            base_url=self.url,
            # The body is read raw: no compressed response, whose inflating has no bound.
            headers={"authorization": f"Bearer {self.token}", "accept-encoding": "identity"},
            timeout=httpx2.Timeout(
                connect=self.connect_timeout,
                read=self.read_timeout,
                write=self.connect_timeout,
                pool=None,  # waiting for a free connection: the call's own deadline bounds it
            ),
            limits=httpx2.Limits(
                max_connections=self.max_connections,
                max_keepalive_connections=self.max_connections,
                keepalive_expiry=30.0,
            ),
            trust_env=False,
        )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close the connection pool."""
        client, self._client = self._client, None
        if client is not None:
            with trio.CancelScope(shield=True):
                await client.aclose()

    async def run(self, tool: Tool, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        """Send the call to the worker and return the output it sends back."""
        client = self._client
        if client is None:
            raise ToolError(
                f"remote worker {self.name}: the backend is not open (use 'async with "
                "RemoteBackend(...)'); the call was not sent"
            )
        deadline = trio.current_effective_deadline()
        request = CallRequest(
            id=uuid.uuid4().hex,
            call_id=ctx.call_id,
            tool=ctx.tool_name,
            arguments=arguments,
            timeout=None if math.isinf(deadline) else max(deadline - trio.current_time(), 1e-3),
            agent_path=ctx.agent_path,
            session_id=ctx.session_id,
        )
        try:
            return await self._exchange(client, request, ctx)
        except trio.Cancelled:
            with ctx.cleanup_scope():
                await self._cancel(client, request.id)
            raise

    async def _exchange(
        self, client: httpx2.AsyncClient, request: CallRequest, ctx: ToolContext
    ) -> ToolOutput:
        import httpx2

        try:
            async with client.stream(
                "POST",
                CALLS_PATH,
                content=request.to_json(),
                headers={"content-type": "application/json"},
            ) as response:
                if response.status_code != 200:
                    await self._refused(response)
                return await self._read(response, ctx)
        except httpx2.ConnectTimeout:
            self._fail(f"could not connect within {self.connect_timeout:g}s", ErrorClass.TIMEOUT)
        except httpx2.ReadTimeout:
            self._fail(
                f"sent nothing for {self.read_timeout:g}s (no heartbeat); the call was abandoned",
                ErrorClass.TIMEOUT,
            )
        except httpx2.ConnectError as exc:
            self._fail(f"could not connect: {exc or 'connection refused'}")
        except (httpx2.RemoteProtocolError, httpx2.ReadError) as exc:
            self._fail(
                f"closed the connection before sending the call's result (did the worker "
                f"stop?): {exc or type(exc).__name__}"
            )
        except httpx2.HTTPError as exc:
            self._fail(f"failed: {type(exc).__name__}: {exc}")
        except WireError as exc:
            self._fail(f"sent a malformed response: {exc}")

    async def _read(self, response: httpx2.Response, ctx: ToolContext) -> ToolOutput:
        # The stream is read on after the result or a malformed line, up to _DRAIN_LIMIT
        # bytes: the worker ends it right after the result, and a body read to its end
        # leaves the connection for the next call. A peer that goes on sending is cut off.
        reader = LineReader(self.max_line_bytes)
        found: ToolOutput | ToolError | WireError | None = None
        drained = 0

        def take(chunk: bytes) -> bool:
            nonlocal found, drained
            if found is None:
                found = self._lines(reader, chunk, ctx)
                return False
            drained += len(chunk)
            return drained > _DRAIN_LIMIT

        await _read_raw(response, take)
        if isinstance(found, BaseException):
            raise found
        if found is None:
            reader.close()
            raise WireError("the response ended without the call's result (did the worker stop?)")
        return found

    def _lines(
        self, reader: LineReader, chunk: bytes, ctx: ToolContext
    ) -> ToolOutput | ToolError | WireError | None:
        """Act on the lines ``chunk`` completes; the result, or the error, once there is one."""
        try:
            for line in reader.feed(chunk):
                found = self._line(line, ctx)
                if found is not None:
                    return found
        except (ToolError, WireError) as exc:
            return exc
        return None

    def _line(self, line: bytes, ctx: ToolContext) -> ToolOutput | None:
        """Act on one line of the stream; the call's output if it is the result."""
        if not line.strip():
            return None
        data = parse_line(line)
        kind = data["type"]
        if kind == "result":
            output, error_class = decode_output(data.get("result"))
            details = {**output.details, "worker": self.name}
            if output.is_error:
                raise ToolError(
                    "\n".join(map(block_text, output.content))
                    or f"remote worker {self.name}: the call failed",
                    error_class=error_class or ErrorClass.EXECUTION_ERROR,
                    details=details,
                )
            return attrs.evolve(output, details=details)
        if kind == "progress":
            progress = data.get("message")
            if not isinstance(progress, str):
                raise WireError(f"a progress line has no text message: {line[:200]!r}")
            ctx.report_progress(progress)
        elif kind == "update":
            ctx.update(decode_output(data.get("output"))[0])
        elif kind != "heartbeat":
            raise WireError(f"unknown line type {kind!r}")
        return None

    async def _refused(self, response: httpx2.Response) -> NoReturn:
        body = (await _head(response)).decode("utf-8", errors="replace")
        status = response.status_code
        try:
            reason = str(parse_error(body))
        except ValueError:
            reason = body or response.reason_phrase
        if status == 401:
            self._fail(
                f"refused the token (HTTP 401: {reason}); give the backend the token the "
                "worker was started with",
                ErrorClass.PERMISSION_DENIED,
            )
        self._fail(f"refused the call (HTTP {status}: {reason})")

    async def _cancel(self, client: httpx2.AsyncClient, request_id: str) -> None:
        """Ask the worker to stop the call and wait until it has; errors are moot."""
        import httpx2

        # On failure, the closed connection has cancelled the call already (if the worker lives).
        with contextlib.suppress(httpx2.HTTPError):
            await client.post(f"{CALLS_PATH}/{request_id}/cancel")

    def _fail(self, what: str, error_class: ErrorClass = ErrorClass.EXECUTION_ERROR) -> NoReturn:
        raise ToolError(
            f"remote worker {self.name} {what}",
            error_class=error_class,
            details={"worker": self.name},
        )


async def _read_raw(response: httpx2.Response, take: Callable[[bytes], bool]) -> None:
    """Give the body's raw chunks to ``take`` until it has had enough (returns true).

    Leaving the loop early would leave generators beneath the response
    unclosed (httpx2 does not close them); the response is closed instead,
    so that its next read fails and every one of them ends.
    """
    import httpx2

    stopped = False
    try:
        async with contextlib.aclosing(response.aiter_raw()) as chunks:
            async for chunk in chunks:
                if not stopped and take(chunk):
                    stopped = True
                    await response.aclose()
    except httpx2.HTTPError:
        if not stopped:
            raise


async def _head(response: httpx2.Response) -> bytes:
    """The first ``_REFUSAL_LIMIT`` bytes of a body, the rest left unread."""
    head = bytearray()

    def take(chunk: bytes) -> bool:
        head.extend(chunk[: _REFUSAL_LIMIT - len(head)])
        return len(head) >= _REFUSAL_LIMIT

    await _read_raw(response, take)
    return bytes(head)


def parse_error(body: str) -> str:
    """The ``error`` text of a worker's JSON refusal; ``ValueError`` if it has none."""
    data = loads_bounded(body)
    error = data.get("error") if isinstance(data, dict) else None
    if not isinstance(error, str):
        raise ValueError("no error text")
    return error
