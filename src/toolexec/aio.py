"""Run toolexec from asyncio: one trio run beside the host's loop.

``open_executor`` starts one long-lived trio run, builds a ``ToolExecutor``
inside it, and hands back an ``AsyncioExecutor`` whose ``execute_batch`` is
awaited from asyncio tasks; the batches of every asyncio task share the
executor's pools.

Example::

    async with toolexec.aio.open_executor(registry) as executor:
        outcome = await executor.execute_batch(calls)

Two modes, chosen explicitly:

- ``mode="guest"`` (the default): the trio run is a guest of the running
  asyncio loop (``trio.lowlevel.start_guest_run``). No thread, no new loop:
  trio code runs on the asyncio thread, between the loop's own callbacks.
- ``mode="thread"``: ``trio.run`` in a dedicated thread, for hosts where a
  guest run cannot be used (a loop that is not the stock asyncio one, code
  that must not share the loop's thread). Same API, same guarantees; each
  batch crosses threads twice.

Theory of operation. The run's main task holds two nurseries: an outer one
for the long-lived contexts (``AsyncioExecutor.enter``), and an inner one,
the batches' nursery. A batch is a ``_Job``: the trio side completes its
``asyncio.Future`` (directly in guest mode, through ``call_soon_threadsafe``
in thread mode). In thread mode each batch gets a trio task of its own. In
guest mode the inner nursery also holds a dispatcher task: a batch
submitted while it waits runs in it, in a copy of the awaiting asyncio
task's context variables, so back-to-back batches spawn no task; a batch
submitted while it is busy gets a task of its own, so batches from several
asyncio tasks still run together and share the pools. Cancelling the
awaiting asyncio task cancels the trio batch (its unfinished calls get
``cancelled`` results, every task and child process ends), waits for it to
finish, and then raises ``asyncio.CancelledError`` as asyncio expects.
Leaving the ``async with`` cancels the batches still running (the
dispatcher with them), leaves the entered contexts in reverse order, ends
the trio run and re-raises its error; a run that dies early fails every
waiting batch instead of hanging, and a batch submitted once the batches'
nursery has closed fails at once.

Guest mode and its cost. Each trio scheduler pass of a guest run is a guest
step, run from the asyncio loop, so a batch costs one step per pass it
needs in ``trio.run``, plus one to start it: a batch that would need no
pass at all (N = 0 or 1 no-op calls) takes one step. The batch is handed to
the dispatcher straight from the awaiting asyncio task: on the loop's
thread between two guest steps the run is at rest, as it is when
``TrioToken.run_sync_soon`` callbacks run, and trio schedules a step itself
if none is. The run's steps go through ``_Steps``: one loop callback runs
the step trio asks for, unless the submitting task has run it already, at
once, after handing the batch over (when the run is awake, a step is
waiting). So a batch needing one step is done before ``execute_batch``
would first suspend, with no loop turn at all; a longer one completes its
future from a later step, and the task resumes in the next loop turn. A guest run
whose tasks are all blocked waits for I/O in a helper thread and is woken
through it: two thread hand-offs. So after a batch the dispatcher stays
awake a short while (``LINGER``; yielding, one step per loop turn; not
while batches run in tasks of their own), and a batch that follows soon
after costs no hand-off at all. ``benchmarks/bench_aio.py --profile``
counts steps and hand-offs per batch.

The asyncio side's context variables (an OpenTelemetry span, a request id)
are copied into the batch (its own task, or the dispatcher while it runs
it; what the batch sets stays in that copy), so sinks see them. Sinks and
approvers run inside the trio run; ``AsyncioSink`` and ``AsyncioApprover``
hand their work to the host loop instead, and ``asyncio_tool`` marks a tool
body written for asyncio.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import threading
import time
import types
from typing import TYPE_CHECKING, Any, Literal, ParamSpec, TypeVar

import attrs
import trio

from ._executor import ToolExecutor
from ._public import fixup_module_metadata as _fixup_module_metadata

if TYPE_CHECKING:
    from collections.abc import (
        AsyncIterator,
        Callable,
        Coroutine,
        Generator,
        Sequence,
    )
    from contextlib import AbstractAsyncContextManager

    from outcome import Outcome

    from ._approval import ApprovalAnswer, ApprovalRequest
    from ._batch import Batch, BatchOutcome
    from ._events import Event
    from ._registry import ToolRegistry
    from ._types import ToolCall

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
        task's context variables.
        """
        assert self.token is not None
        token, done = self.token, trio.Event()
        task: list[asyncio.Task[T]] = []
        context = contextvars.copy_context()

        def start() -> None:
            made = self.loop.create_task(fn(*args, **kwargs), context=context)
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
        return task[0].result()


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


