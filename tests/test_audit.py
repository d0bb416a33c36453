"""The JSON-lines audit log: every decision, whole lines even after a crash."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING

from conftest import Scripted, write
from toolexec import ToolCall, ToolExecutor, ToolRegistry
from toolexec.events import JsonlAuditSink
from toolexec.policy import Rule, RulePolicy

if TYPE_CHECKING:
    from pathlib import Path


async def test_audit_log_records_every_decision(registry: ToolRegistry, tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    audit = JsonlAuditSink.open(path)
    policy = RulePolicy([Rule("deny", "read_file", reason="reads are off today")])
    executor = ToolExecutor(
        registry, policy=policy, approver=Scripted(True, by="ann"), sinks=[audit]
    )
    await executor.execute_batch(
        [write("w"), ToolCall("r", "read_file", {"path": "a"}), ToolCall("bad", "write_file")]
    )
    audit.close()
    records = [json.loads(line) for line in path.read_text().splitlines()]
    kinds = [(r["event"], r["call_id"]) for r in records]
    assert ("call.failed", "r") in kinds
    assert ("call.input_invalid", "bad") in kinds
    assert [k for k in kinds if k[1] == "w"] == [
        ("approval.requested", "w"),
        ("approval.resolved", "w"),
        ("call.started", "w"),
        ("call.completed", "w"),
    ]
    denied = next(r for r in records if r["call_id"] == "r")
    assert denied["error_class"] == "permission_denied"
    assert "reads are off today" in denied["message"]
    resolved = next(r for r in records if r["event"] == "approval.resolved")
    assert resolved["by"] == "ann"
    assert resolved["approved"] is True
    assert "duration" in records[-1] or any("duration" in r for r in records)


def test_audit_log_survives_a_crash_mid_batch(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    script = textwrap.dedent(f"""
        import os, signal, trio
        from toolexec import *
        from toolexec.events import JsonlAuditSink

        @function_tool(side_effects=SideEffects.READ)
        async def step(n: int) -> str:
            if n == 150:
                os.kill(os.getpid(), signal.SIGKILL)
            return "x" * 500

        registry = ToolRegistry()
        registry.register(step)
        audit = JsonlAuditSink.open({str(path)!r})
        executor = ToolExecutor(registry, sinks=[audit],
                                config=ConcurrencyConfig(read_width=8))
        calls = [ToolCall(str(i), "step", {{"n": i}}) for i in range(300)]
        trio.run(executor.execute_batch, calls)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL
    raw = path.read_bytes()
    assert raw.endswith(b"\n")
    lines = raw.decode().splitlines()
    assert len(lines) > 100
    for line in lines:
        json.loads(line)  # every line is whole
    assert os.stat(path).st_size == len(raw)
