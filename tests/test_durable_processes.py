"""Questions across processes: ask in one, approve from a second, resume in a third.

The asking host and the resuming host are real child processes sharing one
SQLite journal; the answer comes from ``toolexec approve`` in a third, and
the first host is killed with SIGKILL before it could see the answer.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # child processes, each importing toolexec

HANG_GUARD = 120.0  # seconds; each process needs about one

HOST = textwrap.dedent(
    """
    import os, sys, trio
    from toolexec import SideEffects, ToolCall, ToolExecutor, ToolRegistry, function_tool
    from toolexec.approval import ApprovalConfig, ApprovalMode
    from toolexec.durable import Journal, SQLiteStore
    from toolexec.events import ApprovalRequested, CallbackSink

    journal_path, marker, poll = sys.argv[1], sys.argv[2], float(sys.argv[3])

    @function_tool(side_effects=SideEffects.WRITE)
    def deploy(target: str) -> str:
        "Deploy, once a person says so."
        with open(marker, "a") as f:
            f.write(target + "\\n")
        return f"deployed {target}"

    def on_event(event):
        if isinstance(event, ApprovalRequested):
            print("asking", event.call_id, flush=True)

    async def main():
        registry = ToolRegistry()
        registry.register(deploy)
        journal = await Journal.open(SQLiteStore(journal_path), "web-1", poll_interval=poll)
        executor = ToolExecutor(
            registry,
            journal=journal,
            approval=ApprovalConfig(per_tool={"deploy": ApprovalMode.PROMPT}),
            sinks=[CallbackSink(on_event)],
        )
        outcome = await executor.execute_batch([ToolCall("d1", "deploy", {"target": "prod"})])
        print("result", outcome.results[0].text, flush=True)

    trio.run(main)
    """
)


def start_host(tmp_path: Path, poll: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", HOST, str(tmp_path / "j.db"), str(tmp_path / "deployed"), str(poll)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def toolexec(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "toolexec", *args],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD,
        check=True,
    )
    return done.stdout


def test_ask_in_one_process_approve_from_a_second_resume_in_a_third(tmp_path: Path) -> None:
    # 1. The first host asks, and looks at the journal only every 10 minutes.
    first = start_host(tmp_path, poll=600.0)
    try:
        assert first.stdout is not None
        assert first.stdout.readline().split() == ["asking", "d1"]
        # 2. A second process lists the question and approves it.
        listing = toolexec("questions", str(tmp_path / "j.db"))
        question_id, summary = listing.split("  ", 1)
        assert "deploy" in summary
        assert '{"target":"prod"}' in summary
        assert toolexec("approve", str(tmp_path / "j.db"), question_id, "--by", "alice") == (
            f"approved {question_id}\n"
        )
        assert toolexec("questions", str(tmp_path / "j.db")) == ""
    finally:
        # 3. The first host dies before it could see the answer.
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(HANG_GUARD)
        if first.stdout is not None:
            first.stdout.close()
    assert not (tmp_path / "deployed").exists()
    # 4. A third host resumes: the answer is in the journal, so nobody is asked again.
    third = start_host(tmp_path, poll=600.0)
    out, _ = third.communicate(timeout=HANG_GUARD)
    assert out.splitlines() == ["result deployed prod"]
    assert (tmp_path / "deployed").read_text() == "prod\n"


def test_a_denial_from_the_command_line_reaches_a_waiting_host(tmp_path: Path) -> None:
    host = start_host(tmp_path, poll=0.05)
    try:
        assert host.stdout is not None
        assert host.stdout.readline().split() == ["asking", "d1"]
        question_id = toolexec("questions", str(tmp_path / "j.db")).split("  ", 1)[0]
        denied = toolexec("deny", str(tmp_path / "j.db"), question_id, "--reason", "frozen")
        assert denied == f"denied {question_id}\n"
        out, _ = host.communicate(timeout=HANG_GUARD)
    finally:
        with contextlib.suppress(ProcessLookupError):  # it ended by itself
            os.killpg(host.pid, signal.SIGKILL)
        host.wait(HANG_GUARD)
    assert "frozen" in out
    assert not (tmp_path / "deployed").exists()


def test_the_commands_refuse_what_they_cannot_answer(tmp_path: Path) -> None:
    def refused(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "toolexec", *args],
            capture_output=True,
            text=True,
            timeout=HANG_GUARD,
        )
        assert done.returncode == 2
        return done.stderr

    assert "no journal" in refused("approve", str(tmp_path / "none.db"), "abc")
    (tmp_path / "j.db").touch()
    assert "no open question" in refused("deny", str(tmp_path / "j.db"), "abc")


def test_the_docs_example_kills_a_host_mid_batch_and_resumes_it(tmp_path: Path) -> None:
    """docs/durable.md's two programs, run as they are, print what the page shows."""
    page = (Path(__file__).parent.parent / "docs" / "durable.md").read_text()
    programs = re.findall(r"```python\n# (\S+\.py)\n(.*?)```", page, flags=re.DOTALL)
    assert [name for name, _ in programs] == ["deploy_host.py", "kill_and_resume.py"]
    for name, body in programs:
        (tmp_path / name).write_text(body)
    shown = re.search(r"```text\n(first host:.*?)```", page, flags=re.DOTALL)
    assert shown is not None
    done = subprocess.run(
        [sys.executable, "kill_and_resume.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=HANG_GUARD,
        check=True,
    )
    assert done.stdout == shown[1]
