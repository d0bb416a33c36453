"""Remote workers: ``RemoteBackend`` calling ``toolexec serve --http`` processes on 127.0.0.1.

Each worker is a real ``toolexec serve`` process serving ``remote_tools``; it
prints its address on stdout and logs to a file the tests read. The host
routes every call to it with a policy granting ``sandbox="remote"``.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import logging
import math
import os
import signal
import socket
import subprocess
import sys
import tracemalloc
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import httpx2
import pytest
import trio

import remote_tools
from toolexec import (
    Allow,
    ConcurrencyConfig,
    ErrorClass,
    ImageContent,
    JsonContent,
    SideEffects,
    TextContent,
    ToolCall,
    ToolContext,
    ToolDefinition,
    ToolExecutor,
    ToolOutput,
    ToolRegistry,
    ToolResult,
)
from toolexec._backends._remote_wire import (
    CallRequest,
    WireError,
    decode_output,
    encode_line,
    encode_output,
    parse_line,
)
from toolexec._cli import _remote as _remote_cli
from toolexec._cli._commands import load_policy
from toolexec._cli._main import _parser, main
from toolexec._proc._process import open_group_process, reap
from toolexec.backends import RemoteBackend, serve_worker
from toolexec.events import CallbackSink, CallProgress, CallUpdate, Event
from toolexec.policy import ExecutionGrant, RulePolicy

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Mapping

# Slow (tests/README.md): real worker processes.
pytestmark = pytest.mark.slow

TESTS = Path(__file__).resolve().parent
TOKEN = "test-token-0123456789abcdef"
#: A hang guard for real processes, never a timing claim.
GUARD = 60


@attrs.define
class Worker:
    url: str
    process: trio.Process
    log: Path

    def log_text(self) -> str:
        return self.log.read_text()


@asynccontextmanager
async def worker(tmp_path: Path, *extra: str, token: str = TOKEN) -> AsyncIterator[Worker]:
    """A ``toolexec serve --http 127.0.0.1:0`` process, ended with its group."""
    log = tmp_path / f"worker-{len(list(tmp_path.glob('worker-*')))}.log"
    env = {**os.environ, "TOOLEXEC_WORKER_TOKEN": token, "PYTHONPATH": str(TESTS)}
    argv = [sys.executable, "-m", "toolexec", "serve", "--http", "127.0.0.1:0"]
    argv += ["--tools", "remote_tools:TOOLS", *extra]
    with log.open("wb") as log_file:
        process = await open_group_process(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log_file.fileno(),
            cwd=str(tmp_path),
            env=env,
        )
    try:
        assert process.stdout is not None
        line = b""
        with trio.fail_after(GUARD):
            while not line.endswith(b"\n"):
                chunk = await process.stdout.receive_some(1)
                assert chunk, f"the worker exited before listening: {log.read_text()}"
                line += chunk
        prefix = "toolexec worker listening on "
        text = line.decode()
        assert text.startswith(prefix), text
        yield Worker(text[len(prefix) :].strip(), process, log)
    finally:
        await reap(process, 5)


class ToRemote:
    """A policy sending every call to the backend named ``remote``."""

    def decide(
        self, definition: ToolDefinition, arguments: Mapping[str, Any], agent_path: str
    ) -> Allow:
        return Allow(ExecutionGrant(sandbox="remote"))


def remote_policy() -> ToRemote:
    return ToRemote()


def registry() -> ToolRegistry:
    reg = ToolRegistry()
    for tool in remote_tools.TOOLS:
        reg.register(tool)
    return reg


def summary(results: tuple[ToolResult, ...]) -> list[tuple[Any, ...]]:
    return [(r.call_id, r.tool_name, r.text, r.is_error, r.error_class) for r in results]


MIXED = [
    ToolCall("c0", "put", {"key": "a", "value": "1"}),
    ToolCall("c1", "get", {"key": "a"}),
    ToolCall("c2", "peek", {"key": "a"}),
    ToolCall("c3", "peek", {"key": "b"}),
    ToolCall("c4", "put", {"key": "a", "value": "2"}),
    ToolCall("c5", "put", {"key": "b", "value": "3"}),
    ToolCall("c6", "peek", {"key": "a"}),
    ToolCall("c7", "get", {"key": "b"}),
    ToolCall("c8", "peek", {"key": "b"}),
    ToolCall("c9", "fail", {"reason": "no such thing"}),
    ToolCall("c10", "missing", {}),
    ToolCall("c11", "get", {"key": 5}),
    ToolCall("c12", "put", {"key": "a", "value": "4"}),
    ToolCall("c13", "get", {"key": "a"}),
]
CAPS = ConcurrencyConfig(per_tool={"peek": 2})


async def test_a_mixed_batch_gives_the_hosts_results_order_and_caps(tmp_path: Path) -> None:
    remote_tools.reset()
    on_host = await ToolExecutor(registry(), config=CAPS).execute_batch(MIXED)
    progress: list[str] = []

    def seen(event: Event) -> None:
        if isinstance(event, CallProgress):
            progress.append(f"{event.call_id}: {event.message}")
        elif isinstance(event, CallUpdate):
            [block] = event.partial.content
            assert isinstance(block, TextContent)
            assert event.partial.details == {"key": block.text[-1]}
            progress.append(f"{event.call_id}: {block.text}")

    async with worker(tmp_path) as w, RemoteBackend(w.url, token=TOKEN) as remote:
        executor = ToolExecutor(
            registry(),
            config=CAPS,
            policy=remote_policy(),
            backends={"remote": remote},
            sinks=[CallbackSink(seen)],
        )
        with trio.fail_after(GUARD):
            outcome = await executor.execute_batch(MIXED)
        log = w.log_text()
    assert summary(outcome.results) == summary(on_host.results)
    texts = [r.text for r in outcome.results]
    # Reads see exactly the writes before them; writes ran alone; peeks overlapped in twos.
    assert (texts[1], texts[7], texts[13]) == ("1", "3", "4")
    assert all("running beside it: nothing" in texts[i] for i in (0, 4, 5, 12))
    assert all("(peeks at once: 2)" in texts[i] for i in (2, 3, 6, 8))
    assert outcome.results[9].error_class is ErrorClass.EXECUTION_ERROR
    assert "no such thing" in texts[9]
    # Unknown tools and bad arguments are refused on the host: nothing is sent.
    assert outcome.results[10].error_class is ErrorClass.NOT_FOUND
    assert outcome.results[11].error_class is ErrorClass.INVALID_ARGUMENTS
    assert all(
        r.details.get("worker") == w.url for r in outcome.results if r.call_id in ("c0", "c1")
    )
    # Progress streamed back from the worker, for each write.
    assert progress == [
        f"{cid}: {what} {key}"
        for cid, key in (("c0", "a"), ("c4", "a"), ("c5", "b"), ("c12", "a"))
        for what in ("writing", "about to write")
    ]
    assert log.count(") started") == 12  # c10 and c11 never left the host


async def test_a_bad_token_is_refused_and_the_worker_applies_its_own_policy(
    tmp_path: Path,
) -> None:
    (tmp_path / "token").write_text(TOKEN + "\n")
    (tmp_path / "worker.toml").write_text(
        '[[rules]]\naction = "deny"\ntool = "put"\nreason = "this worker only reads"\n'
    )
    extra = ("--token-file", "token", "--policy", "worker.toml")
    calls = [ToolCall("c0", "put", {"key": "k", "value": "v"}), ToolCall("c1", "get", {"key": "k"})]
    async with worker(tmp_path, *extra, token="") as w:
        outcomes = []
        for token in ("x" * 32, TOKEN):
            async with RemoteBackend(w.url, token=token) as remote:
                executor = ToolExecutor(
                    registry(), policy=remote_policy(), backends={"remote": remote}
                )
                with trio.fail_after(GUARD):
                    outcomes.append(await executor.execute_batch(calls))
        log = w.log_text()
    refused, served = outcomes
    for result in refused.results:
        assert result.error_class is ErrorClass.PERMISSION_DENIED
        assert f"remote worker {w.url} refused the token" in result.text
    refusals = [
        line for line in log.splitlines() if "refused POST /v1/calls from 127.0.0.1:" in line
    ]
    assert len(refusals) == 2
    assert all(line.endswith(": bad or missing token") for line in refusals)
    # With the right token, the worker's own policy still refuses the write.
    put, get = served.results
    assert put.error_class is ErrorClass.PERMISSION_DENIED
    assert "this worker only reads" in put.text
    assert (get.text, get.is_error) == ("<unset>", False)


async def test_a_host_cancel_stops_the_call_on_the_worker(tmp_path: Path) -> None:
    marker = str(tmp_path / "hold")
    started = trio.Event()

    def seen(event: Event) -> None:
        if isinstance(event, CallProgress) and event.message == "holding":
            started.set()

    async with worker(tmp_path) as w, RemoteBackend(w.url, token=TOKEN) as remote:
        executor = ToolExecutor(
            registry(),
            policy=remote_policy(),
            backends={"remote": remote},
            sinks=[CallbackSink(seen)],
        )
        batch = executor.prepare([ToolCall("c0", "hold", {"marker": marker})])
        async with trio.open_nursery() as nursery:
            outcome: list[Any] = []
            nursery.start_soon(lambda: _into(outcome, batch.run()))
            with trio.fail_after(GUARD):
                await started.wait()
            batch.cancel()
        # The host's result comes once the worker has stopped the call.
        assert Path(marker + ".cancelled").exists()
        log = w.log_text()
    [result] = outcome[0].results
    assert result.error_class is ErrorClass.CANCELLED
    assert "(hold) cancelled: the host" in log
    assert "finished with an error (cancelled)" in log


async def _into(box: list[Any], awaitable: Any) -> None:
    box.append(await awaitable)


async def test_killing_the_worker_mid_call_gives_an_error_result(tmp_path: Path) -> None:
    marker = str(tmp_path / "hold")
    started = trio.Event()

    def seen(event: Event) -> None:
        if isinstance(event, CallProgress):
            started.set()

    async with worker(tmp_path) as w, RemoteBackend(w.url, token=TOKEN) as remote:
        executor = ToolExecutor(
            registry(),
            policy=remote_policy(),
            backends={"remote": remote},
            sinks=[CallbackSink(seen)],
        )
        async with trio.open_nursery() as nursery:
            outcome: list[Any] = []
            batch = executor.prepare([ToolCall("c0", "hold", {"marker": marker})])
            nursery.start_soon(lambda: _into(outcome, batch.run()))
            with trio.fail_after(GUARD):
                await started.wait()
            os.killpg(w.process.pid, signal.SIGKILL)
    [result] = outcome[0].results
    assert result.error_class is ErrorClass.EXECUTION_ERROR
    assert f"remote worker {w.url}" in result.text
    assert "closed the connection before sending the call's result" in result.text


async def test_a_refused_connection_is_an_error_result() -> None:
    sock = trio.socket.socket()
    await sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    url = f"http://127.0.0.1:{port}"
    async with RemoteBackend(url, token=TOKEN) as remote:
        executor = ToolExecutor(registry(), policy=remote_policy(), backends={"remote": remote})
        with trio.fail_after(GUARD):
            outcome = await executor.execute_batch([ToolCall("c0", "get", {"key": "a"})])
    [result] = outcome.results
    assert result.is_error
    assert f"remote worker {url} could not connect" in result.text


async def _receive_request(stream: trio.SocketStream) -> None:
    """Read one whole request (a socket closed with unread input resets, which can
    drop the end of the reply before the host reads it)."""
    request = b""
    while b"\r\n\r\n" not in request:
        request += await stream.receive_some(65536)
    head, _, body = request.partition(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
    while len(body) < length:
        body += await stream.receive_some(65536)


async def _answer(reply: bytes, stream: trio.SocketStream) -> None:
    await _receive_request(stream)
    if reply:
        await stream.send_all(reply)
        await stream.aclose()
    else:
        await trio.sleep_forever()  # say nothing: the host's read deadline must fire


@asynccontextmanager
async def fake_worker(reply: bytes) -> AsyncIterator[str]:
    """A socket server answering every request with ``reply`` (or with silence)."""
    async with trio.open_nursery() as nursery:
        [listener] = await nursery.start(
            partial(trio.serve_tcp, partial(_answer, reply), 0, host="127.0.0.1")
        )
        yield f"http://127.0.0.1:{listener.socket.getsockname()[1]}"
        nursery.cancel_scope.cancel()


def _http(body: bytes, status: str = "200 OK", media: str = "application/x-ndjson") -> bytes:
    head = f"HTTP/1.1 {status}\r\ncontent-type: {media}\r\ncontent-length: {len(body)}\r\n\r\n"
    return head.encode() + body


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (_http(b"this is not json\n"), "sent a malformed response: a line is not JSON"),
        (_http(b'\n{"type": "nonsense"}\n'), "sent a malformed response: unknown line type"),
        (_http(b'{"type": "progress"}\n'), "a progress line has no text message"),
        (_http(b'{"type": "heartbeat"}'), "the response ended inside a line"),
        (_http(b"nope\n" + b"x" * 1000), "sent a malformed response: a line is not JSON"),
        (_http(b"busy", "503 Service Unavailable", "text/plain"), "(HTTP 503: busy)"),
        (_http(b'{"x": 1}', "502 Bad Gateway", "application/json"), '(HTTP 502: {"x": 1})'),
        (_http(b'{"type": "heartbeat"}\n'), "ended without the call's result"),
        (
            _http(b'{"type": "result", "result": {"content": 3}}\n'),
            "sent a malformed response: an output needs",
        ),
        (b"SSH-2.0-OpenSSH\r\n", "closed the connection before sending the call's result"),
        # Hardening III: what a line may hold, and how long it may be.
        (
            _http(b'{"type": "result", "result": {"content": [], "details": {"n": 1e999}}}\n'),
            "a line is not JSON (1e999 is too large for a number; numbers must be finite)",
        ),
        (_http(b'{"type": "heartbeat", "n": -Infinity}\n'), "numbers must be finite"),
        (
            _http(b'{"type": "heartbeat", "x": ' + b"[" * 200 + b"]" * 200 + b"}\n"),
            "a line is too large to decode: the JSON is nested more than 128 levels",
        ),
        (
            _http(b'{"type": "heartbeat", "x": [' + b"[]," * 300_000 + b"[]]}\n"),
            "a line is too large to decode: the JSON holds about",
        ),
        (
            _http(b'{"type": "heartbeat"}\n' + b" " * (1 << 20) + b"x\n"),
            "a line is longer than the host's limit of 1048576 bytes",
        ),
        (
            _http(b'{"error": "busy"}', "503 Service Unavailable", "application/json"),
            "refused the call (HTTP 503: busy)",
        ),
    ],
)
async def test_a_malformed_response_is_an_error_result_naming_the_worker(
    reply: bytes, message: str
) -> None:
    async with fake_worker(reply) as url, RemoteBackend(url, token=TOKEN) as remote:
        executor = ToolExecutor(registry(), policy=remote_policy(), backends={"remote": remote})
        with trio.fail_after(GUARD):
            outcome = await executor.execute_batch([ToolCall("c0", "get", {"key": "a"})])
    [result] = outcome.results
    assert result.is_error
    assert f"remote worker {url}" in result.text
    assert message in result.text


async def _stream(head: bytes, size: int, sent: list[int], stream: trio.SocketStream) -> None:
    """Answer with ``head`` and ``size`` bytes of ``x`` (no newline), until the host hangs up."""
    await _receive_request(stream)
    piece = b"x" * 65536
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        await stream.send_all(head % size)
        while sent[0] < size:
            await stream.send_all(piece[: size - sent[0]])
            sent[0] += min(len(piece), size - sent[0])
    await stream.aclose()


@asynccontextmanager
async def streaming_worker(head: bytes, size: int) -> AsyncIterator[tuple[str, list[int]]]:
    """A socket server answering with ``head`` (``%d``: the size) then ``size`` bytes."""
    sent = [0]
    async with trio.open_nursery() as nursery:
        [listener] = await nursery.start(
            partial(trio.serve_tcp, partial(_stream, head, size, sent), 0, host="127.0.0.1")
        )
        yield f"http://127.0.0.1:{listener.socket.getsockname()[1]}", sent
        nursery.cancel_scope.cancel()


NDJSON_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\ncontent-length: %d\r\n\r\n"


@pytest.mark.parametrize(
    ("head", "message"),
    [
        (NDJSON_HEAD, "a line is longer than the host's limit of 1048576 bytes"),
        (
            b"HTTP/1.1 503 Busy\r\ncontent-type: text/plain\r\ncontent-length: %d\r\n\r\n",
            "refused the call (HTTP 503: xxxx",
        ),
    ],
)
async def test_a_worker_sending_32_mib_without_a_newline_is_cut_off_naming_it(
    head: bytes, message: str
) -> None:
    """Hardening III: the host holds at most ``max_line_bytes`` of a line, and reads on
    only a little past it; before, it held and rescanned all 32 MiB (about 10 s of CPU)."""
    size = 32 << 20
    async with (
        streaming_worker(head, size) as (url, sent),
        RemoteBackend(url, token=TOKEN) as remote,
    ):
        executor = ToolExecutor(registry(), policy=remote_policy(), backends={"remote": remote})
        tracemalloc.start()
        try:
            with trio.fail_after(GUARD):
                outcome = await executor.execute_batch([ToolCall("c0", "get", {"key": "a"})])
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    [result] = outcome.results
    assert result.is_error
    assert result.error_class is ErrorClass.EXECUTION_ERROR
    assert f"remote worker {url} " in result.text
    assert message in result.text
    assert len(result.text) < 3000
    assert result.details["worker"] == url
    # The line limit is 1 MiB: the host held about that much, never the 32 MiB.
    assert peak < 8 << 20, peak
    assert sent[0] < size


@pytest.mark.parametrize(
    "plain",
    [
        encode_line("result", result=encode_output((TextContent("fine"),), {}, False)),
        b"x" * (32 << 20),  # 32 MiB of one line, in 32 KiB: inflated, it would all be read
    ],
)
async def test_a_compressed_response_is_not_inflated(plain: bytes) -> None:
    """The host asks for no content coding and reads the body raw: whatever a gzip body
    holds, it is bytes that are not JSON, never what they would inflate to."""
    body = gzip.compress(plain)
    reply = (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\ncontent-encoding: gzip\r\n"
        + f"content-length: {len(body)}\r\n\r\n".encode()
        + body
    )
    async with fake_worker(reply) as url, RemoteBackend(url, token=TOKEN) as remote:
        executor = ToolExecutor(registry(), policy=remote_policy(), backends={"remote": remote})
        tracemalloc.start()
        try:
            with trio.fail_after(GUARD):
                outcome = await executor.execute_batch([ToolCall("c0", "get", {"key": "a"})])
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    [result] = outcome.results
    assert result.is_error
    assert f"remote worker {url} sent a malformed response" in result.text
    assert peak < 8 << 20, peak


def test_remote_backend_checks_its_line_limit() -> None:
    assert RemoteBackend("http://w:1", token=TOKEN).max_line_bytes == 1 << 20
    assert RemoteBackend("http://w:1", token=TOKEN, max_line_bytes=10).max_line_bytes == 10
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="max_line_bytes must be a positive int"):
            RemoteBackend("http://w:1", token=TOKEN, max_line_bytes=bad)  # type: ignore[arg-type]


async def test_a_silent_worker_hits_the_read_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with fake_worker(b"") as url, RemoteBackend(url, token=TOKEN, read_timeout=3) as remote:
        executor = ToolExecutor(registry(), policy=remote_policy(), backends={"remote": remote})
        outcome = await executor.execute_batch([ToolCall("c0", "get", {"key": "a"})])
    [result] = outcome.results
    assert result.error_class is ErrorClass.TIMEOUT
    assert f"remote worker {url} sent nothing for 3s" in result.text


# -- the worker's service, in this process ------------------------------------------


@asynccontextmanager
async def in_process_worker(**options: Any) -> AsyncIterator[str]:
    async with trio.open_nursery() as nursery:
        url = await nursery.start(partial(serve_worker, registry(), token=TOKEN, **options))
        yield url
        nursery.cancel_scope.cancel()


def _body(request_id: str = "r1", **fields: Any) -> bytes:
    return CallRequest(
        request_id, "c0", fields.pop("tool", "get"), fields.pop("arguments", {"key": "a"}), **fields
    ).to_json()


@attrs.frozen
class _Later:
    """A request body built when its test runs, not at collection: it takes seconds."""

    build: Callable[[], bytes]


@pytest.mark.parametrize(
    ("method", "path", "body", "headers", "status", "error"),
    [
        ("POST", "/v1/calls", _body(), {"authorization": "Basic " + TOKEN}, 401, "bearer token"),
        ("POST", "/v1/calls", _body(), {}, 401, "missing or wrong bearer token"),
        ("GET", "/v1/calls", b"", None, 405, "/v1/calls takes POST, not GET"),
        ("POST", "/v1/other", b"", None, 404, "no such endpoint '/v1/other'"),
        ("POST", "/v1/calls", b"{", None, 400, "the request body is not JSON"),
        ("POST", "/v1/calls", b"[]", None, 400, "must be a JSON object, got list"),
        ("POST", "/v1/calls", _body(arguments=[]), None, 400, "'arguments' must be a JSON object"),
        ("POST", "/v1/calls", _body(timeout=-1), None, 400, "'timeout' must be a positive"),
        ("POST", "/v1/calls", _body(""), None, 400, "'id' must be a non-empty string"),
        ("POST", "/v1/calls", b" " * (8 * 1024 * 1024 + 1), None, 413, "over 8388608 bytes"),
        (
            "POST",
            "/v1/calls",
            b'{"id": "r1", "call_id": "c0", "tool": "get", "arguments": {"key": 1e999}}',
            None,
            400,
            "numbers must be finite",
        ),
        ("POST", "/v1/calls", _body(arguments={"k": math.inf}), None, 400, "must be finite"),
        (
            "POST",
            "/v1/calls",
            _Later(lambda: _body(arguments={"key": "a", "x": [[]] * 2_000_000})),
            None,
            400,
            "the request body is too large to decode",
        ),
    ],
)
async def test_the_worker_refuses_bad_requests_saying_why(
    method: str,
    path: str,
    body: bytes | _Later,
    headers: dict[str, str] | None,
    status: int,
    error: str,
) -> None:
    content = body.build() if isinstance(body, _Later) else body
    async with in_process_worker() as url, httpx2.AsyncClient(base_url=url) as client:
        sent = {"authorization": f"Bearer {TOKEN}"} if headers is None else headers
        response = await client.request(method, path, content=content, headers=sent)
    assert response.status_code == status
    assert error in response.json()["error"]


async def test_the_worker_stops_a_call_at_the_hosts_deadline(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    marker = str(tmp_path / "hold")
    body = _body(tool="hold", arguments={"marker": marker}, timeout=30)
    async with in_process_worker(heartbeat=7) as url, httpx2.AsyncClient(base_url=url) as client:
        start = trio.current_time()
        response = await client.post(
            "/v1/calls", content=body, headers={"authorization": f"Bearer {TOKEN}"}, timeout=None
        )
        took = trio.current_time() - start
        # A request id may be reused once its call has ended; a cancel for it finds nothing.
        cancel = await client.post(
            "/v1/calls/r1/cancel", headers={"authorization": f"Bearer {TOKEN}"}
        )
    lines = [parse_line(line) for line in response.text.splitlines()]
    assert [line["type"] for line in lines] == ["progress", *["heartbeat"] * 4, "result"]
    output, error_class = decode_output(lines[-1]["result"])
    assert error_class is ErrorClass.CANCELLED
    assert output.is_error
    assert 30 <= took < 31
    assert Path(marker + ".cancelled").exists()
    assert cancel.json() == {"found": False, "stopped": True}


async def test_a_running_request_id_cannot_be_reused(tmp_path: Path) -> None:
    body = _body(tool="hold", arguments={"marker": str(tmp_path / "hold")})
    auth = {"authorization": f"Bearer {TOKEN}"}
    async with (
        in_process_worker() as url,
        httpx2.AsyncClient(base_url=url) as client,
        client.stream("POST", "/v1/calls", content=body, headers=auth) as first,
        contextlib.aclosing(first.aiter_bytes()) as chunks,
    ):
        with trio.fail_after(GUARD):
            running = await anext(chunks)  # the tool's progress: it runs
        again = await client.post("/v1/calls", content=_body(), headers=auth)
        cancel = await client.post("/v1/calls/r1/cancel", headers=auth)
        rest = b"".join([chunk async for chunk in chunks])
    assert parse_line(running.decode()) == {"type": "progress", "message": "holding"}
    assert again.status_code == 409
    assert "already running" in again.json()["error"]
    assert cancel.json() == {"found": True, "stopped": True}
    assert parse_line(rest.decode())["result"]["error_class"] == "cancelled"


def test_serve_worker_checks_its_options() -> None:
    with pytest.raises(ValueError, match="at least 16 characters"):
        trio.run(partial(serve_worker, registry(), token="short"))
    with pytest.raises(ValueError, match="heartbeat must be a positive number"):
        trio.run(partial(serve_worker, registry(), token=TOKEN, heartbeat=0))
    with pytest.raises(ValueError, match="heartbeat must be finite"):
        trio.run(partial(serve_worker, registry(), token=TOKEN, heartbeat=math.inf))


def test_remote_backend_checks_its_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOOLEXEC_WORKER_TOKEN", raising=False)
    with pytest.raises(ValueError, match="needs the worker's token"):
        RemoteBackend("http://127.0.0.1:1")
    with pytest.raises(ValueError, match="http:// or https:// base URL"):
        RemoteBackend("127.0.0.1:1", token=TOKEN)
    with pytest.raises(ValueError, match="read_timeout must be a positive number"):
        RemoteBackend("http://127.0.0.1:1", token=TOKEN, read_timeout=0)
    with pytest.raises(ValueError, match="max_connections must be a positive int"):
        RemoteBackend("http://127.0.0.1:1", token=TOKEN, max_connections=0)
    monkeypatch.setenv("TOOLEXEC_WORKER_TOKEN", TOKEN)
    assert RemoteBackend("http://127.0.0.1:1/").url == "http://127.0.0.1:1"


async def test_a_backend_that_is_not_open_sends_nothing() -> None:
    executor = ToolExecutor(
        registry(),
        policy=remote_policy(),
        backends={"remote": RemoteBackend("http://127.0.0.1:1", token=TOKEN)},
    )
    outcome = await executor.execute_batch([ToolCall("c0", "get", {"key": "a"})])
    assert "the backend is not open" in outcome.results[0].text


# -- toolexec serve's usage errors ---------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--http", "nowhere"], TOKEN, "--http 'nowhere': expected HOST:PORT"),
        (["--http", "127.0.0.1:0", "--tools", "remote_tools:TOOLS"], "", "needs a shared token"),
        (["--http", "127.0.0.1:0", "--tools", "remote_tools:TOOLS"], "short", "at least 16"),
        (["--http", "127.0.0.1:0"], TOKEN, "the worker has no tools to serve"),
        (
            ["--http", "127.0.0.1:0", "--token-file", "/nonexistent/token"],
            "",
            "cannot read the token file /nonexistent/token",
        ),
        (["--http", "127.0.0.1:0", "--workspace", "/nonexistent"], TOKEN, "not an existing"),
    ],
)
def test_serve_usage_errors_say_what_to_change(
    argv: list[str],
    env: str,
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("TOOLEXEC_WORKER_TOKEN", env)
    monkeypatch.syspath_prepend(str(TESTS))
    with pytest.raises(SystemExit) as exit_info:
        main(["serve", *argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_serve_needs_a_transport(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["serve", "--tools", "remote_tools:TOOLS"])
    assert exit_info.value.code == 2
    assert "one of the arguments --stdio --http is required" in capsys.readouterr().err


def test_serve_says_when_it_cannot_listen(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TOOLEXEC_WORKER_TOKEN", TOKEN)
    monkeypatch.syspath_prepend(str(TESTS))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(SystemExit) as exit_info:
            main(["serve", "--http", f"127.0.0.1:{port}", "--tools", "remote_tools:TOOLS"])
    assert exit_info.value.code == 2
    assert f"--http 127.0.0.1:{port}: cannot listen there" in capsys.readouterr().err


class ToRemoteWithin:
    """Send every call to ``remote`` with a deadline of ``seconds``."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def decide(
        self, definition: ToolDefinition, arguments: Mapping[str, Any], agent_path: str
    ) -> Allow:
        return Allow(ExecutionGrant(sandbox="remote", timeout=self.seconds))


