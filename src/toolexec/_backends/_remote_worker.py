"""A remote worker: an HTTP service running the calls ``RemoteBackend`` sends it.

Theory of operation. ``serve_worker`` serves a small ASGI application with
hypercorn's trio worker on this trio loop. Each ``POST /v1/calls`` is
checked against the shared token (constant-time), parsed, and run as a
one-call batch through the worker's own ``ToolExecutor``: its registry
(only the tools the worker was given), its policy, its caps. While the call
runs the response streams JSON lines (``_remote_wire``): the call's
progress and updates, a heartbeat every ``heartbeat`` seconds (so the host's
read deadline only fires on a worker that went silent), then the result.

A call stops early in three ways, each through ``Batch.cancel`` (so the
call still gets its one ``cancelled`` result and leaves nothing running):
the host's explicit cancel request, the host's connection closing, and
the deadline the host sent with the call (so a host that vanished without
closing its connection does not leave the call running forever).

The worker never asks for approval: the host asked before sending the
call. A worker policy's ``Ask`` therefore refuses the call.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import math
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import attrs
import trio

from .._core._events import CallProgress, CallUpdate
from .._core._executor import ToolExecutor
from .._core._limits import ConcurrencyConfig
from .._core._types import ToolCall
from .._gate._policy import AllowAll
from ._asgi import lifespan, listening_socket
from ._remote_wire import (
    CALLS_PATH,
    NDJSON,
    CallRequest,
    WireError,
    encode_line,
    encode_output,
    parse_request,
)

if TYPE_CHECKING:
    from .._core._batch import Batch
    from .._core._events import Event
    from .._core._registry import ToolRegistry
    from .._core._types import PathResolver, ToolResult
    from .._gate._policy import ToolPolicy

__all__ = ["MAX_REQUEST_BYTES", "WorkerApp", "check_token", "serve_worker"]

_log = logging.getLogger("toolexec.remote.worker")

#: The largest request body a worker reads, in bytes.
MAX_REQUEST_BYTES = 8 * 1024 * 1024
#: The shortest token a worker accepts.
MIN_TOKEN_LENGTH = 16

Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


@attrs.define(eq=False)
class _Running:
    """A call in progress on the worker, for its cancel request to find."""

    request: CallRequest
    batch: Batch
    done: trio.Event = attrs.field(factory=trio.Event)
    stopped_by: str = ""

    def stop(self, why: str) -> None:
        if not self.done.is_set() and not self.stopped_by:
            self.stopped_by = why
            _log.info("call %s (%s) cancelled: %s", self.request.id, self.request.tool, why)
        self.batch.cancel()


def check_token(token: str) -> str:
    """``token`` if it is long enough to be a shared secret; ``ValueError`` if not."""
    if not isinstance(token, str) or len(token.strip()) < MIN_TOKEN_LENGTH:
        raise ValueError(
            f"the worker token must be at least {MIN_TOKEN_LENGTH} characters; make one with "
            "python -c 'import secrets; print(secrets.token_urlsafe(32))'"
        )
    return token.strip()


@attrs.define(eq=False)
class _Progress:
    """The worker executor's sink: a call's progress and updates go to its response."""

    streams: dict[str, trio.MemorySendChannel[tuple[bytes, bool]]] = attrs.field(factory=dict)

    def emit(self, event: Event) -> None:
        """Queue a progress or update line for the response of the event's batch."""
        if isinstance(event, CallProgress):
            line = encode_line("progress", message=event.message)
        elif isinstance(event, CallUpdate):
            partial = event.partial
            output = encode_output(partial.content, partial.details, partial.is_error)
            line = encode_line("update", output=output)
        else:
            return
        stream = self.streams.get(event.batch_id)
        if stream is not None:
            with contextlib.suppress(trio.WouldBlock, trio.BrokenResourceError):
                stream.send_nowait((line, False))  # a slow reader loses progress, not results


