"""What the subprocess sandbox costs: ``shell`` running ``true`` in it against on the host.

Run: ``python benchmarks/bench_sandbox.py`` (``--quick`` for fewer repeats).
In one process, interleaved round by round, it runs the same ``shell`` call
(``true``) through a ``ToolExecutor`` on the host and through one routed to
a ``SubprocessBackend`` restricted to each isolation level this machine has
(``bwrap``, ``unshare``, ``rlimits``), fresh (a sandbox per call) and warm
(``warm=4``: a kept sandbox runs each call as a fresh process), and prints
the median time per call of each and its ratio to the host's. Outside
toolexec, in the same rounds, it times ``sh -c true`` and ``bwrap ... true``
(the namespaces, mounts and seccomp filter of a call at the ``bwrap`` level,
started from this process: the floor for a fresh bwrap sandbox). The row
``wasm add warm`` is a pure-Python function tool's call (``add``) in a warm
``WasmBackend`` (target: at most 1 ms). The load average is
printed before and after: compare runs only on a quiet machine.

The last two lines are for scripts::

    warm shell vs host: X.XXx           (the best level's warm sandbox)
    fresh bwrap shell vs raw bwrap: X.XXx
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import TYPE_CHECKING

import trio

from toolexec import ToolCall, ToolExecutor, ToolRegistry
from toolexec._backends._sandbox_child import seccomp_filter
from toolexec._backends._sandbox_launch import bwrap_command
from toolexec._tools._shell import ShellTool
from toolexec._tools._workspace import Workspace
from toolexec.backends import SandboxLimits, SubprocessBackend, WasmBackend
from toolexec.policy import Allow, ExecutionGrant

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

LEVELS = ("bwrap", "unshare", "rlimits")
Timed = dict[str, "Callable[[int], Awaitable[float]]"]


class _ToSandbox:
    def decide(self, definition: object, arguments: object, agent_path: str) -> Allow:
        return Allow(ExecutionGrant(sandbox="subprocess"))


def _shell_calls(executor: ToolExecutor) -> Callable[[int], Awaitable[float]]:
    async def per_call(calls: int) -> float:
        call = [ToolCall("1", "shell", {"command": "true"})]
        start = time.perf_counter()
        for _ in range(calls):
            outcome = await executor.execute_batch(call)
            assert not outcome.results[0].is_error, outcome.results[0].text
        return (time.perf_counter() - start) / calls

    return per_call


def _raw(argv: list[str]) -> Callable[[int], Awaitable[float]]:
    async def per_call(calls: int) -> float:
        start = time.perf_counter()
        for _ in range(calls):
            subprocess.run(argv, check=True)  # timed as it is, blocking
        return (time.perf_counter() - start) / calls

    return per_call


async def _raw_bwrap(root: str) -> Callable[[int], Awaitable[float]]:
    """``bwrap ... true`` with the namespaces, mounts and seccomp filter of a call
    at the ``bwrap`` level, started from this process."""
    found = await SubprocessBackend(levels=("bwrap",)).detect()
    argv = bwrap_command(found, SandboxLimits(), root, "/bin/true", ["true"])
    assert argv is not None
    read, write = os.pipe()
    os.write(write, seccomp_filter(unix=True))
    os.close(write)
    argv[argv.index("--seccomp") + 1] = str(read)
    os.close(read)

    async def per_call(calls: int) -> float:
        start = time.perf_counter()
        for _ in range(calls):
            filters, write = os.pipe()
            os.write(write, seccomp_filter(unix=True))
            os.close(write)
            if filters != read:
                os.dup2(filters, read)
                os.close(filters)
            subprocess.run(argv, check=True, pass_fds=(read,))
            os.close(read)
        return (time.perf_counter() - start) / calls

    return per_call


_WASM_TOOLS = '''
from toolexec import SideEffects, function_tool


@function_tool(side_effects=SideEffects.READ)
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b
'''


class _ToWasm:
    def decide(self, definition: object, arguments: object, agent_path: str) -> Allow:
        return Allow(ExecutionGrant(sandbox="wasm"))


def _wasm_add(stack: list[SubprocessBackend | WasmBackend]) -> Callable[[int], Awaitable[float]]:
    """A pure-Python function tool's call (``add``) in a warm wasm sandbox."""
    folder = tempfile.mkdtemp(prefix="toolexec-bench-wasm-")
    with open(os.path.join(folder, "bench_wasm_tools.py"), "w") as f:
        f.write(_WASM_TOOLS)
    sys.path.insert(0, folder)
    tools = importlib.import_module("bench_wasm_tools")
    registry = ToolRegistry()
    registry.register(tools.add)
    backend = WasmBackend()
    stack.append(backend)
    executor = ToolExecutor(registry, policy=_ToWasm(), backends={"wasm": backend})

    async def per_call(calls: int) -> float:
        call = [ToolCall("1", "add", {"a": 1, "b": 2})]
        start = time.perf_counter()
        for _ in range(calls):
            outcome = await executor.execute_batch(call)
            assert outcome.results[0].text == "3", outcome.results[0].text
        return (time.perf_counter() - start) / calls

    return per_call


