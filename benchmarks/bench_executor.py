"""What the executor costs over the naive trio floor: per call, in wall time, in memory.

Run: ``python benchmarks/bench_executor.py`` (add ``--quick`` for fewer
repeats). In one process it measures, against the *floor* (the naive trio
program: a nursery that starts one task per call, each parsing the call's
JSON arguments and calling the tool function under a ``trio.CapacityLimiter``
as wide as the batch, with no routing, validation or results):

1. per-call cost of N = 1, 10, 100, 1000 no-op read-only calls whose
   arguments arrive as JSON text (as a model sends them) and are parsed and
   validated against the tool's schema, through ``ToolExecutor.execute_batch``
   with the default configuration; and, without a target, N = 10 calls of a
   no-op whose body awaits (a checkpoint that returns at once): a tool that
   *may* block costs its run a nursery, one that cannot (no ``await``) not;
2. wall time of 100 calls of an I/O-bound tool (``await trio.sleep(0.01)``),
   default configuration against the uncapped floor;
3. memory per in-flight call: tracemalloc while 1000 calls are all parked
   on one ``trio.Event`` (pools 1000 wide, so none waits for a permit).
   Beside it, for reference, the floor with a deadline per call (each task
   under ``trio.move_on_after``), as every executor call has one: the part
   of the executor's excess a per-call deadline costs in trio itself.

In the same rounds as (1), for each N, two more sides are timed against
the bare executor of that round (a second table):

4. the gate: the same calls through an executor with a ``RulePolicy`` of 20
   rules (the call matching the last; one rule before it checks the path
   argument) and ``ApprovalConfig.auto()`` with an approver, target <= 1.25x
   at N = 10, 100, 1000; and the same rules in a ``ComposedPolicy`` beside a
   ``CapabilityPolicy`` that grants the tool by pattern, same target;
5. an agent turn: ``AgentLoop.run`` whose model asks for the N calls, then
   answers when shown their results (one loop per run), target <= 2x at
   N = 1 (the per-turn cost outside the batch).

Each figure is the median of several repeats, the sides interleaved so
that machine noise hits them alike. The table prints absolute numbers, the
executor/floor ratio and its target, and the load average around the run.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
import tracemalloc
from typing import TYPE_CHECKING, Any

import trio
import trio.testing

from toolexec import (
    AgentLoop,
    ConcurrencyConfig,
    SideEffects,
    ToolCall,
    ToolExecutor,
    ToolRegistry,
    function_tool,
)
from toolexec.approval import ApprovalConfig, AutoApprover
from toolexec.models import ModelResponse
from toolexec.policy import (
    Capabilities,
    CapabilityPolicy,
    CommandPrefix,
    ComposedPolicy,
    PathGlob,
    Rule,
    RulePolicy,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from toolexec import ToolDefinition
    from toolexec.models import Message
    from toolexec.policy import ToolPolicy

SIZES = (1, 10, 100, 1000)
CALLS_PER_SAMPLE = 2000  # small batches are repeated so a sample lasts long enough
SLEEP_CALLS = 100
SLEEP_SECONDS = 0.01
PARKED = 1000

TARGET_OVERHEAD = 1.0  # executor per-call time at N = 10, 100, 1000 <= the floor's
FALLBACK_OVERHEAD = 1.5  # ... and at most 1.5x while 1.0x cannot be reached
DEADLINE_SECONDS = 60.0  # the reference floor's per-call deadline (never reached)
TARGET_SLEEP = 1.2  # 100 x 10 ms batch within 1.2x of the uncapped floor's wall time
TARGET_MEMORY = 1.2  # memory per in-flight call <= 1.2x the floor's
TARGET_GATE = 1.25  # gated (20 rules, auto approval) per-call time <= 1.25x the bare executor's
TARGET_TURN = 2.0  # an agent turn of one call <= 2x execute_batch of that call


async def noop(path: str, limit: int = 10) -> str:
    """Do nothing (the tool body both sides call)."""
    return ""


async def noop_awaiting(path: str, limit: int = 10) -> str:
    """Do nothing, but through an await that returns at once (so the tool *may* block)."""
    await trio.lowlevel.checkpoint_if_cancelled()
    return ""


async def nap(path: str, limit: int = 10) -> str:
    """Sleep 10 ms."""
    await trio.sleep(SLEEP_SECONDS)
    return ""


GATE: trio.Event | None = None


async def park(path: str, limit: int = 10) -> str:
    """Wait until the benchmark opens the gate."""
    assert GATE is not None
    await GATE.wait()
    return ""


def make_executor(config: ConcurrencyConfig | None = None) -> ToolExecutor:
    registry = ToolRegistry()
    for fn in (noop, noop_awaiting, nap, park):
        registry.register(function_tool(side_effects=SideEffects.READ)(fn))
    return ToolExecutor(registry, config or ConcurrencyConfig())


def twenty_rules() -> RulePolicy:
    """A policy as a deployment writes one: the no-op call matches the last of 20 rules.

    Rules for other tools come first (path denials, shell command prefixes),
    then one that denies the no-op a directory by its path argument, then
    the rule that allows it.
    """
    rules = [Rule("deny", f"tool_{i}", {"path": PathGlob(f"secret_{i}/**")}) for i in range(9)]
    rules += [Rule("ask", "shell", {"command": CommandPrefix(f"cmd{i}")}) for i in range(9)]
    rules.append(Rule("deny", "noop*", {"path": PathGlob(".git/**")}, "never .git"))
    rules.append(Rule("allow", "noop*"))
    return RulePolicy(rules, default="deny")


def make_gated_executor(policy: ToolPolicy | None = None) -> ToolExecutor:
    """The executor behind a 20-rule policy (or ``policy``), every call approved automatically."""
    registry = ToolRegistry()
    for fn in (noop, noop_awaiting):
        registry.register(function_tool(side_effects=SideEffects.READ)(fn))
    return ToolExecutor(
        registry,
        policy=policy or twenty_rules(),
        approver=AutoApprover(),
        approval=ApprovalConfig.auto(),
    )


def composed_policy() -> ComposedPolicy:
    """The 20 rules beside per-agent capabilities (the tool granted by pattern)."""
    caps = CapabilityPolicy({"root": Capabilities(tools=("read_*", "noop*", "grep"))})
    return ComposedPolicy([twenty_rules(), caps])


class TurnModel:
    """A model that asks for ``calls`` and, when shown their results, answers."""

    def __init__(self, calls: Sequence[ToolCall]) -> None:
        self.ask = ModelResponse(tool_calls=tuple(calls))
        self.done = ModelResponse("done")

    async def respond(
        self, messages: Sequence[Message], tools: Sequence[ToolDefinition]
    ) -> ModelResponse:
        """The calls after the user's prompt, the answer after their results."""
        return self.done if messages[-1].role == "tool" else self.ask


