"""toolexec.aio: batches from asyncio through one trio guest run.

pytest-trio runs async tests under trio, so these are sync tests that call
``asyncio.run``. Ordering comes from events and from the bridge's own
futures, never from sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import TYPE_CHECKING

import pytest
import trio

import toolexec.aio
from conftest import Gate, process_alive
from toolexec import (
    ConcurrencyConfig,
    ErrorClass,
    SideEffects,
    ToolCall,
    ToolExecutor,
    ToolRegistry,
    Workspace,
    function_tool,
    register_builtin_tools,
)

if TYPE_CHECKING:
    from pathlib import Path


def _texts(outcome: toolexec.BatchOutcome) -> list[str]:
    return [r.content[0].text for r in outcome.results]  # type: ignore[union-attr]


def test_a_batch_of_file_tools_returns_results_in_order(tmp_path: Path) -> None:
    registry = ToolRegistry()
    register_builtin_tools(registry, Workspace(tmp_path))
    (tmp_path / "a.txt").write_text("alpha\n")
    calls = [
        ToolCall("1", "read_file", {"path": "a.txt"}),
        ToolCall("2", "echo", {"text": "two"}),
        ToolCall("3", "nope", {}),
    ]

    async def main() -> toolexec.BatchOutcome:
        async with toolexec.aio.open_executor(registry) as ex:
            return await ex.execute_batch(calls)

    outcome = asyncio.run(main())
    assert [r.call_id for r in outcome.results] == ["1", "2", "3"]
    assert "alpha" in _texts(outcome)[0]
    assert not outcome.results[1].is_error
    assert outcome.results[2].error_class is ErrorClass.NOT_FOUND


def _shell_registry(root: Path) -> ToolRegistry:
    registry = ToolRegistry()
    register_builtin_tools(registry, Workspace(root), shell=True)
    return registry


async def _pid(root: Path) -> int:
    """Wait, yielding to the loop, until the shell command wrote its pid."""
    while not (text := (root / "pid").read_text() if (root / "pid").exists() else ""):
        await asyncio.sleep(0.01)
    return int(text)


def _batch_tasks(ex: toolexec.aio.AsyncioExecutor) -> set[trio.lowlevel.Task]:
    """The trio tasks running batches now, the dispatcher's own batch included."""
    guest = ex._guest
    assert guest.nursery is not None
    tasks = set(guest.nursery.child_tasks)
    if guest.dispatcher is not None and guest.idle:
        tasks.discard(guest.dispatcher)  # waiting for a batch
    return tasks


SLEEPER = ToolCall("s", "shell", {"command": "echo $$ > pid.tmp; mv pid.tmp pid; exec sleep 1000"})


def test_cancelling_the_asyncio_task_cancels_the_batch(tmp_path: Path) -> None:
    registry = _shell_registry(tmp_path)

    async def main() -> None:
        async with toolexec.aio.open_executor(registry) as ex:
            task = asyncio.create_task(ex.execute_batch([SLEEPER, SLEEPER]))
            pid = await _pid(tmp_path)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # The trio batch has finished: no process, no task, no call in flight.
            assert not process_alive(pid)
            assert _batch_tasks(ex) == set()
            assert ex._guest.idle
            assert ex.executor.statistics().calls_in_flight == 0
            outcome = await ex.execute_batch([ToolCall("e", "echo", {"text": "after"})])
            assert _texts(outcome) == ["after"]

    asyncio.run(main())


def test_asyncio_timeout_around_a_batch_cancels_it(tmp_path: Path) -> None:
    registry = _shell_registry(tmp_path)

    pids: list[int] = []

    async def expire_once_started(deadline: asyncio.Timeout) -> None:
        pids.append(await _pid(tmp_path))
        deadline.reschedule(asyncio.get_running_loop().time())

    async def bounded(ex: toolexec.aio.AsyncioExecutor) -> None:
        async with asyncio.timeout(None) as deadline:
            watcher = asyncio.create_task(expire_once_started(deadline))
            await ex.execute_batch([SLEEPER])
        await watcher  # pragma: no cover - the timeout fires first

    async def main() -> None:
        async with toolexec.aio.open_executor(registry) as ex:
            with pytest.raises(TimeoutError):
                await bounded(ex)
            (pid,) = pids
            assert not process_alive(pid)

    asyncio.run(main())


def _gate_overlap(width: int) -> int:
    gate = Gate(expected=width)
    registry = ToolRegistry()
    registry.register(function_tool(name="gate", side_effects=SideEffects.READ)(gate.__call__))
    config = ConcurrencyConfig(per_tool={"gate": width})

    async def main() -> None:
        async with toolexec.aio.open_executor(registry, config=config) as ex:
            first = asyncio.create_task(ex.execute_batch([ToolCall("a", "gate", {})]))
            second = asyncio.create_task(ex.execute_batch([ToolCall("b", "gate", {})]))
            await gate.entered.wait()
            ex.trio_token.run_sync_soon(gate.release.set)
            outcomes = await asyncio.gather(first, second)
            assert [_texts(o) for o in outcomes] == [["ok"], ["ok"]]

    asyncio.run(main())
    return gate.peak


