"""The Wasm sandbox against real wasmtime and the real CPython WASI guest.

The guest is compiled once per machine and cached (``_wasm_guest``); the
first test that needs it compiles it (seconds) unless the user's cache has
it already, and every other test and xdist worker loads the cached file.
Each test's wall-time limits guard hangs only; the deadline tests assert that
the call ended with an error result, not how fast.
"""

from __future__ import annotations

import ast
import os
import socket
import threading
from typing import TYPE_CHECKING, Any

import pytest
import trio
import trio.testing

import wasm_tools
from toolexec import ErrorClass, ToolCall, ToolExecutor, ToolRegistry, Workspace
from toolexec._backends._wasm_instance import GuestInstance
from toolexec.backends import PythonTool, WasmBackend, WasmLimits
from toolexec.events import CallbackSink, CallProgress, EventSink
from toolexec.policy import Allow, ExecutionGrant
from toolexec.tools import ShellTool

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence
    from pathlib import Path

    from toolexec import ToolResult


class Wasm:
    """Send every call to the ``wasm`` sandbox with these limits."""

    def __init__(self, timeout: float | None = None, **limits: Any) -> None:
        self.limits = limits
        self.timeout = timeout

    def decide(self, definition: object, arguments: object, agent_path: object) -> Allow:
        return Allow(ExecutionGrant(sandbox="wasm", timeout=self.timeout, limits=self.limits))


@pytest.fixture
async def backend() -> AsyncIterator[WasmBackend]:
    async with WasmBackend() as wasm:
        yield wasm


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "notes.txt").write_text("inside\n")
    return Workspace(root)


def registry(workspace: Workspace) -> ToolRegistry:
    tools = ToolRegistry()
    tools.register(PythonTool())
    for tool in (wasm_tools.add, wasm_tools.look, wasm_tools.refuse, wasm_tools.crash):
        tools.register(tool)
    tools.register(wasm_tools.big)
    tools.register(wasm_tools.later)
    tools.register(ShellTool(workspace))
    return tools


async def run(
    backend: WasmBackend,
    ws: Workspace,
    calls: Sequence[tuple[str, dict[str, Any]]],
    timeout: float | None = None,
    sinks: Sequence[EventSink] = (),
    **limits: Any,
) -> list[ToolResult]:
    executor = ToolExecutor(
        registry(ws),
        policy=Wasm(timeout, **limits),
        backends={"wasm": backend},
        workspace=ws,
        sinks=list(sinks),
    )
    batch = [ToolCall(str(i), name, args) for i, (name, args) in enumerate(calls)]
    with trio.fail_after(120):  # a hang guard only
        outcome = await executor.execute_batch(batch)
    return list(outcome.results)


async def python(backend: WasmBackend, ws: Workspace, code: str, **limits: Any) -> ToolResult:
    (result,) = await run(backend, ws, [("python", {"code": code})], **limits)
    return result


# -- what runs --------------------------------------------------------------------------


async def test_the_python_tool_runs_code_and_says_where(
    backend: WasmBackend, workspace: Workspace
) -> None:
    result = await python(backend, workspace, "import sys\nprint(6 * 7, sys.platform)")
    assert not result.is_error, result.text
    assert result.text == "42 wasi\n"
    assert result.details["sandbox"] == "wasm"
    assert result.details["wasm"]["workspace"] == "ro"


async def test_function_tools_run_with_their_context_and_errors(
    backend: WasmBackend, workspace: Workspace
) -> None:
    progress: list[str] = []

    def seen(event: object) -> None:
        if isinstance(event, CallProgress):
            progress.append(event.message)

    sink = CallbackSink(seen)
    added, looked, refused, crashed = await run(
        backend,
        workspace,
        [("add", {"a": 2, "b": 3}), ("look", {}), ("refuse", {"reason": "no"}), ("crash", {})],
        sinks=[sink],
    )
    assert (added.text, added.details["sandbox"]) == ("5", "wasm")
    found = looked.content[0].value  # type: ignore[union-attr]
    assert found == {"cwd": "/workspace", "root": "/workspace", "files": ["notes.txt"]}
    assert progress == ["looking around"]
    assert refused.error_class is ErrorClass.PERMISSION_DENIED
    assert refused.text == "refused: no"
    assert crashed.error_class is ErrorClass.EXECUTION_ERROR
    assert "RuntimeError: broken on purpose" in crashed.text
    assert "broken on purpose" in crashed.details["traceback"]


async def test_a_warm_instance_serves_the_next_call_and_a_fresh_one_does_not(
    backend: WasmBackend, workspace: Workspace
) -> None:
    await python(backend, workspace, "import builtins\nbuiltins.left_behind = 1")
    assert backend.idle_count() == 1
    look = "import builtins\nprint(hasattr(builtins, 'left_behind'))"
    warm = await python(backend, workspace, look)
    fresh = await python(backend, workspace, look, fresh=True)
    assert (warm.text, fresh.text) == ("True\n", "False\n")
    assert fresh.details["wasm"]["fresh"] is True
    assert backend.idle_count() == 1
    await backend.aclose()
    assert backend.idle_count() == 0
    assert not [t for t in threading.enumerate() if t.name == "toolexec-wasm-guest"]