@attrs.define(eq=False)
class WorkerApp:
    """The worker's ASGI application (served by ``serve_worker``)."""

    executor: ToolExecutor
    progress: _Progress
    token: bytes
    heartbeat: float = 5.0
    _running: dict[str, _Running] = attrs.field(factory=dict, init=False)

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        """Serve one ASGI connection scope."""
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        method, path = scope["method"], scope["path"]
        if not self._authorized(scope):
            _log.warning("refused %s %s from %s: bad or missing token", method, path, _peer(scope))
            await _reply(
                send, 401, "missing or wrong bearer token", [(b"www-authenticate", b"Bearer")]
            )
            return
        if path == CALLS_PATH:
            if method != "POST":
                await _reply(send, 405, f"{CALLS_PATH} takes POST, not {method}")
                return
            await self._call(receive, send)
            return
        if path.startswith(CALLS_PATH + "/") and path.endswith("/cancel"):
            await self._cancel(path[len(CALLS_PATH) + 1 : -len("/cancel")], send)
            return
        await _reply(send, 404, f"no such endpoint {path!r}; a worker serves POST {CALLS_PATH}")

    def _authorized(self, scope: Message) -> bool:
        given = b""
        for name, value in scope["headers"]:
            if name == b"authorization":
                given = value
        scheme, _, credential = given.partition(b" ")
        # Compared in constant time, whatever the scheme, so timing tells nothing.
        good = hmac.compare_digest(credential.strip(), self.token)
        return good and scheme.lower() == b"bearer"

    async def _call(self, receive: Receive, send: Send) -> None:
        body = await _read_body(receive)
        if body is None:
            await _reply(send, 413, f"the request body is over {MAX_REQUEST_BYTES} bytes")
            return
        try:
            request = parse_request(body)
        except WireError as exc:
            await _reply(send, 400, str(exc))
            return
        if request.id in self._running:
            await _reply(send, 409, f"a call with request id {request.id!r} is already running")
            return
        call = ToolCall(request.call_id, request.tool, request.arguments)
        batch = self.executor.prepare([call])
        running = _Running(request, batch)
        lines, out = trio.open_memory_channel[tuple[bytes, bool]](1000)
        self._running[request.id] = running
        self.progress.streams[batch.id] = lines
        _log.info("call %s (%s, call id %s) started", request.id, request.tool, request.call_id)
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", NDJSON.encode())],
                }
            )
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._watch, receive, running)
                nursery.start_soon(self._beat, lines)
                if request.timeout is not None:
                    nursery.start_soon(_stop_after, running, request.timeout)
                nursery.start_soon(self._run, running, lines)
                await _pump(out, send)
                nursery.cancel_scope.cancel()
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            del self._running[request.id]
            del self.progress.streams[batch.id]
            running.done.set()

    async def _run(
        self, running: _Running, lines: trio.MemorySendChannel[tuple[bytes, bool]]
    ) -> None:
        outcome = await running.batch.run()
        result = outcome.results[0]
        _log.info("call %s (%s) %s", running.request.id, running.request.tool, _verdict(result))
        output = encode_output(result.content, result.details, result.is_error, result.error_class)
        await lines.send((encode_line("result", result=output), True))

    async def _watch(self, receive: Receive, running: _Running) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        running.stop("the host closed the connection")

    async def _beat(self, lines: trio.MemorySendChannel[tuple[bytes, bool]]) -> None:
        beat = (encode_line("heartbeat"), False)
        while True:
            await trio.sleep(self.heartbeat)
            await lines.send(beat)

    async def _cancel(self, request_id: str, send: Send) -> None:
        running = self._running.get(request_id)
        if running is None:
            await _reply(send, 200, None, found=False, stopped=True)
            return
        running.stop("the host asked to cancel it")
        await running.done.wait()
        await _reply(send, 200, None, found=True, stopped=True)


