"""Ten writes to ten different files: resource-keyed conflicts against serial mutators.

Run: ``python benchmarks/bench_resources.py [--quick]``

One batch of 10 ``write_file`` calls, each to its own file in a temp
workspace, runs on two executors in the same process, alternately:

- ``keyed``: ``ToolExecutor(..., resource_conflicts=True)``: the writes touch
  different resources, so they run at once (up to the concurrent-mutator
  width, 10);
- ``serial``: the default executor: ``write_file`` is a serial mutator, so
  the writes run one at a time.

Two kinds of write are measured: the real tool writing 1 MiB each (the
work is the kernel's, in worker threads), and the real tool behind 10 ms of
latency before it (a remote or slow disk; a trio sleep, so the wait costs
no thread). Each is timed as the median of several rounds, and a recording
wrapper counts how many writes were in their tool at once (the recorded
overlap). Prints the wall times, the ratio serial/keyed and the overlap,
with the load average beside them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import attrs
import trio

from toolexec import ToolCall, ToolDefinition, ToolExecutor, ToolOutput, ToolRegistry, Workspace
from toolexec.tools import WriteFileTool

N = 10


@attrs.define(eq=False)
class Overlap:
    now: int = 0
    peak: int = 0


@attrs.define(eq=False)
class Counted:
    """The real write tool, with an optional latency, counting overlap."""

    inner: WriteFileTool
    latency: float
    overlap: Overlap
    definition: ToolDefinition = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.definition = self.inner.definition

    def __call__(self) -> Counted:
        return self

    async def execute(self, arguments: Any, ctx: Any) -> ToolOutput:
        self.overlap.now += 1
        self.overlap.peak = max(self.overlap.peak, self.overlap.now)
        try:
            if self.latency:
                await trio.sleep(self.latency)
            return await self.inner.execute(arguments, ctx)
        finally:
            self.overlap.now -= 1


def measure(root: Path, size: int, latency: float, rounds: int) -> dict[str, tuple[float, int]]:
    ws = Workspace(root)
    content = "x" * size
    calls = [
        ToolCall(str(i), "write_file", {"path": f"out/f{i}.txt", "content": content})
        for i in range(N)
    ]
    (root / "out").mkdir(exist_ok=True)
    executors = {}
    overlaps = {}
    for name, keyed in (("keyed", True), ("serial", False)):
        overlaps[name] = Overlap()
        registry = ToolRegistry()
        registry.register(Counted(WriteFileTool(ws), latency, overlaps[name]))
        executors[name] = ToolExecutor(registry, resource_conflicts=keyed)
    times: dict[str, list[float]] = {name: [] for name in executors}

    async def rounds_of_both() -> None:
        for _ in range(rounds):
            for name, executor in executors.items():
                start = time.perf_counter()
                outcome = await executor.execute_batch(calls)
                times[name].append(time.perf_counter() - start)
                assert not any(r.is_error for r in outcome.results)

    trio.run(rounds_of_both)
    return {name: (statistics.median(times[name]), overlaps[name].peak) for name in executors}


def load() -> str:
    """The 1, 5 and 15 minute load averages."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    args = parser.parse_args()
    rounds = 3 if args.quick else 15
    print(f"load average before: {load()}")
    print(f"{N} writes to {N} different files, median of {rounds} rounds, same process\n")
    print(f"{'write':<26} {'keyed ms':>9} {'serial ms':>10} {'serial/keyed':>13} {'overlap':>14}")
    with tempfile.TemporaryDirectory() as tmp:
        for label, size, latency in (
            ("1 MiB, real tool", 1 << 20, 0.0),
            ("1 KiB + 10 ms latency", 1 << 10, 0.010),
        ):
            found = measure(Path(tmp), size, latency, rounds)
            (keyed, k_peak), (serial, s_peak) = found["keyed"], found["serial"]
            print(
                f"{label:<26} {keyed * 1e3:>9.2f} {serial * 1e3:>10.2f} {serial / keyed:>12.2f}x"
                f" {k_peak:>6} vs {s_peak:<5}"
            )
    print(f"\nload average after: {load()}")
    print(f"cpus: {os.cpu_count()}")


if __name__ == "__main__":
    main()
