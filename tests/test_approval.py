"""Approval: modes by side-effect class, approvers, and what a human is shown."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
import trio
import trio.testing

from conftest import KVTool, Recorder, Scripted, write
from toolexec import ErrorClass, SideEffects, ToolCall, ToolExecutor, ToolRegistry, Workspace
from toolexec._core._display import display_text
from toolexec.approval import (
    ApprovalAnswer,
    ApprovalConfig,
    ApprovalMode,
    ApprovalRequest,
    AutoApprover,
    FirstAnswer,
)
from toolexec.policy import Prefix, Rule, RulePolicy

if TYPE_CHECKING:
    from pathlib import Path


async def test_denied_by_user(registry: ToolRegistry, seen: list[dict[str, Any]]) -> None:
    executor = ToolExecutor(registry, approver=Scripted(False))
    outcome = await executor.execute_batch([write("w")])
    assert outcome.results[0].error_class is ErrorClass.USER_DENIED
    assert outcome.results[0].text == "The user denied this call of 'write_file': not now"
    assert seen == []


async def test_reads_are_auto_and_writes_prompt_by_default(registry: ToolRegistry) -> None:
    approver = Scripted(True)
    executor = ToolExecutor(registry, approver=approver)
    outcome = await executor.execute_batch([ToolCall("r", "read_file", {"path": "a"}), write("w")])
    assert not any(r.is_error for r in outcome.results)
    assert [r.call_id for r in approver.requests] == ["w"]


async def test_confirmation_timeout(
    registry: ToolRegistry, autojump_clock: object, seen: list[dict[str, Any]]
) -> None:
    executor = ToolExecutor(
        registry, approver=Scripted(True, delay=1e6), approval=ApprovalConfig(timeout=30)
    )
    outcome = await executor.execute_batch([write("w")])
    assert outcome.results[0].error_class is ErrorClass.CONFIRMATION_TIMEOUT
    assert "within 30s" in outcome.results[0].text
    assert seen == []


async def test_prompt_once_is_remembered_for_the_session_only(registry: ToolRegistry) -> None:
    approver = Scripted(True)
    config = ApprovalConfig(modes={SideEffects.WRITE: ApprovalMode.PROMPT_ONCE})
    session = ToolExecutor(registry, approver=approver, approval=config)
    await session.execute_batch([write("a")])
    await session.execute_batch([write("b"), write("c")])
    await session.fork_for_subagent("helper").execute_batch([write("d")])
    assert [r.call_id for r in approver.requests] == ["a"]
    other_session = ToolExecutor(registry, approver=approver, approval=config)
    await other_session.execute_batch([write("e")])
    assert [r.call_id for r in approver.requests] == ["a", "e"]


async def test_prompt_once_remembers_a_no_too(registry: ToolRegistry) -> None:
    approver = Scripted(False)
    config = ApprovalConfig(per_tool={"write_file": "prompt_once"})
    session = ToolExecutor(registry, approver=approver, approval=config)
    outcome = await session.execute_batch([write("a"), write("b")])
    assert [r.error_class for r in outcome.results] == [ErrorClass.USER_DENIED] * 2
    assert "for the rest of this session" in outcome.results[1].text
    assert len(approver.requests) == 1


async def test_deny_mode_short_circuits(registry: ToolRegistry) -> None:
    executor = ToolExecutor(
        registry,
        approver=AutoApprover(),
        approval=ApprovalConfig(modes={SideEffects.WRITE: ApprovalMode.DENY}),
    )
    batch = executor.prepare([write("w")])
    assert batch.plan.short_circuited == (0,)
    outcome = await batch.run()
    assert outcome.results[0].error_class is ErrorClass.PERMISSION_DENIED
    assert "confirmation policy denies tools with side effects 'write'" in outcome.results[0].text


async def test_trusted_workspace_lowers_the_bar(registry: ToolRegistry, tmp_path: Path) -> None:
    (tmp_path / "proj").mkdir()
    (tmp_path / "other").mkdir()
    proj, other = Workspace(tmp_path / "proj"), Workspace(tmp_path / "other")
    approver = Scripted(True)
    config = ApprovalConfig(
        trusted_workspaces=[str(proj.root)], trusted_modes={SideEffects.WRITE: ApprovalMode.AUTO}
    )
    trusted = ToolExecutor(registry, approver=approver, approval=config, workspace=proj)
    untrusted = ToolExecutor(registry, approver=approver, approval=config, workspace=other)
    await trusted.execute_batch([write("t")])
    await untrusted.execute_batch([write("u")])
    assert [r.call_id for r in approver.requests] == ["u"]


async def test_first_answer_wins_and_the_others_are_told(
    registry: ToolRegistry, autojump_clock: object
) -> None:
    fast, slow = Scripted(False, delay=1.0, by="phone"), Scripted(True, delay=5.0, by="laptop")
    executor = ToolExecutor(registry, approver=FirstAnswer([slow, fast]))
    outcome = await executor.execute_batch([write("w")])
    assert outcome.results[0].error_class is ErrorClass.USER_DENIED
    assert slow.told == [ApprovalAnswer(False, "phone", "not now")]
    assert fast.told == []
    assert trio.current_time() == pytest.approx(1.0)  # the slow responder was cancelled


async def test_approval_is_bound_to_the_arguments_shown(
    registry: ToolRegistry, seen: list[dict[str, Any]]
) -> None:
    arguments = {"path": "notes/a.md", "text": "harmless"}

    def approve_then_tamper(request: ApprovalRequest) -> bool:
        arguments["path"] = "../../etc/passwd"  # the caller's dict changes while waiting
        return True

    approver = Scripted(approve_then_tamper)
    await ToolExecutor(registry, approver=approver).execute_batch(
        [ToolCall("w", "write_file", arguments)]
    )
    assert approver.requests[0].arguments == '{"path":"notes/a.md","text":"harmless"}'
    assert seen == [{"path": "notes/a.md", "text": "harmless"}]


def test_what_a_human_is_shown_escapes_control_and_bidi_characters() -> None:
    request = ApprovalRequest(
        "c",
        "write_file",
        "root",
        SideEffects.WRITE,
        '{"path":"invoice\u202egpj.exe","text":"a\\nb\x1b[2J"}',
    )
    summary = request.summary
    assert "\u202e" not in summary
    assert "\x1b" not in summary
    assert "\\u202e" in summary
    assert "\\u001b" in summary
    assert display_text("plain") == "plain"


async def test_a_pending_approval_holds_no_permit(autojump_clock: object) -> None:
    rec = Recorder()
    registry = ToolRegistry()
    registry.register(lambda: KVTool(rec, "write", SideEffects.WRITE, 1.0))
    release = trio.Event()

    class Human:
        async def request(self, request: ApprovalRequest) -> ApprovalAnswer:
            await release.wait()
            return ApprovalAnswer(True, "human")

    root = ToolExecutor(registry)
    waiting = root.fork_for_subagent("careful")
    waiting = ToolExecutor(
        registry, approver=Human(), pools=waiting.pools, agent_path=waiting.agent_path
    )
    sibling = root.fork_for_subagent("busy")
    results: dict[str, Any] = {}

    async def run(name: str, executor: ToolExecutor, n: int) -> None:
        calls = [ToolCall(f"{name}{i}", "write", {"key": f"{name}{i}"}) for i in range(n)]
        results[name] = await executor.execute_batch(calls)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run, "careful", waiting, 1)
        await trio.testing.wait_all_tasks_blocked()
        assert waiting.statistics().serial_mut.borrowed == 0
        await run("busy", sibling, 3)  # completes while the human has not answered
        assert "careful" not in results
        release.set()
    assert not any(r.is_error for r in results["busy"].results)
    assert not results["careful"].results[0].is_error
    assert rec.peak["write"] == 1


# -- nothing the model or a host component sends can get a call past the gate ----------


async def test_a_policy_ask_is_not_answered_by_a_remembered_yes(
    registry: ToolRegistry, seen: list[dict[str, Any]]
) -> None:
    approver = Scripted(lambda request: "danger" not in request.arguments)
    executor = ToolExecutor(
        registry,
        policy=RulePolicy([Rule("ask", "write_file", {"text": Prefix("danger")}, "risky")]),
        approver=approver,
        approval=ApprovalConfig(per_tool={"write_file": ApprovalMode.PROMPT_ONCE}),
    )
    outcome = await executor.execute_batch([write("once"), write("risky", text="danger!")])
    assert [r.error_class for r in outcome.results] == [None, ErrorClass.USER_DENIED]
    assert [r.reason for r in approver.requests] == ["", "risky"]
    assert [s["text"] for s in seen] == ["x"]


async def test_an_answer_after_the_approval_timeout_does_not_count(
    registry: ToolRegistry, seen: list[dict[str, Any]], mock_clock: trio.testing.MockClock
) -> None:
    class Blocking:
        async def request(self, request: ApprovalRequest) -> ApprovalAnswer:
            mock_clock.jump(10)  # it held everything up, then said yes without a checkpoint
            return ApprovalAnswer(True, "late")

    executor = ToolExecutor(registry, approver=Blocking(), approval=ApprovalConfig(timeout=1))
    outcome = await executor.execute_batch([write("w")])
    assert outcome.results[0].error_class is ErrorClass.CONFIRMATION_TIMEOUT
    assert seen == []


@pytest.mark.parametrize("answer", [True, None, "yes", 1], ids=repr)
async def test_an_approver_answer_that_is_not_an_approval_answer_denies(
    registry: ToolRegistry, seen: list[dict[str, Any]], answer: object
) -> None:
    class Odd:
        async def request(self, request: ApprovalRequest) -> Any:
            return answer

    outcome = await ToolExecutor(registry, approver=Odd()).execute_batch([write("w")])
    assert outcome.results[0].error_class is ErrorClass.PERMISSION_DENIED
    assert "no valid answer" in outcome.results[0].text
    assert seen == []


def test_an_approval_answer_is_a_real_bool() -> None:
    with pytest.raises(TypeError):
        ApprovalAnswer("no")  # type: ignore[arg-type]


HOSTILE = [
    "\x1b]0;owned\x07",  # OSC: set the terminal title
    "\x1b[2K\r",  # CSI: clear the line
    "a\nb",
    "\u202eevil",  # bidi override
    "\u2028x",  # line separator
    "z\u200bw",  # zero-width space
]


@pytest.mark.parametrize("hostile", HOSTILE)
async def test_every_line_a_terminal_approver_writes_is_clean(hostile: str) -> None:
    import io

    from toolexec.approval import TerminalApprover

    request = ApprovalRequest(
        call_id=f"id{hostile}",
        tool_name=f"tool{hostile}",
        agent_path=f"root/kid{hostile}",
        side_effects=SideEffects.WRITE,
        arguments=f'{{"a":"{hostile}"}}',
        reason=f"why{hostile}",
    )
    out = io.StringIO()
    approver = TerminalApprover(input=io.StringIO("n\n"), output=out)
    await approver.request(request)
    approver.resolved(request, ApprovalAnswer(True, by=f"bob{hostile}"))
    written = out.getvalue()
    for line in written.split("\n"):  # the approver's own line breaks only
        assert line.isprintable(), repr(line)
    assert "\x1b" not in written
    assert written.count("\n") == 2  # one blank line, then the "decided by" line
