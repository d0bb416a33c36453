"""What running a call on a remote worker costs per call, over running it on the host.

Run: ``python benchmarks/bench_remote.py`` (``--quick`` for fewer repeats).
It starts one real worker process (``toolexec serve --http 127.0.0.1:0``)
serving a no-op read-only tool, then, interleaved in one process, runs
batches of N = 1, 100, 1000 calls of that tool through ``ToolExecutor``
on the host and through ``RemoteBackend`` to the worker, and prints the
microseconds per call of each and their ratio. The load average is printed
before and after: compare runs only on a quiet machine.

The functions are importable so that another benchmark can report these
figures beside its own in the same run::

    with remote_worker() as url:
        host_us = measure_host(100)
        remote_us = measure_remote(100, url)

``--unterminated`` measures instead what a hostile worker costs the host: a
fake worker process answers each call with a body of 1 MiB, then 32 MiB, of
one line with no newline, and the host process's CPU time for the call
(``time.process_time``, the worker's own CPU not counted) is printed for
each, with their ratio. The host's reader holds at most ``max_line_bytes``
(1 MiB) of a line and scans each byte once, so the 32 MiB line should cost
no more than about twice the 1 MiB one (before the bound, a rescan of the
held line on every chunk made it quadratic: tens of seconds). The same
pair is then measured with ``max_line_bytes`` raised to 64 MiB, so that the
whole line is read: linear reading makes that ratio about 32x.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from toolexec import Allow, SideEffects, ToolCall, ToolExecutor, ToolRegistry, function_tool
from toolexec.backends import RemoteBackend
from toolexec.policy import ExecutionGrant

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from toolexec import ToolDefinition

SIZES = (1, 100, 1000)
CALLS_PER_SAMPLE = 2000
TOKEN = secrets.token_urlsafe(24)


@function_tool(side_effects=SideEffects.READ)
async def noop() -> str:
    """Do nothing."""
    return ""


TOOLS = [noop]


class _ToRemote:
    def decide(
        self, definition: ToolDefinition, arguments: Mapping[str, Any], agent_path: str
    ) -> Allow:
        return Allow(ExecutionGrant(sandbox="remote"))


def _registry() -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(noop)
    return registry


def _calls(n: int) -> list[ToolCall]:
    return [ToolCall(str(i), "noop", {}) for i in range(n)]


async def _time(executor: ToolExecutor, n: int, samples: int) -> float:
    calls = _calls(n)
    batches = max(1, samples // n)
    await executor.execute_batch(calls)  # warm up (and open connections)
    start = time.perf_counter()
    for _ in range(batches):
        await executor.execute_batch(calls)
    return (time.perf_counter() - start) / (batches * n) * 1e6


def measure_host(n: int, samples: int = CALLS_PER_SAMPLE) -> float:
    """Microseconds per call for batches of ``n`` no-op calls run on the host."""
    return trio.run(_time, ToolExecutor(_registry()), n, samples)


def measure_remote(n: int, url: str, samples: int = CALLS_PER_SAMPLE) -> float:
    """Microseconds per call for batches of ``n`` no-op calls sent to the worker at ``url``."""

    async def main() -> float:
        async with RemoteBackend(url, token=TOKEN) as remote:
            executor = ToolExecutor(_registry(), policy=_ToRemote(), backends={"remote": remote})
            return await _time(executor, n, samples)

    return trio.run(main)


@contextlib.contextmanager
def remote_worker() -> Iterator[str]:
    """A worker process serving ``noop``; yields its URL, and ends its process group."""
    env = {**os.environ, "TOOLEXEC_WORKER_TOKEN": TOKEN}
    argv = [sys.executable, "-m", "toolexec", "serve", "--http", "127.0.0.1:0"]
    argv += ["--tools", "bench_remote:TOOLS"]
    process = subprocess.Popen(
        argv,
        cwd=Path(__file__).parent,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line.startswith("toolexec worker listening on "):
            raise RuntimeError(f"the worker did not start: {line!r}")
        yield line.rsplit(" ", 1)[1].strip()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        if process.stdout is not None:
            process.stdout.close()


def run(sizes: tuple[int, ...] = SIZES, repeats: int = 3) -> dict[int, tuple[float, float]]:
    """Median µs per call on the host and on a worker, for each ``n`` in ``sizes``."""
    results: dict[int, tuple[float, float]] = {}
    with remote_worker() as url:
        for n in sizes:
            host, remote = [], []
            samples = CALLS_PER_SAMPLE if n > 1 else CALLS_PER_SAMPLE // 4
            for _ in range(repeats):  # interleaved, so load changes hit both alike
                host.append(measure_host(n, samples))
                remote.append(measure_remote(n, url, samples))
            results[n] = (statistics.median(host), statistics.median(remote))
    return results


# A fake worker: answers every request with a 200 and ``size`` bytes of one
# line with no newline, written in 64 KiB pieces until the host hangs up.
FAKE_WORKER = r"""
import socket, sys
size = int(sys.argv[1])
server = socket.create_server(("127.0.0.1", 0))
print(server.getsockname()[1], flush=True)
piece = b"x" * 65536
while True:
    conn, _ = server.accept()
    with conn:
        request = b""
        while b"\r\n\r\n" not in request:
            request += conn.recv(65536)
        head, _, body = request.partition(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        while len(body) < length:
            body += conn.recv(65536)
        try:
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\n"
                         + b"content-length: %d\r\n\r\n" % size)
            for start in range(0, size, len(piece)):
                conn.sendall(piece[: size - start])
        except OSError:
            pass  # the host hung up: what it read was enough
