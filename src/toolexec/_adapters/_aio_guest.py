"""The trio side of ``toolexec.aio``: one guest run (or a trio thread) per executor.

The user-facing story and the theory of operation: the docstring of
``toolexec.aio``. This module holds the run itself (``_Guest``), the jobs
asyncio callers hand it (``_Job``) and the context and step relays between
the two loops.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
import types
from typing import TYPE_CHECKING, Any, Literal, ParamSpec, TypeVar, cast

import trio

from .._core._executor import ToolExecutor

if TYPE_CHECKING:
    import threading
    from collections.abc import (
        Callable,
        Coroutine,
        Generator,
        Sequence,
    )
    from contextlib import AbstractAsyncContextManager

    from outcome import Outcome

    from .._core._batch import Batch, BatchOutcome
    from .._core._registry import ToolRegistry
    from .._core._types import ToolCall


P = ParamSpec("P")
T = TypeVar("T")

Mode = Literal["guest", "thread"]
MODES: tuple[Mode, ...] = ("guest", "thread")

# How long the guest-mode dispatcher stays awake after a batch ends, in
# seconds of ``time.perf_counter``: long enough to take the next
# batch of a caller running batches back to back without a thread hand-off,
# short enough that an idle host loop spins for no noticeable time.
LINGER = 0.0005

_CLOSED = "this toolexec.aio executor is closed"


class _Host:
    """The host asyncio loop as seen from the trio run (guest or thread)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, *, threaded: bool) -> None:
        self.loop = loop
        self.threaded = threaded
        self.token: trio.lowlevel.TrioToken | None = None

    def check_loop(self, what: str) -> None:
        """From the asyncio side: refuse a caller on another loop (or outside any)."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not self.loop:
            raise RuntimeError(
                f"{what} was called from {'another' if running else 'no'} asyncio loop; the"
                " executor belongs to the asyncio loop that opened it (open_executor). Call"
                " it from a task on that loop; from another thread, submit the coroutine"
                " to that loop with asyncio.run_coroutine_threadsafe(...)"
            )

    def call(self, fn: Callable[..., object], *args: Any) -> None:
        """From the trio side: run ``fn(*args)`` on the loop's thread."""
        if self.threaded:
            self.loop.call_soon_threadsafe(fn, *args)
        else:
            fn(*args)

    async def run(self, fn: Callable[..., Coroutine[Any, Any, T]], *args: Any, **kwargs: Any) -> T:
        """From the trio side: run ``fn(*args, **kwargs)`` as an asyncio task, wait for it.

        A trio cancel (the executor's timeout, a cancelled batch) cancels the
        asyncio task and waits, shielded, until it has finished; then the
        ``trio.Cancelled`` goes on. The task runs in a copy of the trio
        task's context variables. A ``SystemExit`` or ``KeyboardInterrupt``
        from ``fn`` is raised here, as if ``fn`` ran in this trio task:
        asyncio would let either out of its loop, ending the host program.
        """
        assert self.token is not None
        token, done = self.token, trio.Event()
        task: list[asyncio.Task[T | None]] = []
        escaped: list[BaseException] = []
        context = contextvars.copy_context()

        async def body() -> T | None:
            try:
                return await fn(*args, **kwargs)
            except (KeyboardInterrupt, SystemExit) as exc:
                escaped.append(exc)
                return None

        def start() -> None:
            made = self.loop.create_task(body(), context=context)
            made.add_done_callback(lambda _: token.run_sync_soon(done.set))
            task.append(made)

        def cancel() -> None:
            task[0].cancel()

        self.call(start)
        try:
            await done.wait()
        except BaseException:
            with trio.CancelScope(shield=True):
                self.call(cancel)
                await done.wait()
            raise
        if task[0].cancelled():  # by someone else: asyncio's CancelledError must not leak
            raise RuntimeError(f"the asyncio task running {fn.__name__!r} was cancelled")
        result = task[0].result()
        if escaped:
            raise escaped[0]
        return cast("T", result)  # a value of ``fn``: nothing escaped


# The host of the trio run this task belongs to, for tools and approvers.
_HOST: contextvars.ContextVar[_Host | None] = contextvars.ContextVar(
    "toolexec_aio_host", default=None
)


def _current_host(what: str) -> _Host:
    host = _HOST.get()
    if host is None:
        raise RuntimeError(
            f"{what} needs an asyncio host loop: run the executor through"
            " toolexec.aio.open_executor(...)"
        )
    return host