def make_calls(name: str, n: int) -> list[ToolCall]:
    """Calls as a model sends them: the arguments are JSON text."""
    return [
        ToolCall(f"call_{i}", name, json.dumps({"path": f"src/f{i}.py", "limit": 5}))
        for i in range(n)
    ]


async def floor_batch(
    fn: Callable[..., Awaitable[str]], calls: list[ToolCall], limiter: trio.CapacityLimiter
) -> None:
    """The floor: one task per call, each parsing its arguments under a capacity limiter."""

    async def one(arguments: Any) -> None:
        async with limiter:
            await fn(**json.loads(arguments))

    async with trio.open_nursery() as nursery:
        for call in calls:
            nursery.start_soon(one, call.arguments)


async def floor_batch_with_deadlines(
    fn: Callable[..., Awaitable[str]], calls: list[ToolCall], limiter: trio.CapacityLimiter
) -> None:
    """The floor, each call also under a deadline of its own (for the memory reference)."""

    async def one(arguments: Any) -> None:
        async with limiter:
            with trio.move_on_after(DEADLINE_SECONDS):
                await fn(**json.loads(arguments))

    async with trio.open_nursery() as nursery:
        for call in calls:
            nursery.start_soon(one, call.arguments)


async def time_batches(run_once: Callable[[], Awaitable[object]], batches: int) -> float:
    gc.collect()
    start = time.perf_counter()
    for _ in range(batches):
        await run_once()
    return time.perf_counter() - start


