"""What the call journal costs: batches with a journal against the same batches without.

Run: ``python benchmarks/bench_durable.py [--quick]``. For each store (SQLite
here; PostgreSQL where ``postgres_store`` can open one), each tool and each
batch size N = 1, 10, 100, it times batches on an executor with a journal
and on the same executor without one, interleaved round by round in one
process, and prints the medians and their ratio, with the load average.

The tools: a no-op, and a tool that waits 10 ms (I/O), each in two kinds:
``READ`` (read-only: a run of them starts together; the journal keeps their
records and writes them once per run) and ``WRITE`` (a serial mutator, not
idempotent: each call is claimed in the store, durably, before it runs, so
a crash can never leave a write without a trace). Every batch has fresh
call ids, so nothing is replayed: this is the cost of recording.

Targets (issue 33): at N = 100 with the 10 ms tool, SQLite <= 1.5x and
PostgreSQL <= 2x no journal. The SQLite store's default commits in WAL mode
with ``synchronous=NORMAL`` (a commit survives any crash of the process);
``--full`` measures ``synchronous=FULL`` too (an fsync per commit: it
survives a power loss), reported without a target.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from toolexec import SideEffects, ToolCall, ToolExecutor, ToolRegistry, function_tool
from toolexec.durable import Journal, JournalStore, SQLiteStore

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

SIZES = (1, 10, 100)
TARGETS = {"sqlite": 1.5, "postgres": 2.0}
_ids = itertools.count()


def registry() -> ToolRegistry:
    @function_tool(side_effects=SideEffects.READ)
    async def read_noop(n: int) -> int:
        """Do nothing."""
        return n

    @function_tool(side_effects=SideEffects.READ)
    async def read_io(n: int) -> int:
        """Wait 10 ms, as a read over the network would."""
        await trio.sleep(0.01)
        return n

    @function_tool(side_effects=SideEffects.WRITE)
    async def write_noop(n: int) -> int:
        """Do nothing, as a write."""
        return n

    @function_tool(side_effects=SideEffects.WRITE)
    async def write_io(n: int) -> int:
        """Wait 10 ms, as a write over the network would."""
        await trio.sleep(0.01)
        return n

    reg = ToolRegistry()
    for tool in (read_noop, read_io, write_noop, write_io):
        reg.register(tool)
    return reg


def sqlite_store(where: Path, synchronous: str = "NORMAL") -> JournalStore:
    return SQLiteStore(where / f"journal-{synchronous}.db", synchronous=synchronous)


def postgres_store(where: Path) -> JournalStore | None:
    """A PostgreSQL store for the PostgreSQL rows, or ``None`` where none can be opened.

    The PostgreSQL half of this benchmark (a cluster started for it, the
    store on it) goes here.
    """
    return None


async def batch_time(executor: ToolExecutor, tool: str, n: int) -> float:
    calls = [ToolCall(f"c{next(_ids)}", tool, {"n": i}) for i in range(n)]
    start = time.perf_counter()
    await executor.execute_batch(calls)
    return time.perf_counter() - start


async def compare(store: JournalStore, tool: str, n: int, rounds: int) -> tuple[float, float]:
    """Median seconds per batch: (no journal, journal), measured interleaved."""
    reg = registry()
    plain = ToolExecutor(reg)
    journal = await Journal.open(store, f"bench-{next(_ids)}")
    durable = ToolExecutor(reg, journal=journal)
    for _ in range(2):  # warm up both (the store's file and connection, the caches)
        await batch_time(plain, tool, n)
        await batch_time(durable, tool, n)
    bare: list[float] = []
    kept: list[float] = []
    for _ in range(rounds):
        bare.append(await batch_time(plain, tool, n))
        kept.append(await batch_time(durable, tool, n))
    return statistics.median(bare), statistics.median(kept)


async def run_store(
    name: str, open_store: Callable[[], Awaitable[JournalStore]], rounds: int
) -> bool:
    store = await open_store()
    met = True
    print(f"\n{name}: ms per batch (no journal -> journal), ratio")
    for tool in ("read_noop", "read_io", "write_noop", "write_io"):
        for n in SIZES:
            r = (
                rounds
                if n < 100 or tool.endswith("noop") or tool.startswith("read")
                else max(3, rounds // 3)
            )
            bare, kept = await compare(store, tool, n, r)
            ratio = kept / bare
            target = ""
            if n == 100 and tool.endswith("_io") and name in TARGETS:
                ok = ratio <= TARGETS[name]
                met = met and ok
                target = f"  target <= {TARGETS[name]}x: {'met' if ok else 'MISSED'}"
            per_call = (kept - bare) / n * 1e6
            print(
                f"  {tool:<10} N={n:<4} {bare * 1e3:9.2f} -> {kept * 1e3:9.2f}"
                f"  {ratio:5.2f}x  (+{per_call:7.0f} us/call){target}"
            )
    await store.aclose()
    return met


async def main(quick: bool, full: bool) -> int:
    rounds = 3 if quick else 9
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; {rounds} rounds")
    met = True
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)

        async def default() -> JournalStore:
            return sqlite_store(where)

        async def synced() -> JournalStore:
            return sqlite_store(where, "FULL")

        stores: list[tuple[str, Callable[[], Awaitable[JournalStore]]]] = [("sqlite", default)]
        if full:
            stores.append(("sqlite-full", synced))
        pg = postgres_store(where)
        if pg is not None:

            async def postgres() -> JournalStore:
                assert pg is not None
                return pg

            stores.append(("postgres", postgres))
        else:
            print("postgres: no store opened here (postgres_store returned None)")
        for name, opener in stores:
            met = await run_store(name, opener, rounds) and met
    print(f"\nload average {os.getloadavg()[0]:.2f}")
    return 0 if met else 1


def _args(argv: list[str]) -> Any:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds instead of 9")
    parser.add_argument("--full", action="store_true", help="also SQLite synchronous=FULL")
    return parser.parse_args(argv)


if __name__ == "__main__":
    args = _args(sys.argv[1:])
    sys.exit(trio.run(main, args.quick, args.full))