class _Job:
    """One submitted batch: the asyncio future and, once planned, the trio batch."""

    __slots__ = ("batch", "calls", "cancelled", "context", "finished", "future", "waiter")

    def __init__(self, calls: Sequence[ToolCall], future: asyncio.Future[BatchOutcome]) -> None:
        self.calls = calls
        self.future = future
        # A copy of the asyncio side's context variables, when the batch does
        # not run in a task spawned from that side (which copies them itself):
        # run by the dispatcher, or started through ``run_sync_soon``.
        self.context: contextvars.Context | None = None
        self.batch: Batch | None = None
        self.cancelled = False
        # Asyncio side: whether the batch has ended on the trio side, and who
        # waits for that after the awaiting task was cancelled (``future`` is
        # cancelled then).
        self.finished = False
        self.waiter: asyncio.Future[None] | None = None

    def finish(self, value: BatchOutcome | None, exc: BaseException | None) -> None:
        # Asyncio side: the batch has ended on the trio side.
        self.finished = True
        if not self.future.done():
            if exc is not None:
                self.future.set_exception(exc)
            else:
                self.future.set_result(value)  # type: ignore[arg-type]
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def cancel(self) -> None:
        # Trio side. Before the batch is planned, ``run`` sees the flag.
        self.cancelled = True
        if self.batch is not None:
            self.batch.cancel()

    async def run(self, guest: _Guest) -> None:
        # Trio side, in a task of its own: the outcome (or the error) goes to
        # the future.
        if self.context is not None:
            for var, value in self.context.items():
                var.set(value)  # the host's context: spans, request ids...
        guest.running += 1
        try:
            await self.body(guest)
        finally:
            guest.running -= 1
            guest.linger()

    async def body(self, guest: _Guest) -> None:
        # Trio side: plan and run the batch, hand its outcome to the future.
        _HOST.set(guest.host)
        try:
            self.batch = batch = guest.executor.prepare(self.calls)
            if self.cancelled:
                batch.cancel()
            result = await batch.run()
        except Exception as exc:
            guest.host.call(self.finish, None, exc)
        except KeyboardInterrupt as exc:
            # Out of the batch bare, as from ``execute_batch`` in trio, to the
            # task that awaits it; the run goes on, as a trio host's would.
            guest.host.call(self.finish, None, exc)
        except BaseException:
            guest.host.call(
                self.finish, None, RuntimeError("the trio run stopped during the batch")
            )
            raise
        else:
            guest.host.call(self.finish, result, None)


@types.coroutine
def _in_context(
    context: contextvars.Context, coro: Coroutine[Any, Any, T]
) -> Generator[Any, Any, T]:
    """Await ``coro`` with ``context`` as its context variables, in the current task.

    Each step of ``coro`` runs inside ``context.run``, so what it reads and
    sets is that context's, as if it ran in a task of its own made from a
    copy of it; what trio sends into the task goes on to ``coro``.
    """
    send: Callable[[Any], Any] = coro.send
    arg: Any = None
    while True:
        try:
            message = context.run(send, arg)
        except StopIteration as stop:
            result: T = stop.value
            return result
        try:
            arg = yield message
        except BaseException as exc:  # thrown into the task (``close``): on to ``coro``
            send, arg = coro.throw, exc
        else:
            send = coro.send


def _set_result(future: asyncio.Future[T], value: T) -> None:
    if not future.done():
        future.set_result(value)


def _settle(future: asyncio.Future[Any], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)


class _Context:
    """A long-lived trio context, entered and left by one task of the outer nursery."""

    def __init__(self, cm: AbstractAsyncContextManager[Any], future: asyncio.Future[Any]) -> None:
        self.cm = cm
        self.future = future
        self.release = trio.Event()
        self.exited = trio.Event()
        self.scope = trio.CancelScope()
        self.entered = False

    async def run(self, guest: _Guest) -> None:
        # Trio side. An error entering goes to ``enter``'s caller; an error
        # leaving is kept for ``close`` to raise.
        _HOST.set(guest.host)
        try:
            with self.scope:
                try:
                    async with self.cm as value:
                        self.entered = True
                        guest.host.call(_set_result, self.future, value)
                        await self.release.wait()
                except Exception as exc:
                    if self.entered:
                        guest.errors.append(exc)
                    else:
                        guest.host.call(_settle, self.future, exc)
            if self.scope.cancelled_caught and not self.entered:
                guest.host.call(_settle, self.future, RuntimeError("entering was cancelled"))
        finally:
            self.exited.set()


