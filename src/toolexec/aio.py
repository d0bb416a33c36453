"""Run toolexec from asyncio: one trio guest run on the host's loop.

``open_executor`` starts one long-lived trio run as a guest of the running
asyncio loop (``trio.lowlevel.start_guest_run``), builds a ``ToolExecutor``
inside it, and hands back an ``AsyncioExecutor`` whose ``execute_batch`` is
awaited from asyncio tasks. No thread and no new loop: trio code runs on the
asyncio thread, between the loop's own callbacks, and the batches of every
asyncio task share the executor's pools.

Example::

    async with toolexec.aio.open_executor(registry) as executor:
        outcome = await executor.execute_batch(calls)

Theory of operation. The guest's main task opens a nursery and waits. A
batch is submitted with ``TrioToken.run_sync_soon``, which starts a trio task
for it in that nursery; the task completes an ``asyncio.Future`` (directly:
it runs on the loop's thread). Cancelling the awaiting asyncio task cancels
the trio batch (its unfinished calls get ``cancelled`` results, every task
and child process ends), waits for it to finish, and then raises
``asyncio.CancelledError`` as asyncio expects. Leaving the ``async with``
cancels anything still running, ends the guest run and re-raises its error;
a guest run that dies early fails every waiting batch instead of hanging.

Sinks and approvers are called inside the trio run, on the asyncio thread: a
plain sync sink just works, and an approver must be trio-async (an approver
awaiting asyncio objects is not bridged yet).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ._executor import ToolExecutor
from ._public import fixup_module_metadata as _fixup_module_metadata

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence

    from outcome import Outcome

    from ._batch import Batch, BatchOutcome
    from ._registry import ToolRegistry
    from ._types import ToolCall


class _Job:
    """One submitted batch: the asyncio future and, once planned, the trio batch."""

    __slots__ = ("batch", "calls", "cancelled", "future")

    def __init__(self, calls: Sequence[ToolCall], future: asyncio.Future[BatchOutcome]) -> None:
        self.calls = calls
        self.future = future
        self.batch: Batch | None = None
        self.cancelled = False

    def cancel(self) -> None:
        # Trio side. Before the batch is planned, ``_run`` sees the flag.
        self.cancelled = True
        if self.batch is not None:
            self.batch.cancel()

    async def run(self, executor: ToolExecutor) -> None:
        # Trio side: the outcome (or the error) goes to the future.
        try:
            self.batch = batch = executor.prepare(self.calls)
            if self.cancelled:
                batch.cancel()
            outcome = await batch.run()
        except Exception as exc:
            _settle(self.future, exc)
        except BaseException:
            _settle(self.future, RuntimeError("the trio guest run stopped during the batch"))
            raise
        else:
            if not self.future.done():
                self.future.set_result(outcome)


def _settle(future: asyncio.Future[Any], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)


class _Guest:
    """The guest run's lifecycle, seen from both sides; trio side where noted."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.ready: asyncio.Future[ToolExecutor] = loop.create_future()
        self.done: asyncio.Future[Outcome[None]] = loop.create_future()
        self.jobs: set[_Job] = set()
        self.closed: BaseException | None = None
        self.token: trio.lowlevel.TrioToken | None = None
        self.nursery: trio.Nursery | None = None

    async def main(self, registry: ToolRegistry, kwargs: dict[str, Any]) -> None:
        # Trio side: the guest run's main task, holding every batch task.
        async with trio.open_nursery() as nursery:
            executor = ToolExecutor(registry, **kwargs)
            self.token = trio.lowlevel.current_trio_token()
            self.nursery = nursery
            if self.ready.done():  # the host stopped waiting (cancelled)
                return
            self.ready.set_result(executor)
            await trio.sleep_forever()

    def finished(self, result: Outcome[None]) -> None:
        # The done_callback: the run has ended; fail whoever still waits.
        self.closed = RuntimeError("the trio guest run stopped")
        for job in self.jobs:
            _settle(job.future, self.closed)
        _settle(self.ready, RuntimeError("the trio guest run stopped before it started"))
        self.done.set_result(result)

    def submit(self, job: _Job) -> None:
        if self.closed is not None or self.token is None:
            raise RuntimeError("this toolexec.aio executor is closed") from self.closed
        self.token.run_sync_soon(self.start, job)

    def start(self, job: _Job) -> None:
        # Trio side, from ``run_sync_soon``: it must not raise.
        assert self.nursery is not None
        try:
            self.nursery.start_soon(job.run, self.executor)
        except RuntimeError:  # closed to new arrivals: the guest run is ending
            _settle(job.future, RuntimeError("the trio guest run stopped"))

    @property
    def executor(self) -> ToolExecutor:
        return self.ready.result()

    def cancel(self, job: _Job) -> None:
        if self.token is not None and not self.done.done():
            self.token.run_sync_soon(job.cancel)

    async def close(self) -> None:
        """Cancel what still runs, wait for the run's end, re-raise its error."""
        if not self.done.done() and self.token is not None and self.nursery is not None:
            self.token.run_sync_soon(self.nursery.cancel_scope.cancel)
        cancelled = await _wait_uncancellable(self.done)
        self.closed = self.closed or RuntimeError("closed")
        self.done.result().unwrap()
        if cancelled:
            raise asyncio.CancelledError


