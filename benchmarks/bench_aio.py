"""What the asyncio bridge costs per batch over the same batch run directly in trio.

Run: ``python benchmarks/bench_aio.py`` (``--quick`` for fewer repeats). In
one process, interleaved, it runs batches of N = 0, 1, 10, 100 no-op
read-only calls through ``ToolExecutor.execute_batch`` inside ``trio.run``
(the baseline) and through ``toolexec.aio.open_executor(...).execute_batch``
from an asyncio task (one trio run, many batches), and prints the time per
batch of each, the difference (the bridge's per-batch overhead) and the
ratio. Every batch is timed on its own, and a row's figure is the median
batch over all repeats: on a shared machine a batch that the system
preempts reads milliseconds long, and a median is not moved by a few of
those where a mean is. The difference of the means is printed beside it
(``mean delta``), so what the outliers add is in view too. Rows:

- back to back (the target): each batch starts as soon as the last ended;
- after idle: the loop idles 2 ms before each batch, so the guest run has
  gone to wait for I/O in its helper thread and must be woken through it
  (two thread hand-offs), and the batch's own time is measured;
- thread mode: ``mode="thread"``, every batch crossing threads twice;
- inside the guest run: the same loop of batches run by a trio task of a
  guest run on an asyncio loop, no bridge at all: what guest mode itself
  costs over ``trio.run`` (each trio pass an asyncio loop callback), the
  part of the overhead the bridge cannot remove.

The load average is printed before and after: compare runs only on a quiet
machine.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import functools
import os
import statistics
import time
from typing import Any

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
        print("cost of one scheduling step, us:")
        for name, cost in step_costs().items():
            print(f"  {name:<36}{cost:>7.1f}")
        print()
    finally:
        trio_run.GuestState.guest_tick = guest_tick  # type: ignore[method-assign]
        trio_run.start_thread_soon = start_thread_soon  # type: ignore[attr-defined]
        loop_class._run_once = run_once  # type: ignore[attr-defined]  # noqa: SLF001


def _row(label: str, direct: list[float], bridged: list[float], target: bool) -> None:
    d, b = statistics.median(direct) * 1e6, statistics.median(bridged) * 1e6
    mean = (statistics.fmean(bridged) - statistics.fmean(direct)) * 1e6
    verdict = ("met" if b - d <= TARGET_US else "NOT met") if target else ""
    print(f"{label:<26}{d:>10.1f}{b:>10.1f}{b - d:>10.1f}{b / d:>7.2f}x{mean:>12.1f}  {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 repeats instead of 9")
    parser.add_argument("--profile", action="store_true", help="count steps per batch first")
    args = parser.parse_args()
    repeats = 3 if args.quick else 9
    if args.profile:
        profile()
    print("load average before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    print(f"asyncio bridge vs trio directly: median batch of {repeats} interleaved repeats")
    print(f"target: <= {TARGET_US:.0f} us per batch over trio, batches back to back\n")
    print(
        f"{'batch of N no-op calls':<26}{'trio us':>10}{'aio us':>10}{'delta us':>10}{'ratio':>8}"
        f"{'mean delta':>12}"
    )
    rows: list[tuple[str, int, bool, toolexec.aio.Mode | None, bool]] = [
        *((f"N={n}, guest", n, False, "guest", True) for n in (0, *SIZES)),
        *((f"N={n}, guest, after idle", n, True, "guest", False) for n in (1, 10)),
        *((f"N={n}, thread mode", n, False, "thread", False) for n in (1, 10)),
        *((f"N={n}, inside guest run", n, False, None, False) for n in SIZES),
    ]
    for label, n, idle, mode, target in rows:
        direct: list[float] = []
        bridged: list[float] = []
        for _ in range(repeats):  # interleaved, so noise hits both alike
            direct += trio_per_batch(n, idle)
            bridged += guest_inside_per_batch(n) if mode is None else aio_per_batch(n, idle, mode)
        _row(label, direct, bridged, target)
    print("\nN=0 is an empty batch: the bridge's own round trip, nearly nothing else.")
    print(f"after idle: {IDLE_GAP * 1e3:.0f} ms of idle loop before each (untimed) batch.")
    print("inside guest run: no bridge; guest mode's own cost, a floor for the rows above.")
    print("load average after: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))


if __name__ == "__main__":
    main()