class _Steps:
    """Guest mode: the run's next step, run by the loop soon, or at once by a submitter.

    Trio hands each step it wants run soon to ``schedule`` (its
    ``run_sync_soon_not_threadsafe``); one loop callback at a time runs
    whichever step is waiting. ``run_now`` runs the waiting step straight
    away instead, on the loop's thread. A step waits only between two steps,
    never while one runs, so ``run_now`` cannot run a step inside another.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.waiting: Callable[[], object] | None = None
        self.queued = False  # a loop callback will run the waiting step

    def schedule(self, step: Callable[[], object]) -> None:
        assert self.waiting is None  # trio asks for one step at a time
        self.waiting = step
        if not self.queued:
            self.queued = True
            self.loop.call_soon(self._from_loop)

    def _from_loop(self) -> None:
        self.queued = False
        self.run_now()

    def run_now(self) -> None:
        step, self.waiting = self.waiting, None
        if step is not None:
            step()


class _Guest:
    """The trio run's lifecycle, seen from both sides; trio side where noted."""

    def __init__(self, loop: asyncio.AbstractEventLoop, mode: Mode) -> None:
        self.host = _Host(loop, threaded=mode == "thread")
        self.ready: asyncio.Future[ToolExecutor] = loop.create_future()
        # The run's end: ``None``, or the error it ended with.
        self.done: asyncio.Future[BaseException | None] = loop.create_future()
        self.jobs: set[_Job] = set()
        self.steps = _Steps(loop)
        self.closed: BaseException | None = None
        self.token: trio.lowlevel.TrioToken | None = None
        self.nursery: trio.Nursery | None = None  # the batches' nursery
        self.outer: trio.Nursery | None = None  # the contexts
        self.contexts: list[_Context] = []
        self.errors: list[Exception] = []
        self.thread: threading.Thread | None = None
        self.tool_executor: ToolExecutor | None = None
        # Guest mode's dispatcher: whether it waits for a batch (``submit``
        # may hand it one), the batch handed over, its task when parked, and
        # until when it spins instead of parking.
        self.dispatcher: trio.lowlevel.Task | None = None
        self.idle = False
        self.handed: _Job | None = None
        self.parked: trio.lowlevel.Task | None = None
        self.linger_until = 0.0
        self.running = 0  # batches running in tasks of their own

    # -- trio side ---------------------------------------------------------

    async def main(self, registry: ToolRegistry, kwargs: dict[str, Any]) -> None:
        # The run's main task: contexts outside, batches inside.
        _HOST.set(self.host)
        self.tool_executor = executor = ToolExecutor(registry, **kwargs)  # bare errors
        async with trio.open_nursery() as outer:
            self.token = self.host.token = trio.lowlevel.current_trio_token()
            self.outer = outer
            async with trio.open_nursery() as nursery:
                self.nursery = nursery
                if not self.host.threaded:
                    nursery.start_soon(self._dispatch)
                    self.idle = True  # it takes a batch handed over before its first step
                if self.ready.done():  # the host stopped waiting (cancelled)
                    nursery.cancel_scope.cancel()
                else:
                    self.host.call(_set_result, self.ready, executor)
                await trio.sleep_forever()
            for held in reversed(self.contexts):  # last entered, first left
                held.release.set()
                await held.exited.wait()
            outer.cancel_scope.cancel()
        if self.errors:
            raise BaseExceptionGroup("leaving contexts entered through toolexec.aio", self.errors)

    async def _dispatch(self) -> None:
        # Guest mode: run the batches ``submit`` hands over, one at a time, in
        # this task (a batch submitted while one runs here gets a task of its
        # own). Between batches, stay runnable until ``linger_until``, one
        # step per loop turn, so the run does not go to wait for I/O in its
        # thread; then park. Not while batches run in tasks of their own: they
        # keep the run busy, and a step more per loop turn would slow them.
        self.dispatcher = trio.lowlevel.current_task()
        try:
            while True:
                job = self.handed
                if job is not None:
                    self.handed = None
                    assert job.context is not None
                    await _in_context(job.context, job.body(self))
                    self.linger_until = time.perf_counter() + LINGER
                    self.idle = True
                elif self.running or time.perf_counter() >= self.linger_until:
                    self.parked = trio.lowlevel.current_task()
                    await trio.lowlevel.wait_task_rescheduled(self._unpark_on_cancel)
                else:
                    await trio.lowlevel.checkpoint()
        finally:
            self.idle = False
            if self.handed is not None:  # handed over as the run ends: never started
                error = RuntimeError("the trio run stopped before the batch")
                self.host.call(self.handed.finish, None, error)
                self.handed = None

    def _unpark_on_cancel(self, _raise_cancel: Any) -> trio.lowlevel.Abort:
        self.parked = None
        return trio.lowlevel.Abort.SUCCEEDED

    def linger(self) -> None:
        """Keep the run awake a while: another batch may follow soon."""
        if not self.host.threaded:
            self.linger_until = time.perf_counter() + LINGER
            self.wake()

    def wake(self) -> None:
        # Guest mode, trio side or between steps: the dispatcher, if parked,
        # runs in the next step.
        if self.parked is not None:
            task, self.parked = self.parked, None
            trio.lowlevel.reschedule(task)

    def start(self, job: _Job) -> None:
        # Between trio steps (guest mode) or from ``run_sync_soon``: no raising.
        assert self.nursery is not None
        try:
            self.nursery.start_soon(job.run, self)
        except RuntimeError:  # the batches' nursery is closed: the executor is closing
            error = RuntimeError("the trio run stopped taking batches: the executor is closing")
            self.host.call(job.finish, None, error)

    @property
    def executor(self) -> ToolExecutor:
        assert self.tool_executor is not None
        return self.tool_executor

    # -- asyncio side ------------------------------------------------------

    def guest_finished(self, result: Outcome[None]) -> None:
        # The guest run's ``done_callback``.
        try:
            result.unwrap()
        except BaseException as exc:  # kept, raised by ``close``
            self.finished(exc)
        else:
            self.finished(None)

    def finished(self, error: BaseException | None) -> None:
        # The run has ended; fail whoever still waits.
        self.closed = RuntimeError("the trio run stopped")
        for job in self.jobs:
            job.finish(None, self.closed)
        for held in self.contexts:
            _settle(held.future, self.closed)
        _settle(self.ready, RuntimeError("the trio run stopped before it started"))
        self.done.set_result(error)

    def _check_open(self) -> None:
        if self.closed is not None or self.token is None:
            raise RuntimeError(_CLOSED) from self.closed

    def soon(self, fn: Callable[..., object], *args: Any) -> bool:
        """Have the trio run call ``fn(*args)`` soon; ``False`` if it has ended.

        The run can end (in its thread, or in its last guest step) before the
        loop has heard of it from ``finished``; until then ``run_sync_soon``
        raises trio's ``RunFinishedError``, and ``finished``, still to come,
        fails whoever waits.
        """
        assert self.token is not None
        try:
            self.token.run_sync_soon(fn, *args)
        except trio.RunFinishedError:
            return False
        return True

    def submit(self, job: _Job) -> None:
        self._check_open()
        if not self.host.threaded and trio.lowlevel.in_trio_run():
            # Guest mode, on the loop's thread between two steps of the run:
            # trio objects may be touched now. Trio wakes its I/O-wait thread
            # if no step is scheduled, as ``run_sync_soon`` would.
            if self.idle:
                # The dispatcher runs it in its next step, in a copy of this
                # asyncio task's context variables.
                self.idle = False
                job.context = contextvars.copy_context()
                self.handed = job
                self.wake()
            else:
                self.start(job)  # a task of its own (its context: a copy of this one's)
            return
        job.context = contextvars.copy_context()
        if not self.soon(self.start, job):
            raise RuntimeError(_CLOSED)

    def cancel(self, job: _Job) -> None:
        if self.token is not None and not self.done.done():
            self.soon(job.cancel)  # or the run has ended: ``finished`` ends the job

    def add_context(self, held: _Context) -> None:
        self._check_open()
        self.contexts.append(held)  # an ended run's ``finished`` fails its future

        def start() -> None:
            assert self.outer is not None
            try:
                self.outer.start_soon(held.run, self)
            except RuntimeError:  # pragma: no cover - closing at this very moment
                held.exited.set()

        self.soon(start)

    async def close(self) -> None:
        """Cancel what still runs, wait for the run's end, re-raise its error."""
        if not self.done.done() and self.token is not None and self.nursery is not None:
            self.soon(self.nursery.cancel_scope.cancel)
        cancelled = await _wait_uncancellable(self.done)
        if self.thread is not None:
            self.thread.join()
        self.closed = self.closed or RuntimeError("closed")
        error = self.done.result()
        if error is not None:
            raise error
        if cancelled:
            raise asyncio.CancelledError


async def _wait_uncancellable(future: asyncio.Future[Any]) -> bool:
    """Wait for ``future`` however often this task is cancelled; say if it was."""
    cancelled = False
    while not future.done():
        try:
            await asyncio.shield(future)
        except asyncio.CancelledError:
            cancelled = True
        except Exception:  # read below, by whoever needs it
            pass
    if not future.cancelled():
        future.exception()  # retrieved: the caller raises or reads it itself
    return cancelled
