"""A host process for the several-hosts tests: runs batches on a shared PostgreSQL journal.

Run as ``python durable_host.py CONNINFO MARKERS LEASE``. Each line on stdin
is one batch, as JSON: ``{"session": ..., "calls": [[id, tool, marker], ...]}``;
the host runs it through a ``ToolExecutor`` whose journal is that session in
the store, and prints one JSON line of results. Every tool appends this
process's id as one line to the file ``MARKERS/<marker>`` (an append-only
record of who ran what); the ``hang`` tools, the first time they run
anywhere, then print ``started <marker>`` and wait to be killed.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import trio

from toolexec import SideEffects, ToolCall, ToolExecutor, ToolRegistry, function_tool
from toolexec._durable._postgres import PostgresStore
from toolexec.durable import Journal

MARKERS = Path(sys.argv[2]) if len(sys.argv) > 2 else Path()


def _mark(marker: str) -> None:
    fd = os.open(MARKERS / marker, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{os.getpid()}\n".encode())
    finally:
        os.close(fd)


async def _hang_first_time(marker: str) -> str:
    """On its first attempt anywhere: mark, say so, wait to be killed; later: mark and answer."""
    first = not (MARKERS / marker).exists()
    _mark(marker)
    if first:
        print(f"started {marker}", flush=True)
        await trio.sleep_forever()
    return f"ran again {marker}"


@function_tool(side_effects=SideEffects.WRITE)
async def append(marker: str) -> str:
    """Append a line to a marker file (a write: never to be repeated)."""
    _mark(marker)
    await trio.sleep(0.002)  # a moment in flight, for the other host to race into
    return f"appended {marker}"


@function_tool(side_effects=SideEffects.READ)
async def look(marker: str) -> str:
    """Record a look (a read: may run again after an interruption)."""
    _mark(marker)
    await trio.sleep(0.002)
    return f"looked {marker}"


@function_tool(side_effects=SideEffects.WRITE)
async def hang(marker: str) -> str:
    """A write that, the first time, starts, says so, and never finishes."""
    return await _hang_first_time(marker)


@function_tool(side_effects=SideEffects.READ)
async def hang_read(marker: str) -> str:
    """A read that, the first time, starts, says so, and never finishes."""
    return await _hang_first_time(marker)


async def main(conninfo: str, lease: float) -> None:
    registry = ToolRegistry()
    for tool in (append, look, hang, hang_read):
        registry.register(tool)
    store = PostgresStore(conninfo)
    stdin = trio.wrap_file(sys.stdin)
    async for line in stdin:
        batch = json.loads(line)
        journal = await Journal.open(store, batch["session"], lease=lease, poll_interval=0.01)
        calls = [ToolCall(cid, tool, {"marker": marker}) for cid, tool, marker in batch["calls"]]
        outcome = await ToolExecutor(registry, journal=journal).execute_batch(calls)
        results = [
            {
                "id": r.call_id,
                "text": r.content[0].text if r.content else "",  # type: ignore[union-attr]
                "error": r.is_error,
                "replayed": bool(r.details.get("replayed")),
                "interrupted": bool(r.details.get("interrupted")),
            }
            for r in outcome.results
        ]
        print(json.dumps(results), flush=True)
    await store.aclose()


if __name__ == "__main__":
    trio.run(main, sys.argv[1], float(sys.argv[3]))