@attrs.define(eq=False)
class AsyncioExecutor:
    """A ``ToolExecutor`` in a trio guest run, driven from asyncio tasks.

    Made by ``open_executor``. ``executor`` is the trio-side executor (its
    ``statistics()`` may be read from asyncio; run batches through this
    object). ``trio_token`` reaches the guest run: from asyncio,
    ``trio_token.run_sync_soon(event.set)`` sets a trio event.
    """

    executor: ToolExecutor
    trio_token: trio.lowlevel.TrioToken = attrs.field(repr=False)
    _guest: _Guest = attrs.field(alias="guest", repr=False)

    async def execute_batch(self, calls: Sequence[ToolCall]) -> BatchOutcome:
        """Run a batch in the trio guest run; one result per call, in call order.

        Raises:
            asyncio.CancelledError: the awaiting task was cancelled (or timed
                out). The trio batch was cancelled and has finished: its
                unfinished calls got ``cancelled`` results, no task or child
                process is left. The outcome is dropped.
            RuntimeError: the executor is closed, or its guest run stopped.
        """
        guest = self._guest
        job = _Job(calls, asyncio.get_running_loop().create_future())
        guest.submit(job)
        guest.jobs.add(job)
        try:
            return await asyncio.shield(job.future)
        except asyncio.CancelledError:
            guest.cancel(job)
            await _wait_uncancellable(job.future)
            raise
        finally:
            guest.jobs.discard(job)


async def _wait_uncancellable(future: asyncio.Future[Any]) -> bool:
    """Wait for ``future`` however often this task is cancelled; say if it was."""
    cancelled = False
    while not future.done():
        try:
            await asyncio.shield(future)
        except asyncio.CancelledError:
            cancelled = True
    if not future.cancelled():
        future.exception()  # retrieved: the caller raises or reads it itself
    return cancelled


@contextlib.asynccontextmanager
async def open_executor(
    registry: ToolRegistry, **executor_kwargs: Any
) -> AsyncIterator[AsyncioExecutor]:
    """Start a trio guest run on this asyncio loop with a ``ToolExecutor`` in it.

    Example::

        async with toolexec.aio.open_executor(registry, config=config) as ex:
            outcome = await ex.execute_batch(calls)

    Args:
        registry: the tools.
        **executor_kwargs: passed to ``ToolExecutor`` (config, policy, sinks...).

    Raises:
        BaseException: whatever ended the guest run with an error (on entry,
            if ``ToolExecutor`` refused the arguments; else on exit).
    """
    loop = asyncio.get_running_loop()
    guest = _Guest(loop)
    trio.lowlevel.start_guest_run(
        guest.main,
        registry,
        executor_kwargs,
        run_sync_soon_threadsafe=loop.call_soon_threadsafe,
        done_callback=guest.finished,
        host_uses_signal_set_wakeup_fd=threading.current_thread() is threading.main_thread(),
    )
    try:
        executor = await guest.ready
    except BaseException:
        await guest.close()
        raise
    assert guest.token is not None
    try:
        yield AsyncioExecutor(executor, guest.token, guest=guest)
    finally:
        await guest.close()


__all__ = ["AsyncioExecutor", "open_executor"]

_fixup_module_metadata(__name__, __all__)
