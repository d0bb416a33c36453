"""Gather single calls made by asyncio tasks into toolexec batches.

asyncio frameworks (the OpenAI Agents SDK, pydantic-ai, LangGraph's
``ToolNode``) run a model turn's tool calls as sibling asyncio tasks, one per
call, each calling its tool on its own. To keep toolexec's guarantees across
the turn (call order, per-tool caps, read/write ordering) those calls must
reach the executor as one batch. ``Collector.run_call`` parks each call; a
flush task starts with the first one and waits until one loop turn passes
with no new arrival. The sibling tasks, started together, reach their tools
in the same loop turn, so the turn's calls land in one batch, in the order
the framework started them. A call arriving after the flush goes into the
next batch (still correct, only not ordered with the earlier ones).

Cancellation: a caller cancelled before its batch starts takes its call out
of the batch, so the call never runs. A caller cancelled while its batch
runs leaves the batch running for the others; when every caller of a batch
is gone, the batch itself is cancelled (through the bridge: no trio task or
child process is left) before the last caller's ``CancelledError``
propagates. A group whose flush is being cancelled takes no new caller.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .._core._types import ToolCall, ToolResult
    from ._aio import AsyncioExecutor

__all__ = ["Collector"]


class _Group:
    """The calls of one flush: their futures, and the task running their batch."""

    __slots__ = ("calls", "futures", "started", "task", "waiting")

    def __init__(self) -> None:
        self.calls: list[ToolCall] = []
        self.futures: list[asyncio.Future[ToolResult]] = []
        self.task: asyncio.Task[None] | None = None
        self.started = False  # the batch was handed to the executor
        self.waiting = 0


class Collector:
    """Turns concurrent ``run_call`` awaits into one ``execute_batch`` per loop turn."""

    def __init__(self, executor: AsyncioExecutor) -> None:
        self.executor = executor
        self._open: _Group | None = None
        self.batches = 0  # how many batches were run (for tests and benchmarks)

    async def run_call(self, call: ToolCall) -> ToolResult:
        """Run ``call`` in the batch now gathering; its result."""
        loop = asyncio.get_running_loop()
        group = self._open
        if group is None:
            group = self._open = _Group()
            group.task = loop.create_task(self._flush(group))
        future: asyncio.Future[ToolResult] = loop.create_future()
        future.add_done_callback(_retrieve)
        group.calls.append(call)
        group.futures.append(future)
        group.waiting += 1
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            group.waiting -= 1
            if not group.started:  # not handed over yet: the call never runs
                i = group.futures.index(future)
                del group.calls[i], group.futures[i]
            if group.waiting == 0 and group.task is not None:
                if self._open is group:  # a caller arriving now starts a new group
                    self._open = None
                group.task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await _uncancellable(group.task)
            raise

    async def _flush(self, group: _Group) -> None:
        try:
            seen = -1
            while len(group.calls) != seen:  # until a loop turn brings no new call
                seen = len(group.calls)
                await asyncio.sleep(0)
        finally:  # later calls start a new group, also if this one was cancelled
            if self._open is group:
                self._open = None
        group.started = True
        self.batches += 1
        try:
            outcome = await self.executor.execute_batch(group.calls)
        except asyncio.CancelledError:
            for future in group.futures:
                future.cancel()
            raise
        except Exception as exc:  # the bridge is closed or its run died: every caller hears it
            for future in group.futures:
                if not future.done():
                    future.set_exception(exc)
            return
        for future, result in zip(group.futures, outcome.results, strict=True):
            if not future.done():
                future.set_result(result)


def _retrieve(future: asyncio.Future[ToolResult]) -> None:
    # A caller that left early never reads its future; asyncio must not complain.
    if not future.cancelled():
        future.exception()


async def _uncancellable(task: asyncio.Task[None]) -> None:
    """Wait for ``task`` to end even if this task is cancelled meanwhile."""
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