async def test_a_host_timeout_stops_the_call_on_the_worker(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    marker = str(tmp_path / "hold")
    async with in_process_worker() as url, RemoteBackend(url, token=TOKEN) as remote:
        executor = ToolExecutor(registry(), policy=ToRemoteWithin(12), backends={"remote": remote})
        outcome = await executor.execute_batch([ToolCall("c0", "hold", {"marker": marker})])
        # The result comes once the worker's tool has been cancelled and cleaned up.
        assert Path(marker + ".cancelled").exists()
    [result] = outcome.results
    assert result.error_class is ErrorClass.TIMEOUT


# -- the wire format, the backend's own checks, the command's loading, in process ---


def test_outputs_cross_the_wire_unchanged() -> None:
    content = (TextContent("t"), ImageContent("aGk=", "image/png"), JsonContent({"a": [1]}))
    data = json.loads(encode_line("result", result=encode_output(content, {"k": 1}, True)))
    output, error_class = decode_output(data["result"])
    assert output == ToolOutput(content, {"k": 1}, True)
    assert error_class is None


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "an output must be an object"),
        ({"content": [1]}, "a content block must be an object"),
        ({"content": [{"type": "video"}]}, "unknown content block type 'video'"),
        ({"content": [{"type": "image", "data": "x"}]}, "malformed image content block"),
        ({"content": [], "is_error": "yes"}, "'is_error' must be true or false"),
        ({"content": [], "error_class": "oops"}, "unknown error class 'oops'"),
    ],
)
def test_a_malformed_output_is_refused_saying_why(data: Any, message: str) -> None:
    with pytest.raises(WireError, match=message):
        decode_output(data)


