"""Warm sandboxes and the sandbox by default, with the real bwrap and unshare of this machine.

A warm sandbox serves call after call: what one call leaves (a file in
``/tmp``, a background process, an environment change, a signal handler,
an IPC object) is invisible to the next, and no call, warm or fresh, reaches
a keyring (the host process's session keyring included); a sandbox that
breaks is replaced;
results equal those of fresh sandboxes; the pool is bounded and, closed,
leaves no process. ``toolexec exec`` runs the shell there by default.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import trio

import sandbox_tools
from conftest import open_fds, process_alive
from test_sandbox import Route, _namespace_members, _require, _shell
from toolexec import (
    ErrorClass,
    SideEffects,
    ToolCall,
    ToolExecutor,
    ToolRegistry,
    function_tool,
)
from toolexec._tools._shell import ShellTool
from toolexec._tools._workspace import Workspace
from toolexec.backends import SandboxByDefault, SubprocessBackend
from toolexec.policy import Allow, Ask, Deny, ExecutionGrant

if TYPE_CHECKING:
    from collections.abc import Mapping

# Slow (tests/README.md): real sandboxes.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform != "linux", reason="namespaces are Linux's"),
]

NAMESPACE_LEVELS = ("bwrap", "unshare")
ROOT = Path(__file__).parent.parent


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "in.txt").write_text("inside\n")
    return ws


def _registry(workspace: Path) -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(ShellTool(Workspace(workspace), default_timeout=20))
    for tool in (sandbox_tools.where, sandbox_tools.refuse, sandbox_tools.crash):
        registry.register(tool)
    registry.register(function_tool(side_effects=SideEffects.READ)(sandbox_tools.plain))
    return registry


def _executor(
    workspace: Path, backend: SubprocessBackend, limits: Mapping[str, Any] | None = None
) -> ToolExecutor:
    return ToolExecutor(
        _registry(workspace),
        policy=Route(limits),
        backends={"subprocess": backend},
        workspace=Workspace(workspace),
        grace_period=0.5,
    )


def _stdout(result: Any) -> str:
    return str(result.text).split("stdout:\n", 1)[1] if "stdout:\n" in result.text else ""


def _launchers(backend: SubprocessBackend) -> list[int]:
    pool = backend._pool
    return [s.pid for s in (*pool.idle, *pool.busy, *pool.ending)]


# -- nothing crosses from one call to the next -----------------------------------------

# What the next call could see of the last one's leftovers.
_PROBE = (
    "echo ${{LEFT-unset}}; grep -E 'Sig(Ign|Cgt)' /proc/self/status; "
    "ls -A /tmp ~ /run {dev}; ipcs -m -s -q | grep -c '^0x'; echo sleeping: $(pgrep -c -x sleep); "
    "readlink /proc/self/ns/pid"
)
_LEAVE = (
    "echo x > /tmp/left; mkdir -p /tmp/d/e; touch /tmp/d/e/f ~/left /run/left {dev}; "
    "chmod 000 /tmp/d; ln -s /etc /tmp/link; (setsid sleep 60 &); sleep 60 & "
    "export LEFT=1; trap '' TERM USR1 HUP; ipcmk -M 4096 >/dev/null; ipcmk -Q >/dev/null; "
    "readlink /proc/self/ns/pid"
)


@pytest.mark.parametrize("level", NAMESPACE_LEVELS)
async def test_a_warm_call_sees_nothing_the_last_one_left(level: str, workspace: Path) -> None:
    await _require(level)
    dev = "/dev /dev/shm" if level == "bwrap" else ""
    async with SubprocessBackend(levels=(level,), warm=2) as backend:
        executor = _executor(workspace, backend, {"workspace": "rw"})
        before = await _shell(executor, _PROBE.format(dev=dev))
        assert not before.is_error, before.text
        touch = "/dev/shm/left /dev/left" if level == "bwrap" else ""
        left = await _shell(executor, _LEAVE.format(dev=touch))
        assert not left.is_error, left.text
        after = await _shell(executor, _PROBE.format(dev=dev))
        assert not after.is_error, after.text
        assert len(backend._pool.idle) == 1  # one sandbox served all three
    # The same namespace (the sandbox was reused), and nothing else changed.
    assert _stdout(after).rsplit("\n", 1)[1] == _stdout(left).strip()
    assert _stdout(after).split("\n") == _stdout(before).split("\n")
    assert "unset" in _stdout(after)


# A key a call tries to leave in each keyring a process reaches by name (the user's,
# the user-session's, the session's: the host process's, where bwrap is the call's
# only parent), then whether it is there; keyctl through ctypes (keyutils is not on
# every machine). {op}: add or find.
_KEYS = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
ADD_KEY, KEYCTL = {calls}
RINGS = ((-4, b"user"), (-5, b"user-session"), (-3, b"session"))
for ring, name in RINGS:
    if "{op}" == "add":
        got = libc.syscall(ADD_KEY, b"user", name, b"x", 1, ring)
    else:  # KEYCTL_SEARCH
        got = libc.syscall(KEYCTL, 10, ring, b"user", name, 0)
    print(name.decode(), got, ctypes.get_errno())
"""
# add_key(2) and keyctl(2), by machine.
_KEY_CALLS = {"x86_64": (248, 250), "aarch64": (217, 219)}


