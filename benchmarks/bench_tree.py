"""What an agent tree costs: ~1000 sub-agents against the same leaf calls run flat.

Run: `python benchmarks/bench_tree.py`. Builds a tree of scripted agents with
fan-out 10: every inner agent starts its 10 children in one batch and then
answers; every leaf agent makes one no-op read call and answers. Depth 3
gives 1 + 10 + 100 + 1000 = 1111 agents and 1000 leaf calls; depth 2 gives
111 agents and 100 leaf calls. Each tree is compared, in the same process,
with one agent making the same number of no-op calls in one batch ("flat").
Prints the median wall time of several runs, the overhead per extra agent,
and the peak traced memory (tracemalloc, in a separate run), so the growth
from 100 to 1000 agents can be read off as a ratio.
"""

from __future__ import annotations

import statistics
import time
import tracemalloc
from typing import TYPE_CHECKING, Any

import trio

from toolexec import (
    AgentLoop,
    AgentTree,
    SideEffects,
    SubAgentTool,
    ToolCall,
    ToolExecutor,
    ToolRegistry,
    TreeLimits,
    function_tool,
)
from toolexec.testing import ScriptedModel

if TYPE_CHECKING:
    from collections.abc import Sequence

    from toolexec.models import Message

FAN_OUT = 10
REPEATS = 5


@function_tool(side_effects=SideEffects.READ)
async def noop(n: int) -> str:
    """Do nothing."""
    return ""


def agent_model(depth: int) -> ScriptedModel:
    """A model for one agent: delegate to 10 children, or make one leaf call."""

    def first(messages: Sequence[Message]) -> list[ToolCall]:
        level = int(next(m.text for m in messages if m.role == "user"))
        if level < depth:
            return [ToolCall(f"s{i}", "agent", {"task": str(level + 1)}) for i in range(FAN_OUT)]
        return [ToolCall("leaf", "noop", {"n": level})]

    return ScriptedModel([first, "done"])


def tree_run(depth: int) -> tuple[float, int]:
    registry = ToolRegistry()
    registry.register(noop)
    registry.register(
        SubAgentTool(
            name="agent",
            description="A sub-agent.",
            system_prompt="",
            model=lambda: agent_model(depth),
        )
    )
    tree = AgentTree(TreeLimits(max_depth=depth, max_children=FAN_OUT, max_agents=10_000))
    executor = ToolExecutor(registry, services=[tree])

    async def main() -> float:
        start = time.perf_counter()
        result = await AgentLoop(agent_model(depth), executor).run("0")
        elapsed = time.perf_counter() - start
        assert result.text == "done", result
        return elapsed

    elapsed = trio.run(main)
    return elapsed, tree.statistics().started + 1


def flat_run(calls: int) -> float:
    registry = ToolRegistry()
    registry.register(noop)
    executor = ToolExecutor(registry)
    batch = [ToolCall(f"c{i}", "noop", {"n": i}) for i in range(calls)]

    async def main() -> float:
        start = time.perf_counter()
        result = await AgentLoop(ScriptedModel([batch, "done"]), executor).run("0")
        elapsed = time.perf_counter() - start
        assert result.text == "done"
        return elapsed

    return trio.run(main)


def peak_memory(fn: Any, *args: Any) -> int:
    tracemalloc.start()
    try:
        fn(*args)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def measure(depth: int) -> dict[str, float]:
    leaves = FAN_OUT**depth
    tree_times, agents = [], 0
    for _ in range(REPEATS):
        elapsed, agents = tree_run(depth)
        tree_times.append(elapsed)
    flat = statistics.median(flat_run(leaves) for _ in range(REPEATS))
    tree = statistics.median(tree_times)
    return {
        "agents": agents,
        "leaf_calls": leaves,
        "tree_s": tree,
        "flat_s": flat,
        "per_agent_us": (tree - flat) / (agents - 1) * 1e6,
        "tree_peak_kib": peak_memory(tree_run, depth) / 1024,
        "flat_peak_kib": peak_memory(flat_run, leaves) / 1024,
    }


def main() -> None:
    rows = [measure(2), measure(3)]
    print(f"agent tree, fan-out {FAN_OUT}, median of {REPEATS} runs")
    header = (
        f"{'agents':>7} {'leaf calls':>10} {'tree ms':>9} {'flat ms':>9} {'ratio':>6} "
        f"{'us/agent':>9} {'tree peak KiB':>14} {'flat peak KiB':>14} {'KiB/agent':>10}"
    )
    print(header)
    for r in rows:
        print(
            f"{r['agents']:>7.0f} {r['leaf_calls']:>10.0f} {r['tree_s'] * 1e3:>9.1f} "
            f"{r['flat_s'] * 1e3:>9.1f} {r['tree_s'] / r['flat_s']:>6.1f} "
            f"{r['per_agent_us']:>9.1f} {r['tree_peak_kib']:>14.0f} {r['flat_peak_kib']:>14.0f} "
            f"{r['tree_peak_kib'] / r['agents']:>10.1f}"
        )
    small, large = rows
    agents = large["agents"] / small["agents"]
    time_ratio = large["tree_s"] / small["tree_s"]
    memory_ratio = large["tree_peak_kib"] / small["tree_peak_kib"]
    print(
        f"growth {small['agents']:.0f} -> {large['agents']:.0f} agents (x{agents:.1f}): "
        f"time x{time_ratio:.1f}, peak memory x{memory_ratio:.1f}"
    )


if __name__ == "__main__":
    main()
