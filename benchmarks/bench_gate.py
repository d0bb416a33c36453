"""What the full gate costs per call: validation + a 50-rule policy + auto approval.

Run: `python benchmarks/bench_gate.py`. Compares, in one process, batches of
N no-op read-only calls through a bare executor (validation, AllowAll, no
approval) and through the gate (the same validation, a RulePolicy of 50
rules where the call matches only the last, ApprovalConfig in auto mode with
an approver configured). Prints per-call times and the extra cost in percent.
"""

from __future__ import annotations

import statistics
import time

import trio

from toolexec import SideEffects, ToolCall, ToolExecutor, ToolRegistry, function_tool
from toolexec.approval import ApprovalConfig, AutoApprover
from toolexec.policy import CommandPrefix, PathGlob, Rule, RulePolicy

N = 1000
REPEATS = 15


@function_tool(side_effects=SideEffects.READ)
async def noop(path: str, limit: int = 10) -> str:
    """Do nothing."""
    return ""


def fifty_rules() -> RulePolicy:
    rules = [Rule("deny", f"tool_{i}", {"path": PathGlob(f"secret_{i}/**")}) for i in range(25)]
    rules += [Rule("ask", "shell", {"command": CommandPrefix(f"cmd{i}")}) for i in range(24)]
    rules.append(Rule("allow", "noop", {"path": PathGlob("src/**")}))
    return RulePolicy(rules, default="deny")


def per_call(executor: ToolExecutor) -> float:
    calls = [ToolCall(str(i), "noop", {"path": f"src/f{i}.py", "limit": 5}) for i in range(N)]

    async def once() -> float:
        start = time.perf_counter()
        outcome = await executor.execute_batch(calls)
        elapsed = time.perf_counter() - start
        assert not any(r.is_error for r in outcome.results), outcome.results[0]
        return elapsed

    samples = [trio.run(once) for _ in range(REPEATS)]
    return statistics.median(samples) / N


def main() -> None:
    registry = ToolRegistry()
    registry.register(noop)
    bare = ToolExecutor(registry)
    gated = ToolExecutor(
        registry, policy=fifty_rules(), approver=AutoApprover(), approval=ApprovalConfig.auto()
    )
    per_call(bare)  # warm up
    results = []
    for _ in range(3):  # interleave so machine noise hits both alike
        results.append((per_call(bare), per_call(gated)))
    base = statistics.median(b for b, _ in results)
    gate = statistics.median(g for _, g in results)
    print(f"N = {N} read-only no-op calls per batch, median of {REPEATS} batches x 3 rounds")
    print(f"  bare executor : {base * 1e6:7.1f} us/call")
    print(f"  full gate     : {gate * 1e6:7.1f} us/call")
    print(f"  gate extra    : {(gate / base - 1) * 100:+6.1f} %   (target < 20 %)")


if __name__ == "__main__":
    main()
