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


def _load() -> str:
    return Path("/proc/loadavg").read_text().strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="one repeat instead of three")
    args = parser.parse_args()
    print(f"load average before: {_load()}")
    results = run(repeats=1 if args.quick else 3)
    print(f"{'N':>6} {'host us/call':>14} {'remote us/call':>16} {'ratio':>8}")
    for n, (host, remote) in results.items():
        print(f"{n:>6} {host:>14.1f} {remote:>16.1f} {remote / host:>7.1f}x")
    print(f"load average after:  {_load()}")


if __name__ == "__main__":
    main()