async def _sandboxes(registry: ToolRegistry, stack: list[SubprocessBackend | WasmBackend]) -> Timed:
    """Per level the machine has: the shell call in a fresh and in a warm sandbox."""
    timed: Timed = {}
    for level in LEVELS:
        for mode, warm in (("fresh", 0), ("warm", 4)):
            backend = SubprocessBackend(levels=(level,), warm=warm)
            found = await backend.detect()
            if found.level != level:
                print(f"{level}: not available here ({found.why_not()})")
                break
            stack.append(backend)
            executor = ToolExecutor(registry, policy=_ToSandbox(), backends={"subprocess": backend})
            timed[f"{level} {mode}"] = _shell_calls(executor)
    timed["wasm add warm"] = _wasm_add(stack)
    return timed


async def main(rounds: int, calls: int) -> None:
    root = tempfile.mkdtemp(prefix="toolexec-bench-")
    registry = ToolRegistry()
    registry.register(ShellTool(Workspace(root)))
    timed: Timed = {"host": _shell_calls(ToolExecutor(registry))}
    backends: list[SubprocessBackend | WasmBackend] = []
    timed.update(await _sandboxes(registry, backends))
    timed["sh -c true"] = _raw(["/bin/sh", "-c", "true"])
    if "bwrap fresh" in timed:
        timed["raw bwrap true"] = await _raw_bwrap(root)
    samples: dict[str, list[float]] = {name: [] for name in timed}
    try:
        for per_call in timed.values():  # warm up: the reaper, the probes, the page cache
            await per_call(2)
        for _ in range(rounds):
            for name, per_call in timed.items():
                samples[name].append(await per_call(calls))
    finally:
        for backend in backends:
            await backend.aclose()
    medians = {name: statistics.median(values) for name, values in samples.items()}
    host = medians["host"]
    print(f"{'where':<16} {'ms per call':>12} {'x host':>8}")
    for name, median in medians.items():
        print(f"{name:<16} {median * 1000:>12.2f} {median / host:>8.2f}")
    warm = next((medians[f"{lv} warm"] for lv in LEVELS if f"{lv} warm" in medians), None)
    if warm is not None:
        print(f"warm shell vs host: {warm / host:.2f}x")
    if "raw bwrap true" in medians:
        raw = medians["raw bwrap true"]
        print(f"fresh bwrap shell vs raw bwrap: {medians['bwrap fresh'] / raw:.2f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    args = parser.parse_args()
    print("load average before:", " ".join(f"{x:.2f}" for x in os.getloadavg()))
    trio.run(main, 3 if args.quick else 7, 5 if args.quick else 20)
    print("load average after: ", " ".join(f"{x:.2f}" for x in os.getloadavg()))
