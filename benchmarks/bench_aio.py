"""What the asyncio bridge costs per batch over the same batch run directly in trio.

Run: ``python benchmarks/bench_aio.py`` (``--quick`` for fewer runs). It
runs batches of N = 0, 1, 10, 100 no-op read-only calls through
``ToolExecutor.execute_batch`` inside ``trio.run`` (the baseline) and
through ``toolexec.aio.open_executor(...).execute_batch`` from an asyncio
task (one trio run, many batches), and prints the time per batch of each
and the difference: the bridge's per-batch overhead.

The target rows (batches back to back) pair the two ways block by block.
In one process, the asyncio loop with the bridge runs on the main thread
and ``trio.run`` in a second thread; they take turns through two
semaphores, a block of batches back to back each (1000 calls, at least 10
batches), and the process is pinned to one CPU so that each block runs
where the other just ran, as in a one-thread program. A block's figure is
its median batch; a pair's delta is the bridged block's minus the direct
one's; a process's figure is the median of its pairs' deltas. That
process is run several times, each a fresh interpreter, and a row's figure
is the median over the processes, with their lowest and highest beside it.
Both steps answer this machine's noise: its speed drifts by as much as 2x
over seconds, which a delta of adjacent blocks cancels; and one process
differs from the next by 10 - 40 us at N = 100, which only fresh processes
show (pyperf runs worker processes for the same reason).

The other rows run each way on its own, in turn, several times, and print
medians over all their batches:

- after idle: the loop idles 2 ms before each batch, so the guest run has
  gone to wait for I/O in its helper thread and must be woken through it
  (two thread hand-offs), and the batch's own time is measured;
- thread mode: ``mode="thread"``, every batch crossing threads twice;
- inside the guest run: the same loop of batches run by a trio task of a
  guest run on an asyncio loop, no bridge at all: what guest mode itself
  costs over ``trio.run`` (each trio pass an asyncio loop callback).

``--profile`` first counts scheduling steps per batch, times the parts of
a bridged batch, and pairs a batch of 10 calls whose first spins for 0, 1
or 4 ms: time added with almost no work, to tell caches emptied by the
batch's work from caches emptied by time.

The load average is printed before and after: compare runs only on a quiet
machine.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import functools
import gc
import os
import statistics
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

import trio

import toolexec.aio
from toolexec import SideEffects, ToolCall, ToolExecutor, ToolRegistry, function_tool
from toolexec._adapters import _aio_guest

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator

SIZES = (1, 10, 100)
CALLS_PER_SAMPLE = 2000
BLOCKS = 40  # pairs of blocks per paired process
BLOCK_CALLS = 1000  # calls per block (at least 10 batches)
TARGET_US = 50.0  # bridge overhead per batch


@function_tool(side_effects=SideEffects.READ)
async def noop() -> str:
    """Do nothing."""
    return ""


@function_tool(side_effects=SideEffects.READ)
async def spin(us: float) -> str:
    """Keep the CPU busy for ``us`` microseconds, touching almost no memory."""
    end = time.perf_counter() + us * 1e-6
    while time.perf_counter() < end:
        pass
    return ""


def _registry() -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(noop)
    registry.register(spin)
    return registry


def _calls(n: int, spin_us: int = 0) -> list[ToolCall]:
    """``n`` no-op calls; with ``spin_us``, the first spins that long instead."""
    calls = [ToolCall(str(i), "noop", {}) for i in range(n)]
    if spin_us:
        calls[0] = ToolCall("0", "spin", {"us": spin_us})
    return calls


IDLE_GAP = 0.002  # seconds between batches in the "after idle" rows (not timed)
IDLE_BATCHES = 200


def _plan(n: int, idle: bool) -> tuple[int, list[ToolCall]]:
    batches = IDLE_BATCHES if idle else max(1, CALLS_PER_SAMPLE // max(n, 1))
    return batches, _calls(n)


def trio_per_batch(n: int, idle: bool = False) -> list[float]:
    """Seconds of each batch of ``n`` calls, run directly in trio."""
    batches, calls = _plan(n, idle)

    async def main() -> list[float]:
        executor = ToolExecutor(_registry())
        await executor.execute_batch(calls)  # warm up
        spent: list[float] = []
        for _ in range(batches):
            if idle:
                await trio.sleep(IDLE_GAP)
            start = time.perf_counter()
            await executor.execute_batch(calls)
            spent.append(time.perf_counter() - start)
        return spent

    return trio.run(main)


def aio_per_batch(n: int, idle: bool = False, mode: toolexec.aio.Mode = "guest") -> list[float]:
    """Seconds of each batch of ``n`` calls, from an asyncio task through the bridge."""
    batches, calls = _plan(n, idle)

    async def main() -> list[float]:
        async with toolexec.aio.open_executor(_registry(), mode=mode) as executor:
            await executor.execute_batch(calls)  # warm up
            spent: list[float] = []
            for _ in range(batches):
                if idle:
                    await asyncio.sleep(IDLE_GAP)
                start = time.perf_counter()
                await executor.execute_batch(calls)
                spent.append(time.perf_counter() - start)
            return spent

    return asyncio.run(main())


def guest_inside_per_batch(n: int) -> list[float]:
    """Seconds of each batch of ``n`` calls, looped by a trio task of a guest run (no bridge)."""

    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Any] = loop.create_future()
        trio.lowlevel.start_guest_run(
            functools.partial(trio_loop, n),
            run_sync_soon_threadsafe=loop.call_soon_threadsafe,
            run_sync_soon_not_threadsafe=loop.call_soon,
            done_callback=done.set_result,
            host_uses_signal_set_wakeup_fd=True,
        )
        spent: list[float] = (await done).unwrap()
        return spent

    return asyncio.run(main())


async def trio_loop(n: int) -> list[float]:
    """Seconds of each batch of ``n`` calls, back to back in the current trio run."""
    batches, calls = _plan(n, False)
    executor = ToolExecutor(_registry())
    await executor.execute_batch(calls)  # warm up
    spent: list[float] = []
    for _ in range(batches):
        start = time.perf_counter()
        await executor.execute_batch(calls)
        spent.append(time.perf_counter() - start)
    return spent


async def _median_batch(
    execute: Callable[[list[ToolCall]], Awaitable[object]], calls: list[ToolCall], size: int
) -> float:
    """Seconds of the median of ``size`` batches run back to back."""
    spent = []
    for _ in range(size):
        start = time.perf_counter()
        await execute(calls)
        spent.append(time.perf_counter() - start)
    return statistics.median(spent)


def paired_deltas(n: int, blocks: int, size: int, spin_us: int = 0) -> tuple[float, float, float]:
    """Median direct batch, median bridged batch, median block delta (seconds), one process.

    The bridge's asyncio loop runs here, ``trio.run`` in a second thread;
    they take turns, a block of ``size`` batches back to back each. While
    one side runs its block the other waits on a semaphore, off the CPU; the
    bridged side's loop is blocked meanwhile, which leaves its guest run as
    a batch left it (awake, one step waiting), so its next block goes on as
    batches back to back do. A block's figure is its median batch; a pair
    of blocks' delta is the bridged one's minus the direct one's. With
    ``spin_us``, the batch's first call spins that long (see ``spin_rows``).
    """
    calls = _calls(n, spin_us)
    to_trio, to_aio = threading.Semaphore(0), threading.Semaphore(0)
    direct: list[float] = []
    bridged: list[float] = []

    async def trio_side() -> None:
        executor = ToolExecutor(_registry())
        await executor.execute_batch(calls)  # warm up
        to_aio.release()
        for _ in range(blocks):
            to_trio.acquire()
            direct.append(await _median_batch(executor.execute_batch, calls, size))
            to_aio.release()

    async def aio_side() -> None:
        async with toolexec.aio.open_executor(_registry()) as executor:
            await executor.execute_batch(calls)  # warm up
            thread = threading.Thread(target=trio.run, args=(trio_side,))
            thread.start()
            to_aio.acquire()
            gc.collect()
            for _ in range(blocks):
                bridged.append(await _median_batch(executor.execute_batch, calls, size))
                to_trio.release()
                to_aio.acquire()
            thread.join()

    with _pinned():
        asyncio.run(aio_side())
    deltas = [b - d for d, b in zip(direct, bridged, strict=True)]
    return statistics.median(direct), statistics.median(bridged), statistics.median(deltas)


def _paired_processes(n: int, processes: int, spin_us: int = 0) -> list[tuple[float, ...]]:
    """``paired_deltas`` in fresh processes: (direct, bridged, delta) in us, one per process."""
    size = max(10, BLOCK_CALLS // max(n, 1))
    runs: list[tuple[float, ...]] = []
    for _ in range(processes):
        sizes = [str(n), str(BLOCKS), str(size), str(spin_us)]
        argv = [sys.executable, __file__, "--paired-worker", *sizes]
        out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
        runs.append(tuple(float(x) * 1e6 for x in out.split()))
    return runs


def _paired_line(label: str, runs: list[tuple[float, ...]]) -> float:
    """Print a row of medians over the processes' figures; return the delta's."""
    d, b, delta = (float(statistics.median(column)) for column in zip(*runs, strict=True))
    low, high = min(r[2] for r in runs), max(r[2] for r in runs)
    print(
        f"{label:<26}{d:>9.1f}{b:>9.1f}{delta:>9.1f}{f'{low:.0f} .. {high:.0f}':>14}{b / d:>8.2f}x",
        end="",
    )
    return delta


def paired_row(n: int, processes: int) -> None:
    """A target row: ``paired_deltas`` over fresh processes, with the verdict."""
    delta = _paired_line(f"N={n}, back to back", _paired_processes(n, processes))
    print("  met" if delta <= TARGET_US else "  NOT met")


SPINS_US = (0, 1000, 4000)


def spin_rows(processes: int) -> None:
    """Paired rows for a batch of 10 calls whose first spins 0, 1 or 4 ms.

    The spin adds time to the batch but almost no work: a loop over one
    clock read, a few cache lines. If the bridge's overhead grew with N only
    because a larger batch's own work evicts the bridge's path from the
    caches, these rows would stay at the N = 10 figure; if it grows with
    them, the caches empty with time, whatever runs.
    """
    print(f"a batch of 10 calls, the first spinning, paired as above ({processes} processes):")
    for spin_us in SPINS_US:
        _paired_line(f"  spin {spin_us / 1000:g} ms", _paired_processes(10, processes, spin_us))
        print()


STEPS, TRIPS, PASSES = "guest steps", "I/O-wait thread trips", "trio scheduler passes"
TURNS = "asyncio loop turns"


class _Passes(trio.abc.Instrument):
    def __init__(self, counts: collections.Counter[str]) -> None:
        self.counts = counts

    def before_io_wait(self, timeout: float) -> None:
        self.counts[PASSES] += 1


def _profile_direct(n: int, counts: collections.Counter[str]) -> None:
    async def main() -> None:
        executor = ToolExecutor(_registry())
        trio.lowlevel.add_instrument(_Passes(counts))
        for _ in range(IDLE_BATCHES):
            await executor.execute_batch(_calls(n))

    trio.run(main)


def _profile_bridged(n: int, idle: bool, counts: collections.Counter[str]) -> None:
    totals: collections.Counter[str] = collections.Counter()

    async def main() -> None:
        async with toolexec.aio.open_executor(_registry()) as executor:
            await executor.execute_batch(_calls(n))
            counts.clear()
            for _ in range(IDLE_BATCHES):
                if idle:
                    await asyncio.sleep(IDLE_GAP)
                    # The batch's own steps and loop turns; a thread trip that began while
                    # idle is counted, since this batch has to end it.
                    counts[STEPS] = counts[TURNS] = 0
                await executor.execute_batch(_calls(n))
                totals.update(counts)
                counts.clear()

    asyncio.run(main())
    counts.clear()
    counts.update(totals)


PHASE_BATCHES = 3000


def phases(n: int) -> tuple[list[float], dict[str, float]]:
    """Where a bridged batch's time goes (us, medians), and the same batch's in ``trio.run``.

    Bridged, back to back, stamped at four points: the asyncio caller's
    start, the plan's start and the run's end inside the trio task, the end
    of the guest step that ran it, the caller's end. In ``trio.run``: plan
    and run alone, and the whole ``execute_batch``. Wraps private parts of
    ``toolexec.aio``, so this is a diagnostic, not a timing.
    """
    calls = _calls(n)
    stamps: dict[str, float] = {}
    rows: list[tuple[float, float, float, float]] = []
    job_class, steps_class = _aio_guest._Job, _aio_guest._Steps  # noqa: SLF001
    body, run_now = job_class.body, steps_class.run_now

    async def stamped_body(self: Any, guest: Any) -> None:
        _aio_guest._HOST.set(guest.host)  # noqa: SLF001
        stamps["in"] = time.perf_counter()
        self.batch = batch = guest.executor.prepare(self.calls)
        result = await batch.run()
        stamps["out"] = time.perf_counter()
        guest.host.call(self.finish, result, None)

    def stamped_run_now(self: Any) -> None:
        run_now(self)
        stamps["step"] = time.perf_counter()

    async def bridged() -> None:
        async with toolexec.aio.open_executor(_registry()) as executor:
            for _ in range(PHASE_BATCHES // 10):
                await executor.execute_batch(calls)
            for _ in range(PHASE_BATCHES):
                start = time.perf_counter()
                await executor.execute_batch(calls)
                end = time.perf_counter()
                s = stamps
                rows.append(
                    (s["in"] - start, s["out"] - s["in"], s["step"] - s["out"], end - s["step"])
                )

    async def direct() -> dict[str, float]:
        executor = ToolExecutor(_registry())
        plan_run: list[float] = []
        whole: list[float] = []
        for _ in range(PHASE_BATCHES // 10):
            await executor.execute_batch(calls)
        for _ in range(PHASE_BATCHES):
            start = time.perf_counter()
            await executor.prepare(calls).run()
            plan_run.append(time.perf_counter() - start)
            start = time.perf_counter()
            await executor.execute_batch(calls)
            whole.append(time.perf_counter() - start)
        return {
            "plan + run": statistics.median(plan_run) * 1e6,
            "execute_batch": statistics.median(whole) * 1e6,
        }

    job_class.body = stamped_body  # type: ignore[method-assign]
    steps_class.run_now = stamped_run_now  # type: ignore[method-assign]
    with _pinned():
        try:
            asyncio.run(bridged())
        finally:
            job_class.body = body  # type: ignore[method-assign]
            steps_class.run_now = run_now  # type: ignore[method-assign]
        figures = [statistics.median(column) * 1e6 for column in zip(*rows, strict=True)]
        return figures, trio.run(direct)


@contextlib.contextmanager
def _pinned() -> Iterator[None]:
    """Run on one CPU, where the OS allows, as the paired rows do."""
    try:
        before = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {min(before)})
    except (AttributeError, OSError):
        yield
        return
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


STEP_SAMPLES = 20000


def step_costs() -> dict[str, float]:
    """Microseconds per scheduling step: trio's pass, asyncio's loop turn, a guest step.

    Each is a task yielding in a loop with nothing else to do: ``checkpoint``
    in ``trio.run``, ``asyncio.sleep(0)`` in ``asyncio.run``, and
    ``checkpoint`` in a trio guest run on an asyncio loop (one loop turn and
    one guest step each).
    """

    async def trio_steps() -> float:
        start = time.perf_counter()
        for _ in range(STEP_SAMPLES):
            await trio.lowlevel.checkpoint()
        return time.perf_counter() - start

    async def asyncio_turns() -> float:
        start = time.perf_counter()
        for _ in range(STEP_SAMPLES):
            await asyncio.sleep(0)
        return time.perf_counter() - start

    async def guest_steps() -> float:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Any] = loop.create_future()
        trio.lowlevel.start_guest_run(
            trio_steps,
            run_sync_soon_threadsafe=loop.call_soon_threadsafe,
            run_sync_soon_not_threadsafe=loop.call_soon,
            done_callback=done.set_result,
            host_uses_signal_set_wakeup_fd=True,
        )
        spent: float = (await done).unwrap()
        return spent

    return {
        "trio pass": trio.run(trio_steps) / STEP_SAMPLES * 1e6,
        "asyncio loop turn": asyncio.run(asyncio_turns()) / STEP_SAMPLES * 1e6,
        "guest step (loop turn + trio pass)": asyncio.run(guest_steps()) / STEP_SAMPLES * 1e6,
    }


def profile() -> None:
    """Count, per batch, the trio steps and the trips to the I/O-wait thread.

    Guest mode: each guest step is one trio scheduler pass, run from the
    asyncio loop; each trip to the I/O-wait thread is two thread hand-offs
    (there, and back through ``call_soon_threadsafe``); and the asyncio loop
    turns. Trio directly: scheduler passes. The counters
    wrap trio internals, so this is a diagnostic, not a timing.
    """
    import trio._core._run as trio_run

    counts: collections.Counter[str] = collections.Counter()
    guest_tick = trio_run.GuestState.guest_tick
    start_thread_soon = trio_run.start_thread_soon  # type: ignore[attr-defined]

    def counted_tick(self: trio_run.GuestState) -> None:
        counts[STEPS] += 1
        guest_tick(self)

    def counted_thread(*args: Any, **kwargs: Any) -> None:
        counts[TRIPS] += 1
        start_thread_soon(*args, **kwargs)

    loop_class = asyncio.BaseEventLoop
    run_once = loop_class._run_once  # type: ignore[attr-defined]  # noqa: SLF001 - one turn

    def counted_turn(self: asyncio.BaseEventLoop) -> None:
        counts[TURNS] += 1
        run_once(self)

    trio_run.GuestState.guest_tick = counted_tick  # type: ignore[method-assign]
    trio_run.start_thread_soon = counted_thread  # type: ignore[attr-defined]
    loop_class._run_once = counted_turn  # type: ignore[attr-defined]  # noqa: SLF001
    try:
        print("per batch (profile):")
        for n in (0, *SIZES):
            for label, run in (
                ("trio directly", functools.partial(_profile_direct, n)),
                ("guest, back to back", functools.partial(_profile_bridged, n, False)),
                ("guest, after idle", functools.partial(_profile_bridged, n, True)),
            ):
                counts.clear()
                run(counts)
                per = ", ".join(f"{k} {v / IDLE_BATCHES:.2f}" for k, v in sorted(counts.items()))
                print(f"  N={n:<4}{label:<22}{per or 'none'}")
        print("a bridged batch, back to back, us (medians):")
        print(
            f"  {'N':<6}{'to plan':>9}{'plan + run':>12}{'to step end':>13}{'to caller':>11}"
            f"{'| trio: plan + run':>19}{'execute_batch':>15}"
        )
        for n in (0, 100):
            bridged, direct = phases(n)
            head, inner, tail, back = bridged
            print(
                f"  {n:<6}{head:>9.1f}{inner:>12.1f}{tail:>13.1f}{back:>11.1f}"
                f"{direct['plan + run']:>19.1f}{direct['execute_batch']:>15.1f}"
            )
        print("cost of one scheduling step, us:")
        for name, cost in step_costs().items():
            print(f"  {name:<36}{cost:>7.1f}")
        print()
    finally:
        trio_run.GuestState.guest_tick = guest_tick  # type: ignore[method-assign]
        trio_run.start_thread_soon = start_thread_soon  # type: ignore[attr-defined]
        loop_class._run_once = run_once  # type: ignore[attr-defined]  # noqa: SLF001


def _row(label: str, direct: list[float], bridged: list[float]) -> None:
    d, b = statistics.median(direct) * 1e6, statistics.median(bridged) * 1e6
    print(f"{label:<26}{d:>9.1f}{b:>9.1f}{b - d:>9.1f}{'':>14}{b / d:>8.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer processes and repeats")
    parser.add_argument("--profile", action="store_true", help="count steps per batch first")
    # N BLOCKS SIZE [SPIN_US]: one process of a paired row.
    parser.add_argument("--paired-worker", nargs="+", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.paired_worker:
        print(*paired_deltas(*args.paired_worker))
        return
    processes, repeats = (3, 3) if args.quick else (7, 9)
    if args.profile:
        profile()
        spin_rows(3)
        print()
    print("load average before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    print(f"target: <= {TARGET_US:.0f} us per batch over trio, batches back to back")
    print(f"back to back: in blocks, each way in turn, median over {processes} processes")
    print(f"other rows: each way on its own, {repeats} times in turn\n")
    print(
        f"{'batch of N no-op calls':<26}{'trio us':>9}{'aio us':>9}{'delta':>9}"
        f"{'low .. high':>14}{'ratio':>9}"
    )
    for n in (0, *SIZES):
        paired_row(n, processes)
    rows: list[tuple[str, int, bool, toolexec.aio.Mode | None]] = [
        *((f"N={n}, guest, after idle", n, True, "guest") for n in (1, 10)),
        *((f"N={n}, thread mode", n, False, "thread") for n in (1, 10)),
        *((f"N={n}, inside guest run", n, False, None) for n in SIZES),
    ]
    for label, n, idle, mode in rows:
        direct: list[float] = []
        bridged: list[float] = []
        for _ in range(repeats):  # interleaved, so drift hits both alike
            direct += trio_per_batch(n, idle)
            bridged += guest_inside_per_batch(n) if mode is None else aio_per_batch(n, idle, mode)
        _row(label, direct, bridged)
    print("\nback to back: trio us, aio us and delta are medians over the processes of")
    print("each process's median block (delta: of block pairs); low .. high: the lowest")
    print("and highest process's delta.")
    print("other rows: medians over all their batches; delta is aio minus trio.")
    print("N=0 is an empty batch: the bridge's own round trip, nearly nothing else.")
    print(f"after idle: {IDLE_GAP * 1e3:.0f} ms of idle loop before each (untimed) batch.")
    print("inside guest run: no bridge; guest mode's own cost, a floor for the rows above.")
    print("load average after: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))


if __name__ == "__main__":
    main()
