"""The subprocess sandbox, with the real bwrap and unshare of this machine.

Each isolation level the machine has is exercised for real: a command that
writes outside the workspace, connects to a socket the test listens on,
allocates past its memory limit, or forks past its process limit; a call
that times out or is cancelled leaves no process behind (the pid namespace
it ran in is empty afterwards). A level the machine lacks is made real by
configuring the backend with a ``bwrap`` that does not exist.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import trio
import trio.testing

import sandbox_tools
from conftest import process_alive
from toolexec import (
    ErrorClass,
    SideEffects,
    ToolCall,
    ToolError,
    ToolExecutor,
    ToolOutput,
    ToolRegistry,
    function_tool,
)
from toolexec._tools._shell import ShellTool
from toolexec._tools._workspace import Workspace
from toolexec.backends import SandboxLimits, SubprocessBackend
from toolexec.events import CallbackSink, CallProgress, CallUpdate, Event
from toolexec.policy import Allow, ExecutionGrant

if TYPE_CHECKING:
    from collections.abc import Mapping

# Slow (tests/README.md): real sandboxes, a fork bomb, CPU limits.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform != "linux", reason="namespaces are Linux's"),
]

NAMESPACE_LEVELS = ("bwrap", "unshare")


class Route:
    """A policy sending every call to the ``subprocess`` sandbox with ``limits``."""

    def __init__(self, limits: Mapping[str, Any] | None = None) -> None:
        self.limits = dict(limits or {})

    def decide(self, definition: object, arguments: object, agent_path: str) -> Allow:
        return Allow(ExecutionGrant(sandbox="subprocess", limits=self.limits))


_available: dict[str, str | None] = {}


async def _require(level: str) -> None:
    """Skip unless this machine runs ``level`` (say why not)."""
    if level not in _available:
        found = await SubprocessBackend(levels=(level, "rlimits")).detect()
        _available[level] = None if found.level == level else found.why_not()
    if _available[level] is not None:
        pytest.skip(f"this machine has no {level} sandbox: {_available[level]}")


def _executor(
    workspace: Path,
    level: str,
    limits: Mapping[str, Any] | None = None,
    sinks: tuple[Any, ...] = (),
    **options: Any,
) -> ToolExecutor:
    registry = ToolRegistry()
    registry.register(ShellTool(Workspace(workspace), default_timeout=20))
    for tool in (sandbox_tools.where, sandbox_tools.refuse, sandbox_tools.crash):
        registry.register(tool)
    registry.register(sandbox_tools.hog)
    registry.register(function_tool(side_effects=SideEffects.READ)(sandbox_tools.plain))
    backend = SubprocessBackend(levels=(level,), **options)
    return ToolExecutor(
        registry,
        policy=Route(limits),
        backends={"subprocess": backend},
        workspace=Workspace(workspace),
        sinks=sinks,
        grace_period=0.5,  # a command that outlives SIGTERM costs the tests no more
    )


async def _shell(executor: ToolExecutor, command: str, **arguments: Any) -> Any:
    outcome = await executor.execute_batch(
        [ToolCall("c", "shell", {"command": command, **arguments})]
    )
    return outcome.results[0]


def _namespace_members(ns: str) -> list[int]:
    """The live processes whose pid namespace is ``ns`` (``pid:[...]``)."""
    members = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.readlink(f"/proc/{name}/ns/pid") == ns and process_alive(int(name)):
                    members.append(int(name))
            except OSError:
                continue
    return members


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "in.txt").write_text("inside\n")
    return ws


# -- isolation ------------------------------------------------------------------------


@pytest.mark.parametrize("level", NAMESPACE_LEVELS)
async def test_writing_outside_the_workspace_fails(level: str, workspace: Path) -> None:
    await _require(level)
    outside = workspace.parent / "outside"
    outside.mkdir()
    executor = _executor(workspace, level, {"workspace": "rw"})
    result = await _shell(executor, f"echo x > {outside}/leak.txt")
    assert result.is_error
    assert not (outside / "leak.txt").exists()
    result = await _shell(executor, "echo x > /etc/toolexec-leak && echo wrote")
    assert "Read-only file system" in result.text
    assert not Path("/etc/toolexec-leak").exists()
    # The home directory is a private tmpfs: a write lands there, and vanishes.
    result = await _shell(executor, "echo x > ~/toolexec-leak && cat ~/toolexec-leak")
    assert not result.is_error, result.text
    assert not (Path.home() / "toolexec-leak").exists()
    result = await _shell(executor, "cat in.txt && echo y > new.txt")
    assert not result.is_error, result.text
    assert (workspace / "new.txt").read_text() == "y\n"
    assert result.details["sandbox"] == {
        "isolation": level,
        "required": None,
        "network": False,
        "workspace": "rw",
        "limits": {},
    }


@pytest.mark.parametrize("level", NAMESPACE_LEVELS)
async def test_the_workspace_is_read_only_unless_the_grant_writes(
    level: str, workspace: Path
) -> None:
    await _require(level)
    result = await _shell(_executor(workspace, level), "cat in.txt; echo y > in.txt")
    assert result.is_error
    assert "inside" in result.text
    assert "Read-only file system" in result.text
    assert (workspace / "in.txt").read_text() == "inside\n"


@pytest.mark.parametrize("level", NAMESPACE_LEVELS)
async def test_the_network_is_unreachable_without_a_grant(level: str, workspace: Path) -> None:
    await _require(level)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        port = server.getsockname()[1]
        probe = f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected"
        result = await _shell(_executor(workspace, level), probe)
        assert result.is_error
        assert "connected" not in result.text
        result = await _shell(_executor(workspace, level, {"network": True}), probe)
        assert not result.is_error, result.text
        assert "connected" in result.text
        assert result.details["sandbox"]["network"] is True


@pytest.mark.parametrize("level", [*NAMESPACE_LEVELS, "rlimits"])
async def test_an_address_space_limit_stops_a_memory_hog(level: str, workspace: Path) -> None:
    if level != "rlimits":
        await _require(level)
    limits = {"memory_bytes": 256 * 1024 * 1024}
    executor = _executor(workspace, level, limits)
    hog = f"{os.path.realpath(sys.executable)} -I -S -c 'bytearray(1 << 30); print(\"allocated\")'"
    result = await _shell(executor, hog)
    assert result.is_error
    assert "MemoryError" in result.text
    assert "allocated" not in result.text
    assert result.details["sandbox"]["limits"] == limits
    small = await _shell(executor, hog.replace("1 << 30", "1 << 20"))
    assert not small.is_error, small.text


_FORK_BOMB_DRIVER = """
import json, os, shlex, sys
sys.path[:0] = {paths!r}
import trio
from test_sandbox import _executor, _shell
from pathlib import Path