async def _pump(out: trio.MemoryReceiveChannel[tuple[bytes, bool]], send: Send) -> None:
    """Write lines to the response until the result line (the last) has gone."""
    async for line, last in out:
        await send({"type": "http.response.body", "body": line, "more_body": True})
        if last:
            return


async def _stop_after(running: _Running, seconds: float) -> None:
    await trio.sleep(seconds)
    running.stop(f"the host's deadline ({seconds:g}s) passed")


def _verdict(result: ToolResult) -> str:
    if not result.is_error:
        return "finished ok"
    assert result.error_class is not None
    return f"finished with an error ({result.error_class.value})"


def _peer(scope: Message) -> str:
    client = scope.get("client")
    return f"{client[0]}:{client[1]}" if client else "an unknown peer"


async def _read_body(receive: Receive) -> bytes | None:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b""
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_REQUEST_BYTES:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _reply(
    send: Send,
    status: int,
    error: str | None,
    headers: list[tuple[bytes, bytes]] | None = None,
    **fields: Any,
) -> None:
    body = json.dumps({"error": error} if error is not None else fields).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), *(headers or [])],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


def _positive(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return float(value)


async def serve_worker(
    registry: ToolRegistry,
    *,
    token: str,
    host: str = "127.0.0.1",
    port: int = 0,
    policy: ToolPolicy | None = None,
    config: ConcurrencyConfig | None = None,
    grace_period: float = 5.0,
    heartbeat: float = 5.0,
    workspace: PathResolver | None = None,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``registry``'s tools to ``RemoteBackend`` hosts over HTTP until cancelled.

    Start it in a nursery to learn its address (``port=0`` picks a free
    port)::

        url = await nursery.start(partial(serve_worker, registry, token=token))
        async with RemoteBackend(url, token=token) as remote: ...

    Every request must carry ``token`` as a bearer credential. Calls run
    through the worker's own executor: only ``registry``'s tools, under
    ``policy`` (``AllowAll()`` by default) and ``config``'s caps; the
    worker never asks for approval (the host does, before sending).
    ``toolexec serve --http HOST:PORT`` runs this from the command line.

    Args:
        registry: the tools the worker serves, and no others.
        token: the shared secret (at least 16 characters).
        host: the address to listen on (keep ``127.0.0.1`` unless the
            network between host and worker is private: the service
            speaks plain HTTP).
        port: the port; ``0`` picks a free one.
        policy: the worker's own policy.
        config: the worker's own pool widths and per-tool caps.
        grace_period: seconds a cancelled call gets for its cleanup.
        heartbeat: seconds between heartbeat lines while a call runs;
            keep it well under the hosts' ``read_timeout``.
        workspace: given to the tools in their context (the built-in file
            tools carry their own).
        task_status: receives the base URL (``http://127.0.0.1:PORT``) once
            the worker listens.

    Raises:
        ValueError: a short token or a bad number.
        ImportError: the ``remote`` extra (hypercorn) is not installed.
    """
    from hypercorn.config import Config
    from hypercorn.trio import serve

    secret = check_token(token).encode()
    heartbeat = _positive("heartbeat", heartbeat)
    progress = _Progress()
    executor = ToolExecutor(
        registry,
        config=config if config is not None else ConcurrencyConfig(),
        policy=policy if policy is not None else AllowAll(),
        sinks=[progress],
        grace_period=grace_period,
        workspace=workspace,
    )
    app = WorkerApp(executor, progress, secret, heartbeat)
    settings = Config()
    settings.bind = [f"fd://{listening_socket(host, port).detach()}"]
    settings.errorlog = logging.getLogger("toolexec.remote.http")
    settings.keep_alive_timeout = 60.0
    settings.graceful_timeout = grace_period
    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(serve, app, settings)
        _log.info(
            "worker listening on %s with tools: %s; policy: %s; approval: none (the worker "
            "never asks)",
            binds[0],
            ", ".join(registry.names()),
            type(executor.policy).__name__,
        )
        task_status.started(binds[0])
