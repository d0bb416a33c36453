"""How wide the read pool should be: I/O-bound batches against a flood of file reads.

Run: ``python benchmarks/bench_read_width.py [--quick]``. In one process,
for several read widths (the default among them), it measures:

1. wall time of batches of 100 and 1000 calls of a tool that waits 10 ms
   (``await trio.sleep(0.01)``, an I/O-bound read such as an HTTP GET),
   against the naive floor (one task per call under a limiter as wide as
   the batch);
2. a batch of 10,000 ``read_file`` calls over a real temporary workspace:
   wall time, peak traced memory, and the most worker threads and open
   file descriptors seen at once (sampled by a watcher task).

The first shows where the width stops being the bottleneck of ordinary
batches; the second shows what a width costs when a model floods the
executor with file reads. The load average is printed around the run.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

import trio

from toolexec import (
    ConcurrencyConfig,
    SideEffects,
    ToolCall,
    ToolExecutor,
    ToolRegistry,
    Workspace,
    function_tool,
    register_builtin_tools,
)

WIDTHS = (20, 64, 128, 256, 1024)
FLOOD = 10_000


async def wait_10ms(path: str) -> str:
    """Wait 10 ms, as an I/O-bound read does."""
    await trio.sleep(0.01)
    return ""


def calls(name: str, n: int, arguments: Any) -> list[ToolCall]:
    return [ToolCall(f"c{i}", name, json.dumps(arguments(i))) for i in range(n)]


async def floor(n: int) -> float:
    limiter = trio.CapacityLimiter(n)

    async def one(raw: Any) -> None:
        async with limiter:
            await wait_10ms(**json.loads(raw))

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for call in calls("wait_10ms", n, lambda i: {"path": f"f{i}"}):
            nursery.start_soon(one, call.arguments)
    return time.perf_counter() - start


async def io_batch(width: int, n: int) -> float:
    registry = ToolRegistry()
    registry.register(function_tool(side_effects=SideEffects.READ)(wait_10ms))
    executor = ToolExecutor(registry, ConcurrencyConfig(read_width=width))
    batch = calls("wait_10ms", n, lambda i: {"path": f"f{i}"})
    start = time.perf_counter()
    await executor.execute_batch(batch)
    return time.perf_counter() - start


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def flood(width: int, root: Path) -> tuple[float, float, int, int]:
    """Seconds, peak MB, most threads and most open descriptors for 10,000 reads."""
    registry = ToolRegistry()
    register_builtin_tools(registry, Workspace(root))
    executor = ToolExecutor(registry, ConcurrencyConfig(read_width=width))
    batch = calls("read_file", FLOOD, lambda i: {"path": f"f{i % 500}.txt"})
    most = [0, 0]
    done = trio.Event()

    async def watch() -> None:
        while not done.is_set():
            most[0] = max(most[0], threading.active_count())
            most[1] = max(most[1], open_fds())
            await trio.sleep(0.002)

    gc.collect()
    tracemalloc.start()
    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch)
        outcome = await executor.execute_batch(batch)
        done.set()
    seconds = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert not any(r.is_error for r in outcome.results), outcome.results[0]
    return seconds, peak / 1e6, most[0], most[1]


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


async def main(repeats: int) -> None:
    default = ConcurrencyConfig().read_width
    print(f"read width: I/O-bound batches and a flood of file reads, median of {repeats}")
    print(
        f"python {sys.version.split()[0]}, trio {trio.__version__}, default read width "
        f"{default}; load average before: {load()}\n"
    )
    widths = sorted({*WIDTHS, default})
    for n in (100, 1000):
        base = statistics.median([await floor(n) for _ in range(repeats)])
        print(f"{n} x 10 ms, uncapped floor: {base * 1e3:.1f} ms")
        for width in widths:
            wall = statistics.median([await io_batch(width, n) for _ in range(repeats)])
            mark = " (default)" if width == default else ""
            print(f"  width {width:>5}{mark:<10} {wall * 1e3:8.1f} ms  {wall / base:5.2f}x floor")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for i in range(500):
            (root / f"f{i}.txt").write_text("x" * 4096)
        print(f"\n{FLOOD} read_file calls (500 files of 4 KiB, real workspace):")
        for width in widths:
            seconds, mb, threads, fds = await flood(width, root)
            mark = " (default)" if width == default else ""
            print(
                f"  width {width:>5}{mark:<10} {seconds:6.2f} s  peak {mb:6.1f} MB  "
                f"threads <= {threads:3d}  open fds <= {fds:4d}"
            )
    print(f"\nload average after: {load()}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 repeat instead of 5")
    args = parser.parse_args()
    trio.run(main, 1 if args.quick else 5)