FORKS = (
    "import os, time\\n"
    "n = 0\\n"
    "try:\\n"
    "    for _ in range(200):\\n"
    "        if os.fork() == 0:\\n"
    "            time.sleep(30)\\n"
    "            os._exit(0)\\n"
    "        n += 1\\n"
    "except OSError as exc:\\n"
    "    print('stopped', exc.errno)\\n"
    "print('forked', n)\\n"
)

async def main():
    figures = {{}}
    for level in {levels!r}:
        executor = _executor(Path({workspace!r}), level, {{"processes": 8}})
        # A bash fork bomb: bash retries a failed fork with a growing pause, so it
        # stalls at the limit until the call's time is up.
        bomb = await _shell(executor, "b() {{ b | b & }}; b; sleep 30", timeout=1)
        python = os.path.realpath(sys.executable)
        forks = await _shell(executor, python + " -I -S -c " + shlex.quote(FORKS), timeout=20)
        figures[level] = [bomb.error_class.value, bomb.text, forks.text]
    print(json.dumps(figures))

trio.run(main)
"""


def _python_for_nobody() -> str:
    """An interpreter of this version that an unprivileged user can run (or skip)."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    # It must see itself too: the sandbox binds the interpreter's directories by name.
    seen = "import os, sys; sys.exit(not os.path.exists(os.path.realpath(sys.executable)))"
    for python in (f"/usr/bin/{version}", f"/usr/local/bin/{version}", sys.executable):
        check = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", python, "-c", seen],
            capture_output=True,
            check=False,
        )
        if check.returncode == 0:
            return python
    pytest.skip(
        "running as root, whose processes the kernel never limits, and no "
        f"{version} that the unprivileged user can run to test the limit with"
    )