async def test_calls_at_once_each_get_an_instance(workspace: Workspace) -> None:
    async with WasmBackend(max_idle=2) as backend:
        executor = ToolExecutor(
            registry(workspace),
            policy=Wasm(),
            backends={"wasm": backend},
            workspace=workspace,
        )
        calls = [ToolCall(str(i), "add", {"a": i, "b": 1}) for i in range(3)]
        outcome = await executor.execute_batch(calls)
        assert [r.text for r in outcome.results] == ["1", "2", "3"]
        assert backend.idle_count() == 2  # the third was ended, not kept


async def test_what_the_guest_cannot_run_is_refused_before_it_starts(
    backend: WasmBackend, workspace: Workspace
) -> None:
    shell, later = await run(backend, workspace, [("shell", {"command": "true"}), ("later", {})])
    assert "cannot run in the wasm sandbox" in shell.text
    assert "ShellTool" in shell.text
    assert "async function" in later.text
    assert backend.idle_count() == 0
    (bad,) = await run(backend, workspace, [("add", {"a": 1, "b": 1})], memory=1)
    assert bad.text.startswith("Tool 'add' was not run: grant limits: unknown limit 'memory'")
    assert "fuel, wall_seconds, memory_bytes" in bad.text


async def test_the_python_tool_runs_nowhere_else(workspace: Workspace) -> None:
    executor = ToolExecutor(registry(workspace), workspace=workspace)
    outcome = await executor.execute_batch([ToolCall("1", "python", {"code": "print(1)"})])
    assert outcome.results[0].is_error
    assert "only in the wasm sandbox" in outcome.results[0].text


def test_limits_are_checked() -> None:
    assert WasmLimits.parse({"fuel": 10, "wall_seconds": 0.5}).fuel == 10
    for bad in ({"fuel": 0}, {"wall_seconds": "1"}, {"workspace": "x"}, {"fresh": 1}):
        with pytest.raises(ValueError, match="got"):
            WasmLimits.parse(bad)
    with pytest.raises(ValueError, match="unknown limit"):
        WasmBackend(limits={"cpu_seconds": 1})


# -- what it cannot reach ---------------------------------------------------------------


