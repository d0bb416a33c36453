"""toolexec.aio beyond plain batches: thread mode, asyncio callbacks and tools,
long-lived contexts, context variables, start-up and early cancels.

Sync tests that call ``asyncio.run`` (pytest-trio runs async tests under
trio). Ordering comes from events and futures, never from sleeps; the one
tool timeout below is the executor's own deadline, asserted on its result.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from typing import TYPE_CHECKING, Any, Literal

import pytest
import sniffio
import trio

import toolexec.aio
from conftest import process_alive
from mcp_servers.fixtures import process_gone, sdk_server_entry
from toolexec import (
    ErrorClass,
    SideEffects,
    SubAgentTool,
    ToolCall,
    ToolExecutor,
    ToolRegistry,
    Workspace,
    function_tool,
    register_builtin_tools,
)
from toolexec.aio import AsyncioApprover, AsyncioSink, asyncio_tool
from toolexec.approval import ApprovalAnswer, ApprovalConfig, ApprovalRequest
from toolexec.events import CallCompleted, Event
from toolexec.testing import ScriptedModel, tool_call

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Coroutine
    from pathlib import Path

Mode = Literal["guest", "thread"]
MODES: list[Mode] = ["guest", "thread"]


def _texts(outcome: toolexec.BatchOutcome) -> list[str]:
    return [r.content[0].text for r in outcome.results]  # type: ignore[union-attr]


def _run(main: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(main)


@function_tool(side_effects=SideEffects.READ)
async def echo_back(text: str) -> str:
    """Return the text."""
    await trio.sleep(0)
    return text


def _registry(*tools: Any) -> ToolRegistry:
    registry = ToolRegistry()
    for tool in (echo_back, *tools):
        registry.register(tool)
    return registry


# -- thread mode ------------------------------------------------------------


def test_a_bad_mode_is_refused_with_the_choices() -> None:
    async def main() -> None:
        async with toolexec.aio.open_executor(_registry(), mode="fibre"):  # type: ignore[arg-type]
            pass  # pragma: no cover

    with pytest.raises(ValueError, match=r"'guest' .*'thread'.*got 'fibre'"):
        _run(main())


@pytest.mark.parametrize("mode", MODES)
def test_both_modes_keep_call_order_and_say_which_they_are(mode: Mode) -> None:
    calls = [ToolCall(str(i), "echo_back", {"text": f"t{i}"}) for i in range(5)]

    async def main() -> tuple[str, list[str]]:
        async with toolexec.aio.open_executor(_registry(), mode=mode) as ex:
            first, second = await asyncio.gather(ex.execute_batch(calls), ex.execute_batch(calls))
            assert _texts(first) == _texts(second)
            return ex.mode, _texts(first)

    assert _run(main()) == (mode, [f"t{i}" for i in range(5)])


SLEEPER = ToolCall("s", "shell", {"command": "echo $$ > pid.tmp; mv pid.tmp pid; exec sleep 1000"})


async def _pid(root: Path) -> int:
    """Wait, yielding to the loop, until the shell command wrote its pid (hang guard)."""
    async with asyncio.timeout(60):
        while not (text := (root / "pid").read_text() if (root / "pid").exists() else ""):
            await asyncio.sleep(0.01)
    return int(text)


def test_thread_mode_cancel_and_timeout_reach_the_batch(tmp_path: Path) -> None:
    registry = ToolRegistry()
    register_builtin_tools(registry, Workspace(tmp_path), shell=True)

    async def main() -> None:
        async with toolexec.aio.open_executor(registry, mode="thread") as ex:
            task = asyncio.create_task(ex.execute_batch([SLEEPER, SLEEPER]))
            pid = await _pid(tmp_path)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert not process_alive(pid)
            assert ex.executor.statistics().calls_in_flight == 0
            (tmp_path / "pid").unlink()

            async def expire_once_started(deadline: asyncio.Timeout) -> int:
                started = await _pid(tmp_path)
                deadline.reschedule(asyncio.get_running_loop().time())
                return started

            async def bounded() -> None:
                async with asyncio.timeout(None) as deadline:
                    watcher.append(asyncio.create_task(expire_once_started(deadline)))
                    await ex.execute_batch([SLEEPER])

            watcher: list[asyncio.Task[int]] = []
            with pytest.raises(TimeoutError):
                await bounded()
            assert not process_alive(await watcher[0])
            assert _texts(await ex.execute_batch([ToolCall("e", "echo", {"text": "on"})])) == ["on"]
        assert ex._guest.thread is not None
        assert not ex._guest.thread.is_alive()

    _run(main())


# -- events and approvals on the asyncio side -------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_asyncio_sink_callbacks_run_on_the_loop_in_order(mode: Mode) -> None:
    seen: list[tuple[str, str, bool]] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()

        def on_event(event: Event) -> None:
            # An ordinary asyncio callback: on the loop, in no trio task.
            assert asyncio.get_running_loop() is loop
            with pytest.raises(RuntimeError):
                trio.lowlevel.current_task()
            seen.append((type(event).__name__, "asyncio", False))

        sink = AsyncioSink(on_event)
        async with toolexec.aio.open_executor(_registry(), mode=mode, sinks=[sink]) as ex:
            await ex.execute_batch([ToolCall("1", "echo_back", {"text": "x"})])
            await asyncio.sleep(0)  # the last callbacks were scheduled with the result

    _run(main())
    kinds = [k for k, _, _ in seen]
    assert kinds[0] == "BatchPlanned"
    assert kinds[-1] == "BatchFinished"
    assert "CallCompleted" in kinds
    assert {lib for _, lib, _ in seen} == {"asyncio"}


def test_asyncio_sink_made_outside_a_loop_says_what_to_do() -> None:
    with pytest.raises(RuntimeError, match=r"outside a running asyncio loop.*loop="):
        AsyncioSink(print)


@function_tool(side_effects=SideEffects.WRITE)
async def change(text: str) -> str:
    """A mutating tool that needs approval."""
    return f"changed {text}"


@pytest.mark.parametrize("mode", MODES)
def test_asyncio_approver_awaits_asyncio_objects(mode: Mode) -> None:
    async def main() -> None:
        pending: asyncio.Queue[tuple[ApprovalRequest, asyncio.Future[ApprovalAnswer]]]
        pending = asyncio.Queue()

        async def ask_ui(request: ApprovalRequest) -> ApprovalAnswer:
            sniffio.current_async_library()  # asyncio here, not trio
            answer: asyncio.Future[ApprovalAnswer] = asyncio.get_running_loop().create_future()
            await pending.put((request, answer))
            return await answer

        async def ui() -> None:
            for _ in range(2):
                request, answer = await pending.get()
                answer.set_result(ApprovalAnswer(request.call_id == "yes", by="ui"))

        async with toolexec.aio.open_executor(
            _registry(change),
            mode=mode,
            approver=AsyncioApprover(ask_ui),
            approval=ApprovalConfig(),
        ) as ex:
            answering = asyncio.create_task(ui())
            outcome = await ex.execute_batch(
                [ToolCall("yes", "change", {"text": "a"}), ToolCall("no", "change", {"text": "b"})]
            )
            await answering
        assert _texts(outcome)[0] == "changed a"
        assert outcome.results[1].error_class is ErrorClass.USER_DENIED

    _run(main())


def test_a_cancelled_approval_cancels_and_awaits_the_asyncio_task() -> None:
    asked, finished = asyncio.Event(), []

    async def never(request: ApprovalRequest) -> ApprovalAnswer:
        asked.set()
        try:
            await asyncio.Event().wait()
        finally:
            finished.append(request.call_id)
        raise AssertionError("unreachable")  # pragma: no cover

    async def main() -> None:
        async with toolexec.aio.open_executor(
            _registry(change), approver=AsyncioApprover(never), approval=ApprovalConfig()
        ) as ex:
            task = asyncio.create_task(ex.execute_batch([ToolCall("c", "change", {"text": "x"})]))
            await asked.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert finished == ["c"]
            assert asyncio.all_tasks() == {asyncio.current_task()}

    _run(main())


# -- asyncio-bodied tools ---------------------------------------------------


class Body:
    """An asyncio tool body that records where it ran and how it ended."""

    def __init__(self) -> None:
        self.entered: asyncio.Event | None = None
        self.ended: list[str] = []

    async def __call__(self, hold: bool) -> str:
        assert sniffio.current_async_library() == "asyncio"
        assert self.entered is not None
        self.entered.set()
        try:
            if hold:
                await asyncio.Event().wait()
            await asyncio.sleep(0)
        except asyncio.CancelledError:
            self.ended.append("cancelled")
            raise
        self.ended.append("returned")
        return "asyncio says hi"


def _asyncio_tool_registry(body: Body, timeout: float | None = None) -> ToolRegistry:
    async def on_loop(hold: bool) -> str:
        """Run the body on the host loop."""
        return await body(hold)

    tool = function_tool(name="on_loop", side_effects=SideEffects.READ, timeout=timeout)(
        asyncio_tool(on_loop)
    )
    return _registry(tool)


@pytest.mark.parametrize("mode", MODES)
def test_asyncio_tool_runs_on_the_host_loop(mode: Mode) -> None:
    body = Body()

    async def main() -> None:
        body.entered = asyncio.Event()
        registry = _asyncio_tool_registry(body)
        async with toolexec.aio.open_executor(registry, mode=mode) as ex:
            outcome = await ex.execute_batch([ToolCall("1", "on_loop", {"hold": False})])
        assert _texts(outcome) == ["asyncio says hi"]

    _run(main())
    assert body.ended == ["returned"]


@pytest.mark.parametrize("mode", MODES)
def test_asyncio_tool_timeout_cancels_and_awaits_its_task(mode: Mode) -> None:
    body = Body()

    async def main() -> None:
        body.entered = asyncio.Event()
        registry = _asyncio_tool_registry(body, timeout=0.05)
        async with toolexec.aio.open_executor(registry, mode=mode) as ex:
            outcome = await ex.execute_batch([ToolCall("1", "on_loop", {"hold": True})])
            # The result was made only after the asyncio task had ended.
            assert body.ended == ["cancelled"]
            assert asyncio.all_tasks() == {asyncio.current_task()}
        assert outcome.results[0].error_class is ErrorClass.TIMEOUT

    _run(main())


@pytest.mark.parametrize("mode", MODES)
def test_cancelling_the_batch_cancels_the_asyncio_tool_task(mode: Mode) -> None:
    body = Body()

    async def main() -> None:
        body.entered = asyncio.Event()
        registry = _asyncio_tool_registry(body)
        async with toolexec.aio.open_executor(registry, mode=mode) as ex:
            task = asyncio.create_task(ex.execute_batch([ToolCall("1", "on_loop", {"hold": True})]))
            await body.entered.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert body.ended == ["cancelled"]
            assert asyncio.all_tasks() == {asyncio.current_task()}
            assert ex.executor.statistics().calls_in_flight == 0

    _run(main())


def test_an_asyncio_tool_cancelled_by_someone_else_is_an_error_result() -> None:
    async def self_cancelling() -> str:
        """Cancel its own asyncio task."""
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        await asyncio.sleep(0)
        return "unreachable"  # pragma: no cover

    registry = _registry(
        function_tool(side_effects=SideEffects.READ)(asyncio_tool(self_cancelling))
    )

    async def main() -> toolexec.BatchOutcome:
        async with toolexec.aio.open_executor(registry) as ex:
            return await ex.execute_batch([ToolCall("1", "self_cancelling", {})])

    [result] = _run(main()).results
    assert result.is_error
    assert "was cancelled" in result.content[0].text


def test_an_asyncio_tool_outside_the_bridge_names_the_fix() -> None:
    body = Body()
    registry = _asyncio_tool_registry(body)
    outcome = trio.run(
        ToolExecutor(registry).execute_batch, [ToolCall("1", "on_loop", {"hold": False})]
    )
    assert outcome.results[0].is_error
    assert "toolexec.aio.open_executor" in outcome.results[0].content[0].text  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", MODES)
def test_an_asyncio_tool_that_raises_system_exit_is_an_error_result(mode: Mode) -> None:
    async def exits() -> str:
        """Exit, as argparse does on bad input."""
        await asyncio.sleep(0)
        raise SystemExit(2)

    registry = _registry(function_tool(side_effects=SideEffects.READ)(asyncio_tool(exits)))

    async def main() -> list[toolexec.BatchOutcome]:
        async with toolexec.aio.open_executor(registry, mode=mode) as ex:
            first = await ex.execute_batch([ToolCall("1", "exits", {})])
            then = await ex.execute_batch([ToolCall("2", "echo_back", {"text": "still here"})])
        return [first, then]

    first, then = _run(main())
    assert first.results[0].error_class is ErrorClass.EXECUTION_ERROR
    assert "SystemExit: 2" in first.results[0].text
    assert _texts(then) == ["still here"]


@function_tool(side_effects=SideEffects.READ)
async def interrupted() -> str:
    """Raise KeyboardInterrupt, as a Ctrl-C delivered inside a tool does."""
    await trio.sleep(0)
    raise KeyboardInterrupt


async def _interrupted_on_loop() -> str:
    """Raise KeyboardInterrupt in an asyncio body."""
    await asyncio.sleep(0)
    raise KeyboardInterrupt


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("tool", ["interrupted", "_interrupted_on_loop"])
def test_a_keyboard_interrupt_from_a_tool_reaches_the_asyncio_host_bare(
    mode: Mode, tool: str
) -> None:
    registry = _registry(
        interrupted,
        function_tool(side_effects=SideEffects.READ)(asyncio_tool(_interrupted_on_loop)),
    )
    raised: list[BaseException] = []

    async def main(catch: bool) -> None:
        async with toolexec.aio.open_executor(registry, mode=mode) as ex:
            try:
                await ex.execute_batch([ToolCall("1", tool, {}), ToolCall("2", tool, {})])
            except BaseException as exc:
                raised.append(exc)
                if not catch:
                    raise
            # As after trio's own execute_batch, the host that catches it goes on.
            outcome = await ex.execute_batch([ToolCall("3", "echo_back", {"text": "on"})])
            assert _texts(outcome) == ["on"]

    _run(main(catch=True))
    with pytest.raises(KeyboardInterrupt) as info:  # bare: not in an exception group
        _run(main(catch=False))
    assert [type(exc) for exc in raised] == [KeyboardInterrupt, KeyboardInterrupt]
    assert type(info.value) is KeyboardInterrupt


def test_an_async_tool_awaiting_asyncio_without_asyncio_tool_names_the_fix() -> None:
    @function_tool(side_effects=SideEffects.READ)
    async def naive() -> str:
        """Await asyncio in a trio tool."""
        await asyncio.sleep(0.001)
        return "never"  # pragma: no cover

    async def main() -> toolexec.BatchOutcome:
        async with toolexec.aio.open_executor(_registry(naive)) as ex:
            return await ex.execute_batch([ToolCall("1", "naive", {})])

    [result] = _run(main()).results
    assert result.error_class is ErrorClass.EXECUTION_ERROR
    assert "asyncio_tool" in result.text, result.text
    assert "unrecognized yield message" not in result.text


def test_asyncio_tool_above_function_tool_is_refused_when_decorating() -> None:
    with pytest.raises(TypeError, match=r"under @function_tool"):

        @asyncio_tool  # type: ignore[arg-type]
        @function_tool(side_effects=SideEffects.READ)
        async def upside_down() -> str:
            """Decorators in the wrong order."""
            return "never"  # pragma: no cover

    with pytest.raises(TypeError, match=r"async def"):

        @asyncio_tool  # type: ignore[arg-type]
        def not_async() -> str:
            """A sync body."""
            return "never"  # pragma: no cover


# -- context variables cross the bridge -------------------------------------

REQUEST_ID: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")


@function_tool(side_effects=SideEffects.READ)
async def whose() -> str:
    """Say which request this call serves."""
    return REQUEST_ID.get()


@pytest.mark.parametrize("mode", MODES)
def test_the_awaiting_tasks_context_variables_reach_the_batch(mode: Mode) -> None:
    async def one(ex: toolexec.aio.AsyncioExecutor, request: str) -> list[str]:
        REQUEST_ID.set(request)
        return _texts(await ex.execute_batch([ToolCall("1", "whose", {})]))

    async def main() -> list[list[str]]:
        async with toolexec.aio.open_executor(_registry(whose), mode=mode) as ex:
            return list(await asyncio.gather(one(ex, "r1"), one(ex, "r2")))

    assert _run(main()) == [["r1"], ["r2"]]


# -- long-lived contexts ----------------------------------------------------


def test_an_mcp_server_entered_through_the_bridge_serves_two_batches() -> None:
    from toolexec.mcp import open_mcp_server

    # Guest mode only: the server takes seconds to start; thread mode enters
    # contexts through the same code (test_contexts_are_left_in_reverse_order).
    registry = ToolRegistry()

    async def main() -> int:
        async with toolexec.aio.open_executor(registry) as ex:
            server = await ex.enter(open_mcp_server(registry, "t", sdk_server_entry()))
            pid = server.pid
            assert pid is not None
            for text in ("first", "second"):
                outcome = await ex.execute_batch([ToolCall("1", "mcp__t__echo", {"text": text})])
                assert _texts(outcome) == [text]
                assert process_alive(pid)
        return pid

    pid = _run(main())
    assert process_gone(pid)
    assert "mcp__t__echo" not in registry.names()


@pytest.mark.parametrize("mode", MODES)
def test_contexts_are_left_in_reverse_order_after_the_batches(mode: Mode) -> None:
    log: list[str] = []

    @contextlib.asynccontextmanager
    async def held(name: str) -> AsyncIterator[str]:
        log.append(f"enter {name}")
        await trio.lowlevel.checkpoint()
        try:
            yield name
        finally:
            log.append(f"leave {name}")

    async def main() -> None:
        async with toolexec.aio.open_executor(_registry(), mode=mode) as ex:
            assert await ex.enter(held("a")) == "a"
            assert await ex.enter(held("b")) == "b"
            await ex.execute_batch([ToolCall("1", "echo_back", {"text": "x"})])
            log.append("batches done")

    _run(main())
    assert log == ["enter a", "enter b", "batches done", "leave b", "leave a"]


def test_an_error_entering_reaches_the_caller_and_keeps_nothing() -> None:
    from toolexec.mcp import MCPConnectionError, open_mcp_server

    registry = ToolRegistry()

    async def main() -> None:
        async with toolexec.aio.open_executor(registry) as ex:
            with pytest.raises(MCPConnectionError, match="No such file"):
                await ex.enter(open_mcp_server(registry, "gone", {"command": "/nonexistent/x"}))
            outcome = await ex.execute_batch([ToolCall("1", "mcp__gone__x", {})])
            assert outcome.results[0].error_class is ErrorClass.NOT_FOUND

    _run(main())


def test_an_error_leaving_a_context_is_raised_on_exit() -> None:
    @contextlib.asynccontextmanager
    async def breaks_on_exit() -> AsyncIterator[None]:
        yield
        raise OSError("could not close")

    async def main() -> None:
        async with toolexec.aio.open_executor(_registry()) as ex:
            await ex.enter(breaks_on_exit())

    with pytest.raises(BaseExceptionGroup) as info:
        _run(main())
    assert info.group_contains(OSError, match="could not close")


def test_cancelling_an_enter_cancels_entering() -> None:
    entering, left = asyncio.Event(), []

    @contextlib.asynccontextmanager
    async def slow() -> AsyncIterator[None]:
        entering.set()
        try:
            await trio.sleep_forever()
        finally:
            left.append("entering stopped")
        yield  # pragma: no cover

    async def main() -> None:
        async with toolexec.aio.open_executor(_registry()) as ex:
            task = asyncio.create_task(ex.enter(slow()))
            await entering.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert left == ["entering stopped"]

    _run(main())


# -- early cancels ----------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_a_host_cancelled_during_start_up_ends_the_trio_run(mode: Mode) -> None:
    async def main() -> None:
        opening = asyncio.create_task(_open_and_hold(mode))
        await asyncio.sleep(0)  # the task now waits for the trio run to be ready
        opening.cancel()
        with pytest.raises(asyncio.CancelledError):
            await opening
        assert not trio.lowlevel.in_trio_run()

    _run(main())


async def _open_and_hold(mode: Mode) -> None:
    async with toolexec.aio.open_executor(_registry(), mode=mode):
        raise AssertionError("the start-up was cancelled")  # pragma: no cover


def test_a_batch_cancelled_before_it_is_planned_gives_cancelled_results() -> None:
    async def main() -> toolexec.BatchOutcome:
        async with toolexec.aio.open_executor(_registry()) as ex:
            loop = asyncio.get_running_loop()
            job = toolexec._adapters._aio_guest._Job(
                [ToolCall("1", "echo_back", {"text": "x"})], loop.create_future()
            )
            job.cancel()  # before its trio task has run: ``run`` sees the flag
            ex._guest.submit(job)
            return await job.future

    outcome = _run(main())
    assert outcome.cancelled
    assert outcome.results[0].error_class is ErrorClass.CANCELLED


def test_a_closed_executor_refuses_batches_and_contexts() -> None:
    async def main() -> None:
        async with toolexec.aio.open_executor(_registry()) as ex:
            pass
        with pytest.raises(RuntimeError, match="closed"):
            await ex.execute_batch([])
        with pytest.raises(RuntimeError, match="closed"):
            await ex.enter(contextlib.nullcontext())

    _run(main())


def test_a_run_that_ended_before_the_loop_heard_refuses_clearly() -> None:
    # Thread mode: the trio run ends in its thread and tells the loop with a
    # callback. Until that callback runs, a batch, a context, a cancel and the
    # close must still meet "closed", not trio's own error.
    async def main() -> None:
        async with toolexec.aio.open_executor(_registry(), mode="thread") as ex:
            guest = ex._guest
            assert guest.nursery is not None
            assert guest.thread is not None
            ex.trio_token.run_sync_soon(guest.nursery.cancel_scope.cancel)
            guest.thread.join()  # the run has ended; the loop has not run since
            assert not guest.done.done()
            with pytest.raises(RuntimeError, match="executor is closed"):
                await ex.execute_batch([])
            with pytest.raises(RuntimeError, match="trio run stopped"):
                await ex.enter(contextlib.nullcontext())

    _run(main())


@pytest.mark.parametrize("mode", MODES)
def test_sibling_sub_agents_run_their_loops_through_the_bridge(mode: Mode) -> None:
    # Each child echoes its task through a tool of the parent's registry, then
    # answers with what the tool said.
    def child() -> ScriptedModel:
        return ScriptedModel(
            [
                lambda messages: tool_call("echo_back", {"text": messages[-1].text}),
                lambda messages: f"child heard {messages[-1].tool_results[0].text}",
            ]
        )

    researcher = SubAgentTool(
        name="researcher", description="Research.", system_prompt="You research.", model=child
    )
    seen: list[Event] = []

    async def main() -> toolexec.BatchOutcome:
        async with toolexec.aio.open_executor(
            _registry(researcher), mode=mode, sinks=[AsyncioSink(seen.append)]
        ) as ex:
            outcome = await ex.execute_batch(
                [
                    ToolCall("a", "researcher", {"task": "alpha"}),
                    ToolCall("b", "researcher", {"task": "beta"}),
                ]
            )
            await asyncio.sleep(0)  # the sink's last callbacks
            return outcome

    outcome = _run(main())
    assert _texts(outcome) == ["child heard alpha", "child heard beta"]
    paths = {r.call_id: r.details["agent_path"] for r in outcome.results}
    assert sorted(paths.values()) == ["root/researcher#1", "root/researcher#2"]
    # Each child's own call sits under the parent call that spawned it.
    echoes = [e for e in seen if isinstance(e, CallCompleted) and e.tool_name == "echo_back"]
    assert sorted((e.parent_call_id, e.agent_path) for e in echoes) == sorted(paths.items())


def test_events_reach_a_plain_sink_in_guest_mode_too() -> None:
    seen: list[Event] = []

    async def main() -> None:
        async with toolexec.aio.open_executor(_registry(), sinks=[AsyncioSink(seen.append)]) as ex:
            await ex.execute_batch([ToolCall("1", "echo_back", {"text": "x"})])
            await asyncio.sleep(0)

    _run(main())
    assert any(isinstance(e, CallCompleted) for e in seen)


def test_a_bridge_batch_refused_by_the_run_binding_raises_the_clear_error() -> None:
    # The executor is busy in another thread's trio run: the bridge's batch
    # fails with the misuse error instead of hanging or crashing the guest.
    release, started = threading.Event(), threading.Event()

    async def hold() -> str:
        """Hold the other run's batch open."""
        started.set()
        await trio.to_thread.run_sync(release.wait)
        return "held"

    registry = _registry(function_tool(name="hold", side_effects=SideEffects.READ)(hold))

    async def main() -> None:
        async with toolexec.aio.open_executor(registry) as ex:
            other = threading.Thread(
                target=trio.run, args=(ex.executor.execute_batch, [ToolCall("1", "hold", {})])
            )
            other.start()
            try:
                await asyncio.to_thread(started.wait, 30)
                with pytest.raises(RuntimeError, match="one executor per trio run"):
                    await ex.execute_batch([ToolCall("2", "echo_back", {"text": "x"})])
            finally:
                release.set()
                await asyncio.to_thread(other.join)
            assert _texts(await ex.execute_batch([ToolCall("3", "echo_back", {"text": "y"})])) == [
                "y"
            ]

    _run(main())