def _keys(op: str) -> str:
    program = _KEYS.format(op=op, calls=_KEY_CALLS[os.uname().machine])
    return f"python3 -c {shlex.quote(program)}"


@pytest.mark.parametrize("network", [False, True])
@pytest.mark.parametrize("warm", [0, 2])
@pytest.mark.parametrize("level", NAMESPACE_LEVELS)
async def test_a_call_reaches_no_keyring(
    level: str, warm: int, network: bool, workspace: Path
) -> None:
    """The kernel's keyrings are a user's, not a sandbox's: at the namespace levels the
    keyring calls fail with EPERM, so a call neither reads the host process's session
    keyring nor leaves a key for the next call of a warm sandbox."""
    await _require(level)
    if os.uname().machine not in _KEY_CALLS:
        pytest.skip(f"keyctl's number on {os.uname().machine} is not known here")
    add_key, keyctl = _KEY_CALLS[os.uname().machine]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(keyctl, 1, None) < 0:  # KEYCTL_JOIN_SESSION_KEYRING: ours, for the test
        pytest.skip(f"keyctl is refused here: {os.strerror(ctypes.get_errno())}")
    assert libc.syscall(add_key, b"user", b"session", b"host", 4, -3) > 0  # in our session's
    async with SubprocessBackend(levels=(level,), warm=warm) as backend:
        executor = _executor(workspace, backend, {"network": network})
        added = await _shell(executor, _keys("add"))
        found = await _shell(executor, _keys("find"))
    refused = [f"{ring} -1 {errno.EPERM}" for ring in ("user", "user-session", "session")]
    assert _stdout(added).splitlines() == refused, added.text
    assert _stdout(found).splitlines() == refused, found.text


# -- the same results as fresh sandboxes -----------------------------------------------

_COMMANDS = [
    "echo out; echo err >&2",
    "exit 3",
    "cat in.txt; pwd",
    "echo y > in.txt",
    "env | sort",
    "ls / | wc -l",
    "true",
    "/nonexistent/program",
]


def _comparable(result: Any) -> tuple[Any, ...]:
    details = {k: v for k, v in result.details.items() if k not in ("duration", "traceback")}
    text = re.sub(r"duration [0-9.]+ s", "duration", str(result.text))
    return (result.is_error, result.error_class, text, details)


@pytest.mark.parametrize("level", [*NAMESPACE_LEVELS, "rlimits"])
async def test_warm_and_fresh_sandboxes_give_the_same_results(level: str, workspace: Path) -> None:
    if level != "rlimits":
        await _require(level)
    commands = [*_COMMANDS, *(["ls -A /tmp ~ /run"] if level != "rlimits" else [])]
    calls = [ToolCall(f"s{i}", "shell", {"command": c}) for i, c in enumerate(commands)]
    calls.append(ToolCall("t", "shell", {"command": "sleep 30", "timeout": 0.5}))
    calls += [
        ToolCall("p", "plain", {"text": "hi"}),
        ToolCall("r", "refuse", {"reason": "no"}),
        ToolCall("x", "crash", {}),
    ]
    seen = []
    before = open_fds()
    for warm in (0, 3):
        (workspace / "in.txt").write_text("inside\n")  # rlimits does not stop the write
        async with SubprocessBackend(levels=(level,), warm=warm) as backend:
            outcome = await _executor(workspace, backend).execute_batch(calls)
        seen.append([_comparable(r) for r in outcome.results])
    assert open_fds() - before == set()  # the lean bwrap call's and the pool's, all closed
    fresh, warm_results = seen
    assert warm_results == fresh
    timed_out = fresh[len(commands)]
    assert timed_out[1] is ErrorClass.TIMEOUT
    assert fresh[-3][2] == "HI"