async def per_call(
    n: int, repeats: int, tool: Callable[..., Awaitable[str]] = noop, *, gate: bool = False
) -> dict[str, float]:
    """Median seconds per call, batches of ``n``: ``executor`` and ``floor``; with
    ``gate``, also ``gated`` (``make_gated_executor``) and ``agent`` (an
    ``AgentLoop.run`` whose model asks for the batch in one turn, then answers).
    """
    executor = make_executor()
    limiter = trio.CapacityLimiter(n)
    calls = make_calls(tool.__name__, n)
    batches = max(1, CALLS_PER_SAMPLE // n)
    sides: dict[str, Callable[[], Awaitable[object]]] = {
        "executor": lambda: executor.execute_batch(calls),
        "floor": lambda: floor_batch(tool, calls, limiter),
    }
    if gate:
        gated, model = make_gated_executor(), TurnModel(calls)
        composed = make_gated_executor(composed_policy())
        sides["gated"] = lambda: gated.execute_batch(calls)
        sides["composed"] = lambda: composed.execute_batch(calls)
        sides["agent"] = lambda: AgentLoop(model, executor).run("go")
    samples: dict[str, list[float]] = {name: [] for name in sides}
    for run in sides.values():  # warm up every path
        await run()
    order = list(sides)
    for i in range(repeats):  # interleave (and rotate who goes first) against drift
        for name in order[i % len(order) :] + order[: i % len(order)]:
            samples[name].append(await time_batches(sides[name], batches))
    return {name: statistics.median(xs) / (batches * n) for name, xs in samples.items()}


async def sleep_wall(repeats: int) -> tuple[float, float]:
    """Median wall time of 100 calls of a 10 ms sleeping tool, executor and floor."""
    executor = make_executor()
    limiter = trio.CapacityLimiter(SLEEP_CALLS)
    calls = make_calls("nap", SLEEP_CALLS)
    ours: list[float] = []
    floor: list[float] = []
    for _ in range(repeats):
        ours.append(await time_batches(lambda: executor.execute_batch(calls), 1))
        floor.append(await time_batches(lambda: floor_batch(nap, calls, limiter), 1))
    return statistics.median(ours), statistics.median(floor)


async def parked_memory(run_batch: Callable[[], Awaitable[object]]) -> tuple[float, float]:
    """Bytes per call (peak, and current while parked) with every call on the gate."""
    global GATE
    GATE = trio.Event()
    gc.collect()
    tracemalloc.start()
    base, _ = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_batch)
        await trio.testing.wait_all_tasks_blocked()
        current, peak = tracemalloc.get_traced_memory()
        GATE.set()
    tracemalloc.stop()
    return (peak - base) / PARKED, (current - base) / PARKED


async def memory(repeats: int) -> dict[str, tuple[float, float]]:
    """Median (peak, current) bytes per parked call: executor, floor, floor with deadlines."""
    executor = make_executor(ConcurrencyConfig(read_width=PARKED))
    limiter = trio.CapacityLimiter(PARKED)
    calls = make_calls("park", PARKED)
    await executor.execute_batch(make_calls("noop", PARKED))  # warm caches on every side
    await floor_batch(noop, calls, limiter)
    await floor_batch_with_deadlines(noop, calls, limiter)
    sides: dict[str, Callable[[], Awaitable[object]]] = {
        "executor": lambda: executor.execute_batch(calls),
        "floor": lambda: floor_batch(park, calls, limiter),
        "deadlines": lambda: floor_batch_with_deadlines(park, calls, limiter),
    }
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
    for _ in range(repeats):
        for name, run in sides.items():
            samples[name].append(await parked_memory(run))
    return {
        name: (statistics.median(x[0] for x in xs), statistics.median(x[1] for x in xs))
        for name, xs in samples.items()
    }


def verdict(ratio: float, target: float, fallback: float | None = None) -> str:
    if ratio <= target:
        return f"<= {target:g}x  met"
    if fallback is not None and ratio <= fallback:
        return f"<= {target:g}x  missed (<= {fallback:g}x met)"
    return f"<= {target:g}x  MISSED"


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


