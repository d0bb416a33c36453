"""What the subprocess sandbox costs: ``shell`` running ``true`` in it against on the host.

Run: ``python benchmarks/bench_sandbox.py`` (``--quick`` for fewer repeats).
In one process, interleaved round by round, it runs the same ``shell`` call
(``true``) through a ``ToolExecutor`` on the host and through one routed to
a ``SubprocessBackend`` restricted to each isolation level this machine has
(``bwrap``, ``unshare``, ``rlimits``), and prints the median time per call
of each and its ratio to the host's. The load average is printed before and
after: compare runs only on a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import trio

from toolexec import ToolCall, ToolExecutor, ToolRegistry
from toolexec._tools._shell import ShellTool
from toolexec._tools._workspace import Workspace
from toolexec.backends import SubprocessBackend
from toolexec.policy import Allow, ExecutionGrant

LEVELS = ("bwrap", "unshare", "rlimits")


class _ToSandbox:
    def decide(self, definition: object, arguments: object, agent_path: str) -> Allow:
        return Allow(ExecutionGrant(sandbox="subprocess"))


async def _per_call(executor: ToolExecutor, calls: int) -> float:
    call = [ToolCall("1", "shell", {"command": "true"})]
    start = time.perf_counter()
    for _ in range(calls):
        outcome = await executor.execute_batch(call)
        assert not outcome.results[0].is_error, outcome.results[0].text
    return (time.perf_counter() - start) / calls


async def main(rounds: int, calls: int) -> None:
    root = tempfile.mkdtemp(prefix="toolexec-bench-")
    registry = ToolRegistry()
    registry.register(ShellTool(Workspace(root)))
    executors = {"host": ToolExecutor(registry)}
    for level in LEVELS:
        backend = SubprocessBackend(levels=(level,))
        found = await backend.detect()
        if found.level != level:
            print(f"{level}: not available here ({found.why_not()})")
            continue
        executors[level] = ToolExecutor(
            registry, policy=_ToSandbox(), backends={"subprocess": backend}
        )
    samples: dict[str, list[float]] = {name: [] for name in executors}
    for executor in executors.values():  # warm up: the reaper, the probes, the page cache
        await _per_call(executor, 2)
    for _ in range(rounds):
        for name, executor in executors.items():
            samples[name].append(await _per_call(executor, calls))
    host = statistics.median(samples["host"])
    print(f"{'where':<10} {'ms per call':>12} {'x host':>8}")
    for name, values in samples.items():
        median = statistics.median(values)
        print(f"{name:<10} {median * 1000:>12.2f} {median / host:>8.1f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    args = parser.parse_args()
    print("load average before:", " ".join(f"{x:.2f}" for x in os.getloadavg()))
    trio.run(main, 3 if args.quick else 7, 5 if args.quick else 20)
    print("load average after: ", " ".join(f"{x:.2f}" for x in os.getloadavg()))