@pytest.mark.parametrize("width", [1, 2])
def test_batches_from_two_asyncio_tasks_share_the_pools(width: int) -> None:
    assert _gate_overlap(width) == width


def test_asyncio_tasks_run_while_a_batch_waits() -> None:
    gate = Gate(expected=1)
    registry = ToolRegistry()
    registry.register(function_tool(name="gate", side_effects=SideEffects.READ)(gate.__call__))
    ticks = 0
    ticked = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            if ticks == 100:
                ticked.set()
            await asyncio.sleep(0)

    async def main() -> None:
        async with toolexec.aio.open_executor(registry) as ex:
            batch = asyncio.create_task(ex.execute_batch([ToolCall("a", "gate", {})]))
            await gate.entered.wait()
            counting = asyncio.create_task(ticker())
            await ticked.wait()  # a hundred asyncio steps while the tool waits
            assert not batch.done()
            ex.trio_token.run_sync_soon(gate.release.set)
            assert _texts(await batch) == ["ok"]
            counting.cancel()

    asyncio.run(main())


def test_a_bad_executor_argument_fails_on_entry() -> None:
    async def main() -> None:
        async with toolexec.aio.open_executor(ToolRegistry(), strategy="nope"):
            pass  # pragma: no cover

    with pytest.raises(Exception):  # noqa: B017, PT011 - whatever ToolExecutor raises
        asyncio.run(main())


def test_a_crash_of_the_guest_run_fails_waiting_batches_and_the_exit() -> None:
    gate = Gate(expected=1)
    registry = ToolRegistry()
    registry.register(function_tool(name="gate", side_effects=SideEffects.READ)(gate.__call__))

    async def boom() -> None:
        raise ValueError("guest crashed")

    async def main() -> None:
        async with toolexec.aio.open_executor(registry) as ex:
            batch = asyncio.create_task(ex.execute_batch([ToolCall("a", "gate", {})]))
            await gate.entered.wait()
            assert ex._guest.nursery is not None
            ex.trio_token.run_sync_soon(ex._guest.nursery.start_soon, boom)
            with pytest.raises(RuntimeError, match="stopped"):
                await batch
            with pytest.raises(RuntimeError, match=r"closed|stopped"):
                await ex.execute_batch([])

    with pytest.raises(ExceptionGroup) as info:
        asyncio.run(main())
    assert info.group_contains(ValueError, match="guest crashed")


def test_one_executor_in_two_trio_runs_at_once_is_a_clear_error() -> None:
    started, release = threading.Event(), threading.Event()

    @function_tool(side_effects=SideEffects.READ)
    async def hold() -> str:
        """Hold the first run's batch open until the test releases it."""
        started.set()
        await trio.to_thread.run_sync(release.wait)
        return "held"

    registry = ToolRegistry()
    registry.register(hold)
    executor = ToolExecutor(registry)
    first: list[toolexec.BatchOutcome] = []
    thread = threading.Thread(
        target=lambda: first.append(trio.run(executor.execute_batch, [ToolCall("1", "hold", {})]))
    )
    thread.start()
    try:
        assert started.wait(timeout=30)
        with pytest.raises(RuntimeError, match=r"one executor per trio run, or toolexec\.aio"):
            trio.run(executor.execute_batch, [ToolCall("2", "hold", {})])
    finally:
        release.set()
        thread.join()
    assert _texts(first[0]) == ["held"]
    # Once the first run's batches are over, the executor may serve another run.
    release.set()
    assert _texts(trio.run(executor.execute_batch, [ToolCall("3", "hold", {})])) == ["held"]