async def test_a_fork_bomb_is_contained_by_the_process_limit() -> None:
    levels = []
    for level in NAMESPACE_LEVELS:
        try:
            await _require(level)
            levels.append(level)
        except pytest.skip.Exception:
            continue
    if not levels:
        pytest.skip("this machine has no namespace sandbox")
    paths = [str(Path(__file__).parent), *sys.path]
    workspace = tempfile.mkdtemp(prefix="toolexec-bomb-")  # where nobody can reach it
    driver = _FORK_BOMB_DRIVER.format(paths=paths, levels=levels, workspace=workspace)
    argv = [sys.executable, "-c", driver]
    if os.geteuid() == 0:  # the kernel never limits root's processes: run as nobody
        python = _python_for_nobody()
        argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", python, "-c", driver]
        os.chmod(workspace, 0o777)
    try:
        done = await trio.run_process(argv, capture_stdout=True, capture_stderr=True, check=False)
    finally:
        shutil.rmtree(workspace)
    assert done.returncode == 0, done.stderr.decode()
    figures = json.loads(done.stdout)
    for level in levels:
        error_class, bomb, forks = figures[level]
        assert error_class == "timeout", bomb
        assert "Resource temporarily unavailable" in bomb
        assert "stopped 11" in forks  # EAGAIN
        forked = int(forks.rsplit("forked ", 1)[1].split()[0])
        assert 0 < forked < 8  # the limit counts the shell and python too


# -- levels ---------------------------------------------------------------------------


async def test_a_required_level_the_machine_lacks_is_an_error_and_nothing_runs(
    workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    missing = str(workspace.parent / "no-such-bwrap")
    executor = _executor(workspace, "bwrap", limits={"workspace": "rw"}, bwrap=missing)
    registry = executor.registry
    lacking = ToolExecutor(
        registry,
        policy=Route({"workspace": "rw"}),
        backends={"subprocess": SubprocessBackend(bwrap=missing, require="bwrap")},
    )
    with caplog.at_level(logging.WARNING, "toolexec.sandbox"):
        result = await _shell(lacking, "touch ran.txt")
    assert result.is_error
    assert result.error_class is ErrorClass.EXECUTION_ERROR
    assert "requires isolation 'bwrap' or stronger" in result.text
    assert missing in result.text
    assert not (workspace / "ran.txt").exists()
    assert result.details["sandbox"]["required"] == "bwrap"
    assert "runs at level" in caplog.text  # the weaker level it found is logged

    # The same through the grant, on a backend restricted to the weakest level.
    weak = _executor(workspace, "rlimits", {"min_isolation": "unshare", "workspace": "rw"})
    result = await _shell(weak, "touch ran.txt")
    assert result.is_error
    assert "requires isolation 'unshare'" in result.text
    assert not (workspace / "ran.txt").exists()


async def test_the_level_in_effect_is_logged_and_in_the_details(
    workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, "toolexec.sandbox"):
        result = await _shell(_executor(workspace, "rlimits"), "echo hi")
    assert not result.is_error, result.text
    assert result.details["sandbox"]["isolation"] == "rlimits"
    assert result.details["sandbox"]["network"] is True  # nothing stops it at this level
    assert result.details["sandbox"]["workspace"] == "unconfined"
    assert "runs in the subprocess sandbox at isolation 'rlimits'" in caplog.text
    assert result.details["exit_code"] == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="only root is exempt from RLIMIT_NPROC")
