"""anyio programs: on the trio backend toolexec runs directly; on asyncio, via the bridge."""

from __future__ import annotations

import anyio
import trio

import toolexec.aio
from toolexec import SideEffects, ToolCall, ToolExecutor, ToolRegistry, function_tool


def _registry() -> ToolRegistry:
    registry = ToolRegistry()

    @function_tool(side_effects=SideEffects.READ)
    async def double(n: int) -> int:
        """Double a number, after a checkpoint."""
        await trio.lowlevel.checkpoint()
        return 2 * n

    registry.register(double)
    return registry


CALLS = [ToolCall(str(i), "double", {"n": i}) for i in range(3)] + [ToolCall("x", "double", {})]


def test_anyio_trio_backend_runs_the_executor_directly() -> None:
    async def main() -> list[tuple[str, bool]]:
        executor = ToolExecutor(_registry())
        async with anyio.create_task_group() as tg:  # anyio code alongside the batch
            tg.start_soon(anyio.sleep, 0)
            outcome = await executor.execute_batch(CALLS)
        return [(r.text, r.is_error) for r in outcome.results]

    results = anyio.run(main, backend="trio")
    assert [text for text, _ in results[:3]] == ["0", "2", "4"]
    assert results[3][1] is True


def test_anyio_asyncio_backend_uses_the_bridge() -> None:
    async def main() -> list[str]:
        async with toolexec.aio.open_executor(_registry()) as executor:
            outcome = await executor.execute_batch(CALLS[:3])
        return [r.text for r in outcome.results]

    assert anyio.run(main, backend="asyncio") == ["0", "2", "4"]
