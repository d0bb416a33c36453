"""The asyncio face of toolexec: ``AsyncioExecutor`` and its helpers.

Documented in ``toolexec.aio``, which re-exports these names.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import threading
from typing import TYPE_CHECKING, Any

import attrs
import trio

if TYPE_CHECKING:
    from collections.abc import (
        AsyncIterator,
        Callable,
        Coroutine,
        Sequence,
    )
    from contextlib import AbstractAsyncContextManager

    from .._core._batch import BatchOutcome
    from .._core._events import Event
    from .._core._executor import ToolExecutor
    from .._core._registry import ToolRegistry
    from .._core._types import ToolCall
    from .._gate._approval import ApprovalAnswer, ApprovalRequest

from .._tools._function import FunctionTool
from ._aio_guest import (
    MODES,
    Mode,
    P,
    T,
    _Context,
    _current_host,
    _Guest,
    _Job,
    _wait_uncancellable,
)


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

    Raises:
        TypeError: ``fn`` is not an ``async def``; or it is already a tool
            (``asyncio_tool`` above ``function_tool`` instead of under it).
    """
    if isinstance(fn, FunctionTool):
        raise TypeError(
            f"asyncio_tool was put above @function_tool (on tool {fn.definition.name!r}); "
            "put it under @function_tool, right above the async def"
        )
    if not inspect.iscoroutinefunction(fn):
        raise TypeError(f"asyncio_tool marks an async def written for asyncio, not {fn!r}")

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