async def test_a_process_limit_root_would_ignore_is_an_error(workspace: Path) -> None:
    result = await _shell(_executor(workspace, "rlimits", {"processes": 5}), "touch ran.txt")
    assert result.is_error
    assert "cannot be enforced" in result.text
    assert not (workspace / "ran.txt").exists()


async def test_bad_limits_are_errors_naming_the_allowed_keys(workspace: Path) -> None:
    result = await _shell(_executor(workspace, "rlimits", {"memory": 10}), "touch ran.txt")
    assert result.is_error
    assert "unknown limit 'memory'" in result.text
    assert "memory_bytes" in result.text
    assert not (workspace / "ran.txt").exists()
    result = await _shell(_executor(workspace, "rlimits", {"cpu_seconds": -1}), "true")
    assert "grant limits.cpu_seconds: a positive whole number, got -1" in result.text
    cases: list[tuple[dict[str, object], str]] = [
        ({"network": "yes"}, "true or false"),
        ({"workspace": "w"}, "'ro' or 'rw'"),
        ({"min_isolation": "docker"}, "one of microvm, bwrap, unshare, rlimits"),
        ({"env_allow": "PATH"}, "a list of environment variable names"),
        ({"open_files": True}, "a positive whole number"),
    ]
    for bad, message in cases:
        with pytest.raises(ValueError, match=message):
            SandboxLimits.parse(bad)
    with pytest.raises(ValueError, match="unknown limit"):
        SubprocessBackend(limits={"cpu": 1})
    with pytest.raises(ValueError, match="levels"):
        SubprocessBackend(levels=("docker",))
    with pytest.raises(ValueError, match="require"):
        SubprocessBackend(require="vm")
    assert SandboxLimits.parse({"env_allow": ["PATH"], "file_size_bytes": 9}).rlimits() == {
        "file_size_bytes": 9
    }