def test_a_line_must_be_an_object_with_a_type() -> None:
    with pytest.raises(WireError, match="not an object with a 'type'"):
        parse_line("[1]")


async def test_a_backend_opens_once_and_needs_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = RemoteBackend("http://127.0.0.1:1", token=TOKEN, name="box")
    assert backend.name == "box"
    async with backend:
        with pytest.raises(RuntimeError, match="RemoteBackend for box is already open"):
            await backend.__aenter__()
    monkeypatch.setitem(sys.modules, "httpx2", None)
    with pytest.raises(ImportError, match=r"pip install 'toolexec\[remote\]'"):
        await backend.__aenter__()


class _Lines(io.StringIO):
    """A stdout that says when a line was written."""

    def __init__(self) -> None:
        super().__init__()
        self.written = trio.Event()

    def flush(self) -> None:
        self.written.set()


async def test_the_serve_command_loads_and_serves_in_process(tmp_path: Path) -> None:
    (tmp_path / "policy.toml").write_text(
        '[[rules]]\naction = "deny"\ntool = "write_file"\nreason = "read-only worker"\n'
    )
    argv = ["serve", "--http", "127.0.0.1:0", "--workspace", str(tmp_path), "--no-shell"]
    argv += ["--tools", "remote_tools:TOOLS", "--policy", str(tmp_path / "policy.toml")]
    args = _parser().parse_args(argv)
    os.environ["TOOLEXEC_WORKER_TOKEN"] = TOKEN
    try:
        loaded = _remote_cli._load(args, load_policy(args.policy)[0])
    finally:
        del os.environ["TOOLEXEC_WORKER_TOKEN"]
    stdout, log = _Lines(), io.StringIO()
    handler = _remote_cli._LogHandler(log)
    logger = logging.getLogger("toolexec")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_remote_cli._serve, loaded, args, stdout)
            await stdout.written.wait()
            url = stdout.getvalue().split()[-1]
            async with RemoteBackend(url, token=TOKEN) as remote:
                reg = registry()
                reg.register(partial(ToolDefinitionOnly, "write_file"))
                executor = ToolExecutor(reg, policy=remote_policy(), backends={"remote": remote})
                outcome = await executor.execute_batch(
                    [
                        ToolCall("c0", "write_file", {"path": "x.txt", "content": "hi"}),
                        ToolCall("c1", "put", {"key": "a", "value": "1"}),
                    ]
                )
            nursery.cancel_scope.cancel()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    denied, put = outcome.results
    assert denied.error_class is ErrorClass.PERMISSION_DENIED
    assert "read-only worker" in denied.text
    assert put.text.startswith("a=1")
    assert "toolexec worker: call" in log.getvalue()