@attrs.define(eq=False)
class AsyncioExecutor:
    """A ``ToolExecutor`` in a trio run, driven from asyncio tasks.

    Made by ``open_executor``. ``executor`` is the trio-side executor (its
    ``statistics()`` may be read from asyncio; run batches through this
    object). ``trio_token`` reaches the trio run: from asyncio,
    ``trio_token.run_sync_soon(event.set)`` sets a trio event. ``mode`` is
    ``"guest"`` or ``"thread"``.
    """

    executor: ToolExecutor
    trio_token: trio.lowlevel.TrioToken = attrs.field(repr=False)
    _guest: _Guest = attrs.field(alias="guest", repr=False)

    @property
    def mode(self) -> Mode:
        """``"guest"`` (on the asyncio loop) or ``"thread"`` (a dedicated thread)."""
        return "thread" if self._guest.host.threaded else "guest"

    async def execute_batch(self, calls: Sequence[ToolCall]) -> BatchOutcome:
        """Run a batch in the trio run; one result per call, in call order.

        In guest mode, when the trio run is awake (it stays so a moment after
        each batch), the batch starts at once, from this call; a batch that
        then needs no trio scheduler pass (a few calls that never wait) has
        finished when it returns, without a turn of the asyncio loop, like a
        coroutine that never suspends. A loop of such batches that must let
        other asyncio tasks run should ``await asyncio.sleep(0)`` itself.

        Raises:
            asyncio.CancelledError: the awaiting task was cancelled (or timed
                out). The trio batch was cancelled and has finished: its
                unfinished calls got ``cancelled`` results, no task or child
                process is left. The outcome is dropped.
            RuntimeError: the executor is closed, or its trio run stopped; or
                this task runs on another asyncio loop than the one that
                opened the executor (nothing runs).
        """
        guest = self._guest
        guest.host.check_loop("execute_batch")
        job = _Job(calls, guest.host.loop.create_future())
        guest.submit(job)
        guest.jobs.add(job)
        try:
            if not guest.host.threaded:
                # The step that takes the batch runs now, not in a later loop
                # turn; a batch that needs no more steps is done already.
                guest.steps.run_now()
            # Not shielded: a shield costs a loop turn per batch. A cancel
            # cancels ``job.future``; ``job.waiter`` then says when it ended.
            return await job.future
        except asyncio.CancelledError:
            if not job.finished:
                job.waiter = guest.host.loop.create_future()
                guest.cancel(job)
                await _wait_uncancellable(job.waiter)
            raise
        finally:
            guest.jobs.discard(job)

    async def enter(self, cm: AbstractAsyncContextManager[T]) -> T:
        """Enter a trio async context manager in the trio run; keep it open.

        The context stays open across batches until the ``async with`` of
        ``open_executor`` ends, after the last batch: contexts are left in
        reverse order of entry, each by the trio task that entered it. Use it
        for what must live as long as the app: an MCP server
        (``toolexec.mcp.open_mcp_server``), a nursery of sub-agent services.

        Example::

            server = await ex.enter(open_mcp_server(registry, "notes", entry))

        Returns:
            what the context manager's ``__aenter__`` returned.

        Raises:
            Exception: whatever entering raised (the context is not kept).
            asyncio.CancelledError: the awaiting task was cancelled; entering
                was cancelled and has finished.
            RuntimeError: the executor is closed, or this task runs on
                another asyncio loop than the one that opened it. An error
                raised while *leaving* a context is raised by the
                ``async with`` instead.
        """
        guest = self._guest
        guest.host.check_loop("enter")
        held = _Context(cm, guest.host.loop.create_future())
        guest.add_context(held)
        try:
            return await asyncio.shield(held.future)
        except asyncio.CancelledError:
            if guest.token is not None and not guest.done.done():
                guest.soon(held.scope.cancel)
            await _wait_uncancellable(held.future)
            raise


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


def _check_mode(mode: object) -> Mode:
    if mode not in MODES:
        raise ValueError(
            f"toolexec.aio.open_executor mode must be 'guest' (trio on the asyncio"
            f" loop) or 'thread' (trio in a dedicated thread), got {mode!r}"
        )
    return mode


def _start_thread(guest: _Guest, registry: ToolRegistry, kwargs: dict[str, Any]) -> None:
    loop = guest.host.loop

    def body() -> None:
        error: BaseException | None = None
        try:
            trio.run(guest.main, registry, kwargs)
        except BaseException as exc:  # handed to the loop, raised by ``close``
            error = exc
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
            loop.call_soon_threadsafe(guest.finished, error)

    guest.thread = threading.Thread(target=body, name="toolexec.aio trio run", daemon=True)
    guest.thread.start()