async def test_no_path_outside_the_workspace(
    backend: WasmBackend, workspace: Workspace, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("outside")
    (workspace.root / "link").symlink_to(secret)
    probe = f"""
import ast
import os
seen = []
for path in ({str(secret)!r}, "/etc/passwd", "../secret.txt", "/workspace/../secret.txt", "link"):
    try:
        seen.append(open(path).read())
    except OSError as exc:
        seen.append(type(exc).__name__)
for folder in ("/", "..", "/tmp", {str(tmp_path)!r}):
    try:
        seen.append(os.listdir(folder))
    except OSError as exc:
        seen.append(type(exc).__name__)
print(seen)
"""
    result = await python(backend, workspace, probe)
    assert not result.is_error, result.text
    seen = ast.literal_eval(result.text)
    assert all(isinstance(s, str) and s.endswith("Error") for s in seen), seen


async def test_the_workspace_is_read_only_unless_the_grant_says_rw(
    backend: WasmBackend, workspace: Workspace
) -> None:
    write = "open('made.txt', 'w').write('hi')\nprint(open('notes.txt').read())"
    refused = await python(backend, workspace, write)
    assert refused.is_error
    assert not (workspace.root / "made.txt").exists()
    allowed = await python(backend, workspace, write, workspace="rw")
    assert allowed.text == "inside\n\n"
    assert (workspace.root / "made.txt").read_text() == "hi"


async def test_no_network(backend: WasmBackend, workspace: Workspace) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        code = f"""
import socket
for attempt in (
    lambda: socket.create_connection(("127.0.0.1", {port}), timeout=1),
    lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM).connect(("127.0.0.1", {port})),
):
    try:
        attempt()
        print("connected")
    except Exception as exc:
        print(type(exc).__name__)
"""
        result = await python(backend, workspace, code)
    assert not result.is_error, result.text
    assert "connected" not in result.text
    assert len(result.text.splitlines()) == 2


# -- what ends a call -------------------------------------------------------------------


async def test_fuel_ends_a_runaway_call_and_the_next_one_gets_a_new_guest(
    backend: WasmBackend, workspace: Workspace
) -> None:
    result = await python(backend, workspace, "while True:\n    pass", fuel=50_000_000)
    assert result.is_error
    assert "used up its CPU budget (50000000 units of fuel)" in result.text
    assert backend.idle_count() == 0
    after = await python(backend, workspace, "print('again')")
    assert after.text == "again\n"


async def test_the_deadline_ends_a_loop_and_a_sleep(
    backend: WasmBackend, workspace: Workspace
) -> None:
    for code in ("while True:\n    pass", "import time\ntime.sleep(3600)"):
        result = await python(backend, workspace, code, wall_seconds=0.5, fuel=10**15)
        assert result.is_error
        assert "ran past its wall-time limit (0.5 s)" in result.text


async def test_a_short_sleep_returns(backend: WasmBackend, workspace: Workspace) -> None:
    code = (
        "import time\nt = time.monotonic()\ntime.sleep(0.01)\nprint(time.monotonic() - t > 0.009)"
    )
    assert (await python(backend, workspace, code)).text == "True\n"


async def test_the_executor_timeout_and_cancellation_stop_the_guest(
    backend: WasmBackend, workspace: Workspace
) -> None:
    (result,) = await run(
        backend, workspace, [("python", {"code": "while True:\n    pass"})], timeout=0.5
    )
    assert result.error_class is ErrorClass.TIMEOUT
    assert backend.idle_count() == 0
    assert not [t for t in threading.enumerate() if t.name == "toolexec-wasm-guest"]


async def test_the_memory_limit_ends_an_allocation(
    backend: WasmBackend, workspace: Workspace
) -> None:
    result = await python(backend, workspace, "x = bytearray(1 << 30)", memory_bytes=64 << 20)
    assert result.is_error
    assert "MemoryError" in result.text


async def test_output_is_capped(backend: WasmBackend, workspace: Workspace) -> None:
    printed = await python(backend, workspace, "print('y' * 5000)", output_bytes=1000)
    assert printed.text.startswith("y" * 1000)
    assert "4001 more characters dropped" in printed.text
    (returned,) = await run(backend, workspace, [("big", {"size": 100_000})], output_bytes=1000)
    assert returned.is_error
    assert "passed the output limit" in returned.text


async def test_the_deadline_ends_a_wait_on_a_named_pipe(
    backend: WasmBackend, workspace: Workspace
) -> None:
    os.mkfifo(workspace.root / "pipe")
    result = await python(backend, workspace, "print(open('pipe').read())", wall_seconds=0.5)
    assert "ran past its wall-time limit" in result.text
    assert not [t for t in threading.enumerate() if t.name == "toolexec-wasm-guest"]


async def test_a_guest_that_misbehaves_ends_its_call_with_an_error(
    backend: WasmBackend, workspace: Workspace
) -> None:
    cases = {
        "import os\nos.write(1, (5).to_bytes(8, 'big') + b'notjs')": "malformed reply",
        "import os\nos._exit(3)": "the guest exited with code 3",
        "import os\nos.write(2, b'dying words')\nos.abort()": "dying words",
    }
    for code, said in cases.items():
        result = await python(backend, workspace, code)
        assert result.is_error
        assert said in result.text, result.text
    assert backend.idle_count() == 0


async def test_what_the_guest_may_not_wait_for_fails_at_once(
    backend: WasmBackend, workspace: Workspace
) -> None:
    code = """
import os, select, time
fd = os.open("notes.txt", os.O_RDONLY)
for attempt in (lambda: os.pread(fd, 3, 0), lambda: select.select([fd], [], [], 5)):
    try:
        attempt()
        print("waited")
    except OSError as exc:
        print(exc.errno)
print(time.process_time() >= 0, time.time() > 1e9)
"""
    result = await python(backend, workspace, code)
    assert result.text == "58\n58\nTrue True\n", result.text


async def test_a_dead_guest_answers_with_why() -> None:
    guest = await trio.to_thread.run_sync(GuestInstance.open, None, False, 64 << 20, 4096)
    await trio.to_thread.run_sync(guest.kill, "closed on purpose")
    assert not guest.alive
    call = await guest.call({"kind": "python", "code": "print(1)", "output_bytes": 10}, 10**9, 60)
    assert (call.reply, call.failure) == (None, "closed on purpose")


async def test_a_call_running_when_the_backend_closes_ends_its_guest(workspace: Workspace) -> None:
    backend = WasmBackend()
    results: list[ToolResult] = []

    async def call() -> None:
        results.append(await python(backend, workspace, "import time\ntime.sleep(0.2)\nprint(1)"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(call)
        await trio.testing.wait_all_tasks_blocked()
        await backend.aclose()
    assert results[0].text == "1\n"
    assert backend.idle_count() == 0
    assert not [t for t in threading.enumerate() if t.name == "toolexec-wasm-guest"]


async def test_an_ended_guest_lets_its_memory_go() -> None:
    import gc
    import weakref

    guest = await trio.to_thread.run_sync(GuestInstance.open, None, False, 64 << 20, 4096)
    gone = weakref.ref(guest)
    await guest.call({"kind": "python", "code": "x = 1", "output_bytes": 10}, 10**9, 60)
    await trio.to_thread.run_sync(guest.kill, "done")
    del guest
    gc.collect()
    assert gone() is None  # wasmtime's tables of callbacks do not keep it