# -- a broken sandbox is replaced --------------------------------------------------------


def _replaced(backend: SubprocessBackend, old: int) -> int:
    """The one launcher left, another than ``old``, which is gone."""
    assert not process_alive(old)
    (new,) = _launchers(backend)
    assert new != old
    return new


@pytest.mark.parametrize("level", NAMESPACE_LEVELS)
async def test_a_broken_sandbox_is_replaced_never_reused(level: str, workspace: Path) -> None:
    await _require(level)
    async with SubprocessBackend(levels=(level,), warm=2) as backend:
        executor = _executor(workspace, backend)
        for _ in range(2):
            assert not (await _shell(executor, "true")).is_error
        (launcher,) = _launchers(backend)  # reused while whole
        # Its launcher dies between calls.
        os.killpg(launcher, signal.SIGKILL)
        assert not (await _shell(executor, "true")).is_error
        launcher = _replaced(backend, launcher)
        # A limit trips: the call's process is killed by a signal.
        limited = _executor(workspace, backend, {"cpu_seconds": 1})
        with trio.fail_after(60):  # a hang guard: one second of CPU, however busy the machine
            burnt = await _shell(limited, "while :; do :; done")
        assert "SIGXCPU" in burnt.text
        assert not process_alive(launcher)
        assert not (await _shell(executor, "true")).is_error
        (launcher,) = _launchers(backend)
        # A timeout.
        slow = await _shell(executor, "sleep 30", timeout=0.5)
        assert slow.error_class is ErrorClass.TIMEOUT
        assert not process_alive(launcher)
        assert not (await _shell(executor, "true")).is_error
        (launcher,) = _launchers(backend)
        if level == "bwrap":  # a clean-up that fails: bwrap's own /dev loses an entry
            assert not (await _shell(executor, "rm /dev/stdout")).is_error
            kept = await _shell(executor, "readlink /dev/stdout")
            assert _stdout(kept) == "/proc/self/fd/1"
            _replaced(backend, launcher)


# -- bounded, and closed with nothing left ------------------------------------------------


@pytest.mark.parametrize("level", NAMESPACE_LEVELS)
async def test_the_pool_is_bounded_and_closing_it_leaves_no_process(
    level: str, workspace: Path
) -> None:
    await _require(level)
    wait = (
        "mktemp started.XXXXXX >/dev/null; while [ ! -e go ]; do sleep 0.01; done; "
        "readlink /proc/self/ns/pid"
    )
    before = open_fds()
    backend = SubprocessBackend(levels=(level,), warm=1)
    results: list[Any] = []
    launchers: set[int] = set()

    async def one() -> None:
        results.append(await _shell(_executor(workspace, backend, {"workspace": "rw"}), wait))

    with trio.fail_after(120):  # a hang guard only
        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(one)
            while len(list(workspace.glob("started.*"))) < 3:
                await trio.sleep(0.01)
            launchers.update(_launchers(backend))
            assert len(launchers) == 3
            (workspace / "go").touch()
    namespaces = {_stdout(r).strip() for r in results}
    assert len(namespaces) == 3
    assert len(backend._pool.idle) == 1  # the bound: the others were closed
    await backend.aclose()
    assert _launchers(backend) == []
    assert open_fds() - before == set()
    assert [pid for pid in launchers if process_alive(pid)] == []
    assert [ns for ns in namespaces if _namespace_members(ns)] == []
    assert [pid for pid in _group_members(launchers)] == []
    after = await _shell(_executor(workspace, backend), "true")
    assert after.is_error
    assert "the backend was closed" in after.text


def _group_members(groups: set[int]) -> list[int]:
    members = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.getpgid(int(name)) in groups and process_alive(int(name)):
                    members.append(int(name))
            except OSError:
                continue
    return members


# -- the sandbox by default -------------------------------------------------------------