@contextlib.asynccontextmanager
async def open_executor(
    registry: ToolRegistry, *, mode: Mode = "guest", **executor_kwargs: Any
) -> AsyncIterator[AsyncioExecutor]:
    """Start a trio run for this asyncio loop with a ``ToolExecutor`` in it.

    Example::

        async with toolexec.aio.open_executor(registry, config=config) as ex:
            outcome = await ex.execute_batch(calls)

    Args:
        registry: the tools.
        mode: ``"guest"`` runs trio as a guest of this loop, on its thread;
            ``"thread"`` runs ``trio.run`` in a dedicated thread, for hosts
            where a guest run cannot be used. Same API either way.
        **executor_kwargs: passed to ``ToolExecutor`` (config, policy, sinks...).

    Raises:
        ValueError: ``mode`` is not ``"guest"`` or ``"thread"``.
        RuntimeError: guest mode, while a trio run is active on this thread
            (another guest-mode executor open on the same loop).
        BaseException: whatever ended the trio run with an error (on entry,
            if ``ToolExecutor`` refused the arguments; else on exit).
    """
    guest = _Guest(asyncio.get_running_loop(), _check_mode(mode))
    if not guest.host.threaded and trio.lowlevel.in_trio_run():
        raise RuntimeError(
            "a trio run is already active on this thread (another guest-mode executor "
            "open on this loop, or a trio host): trio runs one run per thread. Share "
            "that executor (batches from every task may), or open this one with "
            "mode='thread'"
        )
    if guest.host.threaded:
        _start_thread(guest, registry, executor_kwargs)
    else:
        loop = guest.host.loop
        trio.lowlevel.start_guest_run(
            guest.main,
            registry,
            executor_kwargs,
            run_sync_soon_threadsafe=loop.call_soon_threadsafe,
            run_sync_soon_not_threadsafe=guest.steps.schedule,
            done_callback=guest.guest_finished,
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


# -- asyncio-side callbacks, approvers and tool bodies -----------------------


def _running_loop(what: str) -> asyncio.AbstractEventLoop:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        raise RuntimeError(
            f"{what} made outside a running asyncio loop: make it inside the loop, or pass loop="
        ) from None


@attrs.define(eq=False)
class AsyncioSink:
    """An event sink whose callback runs on the asyncio loop, in event order.

    ``emit`` is called inside the trio run; it only schedules
    ``fn(event)`` with the loop's ``call_soon`` (``call_soon_threadsafe``
    from another thread), so the callback runs as an ordinary asyncio
    callback: it may touch asyncio objects, and to feed a queue pass
    ``queue.put_nowait``.

    Example::

        events: asyncio.Queue[Event] = asyncio.Queue()
        async with open_executor(registry, sinks=[AsyncioSink(events.put_nowait)]) as ex:
            ...

    Args:
        fn: called with each event on the loop.
        loop: the loop; by default the running loop when the sink is made.
    """

    fn: Callable[[Event], object]
    loop: asyncio.AbstractEventLoop = attrs.field(factory=lambda: _running_loop("AsyncioSink"))

    def emit(self, event: Event) -> None:
        """Schedule ``fn(event)`` on the loop."""
        loop = self.loop
        try:
            here = asyncio.get_running_loop() is loop  # guest mode: the loop's thread
        except RuntimeError:
            here = False
        if here:
            loop.call_soon(self.fn, event)
        else:
            loop.call_soon_threadsafe(self.fn, event)


@attrs.define(eq=False)
class AsyncioApprover:
    """An approver whose ``async def`` answer runs as a task on the asyncio loop.

    The function may await asyncio objects (a queue a web UI fills, a chat
    message). It runs in the host loop of the ``toolexec.aio`` executor that
    asks; if the call is cancelled or times out while it waits, its task is
    cancelled and awaited.

    Example::

        async def ask_ui(request: ApprovalRequest) -> ApprovalAnswer:
            return await ui.ask(request.summary)

        open_executor(registry, approver=AsyncioApprover(ask_ui))

    Args:
        fn: ``async def fn(request) -> ApprovalAnswer``, written for asyncio.
    """

    fn: Callable[[ApprovalRequest], Coroutine[Any, Any, ApprovalAnswer]]

    async def request(self, request: ApprovalRequest) -> ApprovalAnswer:
        """Run ``fn(request)`` on the host loop and return its answer."""
        return await _current_host("AsyncioApprover").run(self.fn, request)


def asyncio_tool(fn: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, Coroutine[Any, Any, T]]:
    """Mark a tool body written for asyncio: it runs as a task on the host loop.

    Put it under ``function_tool``. The call itself stays a toolexec call:
    admitted, timed and cancelled by the executor. When its deadline passes
    or its batch is cancelled, the asyncio task is cancelled and awaited
    before the call's result is made, so nothing is left running. The tool
    only works through ``toolexec.aio.open_executor``; called from plain trio
    it gives an error result naming the fix.

    Example::

        @function_tool(side_effects=SideEffects.READ, timeout=10)
        @asyncio_tool
        async def fetch(url: str) -> str:
            async with httpx.AsyncClient() as client:   # asyncio code
                return (await client.get(url)).text
    """

    @functools.wraps(fn)
    async def on_host(*args: P.args, **kwargs: P.kwargs) -> T:
        return await _current_host(f"asyncio tool {fn.__name__!r}").run(fn, *args, **kwargs)

    return on_host


__all__ = [
    "AsyncioApprover",
    "AsyncioExecutor",
    "AsyncioSink",
    "asyncio_tool",
    "open_executor",
]

_fixup_module_metadata(__name__, __all__)
