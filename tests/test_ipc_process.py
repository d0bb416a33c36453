"""toolexec.ipc with real runner processes: the acceptance list, a dying runner, a 1 GB line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from conftest import group_members
from toolexec import (
    SideEffects,
    ToolExecutor,
    ToolRegistry,
    Workspace,
    function_tool,
    register_builtin_tools,
)
from toolexec.events import JsonlAuditSink
from toolexec.ipc import RunnerConfig, Supervisor
from toolexec.policy import Capabilities, PathGrant

ROOT = Path(__file__).resolve().parent.parent
RUNNER = str(ROOT / "examples" / "ipc_runner.py")
#: A hang guard only: every test here ends in well under a second when it passes.
DEADLINE = 60


@function_tool(side_effects=SideEffects.READ)
def boom() -> str:
    """Fail."""
    raise RuntimeError("the handler broke")


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    (tmp_path / "ws" / "notes").mkdir(parents=True)
    (tmp_path / "ws" / "notes" / "todo.txt").write_text("buy milk\n")
    (tmp_path / "ws" / "secret.txt").write_text("hunter2\n")
    return Workspace(tmp_path / "ws")


def answers_of(path: Path) -> dict[str, dict[str, Any]]:
    lines = path.read_text().splitlines()
    return {a["tool_call_id"]: a for a in map(json.loads, lines)}


async def test_the_acceptance_list_end_to_end(workspace: Workspace, tmp_path: Path) -> None:
    registry = ToolRegistry()
    register_builtin_tools(registry, workspace)
    registry.register(boom)
    audit = JsonlAuditSink.open(tmp_path / "audit.jsonl")
    supervisor = Supervisor(ToolExecutor(registry, workspace=workspace, sinks=[audit]))
    caps = Capabilities(["read_file", "echo", "boom"], [PathGrant("notes")])
    steps = [
        ["read_file", {"path": "notes/todo.txt"}],  # call-0: granted
        ["write_file", {"path": "notes/x", "content": "y"}],  # call-1: tool not granted
        ["no_such_tool", {}],  # call-2
        ["read_file", {"path": "secret.txt"}],  # call-3: path not granted
        ["read_file", {"path": "notes/../secret.txt"}],  # call-4: leads outside the grant
        ["boom", {}],  # call-5: the handler raises
        ["echo", {"text": "still here"}],  # call-6: the runner keeps working
    ]
    out = tmp_path / "answers.jsonl"
    with trio.fail_after(DEADLINE):
        status = await supervisor.run_process(
            [sys.executable, RUNNER, json.dumps(steps), "--out", str(out)],
            RunnerConfig("agent", caps),
        )
    audit.close()
    assert status == 0
    got = answers_of(out)
    assert got["call-0"]["ok"] is True
    assert got["call-0"]["text"] == "buy milk\n"
    assert got["call-1"]["error"] == "permission_denied"
    assert got["call-2"]["error"] == "tool_not_found"
    assert got["call-3"]["error"] == "fs_denied"
    assert got["call-4"]["error"] == "fs_denied"
    assert got["call-5"]["error"] == "tool_failed"
    assert "the handler broke" in got["call-5"]["text"]
    assert got["call-6"] == {
        "tool_call_id": "call-6",
        "ok": True,
        "error": None,
        "text": "still here",
    }
    records = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    mine = {(r["event"], r["tool_call_id"]) for r in records if r["event"].startswith("tool.")}
    dispatched = {f"call-{i}" for i in (0, 5, 6)}
    denied = {f"call-{i}" for i in (1, 2, 3, 4)}
    assert mine == {("tool.call.dispatched", c) for c in dispatched} | {
        ("tool.call.denied", c) for c in denied
    }
    for r in records:
        if r["event"] == "tool.call.denied":
            assert r["agent_path"] == "root/agent"
            assert r["error"] in ("permission_denied", "tool_not_found", "fs_denied")
    # The executor's own lines for the dispatched calls land in the same file.
    assert {r["call_id"] for r in records if r["event"] == "call.completed"} == {"call-0", "call-6"}


async def test_a_supervisor_without_tools_answers_tool_not_found(tmp_path: Path) -> None:
    out = tmp_path / "answers.jsonl"
    steps = [[["read_file", {"path": "x"}], ["echo", {"text": "x"}]]]
    with trio.fail_after(DEADLINE):
        status = await Supervisor().run_process(
            [sys.executable, RUNNER, json.dumps(steps), "--out", str(out)], RunnerConfig("r")
        )
    assert status == 0
    got = answers_of(out)
    assert [a["error"] for a in got.values()] == ["tool_not_found", "tool_not_found"]
    assert "Available: (none)" in got["call-0"]["text"]


DIES_MID_CALL = """
import os, sys
open(sys.argv[1], "w").write(str(os.getpid()))
sys.stdout.write('{"op": "tool_call", "tool_call_id": "h", "tool": "hang", "args": {}}\\n')
sys.stdout.flush()
sys.stdin.readline()  # never answered: the tool kills this process
"""


async def test_a_runner_dying_mid_call_has_its_calls_cancelled(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    events: list[str] = []

    @function_tool(side_effects=SideEffects.READ)
    async def hang() -> str:
        """Kill the runner that called, then wait to be cancelled."""
        events.append("started")
        os.kill(int(pidfile.read_text()), signal.SIGKILL)
        try:
            await trio.sleep_forever()
        finally:
            events.append("ended")
        return ""  # pragma: no cover

    registry = ToolRegistry()
    registry.register(hang)
    executor = ToolExecutor(registry)
    supervisor = Supervisor(executor)
    with trio.fail_after(DEADLINE):
        status = await supervisor.run_process(
            [sys.executable, "-c", DIES_MID_CALL, str(pidfile)], RunnerConfig("r")
        )
    assert status == -signal.SIGKILL
    assert events == ["started", "ended"]
    assert executor.statistics().calls_in_flight == 0
    assert supervisor.statistics() == ()
    assert group_members(int(pidfile.read_text())) == []


LONG_LINE_RUNNER = """
import json, sys
out = sys.stdout.buffer
chunk = b"x" * (1 << 20)
out.write(b'{"op": "tool_call", "tool_call_id": "big", "tool": "echo", "args": {"text": "')
for _ in range(1024):
    out.write(chunk)
