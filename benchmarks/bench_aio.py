"""What the asyncio bridge costs per batch over the same batch run directly in trio.

Run: ``python benchmarks/bench_aio.py`` (``--quick`` for fewer repeats). In
one process, interleaved, it runs batches of N = 1, 10, 100 no-op read-only
calls through ``ToolExecutor.execute_batch`` inside ``trio.run`` (the
baseline) and through ``toolexec.aio.open_executor(...).execute_batch`` from
an asyncio task (one guest run, many batches), and prints the time per batch
of each, the difference (the bridge's per-batch overhead) and the ratio. The
load average is printed before and after: compare runs only on a quiet machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

import trio

import toolexec.aio
from toolexec import SideEffects, ToolCall, ToolExecutor, ToolRegistry, function_tool

SIZES = (1, 10, 100)
CALLS_PER_SAMPLE = 2000
TARGET_US = 50.0  # bridge overhead per batch


@function_tool(side_effects=SideEffects.READ)
async def noop() -> str:
    """Do nothing."""
    return ""


def _registry() -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(noop)
    return registry


def _calls(n: int) -> list[ToolCall]:
    return [ToolCall(str(i), "noop", {}) for i in range(n)]


def trio_per_batch(n: int) -> float:
    """Seconds per batch of ``n`` calls, run directly in trio."""
    batches, calls = max(1, CALLS_PER_SAMPLE // n), _calls(n)

    async def main() -> float:
        executor = ToolExecutor(_registry())
        await executor.execute_batch(calls)  # warm up
        start = time.perf_counter()
        for _ in range(batches):
            await executor.execute_batch(calls)
        return (time.perf_counter() - start) / batches

    return trio.run(main)


def aio_per_batch(n: int) -> float:
    """Seconds per batch of ``n`` calls, from asyncio through the guest run."""
    batches, calls = max(1, CALLS_PER_SAMPLE // n), _calls(n)

    async def main() -> float:
        async with toolexec.aio.open_executor(_registry()) as executor:
            await executor.execute_batch(calls)  # warm up
            start = time.perf_counter()
            for _ in range(batches):
                await executor.execute_batch(calls)
            return (time.perf_counter() - start) / batches

    return asyncio.run(main())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 repeats instead of 9")
    repeats = 3 if parser.parse_args().quick else 9
    print("load average before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    print(f"asyncio bridge vs trio directly: median of {repeats} repeats\n")
    print(
        f"{'batch of N no-op calls':<24}{'trio us':>10}{'aio us':>10}{'delta us':>10}"
        f"{'ratio':>8}  target"
    )
    for n in SIZES:
        direct, bridged = [], []
        for _ in range(repeats):  # interleaved, so noise hits both alike
            direct.append(trio_per_batch(n))
            bridged.append(aio_per_batch(n))
        d, b = statistics.median(direct) * 1e6, statistics.median(bridged) * 1e6
        verdict = "met" if b - d <= TARGET_US else "NOT met"
        print(
            f"{'N=' + str(n):<24}{d:>10.1f}{b:>10.1f}{b - d:>10.1f}{b / d:>7.2f}x"
            f"  <= {TARGET_US:.0f} us  {verdict}"
        )
    print("\nload average after: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))


if __name__ == "__main__":
    main()
