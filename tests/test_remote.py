"""Remote workers: ``RemoteBackend`` calling ``toolexec serve --http`` processes on 127.0.0.1.

Each worker is a real ``toolexec serve`` process serving ``remote_tools``; it
prints its address on stdout and logs to a file the tests read. The host
routes every call to it with a policy granting ``sandbox="remote"``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import pytest
import trio

import remote_tools
from toolexec import (
    Allow,
    ConcurrencyConfig,
    ErrorClass,
    ToolCall,
    ToolDefinition,
    ToolExecutor,
    ToolRegistry,
    ToolResult,
)
from toolexec._process import open_group_process, reap
from toolexec.backends import RemoteBackend
from toolexec.events import CallbackSink, CallProgress, Event
from toolexec.policy import ExecutionGrant

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping

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
    assert progress == ["c0: writing a", "c4: writing a", "c5: writing b", "c12: writing a"]
    assert log.count(") started") == 12  # c10 and c11 never left the host


async def test_a_bad_token_is_refused(tmp_path: Path) -> None:
    async with worker(tmp_path) as w, RemoteBackend(w.url, token="x" * 32) as remote:
        executor = ToolExecutor(registry(), policy=remote_policy(), backends={"remote": remote})
        with trio.fail_after(GUARD):
            outcome = await executor.execute_batch(
                [ToolCall("c0", "put", {"key": "k", "value": "v"})]
            )
        log = w.log_text()
    [result] = outcome.results
    assert result.error_class is ErrorClass.PERMISSION_DENIED
    assert f"remote worker {w.url} refused the token" in result.text
    assert "refused POST /v1/calls from 127.0.0.1" in log
    assert "bad or missing token" in log
    assert "started" not in log


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


async def _answer(reply: bytes, stream: trio.SocketStream) -> None:
    await stream.receive_some(65536)
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
        (_http(b'{"type": "nonsense"}\n'), "sent a malformed response: unknown line type"),
        (_http(b'{"type": "heartbeat"}\n'), "ended without the call's result"),
        (
            _http(b'{"type": "result", "result": {"content": 3}}\n'),
            "sent a malformed response: an output needs",
        ),
        (b"SSH-2.0-OpenSSH\r\n", "closed the connection before sending the call's result"),
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


async def test_a_silent_worker_hits_the_read_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with fake_worker(b"") as url, RemoteBackend(url, token=TOKEN, read_timeout=3) as remote:
        executor = ToolExecutor(registry(), policy=remote_policy(), backends={"remote": remote})
        outcome = await executor.execute_batch([ToolCall("c0", "get", {"key": "a"})])
    [result] = outcome.results
    assert result.error_class is ErrorClass.TIMEOUT
    assert f"remote worker {url} sent nothing for 3s" in result.text
