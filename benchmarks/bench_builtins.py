"""Overhead of the built-in tools against the plainest equivalent.

Run: ``python benchmarks/bench_builtins.py [--reads N] [--shells N]``

1. ``read_file`` of a small file through ``ToolExecutor.execute_batch``
   against ``open().read()`` in ``trio.to_thread.run_sync`` (target: 3x).
2. ``shell`` running ``true`` through the executor against
   ``trio.run_process(["true"])`` (target: 1.2x), and against
   ``trio.run_process(["bash", "-c", "true"])``, which starts the same shell
   the tool does and so isolates what toolexec itself adds.

Each pair runs alternately, call by call, in one process after a warm-up;
the median time per call, the ratio of medians and the ratio of the
fastest calls (less sensitive to a loaded machine) are printed.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from toolexec import ToolCall, ToolExecutor, ToolRegistry, Workspace, register_builtin_tools

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable


async def _pair(
    name: str,
    ours: Callable[[], Awaitable[object]],
    plain: Callable[[], Awaitable[object]],
    n: int,
    target: float,
) -> None:
    for _ in range(max(5, n // 10)):  # warm up threads, caches, the schema validator
        await ours()
        await plain()
    a_samples, b_samples = [], []
    for _ in range(n):  # alternate call by call so load drift hits both sides alike
        start = time.perf_counter()
        await ours()
        middle = time.perf_counter()
        await plain()
        a_samples.append(middle - start)
        b_samples.append(time.perf_counter() - middle)
    a, b = statistics.median(a_samples), statistics.median(b_samples)
    ratio, best = a / b, min(a_samples) / min(b_samples)
    verdict = "meets" if ratio <= target else "misses"
    print(
        f"{name:<10} median: toolexec {a * 1e6:8.1f} us, plain {b * 1e6:8.1f} us, "
        f"ratio {ratio:5.2f}x ({verdict} the {target}x target); "
        f"best-case ratio {best:5.2f}x"
    )


async def main(reads: int, shells: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        small = root / "small.txt"
        small.write_text("hello, world\n" * 20)
        registry = ToolRegistry()
        register_builtin_tools(registry, Workspace(root), shell=True)
        executor = ToolExecutor(registry)
        read_call = [ToolCall("r", "read_file", {"path": "small.txt"})]
        shell_call = [ToolCall("s", "shell", {"command": "true"})]
        bash = shutil.which("bash") or "/bin/sh"

        async def read_through_executor() -> None:
            outcome = await executor.execute_batch(read_call)
            assert not outcome.results[0].is_error, outcome.results[0].text

        async def read_plain() -> None:
            def read() -> str:
                with open(small) as f:
                    return f.read()

            await trio.to_thread.run_sync(read)

        async def shell_through_executor() -> None:
            outcome = await executor.execute_batch(shell_call)
            assert not outcome.results[0].is_error, outcome.results[0].text

        async def shell_plain() -> None:
            await trio.run_process(["true"])

        await _pair("read_file", read_through_executor, read_plain, reads, 3.0)
        await _pair("shell", shell_through_executor, shell_plain, shells, 1.2)

        async def bash_plain() -> None:
            await trio.run_process([bash, "-c", "true"])

        # The same shell on both sides: what toolexec itself adds to a command.
        await _pair("shell/bash", shell_through_executor, bash_plain, shells, 1.2)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reads", type=int, default=2000)
    parser.add_argument("--shells", type=int, default=200)
    args = parser.parse_args()
    trio.run(main, args.reads, args.shells)