out.write(b'"}}\\n')
after = {"op": "tool_call", "tool_call_id": "after", "tool": "echo", "args": {"text": "ok"}}
out.write(json.dumps(after).encode() + b"\\n")
out.flush()
answers = [json.loads(sys.stdin.buffer.readline()) for _ in range(2)]
open(sys.argv[1], "w").write(json.dumps(answers))
"""

# The peak RSS of this process image: VmHWM, since getrusage's ru_maxrss keeps
# the high-water mark of the process that forked it (pytest's) across exec.
MEASURED_SERVE = """
import sys
from toolexec._cli._main import main
status = main(sys.argv[1:])
with open("/proc/self/status") as f:
    print(next(line.split()[1] for line in f if line.startswith("VmHWM:")), file=sys.stderr)
sys.exit(status)
"""


@pytest.mark.slow
def test_a_1_gb_line_leaves_the_supervisor_memory_bounded(tmp_path: Path) -> None:
    """``toolexec serve --stdio`` in a process of its own, measured by its peak RSS."""
    out = tmp_path / "answers.json"
    done = subprocess.run(
        [sys.executable, "-c", MEASURED_SERVE, "serve", "--stdio", "-w", str(tmp_path),
         "--no-shell", "--", sys.executable, "-c", LONG_LINE_RUNNER, str(out)],
        capture_output=True, text=True, timeout=DEADLINE * 3, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    peak_kib = int(done.stderr.strip().splitlines()[-1])
    refused, answered = json.loads(out.read_text())
    assert refused["op"] == "protocol_error"
    assert refused["error"] == "line_too_long"
    prefix = b'{"op": "tool_call", "tool_call_id": "big", "tool": "echo", "args": {"text": "'
    assert f"a line of {(1 << 30) + len(prefix) + 3} bytes" in refused["message"]
    assert answered["tool_call_id"] == "after"
    assert answered["ok"] is True
    # 1 GiB held would be over 1,000,000 KiB; the limit is 16 MiB.
    print(f"supervisor peak RSS: {peak_kib} KiB")
    assert peak_kib < 200_000, f"peak RSS {peak_kib} KiB"


def test_serve_needs_a_runner_command_and_a_mode(capsys: pytest.CaptureFixture[str]) -> None:
    from toolexec._cli._main import main

    with pytest.raises(SystemExit) as info:
        main(["serve", "--stdio"])
    assert info.value.code == 2
    assert "give the runner command after '--'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["serve", "--", "true"])
    assert info.value.code == 2
    assert "--stdio" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["serve", "--stdio", "--", "/no/such/runner"])
    assert info.value.code == 2
    assert "cannot start the runner '/no/such/runner'" in capsys.readouterr().err


def test_serve_stdio_runs_the_example_runner(tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("tea\n")
    steps = [["read_file", {"path": "notes/todo.txt"}], ["list_dir", {"path": "."}]]
    done = subprocess.run(
        [sys.executable, "-m", "toolexec", "serve", "--stdio", "-w", str(tmp_path),
         "--allow", "read_file", "--allow", "list_dir", "--grant", "notes", "--audit",
         str(tmp_path / "audit.jsonl"), "--", sys.executable, RUNNER, json.dumps(steps)],
        capture_output=True, text=True, timeout=DEADLINE, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    first, second = (json.loads(line) for line in done.stderr.splitlines()[-2:])
    assert (first["ok"], first["text"]) == (True, "tea\n")
    assert second["error"] == "fs_denied"  # '.' is more than the grant
    kinds = [json.loads(r)["event"] for r in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert kinds.count("tool.call.dispatched") == 1
    assert kinds.count("tool.call.denied") == 1