@attrs.frozen
class ToolDefinitionOnly:
    """A host-side stand-in for a tool that only the worker runs."""

    name: str

    @property
    def definition(self) -> ToolDefinition:
        return ToolDefinition(self.name, "runs on the worker", side_effects=SideEffects.WRITE)

    async def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        raise AssertionError("runs on the worker only")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--http", "127.0.0.1:0", "--grant", "a"], "--grant cannot be used with serve --http"),
        (["--http", "127.0.0.1:0", "--", "python", "x.py"], "a runner command cannot be used"),
        (
            ["--stdio", "--policy", "p.toml", "--", "true"],
            "--policy cannot be used with serve --stdio",
        ),
    ],
)
def test_serve_refuses_the_other_transports_options(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["serve", *argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


async def test_a_policy_file_rule_sends_a_tool_to_the_worker(tmp_path: Path) -> None:
    remote_tools.reset()

    def rules(get_where: str) -> RulePolicy:
        get_rule = {"action": "allow", "tool": "get", "sandbox": get_where}
        put_rule = {"action": "allow", "tool": "put", "sandbox": "remote"}
        return RulePolicy.from_dict({"default": "deny", "rules": [put_rule, get_rule]})

    async with worker(tmp_path) as w, RemoteBackend(w.url, token=TOKEN) as remote:
        backends: dict[str, Any] = {"remote": remote}
        first = ToolExecutor(registry(), policy=rules("host"), backends=backends)
        outcome = await first.execute_batch(
            [ToolCall("p", "put", {"key": "k", "value": "v"}), ToolCall("g", "get", {"key": "k"})]
        )
        put_result, got_here = outcome.results
        assert put_result.text.startswith("k=v"), put_result.text
        assert got_here.text == "<unset>"  # the put ran on the worker, not here
        second = ToolExecutor(registry(), policy=rules("remote"), backends=backends)
        [got_there] = (await second.execute_batch([ToolCall("g", "get", {"key": "k"})])).results
        assert got_there.text == "v"
    assert remote_tools.STORE == {}
