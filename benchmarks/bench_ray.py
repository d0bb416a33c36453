"""What running calls on Ray costs, and what it buys, against the host.

Run: ``python benchmarks/bench_ray.py`` (``--quick``: 3 repeats and 200
CPU-bound calls instead of 1000). It starts a local Ray cluster with two
CPUs (``ray.init(num_cpus=2)``) and, in the same process, measures:

1. per-call cost of a no-op sync function tool at N = 1, 100, 1000 calls
   per batch, routed to the ``ray`` backend (one Ray task per call) and
   to the host (one worker thread per call), all calls admitted at once
   (read width N); plus the driver's CPU time per Ray call, which bounds
   how many calls per second one executor process can push through Ray;
2. wall time of 1000 calls of a 50 ms pure-Python CPU-bound tool: on the
   host (threads, which share one GIL) against Ray with two workers.

The functions are importable (``per_call``, ``cpu_bound``) so that other
scripts can combine the figures; each returns seconds. Absolute figures
depend on the load: the script prints ``/proc/loadavg`` before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

import trio

from toolexec import (
    ConcurrencyConfig,
    SideEffects,
    ToolCall,
    ToolDefinition,
    ToolExecutor,
    ToolRegistry,
    function_tool,
)
from toolexec.backends import RayBackend
from toolexec.policy import Allow, Decision, ExecutionGrant

SIZES = (1, 100, 1000)
CPU_CALLS = 1000
CPU_MS = 50
ITERATIONS_PER_MS: list[int] = []  # calibrated once: loop iterations per millisecond here


@function_tool(side_effects=SideEffects.READ)
def noop(x: int) -> int:
    """Return x."""
    return x


@function_tool(side_effects=SideEffects.READ, timeout=3600)  # 1000 calls queue for threads
def burn(iterations: int) -> int:
    """Spend CPU in pure Python (holding the GIL)."""
    total = 0
    for i in range(iterations):
        total += i
    return total & 1


class Route:
    """Grant every call to one sandbox."""

    def __init__(self, sandbox: str) -> None:
        self.grant = ExecutionGrant(sandbox=sandbox)

    def decide(self, definition: ToolDefinition, arguments: Any, agent_path: str) -> Decision:
        return Allow(self.grant)


def make_executor(sandbox: str, width: int) -> ToolExecutor:
    registry = ToolRegistry()
    registry.register(noop)
    registry.register(burn)
    backends = {"ray": RayBackend()} if sandbox == "ray" else {}
    return ToolExecutor(
        registry,
        ConcurrencyConfig(read_width=max(1, width)),
        policy=Route(sandbox),
        backends=backends,
    )


def calls(name: str, n: int, arguments: dict[str, Any]) -> list[ToolCall]:
    return [ToolCall(f"c{i}", name, arguments) for i in range(n)]


def start_ray() -> None:
    """A local two-CPU cluster for this process (once)."""
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)


async def _timed(executor: ToolExecutor, batch: list[ToolCall]) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    outcome = await executor.execute_batch(batch)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    bad = [r.text for r in outcome.results if r.is_error]
    assert not bad, bad[:3]
    return wall, cpu


async def per_call(n: int, repeats: int = 5) -> dict[str, float]:
    """Median seconds per call of ``n`` no-op calls: ``ray``, ``host``, and the
    driver's CPU seconds per call on Ray (``ray_cpu``)."""
    start_ray()
    on_ray, on_host = make_executor("ray", n), make_executor("host", n)
    batch = calls("noop", n, {"x": 1})
    await on_ray.execute_batch(batch)  # warm up: workers started, function exported
    await on_host.execute_batch(batch)
    ray_wall: list[float] = []
    ray_cpu: list[float] = []
    host_wall: list[float] = []
    for _ in range(repeats):  # interleaved, so noise hits both alike
        wall, cpu = await _timed(on_ray, batch)
        ray_wall.append(wall / n)
        ray_cpu.append(cpu / n)
        host_wall.append((await _timed(on_host, batch))[0] / n)
    return {
        "ray": statistics.median(ray_wall),
        "host": statistics.median(host_wall),
        "ray_cpu": statistics.median(ray_cpu),
    }


def calibrate() -> int:
    """Loop iterations of ``burn`` that take about 1 ms of CPU here (median of 5).

    CPU time, not wall time: on a loaded machine the wall clock runs on while
    this process waits for a core, which would make each call too short.
    """
    if not ITERATIONS_PER_MS:
        probe = 200_000
        samples = []
        for _ in range(5):
            start = time.thread_time()
            burn.fn(probe)
            samples.append(time.thread_time() - start)
        ITERATIONS_PER_MS.append(int(probe / (statistics.median(samples) * 1000)))
    return ITERATIONS_PER_MS[0]


async def cpu_bound(n: int = CPU_CALLS, ms: int = CPU_MS) -> dict[str, float]:
    """Wall seconds of ``n`` calls of a ``ms`` CPU-bound tool: ``host`` (threads)
    and ``ray`` (two workers)."""
    start_ray()
    arguments = {"iterations": calibrate() * ms}
    on_ray, on_host = make_executor("ray", n), make_executor("host", n)
    await on_ray.execute_batch(calls("burn", 4, arguments))  # warm up the workers
    host = (await _timed(on_host, calls("burn", n, arguments)))[0]
    ray = (await _timed(on_ray, calls("burn", n, arguments)))[0]
    return {"host": host, "ray": ray}


def loadavg() -> str:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "unknown"


async def main(repeats: int, cpu_calls: int) -> None:
    import ray

    print(f"toolexec RayBackend vs host: median of {repeats} repeats")
    print(f"python {sys.version.split()[0]}, ray {ray.__version__}, {os.cpu_count()} CPUs")
    print(f"load average before: {loadavg()}")
    start_ray()
    print()
    print(f"{'no-op call':<24}{'host us':>10}{'ray us':>10}{'ray/host':>10}{'driver CPU us':>15}")
    for n in SIZES:
        found = await per_call(n, repeats)
        print(
            f"{'N=' + str(n):<24}{found['host'] * 1e6:>10.0f}{found['ray'] * 1e6:>10.0f}"
            f"{found['ray'] / found['host']:>9.1f}x{found['ray_cpu'] * 1e6:>15.0f}"
        )
    print()
    found = await cpu_bound(cpu_calls)
    ideal = cpu_calls * CPU_MS / 1000
    print(f"{cpu_calls} x {CPU_MS} ms CPU-bound calls (one core's work: {ideal:.1f} s)")
    print(f"  host, threads (one GIL): {found['host']:8.1f} s")
    print(f"  ray, 2 workers:          {found['ray']:8.1f} s")
    print(f"  speed-up of ray over host: {found['host'] / found['ray']:.2f}x")
    print(f"  (calibrated: {calibrate()} loop iterations per CPU millisecond)")
    print(f"load average after: {loadavg()}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 repeats, 200 CPU-bound calls")
    args = parser.parse_args()
    trio.run(main, 3 if args.quick else 5, 200 if args.quick else CPU_CALLS)