class Holder:
    """A tool holding its batch open until the test releases it (from any thread)."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()

    def registry(self) -> ToolRegistry:
        async def hold() -> str:
            """Hold the batch open until released."""
            self.started.set()
            await trio.to_thread.run_sync(self.release.wait)
            return "held"

        registry = ToolRegistry()
        registry.register(function_tool(name="hold", side_effects=SideEffects.READ)(hold))
        return registry


def test_a_fork_used_from_another_run_while_its_parent_runs_is_refused() -> None:
    holder = Holder()
    parent = ToolExecutor(holder.registry())
    child = parent.fork_for_subagent("child")
    first: list[toolexec.BatchOutcome] = []
    thread = threading.Thread(
        target=lambda: first.append(trio.run(parent.execute_batch, [ToolCall("1", "hold", {})]))
    )
    thread.start()
    try:
        assert holder.started.wait(timeout=30)
        with pytest.raises(RuntimeError, match=r"parent or a fork.*one executor per trio run"):
            trio.run(child.execute_batch, [ToolCall("2", "hold", {})])
    finally:
        holder.release.set()
        thread.join()
    assert _texts(first[0]) == ["held"]
    assert _texts(trio.run(child.execute_batch, [ToolCall("3", "hold", {})])) == ["held"]


def test_two_threads_runs_racing_into_one_executor_let_exactly_one_in() -> None:
    # Both threads leave the barrier together; whichever binds first holds its
    # batch open until the other was refused, so a second admission (the old
    # window between check and registration) would hang here, not pass.
    for _ in range(5):
        holder = Holder()
        executor = ToolExecutor(holder.registry())
        barrier = threading.Barrier(2)
        refused = threading.Event()
        errors: list[RuntimeError] = []
        results: list[toolexec.BatchOutcome] = []

        def attempt(
            executor: ToolExecutor = executor,
            barrier: threading.Barrier = barrier,
            refused: threading.Event = refused,
            errors: list[RuntimeError] = errors,
            results: list[toolexec.BatchOutcome] = results,
        ) -> None:
            barrier.wait()
            try:
                results.append(trio.run(executor.execute_batch, [ToolCall("1", "hold", {})]))
            except RuntimeError as exc:
                errors.append(exc)
                refused.set()

        threads = [threading.Thread(target=attempt) for _ in range(2)]
        for t in threads:
            t.start()
        try:
            assert refused.wait(timeout=30), "both runs were admitted"
        finally:
            holder.release.set()
            for t in threads:
                t.join()
        assert len(errors) == 1
        assert "use one executor per trio run, or toolexec.aio" in str(errors[0])
        assert [_texts(r) for r in results] == [["held"]]


@pytest.mark.parametrize("mode", ["guest", "thread"])
def test_a_batch_from_another_asyncio_loop_is_refused_and_never_runs(
    mode: toolexec.aio.Mode,
) -> None:
    ran: list[str] = []

    @function_tool(side_effects=SideEffects.NONE)
    def note(text: str) -> str:
        """Record that the call ran."""
        ran.append(text)
        return text

    registry = ToolRegistry()
    registry.register(note)
    opened, done = threading.Event(), threading.Event()
    holder: list[toolexec.aio.AsyncioExecutor] = []

    async def host() -> None:  # the loop that opens the executor, in a thread of its own
        async with toolexec.aio.open_executor(registry, mode=mode) as executor:
            holder.append(executor)
            opened.set()
            while not done.is_set():
                await asyncio.sleep(0.001)
            # The executor still works from its own loop.
            outcome = await executor.execute_batch([ToolCall("own", "note", {"text": "own"})])
            assert _texts(outcome) == ["own"]

    thread = threading.Thread(target=asyncio.run, args=(host(),))
    thread.start()
    try:
        assert opened.wait(timeout=30)
        executor = holder[0]

        async def elsewhere() -> None:
            with pytest.raises(RuntimeError, match=r"asyncio loop that opened it.*run_coroutine"):
                await executor.execute_batch([ToolCall("1", "note", {"text": "stray"})])
            with pytest.raises(RuntimeError, match=r"asyncio loop that opened it"):
                await executor.enter(contextlib.nullcontext())

        asyncio.run(elsewhere())
    finally:
        done.set()
        thread.join()
    assert ran == ["own"]


@pytest.mark.parametrize("mode", ["guest", "thread"])
def test_a_batch_of_dicts_is_a_type_error_and_the_executor_goes_on(
    mode: toolexec.aio.Mode,
) -> None:
    @function_tool(side_effects=SideEffects.NONE)
    def echo(text: str) -> str:
        """Echo."""
        return text

    registry = ToolRegistry()
    registry.register(echo)

    async def main() -> list[str]:
        async with toolexec.aio.open_executor(registry, mode=mode) as executor:
            with pytest.raises(TypeError, match="item 0 is a dict"):
                await executor.execute_batch([{"id": "1", "name": "echo"}])  # type: ignore[list-item]
            return _texts(await executor.execute_batch([ToolCall("1", "echo", {"text": "on"})]))

    assert asyncio.run(main()) == ["on"]


def test_a_second_guest_executor_on_one_loop_is_refused_naming_the_fix() -> None:
    registry = ToolRegistry()

    @function_tool(side_effects=SideEffects.NONE)
    def echo(text: str) -> str:
        """Echo."""
        return text

    registry.register(echo)

    async def main() -> list[str]:
        async with toolexec.aio.open_executor(registry) as first:
            with pytest.raises(RuntimeError, match=r"one run per thread.*mode='thread'"):
                async with toolexec.aio.open_executor(registry):
                    pass
            async with toolexec.aio.open_executor(registry, mode="thread") as second:
                outcomes = await asyncio.gather(
                    first.execute_batch([ToolCall("1", "echo", {"text": "guest"})]),
                    second.execute_batch([ToolCall("1", "echo", {"text": "thread"})]),
                )
            return [t for outcome in outcomes for t in _texts(outcome)]

    assert asyncio.run(main()) == ["guest", "thread"]