async def test_the_environment_is_the_allow_list(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLEXEC_SECRET", "s3cret")
    monkeypatch.setenv("TOOLEXEC_SHOWN", "shown")
    executor = _executor(workspace, "rlimits", {"env_allow": ["PATH", "TOOLEXEC_SHOWN"]})
    result = await _shell(executor, "env")
    assert "TOOLEXEC_SHOWN=shown" in result.text
    assert "s3cret" not in result.text
    assert "TMPDIR=/tmp" in result.text


async def test_a_file_size_limit_stops_a_large_write(workspace: Path) -> None:
    executor = _executor(workspace, "rlimits", {"file_size_bytes": 4096})
    result = await _shell(executor, "head -c 100000 /dev/zero > big.bin")
    assert result.is_error
    assert (workspace / "big.bin").stat().st_size == 4096


# -- ending -----------------------------------------------------------------------------


@pytest.mark.parametrize("level", NAMESPACE_LEVELS)
async def test_a_timeout_ends_the_whole_tree(level: str, workspace: Path) -> None:
    await _require(level)
    command = "setsid sleep 60 & (sleep 60 &) ; readlink /proc/self/ns/pid; wait"
    result = await _shell(_executor(workspace, level), command, timeout=1)
    assert result.error_class is ErrorClass.TIMEOUT
    ns = result.text.split("stdout:\n", 1)[1].split("\n", 1)[0]
    assert ns.startswith("pid:[")
    assert _namespace_members(ns) == []


async def test_a_timeout_ends_the_group_at_the_rlimits_level(workspace: Path) -> None:
    result = await _shell(_executor(workspace, "rlimits"), "sleep 60 & echo $!; wait", timeout=1)
    assert result.error_class is ErrorClass.TIMEOUT
    pid = int(result.text.split("stdout:\n", 1)[1].split("\n", 1)[0])
    assert not process_alive(pid)


@pytest.mark.parametrize("level", [*NAMESPACE_LEVELS, "rlimits"])
async def test_cancelling_ends_the_whole_tree(level: str, workspace: Path) -> None:
    if level != "rlimits":
        await _require(level)
    seen: list[str] = []
    started = trio.Event()

    def watch(event: Event) -> None:
        if isinstance(event, CallUpdate):
            seen.append(event.partial.content[0].text)  # type: ignore[union-attr]
            if "\n" in "".join(seen):
                started.set()

    executor = _executor(workspace, level, sinks=(CallbackSink(watch),))
    command = "sleep 60 & readlink /proc/self/ns/pid; echo $!; wait"
    outcome: list[Any] = []
    with trio.fail_after(30):  # a hang guard only
        async with trio.open_nursery() as nursery:

            async def run() -> None:
                outcome.append(await _shell(executor, command))

            nursery.start_soon(run)
            await started.wait()
            with trio.move_on_after(5):  # a hang guard: the pid arrives with the ns line
                while len("".join(seen).splitlines()) < 2:
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
    ns, pid = "".join(seen).splitlines()[:2]
    if level == "rlimits":
        assert not process_alive(int(pid))
    else:
        assert _namespace_members(ns) == []


# -- function tools -----------------------------------------------------------------------


@pytest.mark.parametrize("level", [*NAMESPACE_LEVELS, "rlimits"])
async def test_a_function_tool_runs_in_the_sandbox(level: str, workspace: Path) -> None:
    if level != "rlimits":
        await _require(level)
    events: list[Event] = []
    executor = _executor(workspace, level, sinks=(CallbackSink(events.append),))
    outcome = await executor.execute_batch(
        [
            ToolCall("w", "where", {}),
            ToolCall("p", "plain", {"text": "hi"}),
            ToolCall("r", "refuse", {"reason": "no"}),
            ToolCall("x", "crash", {}),
        ]
    )
    where, plain, refuse, crash = outcome.results
    assert not where.is_error, where.text
    found = json.loads(where.text)
    assert found["pid"] != os.getpid()
    assert found["tool"] == "where"
    assert found["cwd"] == str(workspace)
    assert where.details["sandbox"]["isolation"] == level
    progress = [e.message for e in events if isinstance(e, CallProgress)]
    assert progress == ["looking around"]
    assert plain.text == "HI"
    assert refuse.error_class is ErrorClass.PERMISSION_DENIED
    assert refuse.text == "refused: no"
    assert crash.error_class is ErrorClass.EXECUTION_ERROR
    assert "RuntimeError: broken on purpose" in crash.text
    assert "broken on purpose" in crash.details["traceback"]


async def test_a_function_tool_past_its_memory_limit_fails(workspace: Path) -> None:
    executor = _executor(workspace, "rlimits", {"memory_bytes": 1 << 30})
    outcome = await executor.execute_batch([ToolCall("h", "hog", {"megabytes": 2048})])
    assert outcome.results[0].is_error
    assert "MemoryError" in outcome.results[0].text
    outcome = await executor.execute_batch([ToolCall("h", "hog", {"megabytes": 1})])
    assert outcome.results[0].text == str(1 << 20)


async def test_tools_the_sandbox_cannot_import_are_errors(workspace: Path) -> None:
    def local(text: str) -> str:
        return text

    class Other:
        definition = sandbox_tools.where.definition

        async def execute(self, arguments: Any, ctx: Any) -> ToolOutput:
            return ToolOutput.text("ran")

    registry = ToolRegistry()
    registry.register(function_tool(name="local")(local))
    registry.register(function_tool(name="lam")(lambda: "x"))
    executor = ToolExecutor(
        registry,
        policy=Route(),
        backends={"subprocess": SubprocessBackend(levels=("rlimits",))},
    )
    outcome = await executor.execute_batch(
        [ToolCall("1", "local", {"text": "a"}), ToolCall("2", "lam", {})]
    )
    assert "defined inside another function" in outcome.results[0].text
    assert "define it at a module's top level" in outcome.results[0].text
    assert "is a lambda" in outcome.results[1].text
    backend = SubprocessBackend(levels=("rlimits",))
    with pytest.raises(ToolError, match="this is a Other"):
        await backend.run(Other(), {}, _context())


def _context() -> Any:
    from toolexec import ToolContext

    return ToolContext("c", "other")


def test_the_launcher_imports_toolexec_only_to_run_a_function() -> None:
    """It is passed to ``python -I -S -c``: the standard library is all it has until then."""
    from toolexec._backends import _sandbox_child

    source = Path(_sandbox_child.__file__).read_text()
    before, after = source.split("def _run_function", 1)
    assert "from toolexec" not in before
    assert "import toolexec" not in before
    assert "from toolexec" in after.split("\ndef ", 1)[0]


_HOST_DRIVER = """
import sys
sys.path[:0] = {paths!r}
import trio
from pathlib import Path
from test_sandbox import _executor, _shell

async def main():
    async with trio.open_nursery() as nursery:
        for level in {levels!r}:
            executor = _executor(Path({workspace!r}), level, {{"workspace": "rw"}})
            ns = f"readlink /proc/self/ns/pid > {{level}}.tmp && mv {{level}}.tmp {{level}}.ns"
            command = f"{{ns}}; sleep 60"
            nursery.start_soon(_shell, executor, command)

trio.run(main)
"""


async def test_the_sandbox_ends_when_toolexec_dies(workspace: Path) -> None:
    levels = []
    for level in NAMESPACE_LEVELS:
        try:
            await _require(level)
            levels.append(level)
        except pytest.skip.Exception:
            continue
    if not levels:
        pytest.skip("this machine has no namespace sandbox")
    paths = [str(Path(__file__).parent), *sys.path]
    driver = _HOST_DRIVER.format(paths=paths, levels=levels, workspace=str(workspace))
    with trio.fail_after(60):  # a hang guard only
        async with trio.open_nursery() as nursery:
            host = await nursery.start(
                functools.partial(trio.run_process, [sys.executable, "-c", driver], check=False)
            )
            # No event tells when the sandboxes are up: look for what they write
            # (renamed into place, so a file that exists is complete).
            while not all((workspace / f"{level}.ns").exists() for level in levels):
                await trio.sleep(0.02)
            namespaces = [(workspace / f"{level}.ns").read_text().strip() for level in levels]
            assert all(_namespace_members(ns) for ns in namespaces)
            host.kill()  # SIGKILL: toolexec cleans nothing up
        # The launchers see their request pipes close and end their namespaces.
        while any(_namespace_members(ns) for ns in namespaces):
            await trio.sleep(0.02)


async def test_a_function_sending_back_too_much_is_an_error(workspace: Path) -> None:
    executor = _executor(workspace, "rlimits", max_report_bytes=100_000)
    executor.registry.register(sandbox_tools.big)
    outcome = await executor.execute_batch(
        [ToolCall("1", "big", {"size": 1_000_000}), ToolCall("2", "big", {"size": 10})]
    )
    assert "sent back more than 100000 bytes" in outcome.results[0].text
    assert outcome.results[1].text == "x" * 10


async def test_cpu_and_open_file_limits_are_set(workspace: Path) -> None:
    executor = _executor(workspace, "rlimits", {"cpu_seconds": 1, "open_files": 64})
    result = await _shell(executor, "ulimit -n; ulimit -t")
    assert result.text.split("stdout:\n", 1)[1].split() == ["64", "1"]
    with trio.fail_after(60):  # a hang guard only: one second of CPU, however busy the machine
        result = await _shell(executor, "while :; do :; done")
    assert result.is_error
    assert "SIGXCPU" in result.text


# -- the sandbox's own channel ------------------------------------------------------------

# Writes a forged record into every descriptor of every other process it can see
# (the launcher's report pipe among them), then exits 3.
_FORGE = (
    "for fd in /proc/[0-9]*/fd/*; do "
    'case "$fd" in /proc/$$/*) continue;; esac; '
    'printf \'%s\\n\' \'{"op": "progress", "message": "forged"}\' '
    '\'{"op": "exit", "code": 0}\' > "$fd" && echo "wrote $fd"; '
    "done 2>/dev/null; exit 3"
)


@pytest.mark.parametrize("level", NAMESPACE_LEVELS)
async def test_the_work_cannot_forge_the_launchers_reports(level: str, workspace: Path) -> None:
    await _require(level)
    events: list[Event] = []
    executor = _executor(workspace, level, sinks=(CallbackSink(events.append),))
    result = await _shell(executor, _FORGE)
    assert [e for e in events if isinstance(e, CallProgress)] == []
    assert result.details["exit_code"] == 3, result.text
    wrote = [line for line in result.text.splitlines() if line.startswith("wrote")]
    if level == "bwrap":  # no launcher: bwrap's own first process holds the call's stdio
        wrote = [line for line in wrote if not re.fullmatch(r"wrote /proc/1/fd/[012]", line)]
    assert wrote == []
    # Nor can a command a function tool starts (the function holds the pipe itself).
    executor.registry.register(sandbox_tools.run)
    outcome = await executor.execute_batch([ToolCall("f", "run", {"command": _FORGE})])
    assert outcome.results[0].text == "exit 3\n"
    assert [e for e in events if isinstance(e, CallProgress)] == []


# Twelve children, each waiting for the parent to finish forking (EOF on a pipe).
_TWELVE_FORKS = (
    "import os\n"
    "r, w = os.pipe()\n"
    "n = 0\n"
    "try:\n"
    "    for _ in range(12):\n"
    "        if os.fork() == 0:\n"
    "            os.close(w)\n"
    "            os.read(r, 1)\n"
    "            os._exit(0)\n"
    "        n += 1\n"
    "except OSError as exc:\n"
    "    print('stopped', exc.errno)\n"
    "print('forked', n)\n"
    "os.close(w)\n"
)


@pytest.mark.parametrize("level", NAMESPACE_LEVELS)
async def test_a_process_limit_holds_or_is_refused(level: str, workspace: Path) -> None:
    """As root the kernel never limits the forks (root inside is root outside): refused."""
    await _require(level)
    python = os.path.realpath(sys.executable)
    command = f"touch ran.txt; {python} -I -S -c {shlex.quote(_TWELVE_FORKS)}"
    executor = _executor(workspace, level, {"processes": 4, "workspace": "rw"})
    result = await _shell(executor, command)
    if os.geteuid() == 0:
        assert result.is_error
        assert f"cannot be enforced at isolation '{level}'" in result.text
        assert not (workspace / "ran.txt").exists()
    else:
        assert "stopped 11" in result.text  # EAGAIN
        assert int(result.text.rsplit("forked ", 1)[1].split()[0]) < 4


@pytest.mark.parametrize("level", NAMESPACE_LEVELS)
async def test_a_unix_socket_is_unreachable_without_the_network(level: str) -> None:
    await _require(level)
    # A short path: a unix socket's path has at most 107 bytes.
    workspace = Path(tempfile.mkdtemp(prefix="toolexec-sock-"))
    python = os.path.realpath(sys.executable)
    connect = (
        "import socket\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        f"s.connect({str(workspace / 'agent.sock')!r})\n"
        "print('connected')\n"
    )
    command = f"{python} -I -S -c {shlex.quote(connect)}"
    try:
        with socket.socket(socket.AF_UNIX) as server:
            server.bind(str(workspace / "agent.sock"))
            server.listen(8)
            for network in (False, True):
                executor = _executor(workspace, level, {"network": network})
                result = await _shell(executor, command)
                assert ("connected" in result.text) is network, result.text
                executor.registry.register(sandbox_tools.run)
                outcome = await executor.execute_batch([ToolCall("f", "run", {"command": command})])
                assert ("connected" in outcome.results[0].text) is network
    finally:
        shutil.rmtree(workspace)