def test_cancelling_the_host_while_it_closes_still_waits_for_the_end() -> None:
    leaving, order = asyncio.Event(), []

    async def main() -> None:
        gate = trio.Event()

        @contextlib.asynccontextmanager
        async def slow_to_close() -> AsyncIterator[None]:
            yield
            leaving.set()  # trio code on the loop's thread may set it
            await gate.wait()
            order.append("context left")

        async def host() -> None:
            async with toolexec.aio.open_executor(_registry()) as ex:
                await ex.enter(slow_to_close())
                token.append(ex.trio_token)

        token: list[trio.lowlevel.TrioToken] = []
        task = asyncio.create_task(host())
        await leaving.wait()
        task.cancel()  # while ``close`` waits for the context to be left
        await asyncio.sleep(0)
        token[0].run_sync_soon(gate.set)
        with pytest.raises(asyncio.CancelledError):
            await task
        order.append("host cancelled")

    _run(main())
    assert order == ["context left", "host cancelled"]


def test_thread_mode_raises_a_bad_executor_argument_on_entry() -> None:
    async def main() -> None:
        async with toolexec.aio.open_executor(ToolRegistry(), mode="thread", grace_period=-1):
            raise AssertionError("unreachable")  # pragma: no cover

    with pytest.raises(ValueError, match="grace_period must be seconds >= 0"):
        _run(main())