async def main(repeats: int) -> None:
    config = ConcurrencyConfig()
    print(f"toolexec executor vs naive trio floor: median of {repeats} repeats")
    print(
        f"python {sys.version.split()[0]}, trio {trio.__version__}, "
        f"default read width {config.read_width}; load average before: {load()}"
    )
    print()
    print(f"{'measurement':<34}{'executor':>12}{'floor':>12}{'ratio':>8}  target")
    by_size = {}
    for n in SIZES:
        by_size[n] = times = await per_call(n, repeats, gate=True)
        ours, floor = times["executor"], times["floor"]
        ratio = ours / floor
        target = verdict(ratio, TARGET_OVERHEAD, FALLBACK_OVERHEAD) if n > 1 else ""
        label = f"no-op call, N={n} (us/call)"
        print(f"{label:<34}{ours * 1e6:>12.1f}{floor * 1e6:>12.1f}{ratio:>7.2f}x  {target}")
    # A tool with an await in its body may block, so its run keeps a nursery
    # ready to hire workers (the no-op above has none, and its runs need none).
    times = await per_call(10, repeats, noop_awaiting)
    ours, floor = times["executor"], times["floor"]
    label = "no-op with an await, N=10"
    print(f"{label:<34}{ours * 1e6:>12.1f}{floor * 1e6:>12.1f}{ours / floor:>7.2f}x")
    ours, floor = await sleep_wall(repeats)
    ratio = ours / floor
    label = f"{SLEEP_CALLS} x 10 ms sleep (ms wall)"
    print(
        f"{label:<34}{ours * 1e3:>12.1f}{floor * 1e3:>12.1f}{ratio:>7.2f}x  "
        f"{verdict(ratio, TARGET_SLEEP)}"
    )
    mem = await memory(max(3, repeats // 3))
    (ours_peak, ours_now), (floor_peak, floor_now) = mem["executor"], mem["floor"]
    ratio = ours_peak / floor_peak
    label = f"memory, {PARKED} parked (peak B/call)"
    print(
        f"{label:<34}{ours_peak:>12.0f}{floor_peak:>12.0f}{ratio:>7.2f}x  "
        f"{verdict(ratio, TARGET_MEMORY)}"
    )
    label = f"memory, {PARKED} parked (held B/call)"
    print(f"{label:<34}{ours_now:>12.0f}{floor_now:>12.0f}{ours_now / floor_now:>7.2f}x")
    deadline_peak = mem["deadlines"][0]
    label = "  vs floor + per-call deadline"
    print(f"{label:<34}{ours_peak:>12.0f}{deadline_peak:>12.0f}{ours_peak / deadline_peak:>7.2f}x")
    print(
        f"  (a per-call deadline costs the floor {deadline_peak - floor_peak:.0f} B/call "
        "in trio: its cancel scope and cancel status)"
    )
    print()
    print_gate_and_turn(by_size)
    print(f"\nload average after: {load()}")


def print_gate_and_turn(by_size: dict[int, dict[str, float]]) -> None:
    """The gate and the agent turn, each against the bare executor of the same run."""
    print(
        f"{'same runs, against the executor':<34}{'this':>12}{'executor':>12}{'ratio':>8}  target"
    )
    for side, name in (
        ("gated", "gate 20 rules + auto"),
        ("composed", "  + capabilities, composed"),
    ):
        for n, times in by_size.items():
            ratio = times[side] / times["executor"]
            target = verdict(ratio, TARGET_GATE) if n > 1 else ""
            label = f"{name}, N={n}"
            print(
                f"{label:<34}{times[side] * 1e6:>12.1f}{times['executor'] * 1e6:>12.1f}"
                f"{ratio:>7.2f}x  {target}"
            )
    for n, times in by_size.items():
        ratio = times["agent"] / times["executor"]
        target = verdict(ratio, TARGET_TURN) if n == 1 else ""
        label = f"AgentLoop.run turn, N={n}"
        print(
            f"{label:<34}{times['agent'] * 1e6:>12.1f}{times['executor'] * 1e6:>12.1f}"
            f"{ratio:>7.2f}x  {target}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 repeats instead of 15")
    args = parser.parse_args()
    trio.run(main, 3 if args.quick else 15)
