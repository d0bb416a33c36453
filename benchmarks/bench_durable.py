"""What the call journal costs: batches with a journal against the same batches without.

Run: ``python benchmarks/bench_durable.py [--quick]``. For each store (SQLite;
PostgreSQL on a throwaway cluster this run starts, where the machine has the
server's programs: see ``postgres_database``), each tool and each batch size
N = 1, 10, 100, it times batches on an executor with a journal and on the
same executor without one, interleaved round by round in one process, and
prints the medians and their ratio, with the load average.

The tools: a no-op, and a tool that waits 10 ms (I/O), each in two kinds:
``READ`` (read-only: a run of them starts together; the journal keeps their
records and writes them once per run) and ``WRITE`` (a serial mutator, not
idempotent: each call is claimed in the store, durably, before it runs, so
a crash can never leave a write without a trace). Every batch has fresh
call ids, so nothing is replayed: this is the cost of recording.

Targets (issue 33): at N = 100 with the 10 ms tool, SQLite <= 1.5x and
PostgreSQL <= 2x no journal. PostgreSQL is measured three ways: as one host
(``postgres``: a journal without a lease, as the SQLite rows), as several
hosts run it (``postgres-leased``: every call claimed under a lease before
it runs), and with ``synchronous_commit=off`` (``postgres-async``: a commit
survives any crash of a host, as SQLite's ``NORMAL`` does, not a crash of
the database server), the last without a target. The SQLite store's default commits in WAL mode
with ``synchronous=NORMAL`` (a commit survives any crash of the process);
``--full`` measures ``synchronous=FULL`` too (an fsync per commit: it
survives a power loss), reported without a target.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
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
TARGETS = {"sqlite": 1.5, "postgres": 2.0, "postgres-leased": 2.0}
ASYNC = " options='-c synchronous_commit=off'"
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


def postgres_database(stack: contextlib.ExitStack) -> str | None:
    """A database on a PostgreSQL cluster started for this run, or ``None`` where none can start.

    The cluster is the tests' throwaway one (``tests/_pg.py``: ``initdb`` in a
    temporary folder, a unix socket, as ``nobody`` when run as root), with the
    server's own durability settings (``fsync``, ``synchronous_commit`` on);
    ``stack`` stops it.
    """
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    import _pg

    reason = _pg.missing()
    if reason is not None:
        print(f"postgres: not measured: {reason}")
        return None
    return stack.enter_context(_pg.running_cluster(fsync=True)).create_database()


async def postgres_store(conninfo: str) -> JournalStore:
    from toolexec.durable import PostgresStore

    return PostgresStore(conninfo)


async def batch_time(executor: ToolExecutor, tool: str, n: int) -> float:
    calls = [ToolCall(f"c{next(_ids)}", tool, {"n": i}) for i in range(n)]
    start = time.perf_counter()
    await executor.execute_batch(calls)
    return time.perf_counter() - start


async def compare(
    store: JournalStore, tool: str, n: int, rounds: int, lease: float | None = None
) -> tuple[float, float]:
    """Median seconds per batch: (no journal, journal), measured interleaved."""
    reg = registry()
    plain = ToolExecutor(reg)
    journal = await Journal.open(store, f"bench-{next(_ids)}", lease=lease)
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
    name: str,
    open_store: Callable[[], Awaitable[JournalStore]],
    rounds: int,
    lease: float | None = None,
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
            bare, kept = await compare(store, tool, n, r, lease)
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
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        where = Path(tmp)

        async def default() -> JournalStore:
            return sqlite_store(where)

        async def synced() -> JournalStore:
            return sqlite_store(where, "FULL")

        stores: list[tuple[str, Callable[[], Awaitable[JournalStore]], float | None]] = [
            ("sqlite", default, None)
        ]
        if full:
            stores.append(("sqlite-full", synced, None))
        conninfo = postgres_database(stack)
        if conninfo is not None:
            stores += [
                ("postgres", functools.partial(postgres_store, conninfo), None),
                # As several hosts run it: every call claimed under a lease.
                ("postgres-leased", functools.partial(postgres_store, conninfo), 30.0),
                # A commit that survives any crash of a host, as SQLite's
                # NORMAL does, but not a crash of the database server.
                ("postgres-async", functools.partial(postgres_store, conninfo + ASYNC), None),
            ]
        for name, opener, lease in stores:
            met = await run_store(name, opener, rounds, lease) and met
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