def test_the_sandbox_by_default_routes_only_what_it_can_run(workspace: Path) -> None:
    def local(text: str) -> str:
        return text

    registry = _registry(workspace)
    registry.register(function_tool(name="local")(local))
    definition = registry.definition

    class Inner:
        def decide(self, definition: Any, arguments: Any, agent_path: str) -> Any:
            return {
                "refuse": Deny("no"),
                "crash": Allow(ExecutionGrant(sandbox="elsewhere")),
                "plain": Ask(grant=ExecutionGrant(limits={"workspace": "ro", "network": True})),
            }.get(definition.name, Allow())

    policy = SandboxByDefault(registry, Inner())
    shell = policy.decide(definition("shell"), {"command": "true"}, "root")
    assert isinstance(shell, Allow)
    assert (shell.grant.sandbox, dict(shell.grant.limits)) == ("subprocess", {"workspace": "rw"})
    plain = policy.decide(definition("plain"), {"text": "x"}, "root")
    assert isinstance(plain, Ask)
    assert plain.grant.sandbox == "subprocess"
    assert dict(plain.grant.limits) == {"workspace": "ro", "network": True}  # the grant's own win
    for name, arguments, sandbox in (("local", {"text": "x"}, "host"), ("crash", {}, "elsewhere")):
        decision = policy.decide(definition(name), arguments, "root")
        assert isinstance(decision, Allow)
        assert decision.grant.sandbox == sandbox
    assert isinstance(policy.decide(definition("refuse"), {"reason": "x"}, "root"), Deny)
    assert policy.runs_there("where")
    assert not policy.runs_there("missing")
    with pytest.raises(TypeError):
        SandboxByDefault("not a registry")  # type: ignore[arg-type]


def _toolexec(*args: str | Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toolexec", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,  # a hang guard only
        cwd=cwd,
        check=False,
    )


async def test_toolexec_exec_runs_the_shell_sandboxed(tmp_path: Path) -> None:
    found = await SubprocessBackend().detect()
    workspace = tmp_path / "workspace"
    (workspace / "notes").mkdir(parents=True)
    (workspace / "notes" / "todo.txt").write_text("one\ntwo\n")
    example = ROOT / "examples" / "shell_response.json"
    args: list[str | Path] = ["exec", example, "-w", workspace, "--yes", "--shell"]
    done = _toolexec(*args)
    assert done.returncode == 0, done.stderr
    line = f"sandbox: shell run in the subprocess sandbox at isolation '{found.level}' (warm)"
    assert line in done.stderr
    texts = {m["tool_call_id"]: m["content"] for m in json.loads(done.stdout)}
    assert "2 notes/todo.txt" in texts["call_sh1"]
    assert (workspace / "out" / "shell.txt").read_text() == "checked by a sandboxed shell\n"
    if found.level != "rlimits":
        assert "the last call left nothing in /tmp" in texts["call_sh4"]
    # --sandbox none: on the host, in this pid namespace.
    response = tmp_path / "ns.json"
    call = {"name": "shell", "arguments": json.dumps({"command": "readlink /proc/self/ns/pid"})}
    message = {
        "role": "assistant",
        "tool_calls": [{"id": "c", "type": "function", "function": call}],
    }
    response.write_text(json.dumps({"choices": [{"message": message}]}))
    for sandbox, here in (("none", True), ("auto", found.level == "rlimits")):
        done = _toolexec(
            "exec", response, "-w", workspace, "--yes", "--shell", "--sandbox", sandbox
        )
        assert done.returncode == 0, done.stderr
        (result,) = json.loads(done.stdout)
        assert (os.readlink("/proc/self/ns/pid") in result["content"]) is here
        assert ("sandbox: shell run" in done.stderr) is (sandbox == "auto")


@pytest.mark.parametrize("warm", [0, 2])
async def test_a_sandbox_that_cannot_be_set_up_says_why_and_runs_nothing(
    warm: int, tmp_path: Path
) -> None:
    await _require("bwrap")
    gone = tmp_path / "gone"
    gone.mkdir()
    async with SubprocessBackend(levels=("bwrap",), warm=warm) as backend:
        executor = _executor(gone, backend)
        gone.rmdir()
        result = await _shell(executor, "true")
    assert result.is_error
    assert "the sandbox (isolation 'bwrap') could not be set up: " in result.text
    assert "bwrap: " in result.text or "No such file or directory" in result.text
    assert backend._pool.idle == []
