"""The shell tool with real processes: groups, timeouts, cancellation, output, env."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import tracemalloc
from typing import TYPE_CHECKING, Any

import pytest
import trio

import toolexec._proc._process
import toolexec._proc._reaper
import toolexec._tools._shell
from conftest import ESCAPES, group_members, open_fds, process_alive
from toolexec import (
    Allow,
    ErrorClass,
    RoutingClass,
    ToolCall,
    ToolContext,
    ToolExecutor,
    ToolRegistry,
    ToolResult,
    Workspace,
)
from toolexec._proc._process import OutputCapture
from toolexec.events import CallbackSink, CallCompleted, CallUpdate
from toolexec.policy import ExecutionGrant
from toolexec.tools import ShellTool

if TYPE_CHECKING:
    from pathlib import Path

# Slow (tests/README.md): real shells and process trees, timeouts in real time.
pytestmark = pytest.mark.slow


@pytest.fixture(params=["reaper", "group, pidfd", "group, watcher task"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """How the shell runs a command: under the reaper (Linux), or in a process group
    (elsewhere) learning of its exit through a pidfd or through a task (no pidfds)."""
    if request.param != "reaper":
        monkeypatch.setattr(toolexec._proc._reaper._REAPER, "unsupported", "off for this test")
    if request.param == "group, watcher task":
        monkeypatch.setattr(toolexec._proc._process, "_pidfd_open", None)
    return str(request.param)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


def _executor(root: Path, grace: float = 5.0, **tool: Any) -> ToolExecutor:
    registry = ToolRegistry()
    registry.register(ShellTool(Workspace(root), **tool))
    return ToolExecutor(registry, grace_period=grace)


async def shell(executor: ToolExecutor, command: str, **arguments: Any) -> ToolResult:
    outcome = await executor.execute_batch(
        [ToolCall("c1", "shell", {"command": command, **arguments})]
    )
    return outcome.results[0]


async def _pids_from_fifo(fifo: Path) -> list[int]:
    """Block (in a thread) until the command writes its pids to ``fifo``."""

    def read() -> str:
        with open(fifo) as f:
            return f.read()

    text = await trio.to_thread.run_sync(read)
    return [int(p) for p in text.split()]


# -- results --------------------------------------------------------------------------


@pytest.mark.usefixtures("mode")
async def test_output_exit_code_and_duration(root: Path) -> None:
    result = await shell(_executor(root), "pwd; echo out; echo err >&2")
    assert not result.is_error
    first, *rest = result.text.splitlines()
    assert first.startswith("exit code 0; duration ")
    assert first.endswith(" s; output truncated: no")
    assert rest == ["stdout:", str(root.resolve()), "out", "stderr:", "err"]
    assert result.details["exit_code"] == 0
    assert result.details["truncated"] is False


@pytest.mark.usefixtures("mode")
async def test_a_failing_command_is_an_error_result(root: Path) -> None:
    result = await shell(_executor(root), "echo nope; exit 3")
    assert result.error_class is ErrorClass.EXECUTION_ERROR
    assert result.text.startswith("exit code 3;")
    assert "nope" in result.text


async def test_undecodable_output_is_replaced(root: Path) -> None:
    result = await shell(_executor(root), r"printf 'ok \377\376 end'")
    assert "ok \ufffd\ufffd end" in result.text


async def test_a_secret_in_the_host_environment_is_not_passed(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLEXEC_TEST_API_KEY", "sk-very-secret")
    monkeypatch.setenv("LANG", "C.UTF-8")
    result = await shell(_executor(root, env={"EXTRA": "given"}), "env")
    assert "sk-very-secret" not in result.text
    assert "TOOLEXEC_TEST_API_KEY" not in result.text
    assert "LANG=C.UTF-8" in result.text
    assert "EXTRA=given" in result.text
    assert "PATH=" in result.text


# -- no process left behind -------------------------------------------------------------

TREE = "echo $$ > pids; (sleep 1000 & echo $! >> pids; wait) & sleep 1000 & echo $! >> pids; wait"


async def test_a_timeout_kills_the_whole_tree(root: Path, mode: str) -> None:
    result = await shell(_executor(root, grace=1.0), TREE, timeout=1.5)
    assert result.error_class is ErrorClass.TIMEOUT
    if mode == "reaper":
        assert result.text.startswith(
            "timed out after 1.5 s; it and every process it started were terminated; "
        )
        assert result.details["descendants_killed"] == 3  # the subshell and two sleeps
    else:
        assert "timed out after 1.5 s; the process group was terminated" in result.text
        assert result.details["descendants_killed"] is None  # not counted
    pgid, *descendants = [int(p) for p in (root / "pids").read_text().split()]
    assert len(descendants) == 2
    assert group_members(pgid) == []
    assert not any(process_alive(pid) for pid in [pgid, *descendants])


def _escaped(root: Path) -> list[int]:
    """The pids ``ESCAPES`` wrote, its own first; checks there are six."""
    pids = [int(p) for p in (root / "pids").read_text().split()]
    assert len(pids) == 6
    return pids


async def test_background_jobs_in_other_groups_and_sessions_end_with_the_command(
    root: Path,
) -> None:
    result = await shell(_executor(root), ESCAPES + "echo done")
    assert not result.is_error
    first, *rest = result.text.splitlines()
    assert first.startswith("exit code 0; ")
    assert first.endswith("; output truncated: no; background processes stopped: 5")
    assert rest == ["stdout:", "done"]
    assert (result.details["descendants_killed"], result.details["descendants_left"]) == (5, 0)
    assert not any(process_alive(pid) for pid in _escaped(root))


async def test_background_jobs_in_other_groups_and_sessions_end_on_timeout(root: Path) -> None:
    result = await shell(_executor(root, grace=1.0), ESCAPES + "sleep 1000", timeout=1.0)
    assert result.error_class is ErrorClass.TIMEOUT
    assert result.details["timed_out"] is True
    assert result.details["descendants_killed"] == 5  # bash exec'd the last sleep
    assert not any(process_alive(pid) for pid in _escaped(root))


async def test_background_jobs_in_other_groups_and_sessions_end_on_cancel(root: Path) -> None:
    os.mkfifo(root / "ready")
    executor = _executor(root, grace=1.0)
    command = ESCAPES + "echo go > ready; sleep 1000"
    batch = executor.prepare([ToolCall("c1", "shell", {"command": command})])
    outcome: list[Any] = []

    async def run() -> None:
        outcome.append(await batch.run())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        await trio.to_thread.run_sync((root / "ready").read_text)
        pids = _escaped(root)
        assert all(process_alive(pid) for pid in pids)
        batch.cancel()
    assert outcome[0].results[0].error_class is ErrorClass.CANCELLED
    assert not any(process_alive(pid) for pid in pids)


async def test_a_program_started_directly_is_held_as_well(root: Path, tmp_path: Path) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    daemon = bindir / "start-daemon"
    daemon.write_text("#!/bin/sh\nsetsid sleep 1000 >/dev/null 2>&1 </dev/null & echo $! > pid\n")
    daemon.chmod(0o755)
    tool = ShellTool(Workspace(root), env={"PATH": f"{bindir}:/usr/bin:/bin"})
    assert tool._direct("start-daemon") is not None  # no bash in between
    registry = ToolRegistry()
    registry.register(tool)
    result = await shell(ToolExecutor(registry), "start-daemon")
    assert result.details["descendants_killed"] == 1
    assert not process_alive(int((root / "pid").read_text()))


async def test_a_worker_that_stops_answering_is_given_up(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A command can SIGSTOP its worker (a documented limit): the call still
    # ends, and what the worker holds ends once it runs again.
    monkeypatch.setattr(toolexec._proc._reaper, "_REPORT_MARGIN", 0.2)
    command = "echo $PPID $$ > pids; sleep 1000 & echo $! >> pids; kill -STOP $PPID; wait"
    result = await shell(_executor(root, grace=0.1), command, timeout=0.5)
    assert result.error_class is ErrorClass.TIMEOUT
    assert result.text.startswith("timed out after 0.5 s; exit status unknown: ")
    assert result.details["exit_code"] is None
    worker, *below = [int(p) for p in (root / "pids").read_text().split()]
    assert all(process_alive(pid) for pid in below)  # held, but nobody is ending them
    os.kill(worker, signal.SIGCONT)  # it finds toolexec gone from its socket
    deadline = trio.current_time() + 30
    while any(process_alive(pid) for pid in below):
        assert trio.current_time() < deadline
        await trio.sleep(0.01)


@pytest.mark.usefixtures("mode")
async def test_a_host_cancel_kills_the_whole_tree(root: Path) -> None:
    os.mkfifo(root / "ready")
    executor = _executor(root, grace=1.0)
    command = (
        "(sleep 1000 & echo $! > inner; wait) & sub=$!; sleep 1000 & s=$!; "
        "while [ ! -s inner ]; do :; done; echo $$ $sub $s $(cat inner) > ready; wait"
    )
    batch = executor.prepare([ToolCall("c1", "shell", {"command": command})])
    async with trio.open_nursery() as nursery:
        outcome: list[Any] = []

        async def run() -> None:
            outcome.append(await batch.run())

        nursery.start_soon(run)
        pgid, *descendants = await _pids_from_fifo(root / "ready")
        batch.cancel()
    (result,) = outcome[0].results
    assert result.error_class is ErrorClass.CANCELLED
    assert group_members(pgid) == []
    assert not any(process_alive(pid) for pid in [pgid, *descendants])


@pytest.mark.usefixtures("mode")
async def test_an_enclosing_cancel_scope_kills_the_whole_tree(root: Path) -> None:
    os.mkfifo(root / "ready")
    executor = _executor(root, grace=1.0)
    command = "sleep 1000 & echo $$ $! > ready; wait"
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(shell, executor, command)
            pgid, child = await _pids_from_fifo(root / "ready")
            scope.cancel()
    assert scope.cancelled_caught
    assert group_members(pgid) == []
    assert not process_alive(child)


@pytest.mark.usefixtures("mode")
async def test_a_command_ignoring_sigterm_is_killed_after_the_grace_period(root: Path) -> None:
    command = "trap '' TERM; echo $$ > pids; sleep 1000 & echo $! >> pids; wait; wait"
    result = await shell(_executor(root, grace=0.3), command, timeout=1.0)
    assert result.error_class is ErrorClass.TIMEOUT
    pgid, child = [int(p) for p in (root / "pids").read_text().split()]
    assert group_members(pgid) == []
    assert not process_alive(child)


@pytest.mark.usefixtures("mode")
async def test_a_background_child_holding_the_pipe_does_not_hang_the_call(root: Path) -> None:
    command = "sleep 1000 & echo $! > bg; echo done"
    result = await shell(_executor(root), command)
    assert not result.is_error
    assert "done" in result.text
    assert not process_alive(int((root / "bg").read_text()))


@pytest.mark.parametrize("mode", ["group, pidfd", "group, watcher task"], indirect=True)
@pytest.mark.usefixtures("mode")
async def test_a_process_that_left_the_group_cannot_hang_the_call(root: Path) -> None:
    # Without the reaper it is out of reach of the group kill, and it holds
    # stdout open: the call still returns (after the bounded drain) with
    # what was printed.
    command = "setsid sh -c 'echo $$ > escaped; exec sleep 1000' & sleep 0.2; echo done"
    try:
        with trio.fail_after(30):
            result = await shell(_executor(root), command)
        assert not result.is_error
        assert "done" in result.text
    finally:
        with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
            os.kill(int((root / "escaped").read_text()), signal.SIGKILL)


@pytest.mark.usefixtures("mode")
async def test_no_descriptor_is_left_open_whatever_the_outcome(root: Path) -> None:
    executor = _executor(root, grace=0.1)
    broken = _executor(root, shell="/nonexistent/bash")
    await shell(executor, "true")  # let trio open its wakeup pipes and threads first
    before = open_fds()
    assert not (await shell(executor, "echo out; echo err >&2")).is_error
    assert (await shell(executor, "exit 3")).is_error
    timed_out = await shell(executor, "sleep 1000 & wait", timeout=0.2)
    assert timed_out.error_class is ErrorClass.TIMEOUT
    refused = await shell(executor, "echo a\x00b")
    assert refused.error_class is ErrorClass.INVALID_ARGUMENTS
    assert (await shell(broken, "echo hi")).error_class is ErrorClass.EXECUTION_ERROR
    os.mkfifo(root / "ready")
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(shell, executor, "echo $$ > ready; sleep 1000")
            await _pids_from_fifo(root / "ready")
            scope.cancel()
    assert open_fds() - before == set()


@pytest.mark.usefixtures("mode")
async def test_output_written_during_the_grace_period_is_kept(root: Path) -> None:
    # More than a pipe holds: unless output is still read while the group winds
    # down, the handler blocks and is killed when the grace period ends.
    handler = "yes x | head -c 300000; echo goodbye; exit 0"
    command = f"trap '{handler}' TERM; echo hello; sleep 1000 & wait"
    result = await shell(_executor(root, grace=30.0), command, timeout=0.3)
    assert result.error_class is ErrorClass.TIMEOUT
    assert result.text.startswith("timed out after 0.3 s")
    assert "stdout (300014 bytes, kept 65536):\nhello\nx\nx\n" in result.text
    assert result.text.endswith("x\nx\ngoodbye")


@pytest.mark.usefixtures("mode")
async def test_a_flood_of_output_does_not_starve_other_tasks(root: Path) -> None:
    finished: list[str] = []

    async def flood() -> None:
        result = await shell(_executor(root), "head -c 200000000 /dev/zero")
        assert result.details["stdout_bytes"] == 200_000_000
        finished.append("shell")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(flood)
        for _ in range(100):
            await trio.sleep(0)
        finished.append("other task")
    assert finished == ["other task", "shell"]


async def test_running_out_of_descriptors_is_an_error_result_that_leaks_none(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    executor = _executor(root)
    await shell(executor, "true")
    before = open_fds()
    real_pipe, calls = os.pipe, []

    def pipe() -> tuple[int, int]:
        calls.append(1)
        if len(calls) == 2:  # the stderr pipe: the process is out of descriptors
            raise OSError(24, "Too many open files")
        return real_pipe()

    monkeypatch.setattr(os, "pipe", pipe)
    result = await shell(executor, "echo hi")
    monkeypatch.undo()
    assert result.error_class is ErrorClass.EXECUTION_ERROR
    assert "Could not create the pipes for the output" in result.text
    assert "Too many open files" in result.text
    assert open_fds() - before == set()


# -- live output -------------------------------------------------------------------------


@pytest.mark.usefixtures("mode")
async def test_output_streams_to_the_host_as_it_is_read(root: Path) -> None:
    from toolexec import TextContent

    events: list[Any] = []
    registry = ToolRegistry()
    registry.register(ShellTool(Workspace(root)))
    executor = ToolExecutor(registry, sinks=[CallbackSink(events.append)])
    command = "echo one; echo two >&2; yes x | head -c 200000; printf '\\303\\251\\n'"
    result = await shell(executor, command)
    assert not result.is_error
    updates = [e for e in events if isinstance(e, CallUpdate)]
    assert len(updates) >= 3  # one read per wake-up: 200 KB cannot come as one piece
    streamed = {
        name: "".join(
            block.text
            for u in updates
            if u.partial.details["stream"] == name
            for block in u.partial.content[:1]
            if isinstance(block, TextContent)
        )
        for name in ("stdout", "stderr")
    }
    assert streamed == {"stdout": "one\n" + "x\n" * 100_000 + "\u00e9\n", "stderr": "two\n"}
    kinds = [type(e) for e in events]
    assert kinds.index(CallCompleted) > max(i for i, k in enumerate(kinds) if k is CallUpdate)


async def test_a_character_split_across_reads_is_streamed_whole() -> None:
    sent: list[tuple[str, Any]] = []
    ctx = ToolContext("c1", "shell", emit=lambda kind, payload: sent.append((kind, payload)))
    listen = toolexec._tools._shell.update_listener(ctx)
    for stream, chunk in [("stdout", b"caf\xc3"), ("stderr", b"\xe2\x82"), ("stdout", b"\xa9!")]:
        listen(stream, chunk)
    listen("stderr", b"\xac")
    listen("stdout", b"")
    listen("stderr", b"")
    assert [(kind, p.details["stream"], p.content[0].text) for kind, p in sent] == [
        ("update", "stdout", "caf"),
        ("update", "stdout", "\u00e9!"),
        ("update", "stderr", "\u20ac"),
    ]


async def test_nothing_is_streamed_when_nobody_listens(root: Path) -> None:
    seen: list[bool] = []

    class Probe(ShellTool):
        async def execute(self, arguments: Any, ctx: ToolContext) -> Any:
            seen.append(ctx.observed)
            return await super().execute(arguments, ctx)

    for sinks in ([], [CallbackSink(lambda event: None)]):
        registry = ToolRegistry()
        registry.register(Probe(Workspace(root)))
        assert not (await shell(ToolExecutor(registry, sinks=sinks), "echo hi")).is_error
    assert seen == [False, True]


# -- bounded output -----------------------------------------------------------------


@pytest.mark.usefixtures("mode")
async def test_100_mb_of_output_keeps_memory_bounded(root: Path) -> None:
    cap = 64 * 1024
    executor = _executor(root, max_output_bytes=cap)
    command = "head -c 100000000 /dev/zero | tr '\\0' a"
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB, a high-water mark
    tracemalloc.start()
    try:
        result = await shell(executor, command)
        _, peak = tracemalloc.get_traced_memory()  # bytes Python allocated at most
    finally:
        tracemalloc.stop()
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert result.details["stdout_bytes"] == 100_000_000
    assert result.details["truncated"] is True
    assert "output truncated: yes" in result.text
    assert f"stdout (100000000 bytes, kept {cap})" in result.text
    assert len(result.text) < cap + 1000
    assert peak < 8 * 1024 * 1024, peak
    assert after - before < 50 * 1024, (before, after)


def test_output_capture_keeps_head_and_tail() -> None:
    capture = OutputCapture(10)
    for chunk in (b"0123", b"4567", b"89ab", b"cdef"):
        capture.add(chunk)
    assert capture.total == 16
    assert capture.kept == 10
    assert capture.text() == "01234\n[... 6 bytes omitted ...]\nbcdef"
    small = OutputCapture(10)
    small.add(b"\xe2\x82")
    small.add(b"\xac ok")
    assert small.text() == "\u20ac ok"


# -- the read-only classifier (its verdicts: test_shell_classify.py) ----------------------


async def test_read_only_commands_route_as_read_only(root: Path) -> None:
    (root / "f.txt").write_text("x\n")
    executor = _executor(root)
    outcome = await executor.execute_batch(
        [
            ToolCall("1", "shell", {"command": "cat f.txt"}),
            ToolCall("2", "shell", {"command": "touch g.txt"}),
        ]
    )
    assert [r.routing for r in outcome.results] == [
        RoutingClass.READ_ONLY,
        RoutingClass.SERIAL_MUT,
    ]


async def test_a_command_that_cannot_be_an_argument_is_refused(root: Path) -> None:
    result = await shell(_executor(root), "echo a\x00b")
    assert result.error_class is ErrorClass.INVALID_ARGUMENTS
    assert "NUL byte" in result.text


class _ShortGrant:
    """A policy whose grant gives every call a one-second deadline."""

    def decide(self, definition: Any, arguments: Any, agent_path: str) -> Allow:
        return Allow(ExecutionGrant(timeout=1.0))


async def test_the_executor_deadline_kills_the_whole_tree(root: Path) -> None:
    registry = ToolRegistry()
    registry.register(ShellTool(Workspace(root)))
    executor = ToolExecutor(registry, policy=_ShortGrant(), grace_period=1.0)
    result = await shell(executor, TREE)  # no timeout of its own: the grant's applies
    assert result.error_class is ErrorClass.TIMEOUT
    pgid, *descendants = [int(p) for p in (root / "pids").read_text().split()]
    assert len(descendants) == 2
    assert group_members(pgid) == []
    assert not any(process_alive(pid) for pid in [pgid, *descendants])


# -- plain simple commands skip bash's start-up, with bash's own behaviour --------------


@pytest.mark.parametrize(
    "command",
    [
        "printenv PWD SHLVL HOME _",
        "true",
        "false",
        "ls -a",
        "env",
        "cat missing.txt",
        "  printenv   PWD  ",
    ],
)
async def test_a_plain_command_behaves_exactly_as_through_bash(root: Path, command: str) -> None:
    import subprocess

    from toolexec import Workspace
    from toolexec.tools import ShellTool

    (root / "a.txt").write_text("x")
    tool = ShellTool(Workspace(root))
    assert tool._direct(command) is not None
    bash = subprocess.run(
        [tool.shell, "-c", command], cwd=root, env=tool._env, capture_output=True, text=True
    )
    registry = ToolRegistry()
    registry.register(tool)
    outcome = await ToolExecutor(registry).execute_batch(
        [ToolCall("c", "shell", {"command": command})]
    )
    fast = outcome.results[0]
    assert fast.details["exit_code"] == bash.returncode
    expected = [
        f"{label}:\n{data.rstrip(chr(10))}"
        for label, data in (("stdout", bash.stdout), ("stderr", bash.stderr))
        if data
    ] or ["(no output)"]
    got = fast.text.split("\n", 1)[1]
    if command == "env":  # the same variables; bash lists them in its own order
        assert sorted(got.splitlines()) == sorted("\n".join(expected).splitlines())
    else:
        assert got == "\n".join(expected)


@pytest.mark.parametrize(
    ("command", "direct"),
    [
        ("true", True),
        ("ls -la src", True),
        ("git status --short", None),  # only if git is installed
        ("true --help", False),  # the builtin ignores it, the program prints help
        ("echo hi", False),
        ("cd src", False),
        ("ls > out.txt", False),
        ("ls; rm -rf x", False),
        ("ls $HOME", False),
        ("ls 'a b'", False),
        ("ls *.py", False),
        ("ls ~", False),
        ("FOO=1 env", False),
        ("./run.sh", False),
        ("no-such-program-xyz", False),
        ("ls\nrm x", False),
    ],
)
def test_which_commands_take_the_direct_path(root: Path, command: str, direct: bool | None) -> None:
    import shutil

    from toolexec import Workspace
    from toolexec.tools import ShellTool

    tool = ShellTool(Workspace(root))
    if direct is None:
        direct = shutil.which("git", path=tool._env["PATH"]) is not None
    assert (tool._direct(command) is not None) == direct


def test_a_program_installed_later_is_found(root: Path, tmp_path: Path) -> None:
    from toolexec import Workspace
    from toolexec.tools import ShellTool

    bindir = tmp_path / "bin"
    bindir.mkdir()
    tool = ShellTool(Workspace(root), env={"PATH": f"{bindir}:/usr/bin:/bin"})
    assert tool._direct("mytool --flag") is None  # not found: bash reports it
    program = bindir / "mytool"
    program.write_text("#!/bin/sh\necho ok\n")
    program.chmod(0o755)
    direct = tool._direct("mytool --flag")
    assert direct is not None
    assert direct[1] == str(program)


def test_a_program_added_within_the_same_clock_tick_is_found(root: Path, tmp_path: Path) -> None:
    from toolexec import Workspace
    from toolexec.tools import ShellTool

    bindir = tmp_path / "bin"
    bindir.mkdir()
    tool = ShellTool(Workspace(root), env={"PATH": f"{bindir}:/usr/bin:/bin"})
    before = os.stat(bindir)
    assert tool._direct("mytool") is None
    program = bindir / "mytool"
    program.write_text("#!/bin/sh\necho ok\n")
    program.chmod(0o755)
    # A coarse filesystem clock can leave the directory's time unchanged.
    os.utime(bindir, ns=(before.st_atime_ns, before.st_mtime_ns))
    direct = tool._direct("mytool")
    assert direct is not None
    assert direct[1] == str(program)


async def test_a_program_that_lost_its_execute_bit_is_left_to_bash(
    root: Path, tmp_path: Path
) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    program = bindir / "mytool"
    program.write_text("#!/bin/sh\necho ok\n")
    program.chmod(0o755)
    old = os.stat(bindir).st_mtime_ns - 10_000_000_000
    os.utime(bindir, ns=(old, old))  # old enough for the look-up to be remembered
    executor = _executor(root, env={"PATH": f"{bindir}:/usr/bin:/bin"})
    assert "ok" in (await shell(executor, "mytool")).text
    program.chmod(0o644)  # a mode change leaves the directory's time alone
    result = await shell(executor, "mytool")
    assert result.details["exit_code"] == 126  # bash's answer: found, not executable
    assert "Permission denied" in result.text
