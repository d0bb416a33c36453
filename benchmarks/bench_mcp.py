"""What an MCP tool call costs through the executor, over the raw SDK ``call_tool``.

Run: ``python benchmarks/bench_mcp.py`` (add ``--quick`` for fewer calls).
Needs the ``mcp`` extra. In one process it starts the SDK test server
(``tests/mcp_servers/sdk_server.py``) over stdio and measures, on the same
connection:

1. *sequential*: one ``echo`` call at a time, through
   ``ToolExecutor.execute_batch([call])`` versus ``client.call_tool`` (the
   SDK ``Client`` toolexec holds, so both sides share server and transport).
   ``echo`` is a sync function, which the SDK server runs in a worker
   thread, as most simple Python tools are; ``ping`` is async and answers
   at once, the fastest round trip an SDK server offers, so the executor's
   fixed cost weighs most there;
2. *batch of 10*: ten read-only ``echo`` calls in one batch versus ten
   ``client.call_tool`` started together in a nursery;
3. *transport*: the same sequential raw calls over the SDK's own stdio
   transport (``mcp.client.stdio``), a second server process, to show what
   toolexec's stdio transport costs relative to the SDK's.

Rounds of both sides alternate and each figure is the median round time,
so background load hits both alike. The ratio target is 1.1x.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import trio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from toolexec import ToolCall, ToolExecutor, ToolRegistry
from toolexec.mcp import open_mcp_server

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

SERVER = Path(__file__).parents[1] / "tests" / "mcp_servers" / "sdk_server.py"
TARGET = 1.1
ARGS = {"text": "benchmark"}


async def timed(fn: Callable[[], Awaitable[object]]) -> float:
    """Seconds one round of ``fn`` takes."""
    start = time.perf_counter()
    await fn()
    return time.perf_counter() - start


async def compare(
    label: str,
    ours: Callable[[], Awaitable[object]],
    raw: Callable[[], Awaitable[object]],
    rounds: int,
    per_round: int = 1,
) -> float:
    """Print and return the ratio of the median round times of ``ours`` and ``raw``.

    Rounds of the two sides alternate (which goes first alternates too), so
    load from elsewhere on the machine hits both alike.
    """
    for _ in range(20):  # warm up both paths
        await ours()
        await raw()
    ours_t: list[float] = []
    raw_t: list[float] = []
    for i in range(rounds):
        if i % 2:
            ours_t.append(await timed(ours))
            raw_t.append(await timed(raw))
        else:
            raw_t.append(await timed(raw))
            ours_t.append(await timed(ours))
    a = statistics.median(ours_t) / per_round
    b = statistics.median(raw_t) / per_round
    ratio = a / b
    verdict = "ok" if ratio <= TARGET else "ABOVE TARGET"
    print(
        f"{label:<34} {a * 1e6:9.0f} us {b * 1e6:9.0f} us {ratio:7.3f}x"
        f"  (target {TARGET}x: {verdict})"
    )
    return ratio


async def main(quick: bool) -> None:
    rounds = 200 if quick else 1500
    entry = {"command": sys.executable, "args": [str(SERVER)]}
    registry = ToolRegistry()
    print(f"{'':<34} {'toolexec':>12} {'raw SDK':>12} {'ratio':>8}")
    async with open_mcp_server(registry, "bench", entry) as server:
        executor = ToolExecutor(registry)
        client = server.client
        one = [ToolCall("c0", "mcp__bench__echo", ARGS)]
        ten = [ToolCall(f"c{i}", "mcp__bench__echo", ARGS) for i in range(10)]

        async def ours_one() -> object:
            return await executor.execute_batch(one)

        async def raw_one() -> object:
            return await client.call_tool("echo", ARGS)

        async def ours_ten() -> object:
            return await executor.execute_batch(ten)

        async def raw_ten() -> object:
            async with trio.open_nursery() as nursery:
                for _ in range(10):
                    nursery.start_soon(client.call_tool, "echo", ARGS)
            return None

        ping = [ToolCall("c0", "mcp__bench__ping", ARGS)]

        async def ours_ping() -> object:
            return await executor.execute_batch(ping)

        async def raw_ping() -> object:
            return await client.call_tool("ping", ARGS)

        await compare("sequential, per call", ours_one, raw_one, rounds)
        await compare("sequential, async tool, per call", ours_ping, raw_ping, rounds)
        await compare("batch of 10 read-only, per call", ours_ten, raw_ten, rounds // 5, 10)

        params = StdioServerParameters(command=sys.executable, args=[str(SERVER)])
        async with Client(stdio_client(params), cache=None) as sdk_client:

            async def raw_sdk_transport() -> object:
                return await sdk_client.call_tool("echo", ARGS)

            print()
            print(f"{'':<34} {'toolexec tr.':>12} {'SDK stdio':>12} {'ratio':>8}")
            await compare("raw call_tool, stdio transport", raw_one, raw_sdk_transport, rounds)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls and samples")
    trio.run(main, parser.parse_args().quick)