"""


@contextlib.contextmanager
def unterminated_worker(size: int) -> Iterator[str]:
    """A fake worker process answering every call with ``size`` bytes and no newline."""
    process = subprocess.Popen(
        [sys.executable, "-c", FAKE_WORKER, str(size)],
        stdout=subprocess.PIPE,
        start_new_session=True,
        text=True,
    )
    try:
        assert process.stdout is not None
        yield f"http://127.0.0.1:{process.stdout.readline().strip()}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        if process.stdout is not None:
            process.stdout.close()


def measure_unterminated(url: str, calls: int = 3, max_line_bytes: int = 1 << 20) -> float:
    """Median CPU seconds of this process for one call to a worker sending an unterminated line."""

    async def main() -> list[float]:
        cpu = []
        backend = RemoteBackend(url, token=TOKEN, read_timeout=600, max_line_bytes=max_line_bytes)
        async with backend as remote:
            executor = ToolExecutor(_registry(), policy=_ToRemote(), backends={"remote": remote})
            for _ in range(calls):
                start = time.process_time()
                outcome = await executor.execute_batch(_calls(1))
                cpu.append(time.process_time() - start)
                if not outcome.results[0].is_error:
                    raise RuntimeError("an unterminated line was taken as a result")
        return cpu

    return statistics.median(trio.run(main))


def run_unterminated(
    sizes_mib: tuple[int, ...] = (1, 32), calls: int = 3, max_line_bytes: int = 1 << 20
) -> dict[int, float]:
    """Median host CPU seconds per call for each unterminated line size, in MiB."""
    results = {}
    for mib in sizes_mib:
        with unterminated_worker(mib << 20) as url:
            results[mib] = measure_unterminated(url, calls, max_line_bytes)
    return results


def _load() -> str:
    return Path("/proc/loadavg").read_text().strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="one repeat instead of three")
    parser.add_argument(
        "--unterminated",
        action="store_true",
        help="the host's CPU time for a 1 MiB and a 32 MiB response line with no newline",
    )
    args = parser.parse_args()
    print(f"load average before: {_load()}")
    if args.unterminated:
        calls = 1 if args.quick else 3
        for limit, bound in ((1, "bounded: about 1x, <= 2x"), (64, "linear: about 32x")):
            cpu = run_unterminated(calls=calls, max_line_bytes=limit << 20)
            for mib, seconds in cpu.items():
                print(
                    f"max_line_bytes {limit:>2} MiB, unterminated line of {mib:>2} MiB: "
                    f"{seconds * 1000:9.1f} ms of host CPU"
                )
            print(f"  32 MiB / 1 MiB: {cpu[32] / cpu[1]:.2f}x ({bound})")
        print(f"load average after:  {_load()}")
        return
    results = run(repeats=1 if args.quick else 3)
    print(f"{'N':>6} {'host us/call':>14} {'remote us/call':>16} {'ratio':>8}")
    for n, (host, remote) in results.items():
        print(f"{n:>6} {host:>14.1f} {remote:>16.1f} {remote / host:>7.1f}x")
    print(f"load average after:  {_load()}")


if __name__ == "__main__":
    main()
