"""The gate every call passes: policy, approval, hooks, audit."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING, Any

import pytest
import trio
import trio.testing

from conftest import KVTool, Recorder
from toolexec import (
    Allow,
    ErrorClass,
    JsonContent,
    SideEffects,
    ToolCall,
    ToolContext,
    ToolDefinition,
    ToolError,
    ToolExecutor,
    ToolOutput,
    ToolRegistry,
    Workspace,
    function_tool,
)
from toolexec._approval import display_text
from toolexec.approval import (
    ApprovalAnswer,
    ApprovalConfig,
    ApprovalMode,
    ApprovalRequest,
    AutoApprover,
    FirstAnswer,
)
from toolexec.events import CallbackSink, CallFailed, Event, JsonlAuditSink
from toolexec.policy import (
    CallHook,
    Capabilities,
    CapabilityPolicy,
    ComposedPolicy,
    ExecutionGrant,
    PathGlob,
    PathGrant,
    Prefix,
    Rewrite,
    Rule,
    RulePolicy,
    Skip,
)
from toolexec.tools import register_builtin_tools

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path


class FileTool:
    """A tool declaring a path argument (nothing is touched on disk)."""

    def __init__(self, name: str, mode: str, seen: list[dict[str, Any]]) -> None:
        self.seen = seen
        self.definition = ToolDefinition(
            name=name,
            description="touch a path",
            input_schema={
                "type": "object",
                "properties": {"path": {"type": "string"}, "text": {"type": "string"}},
                "required": ["path"],
            },
            side_effects=SideEffects.READ if mode == "r" else SideEffects.WRITE,
            path_arguments={"path": mode},
        )

    async def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        self.seen.append(dict(arguments))
        return ToolOutput.text(f"done {arguments['path']}")


@pytest.fixture
def seen() -> list[dict[str, Any]]:
    return []


@pytest.fixture
def registry(seen: list[dict[str, Any]]) -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(lambda: FileTool("read_file", "r", seen))
    registry.register(lambda: FileTool("write_file", "w", seen))
    return registry


def write(cid: str, path: str = "notes/a.md", **kw: Any) -> ToolCall:
    return ToolCall(cid, "write_file", {"path": path, "text": "x", **kw})


class Scripted:
    """An approver answering from a function, recording what it was shown."""

    def __init__(self, answer: Any = True, delay: float = 0.0, by: str = "ann") -> None:
        self.answer, self.delay, self.by = answer, delay, by
        self.requests: list[ApprovalRequest] = []
        self.told: list[ApprovalAnswer] = []

    async def request(self, request: ApprovalRequest) -> ApprovalAnswer:
        self.requests.append(request)
        await trio.sleep(self.delay)
        answer = self.answer(request) if callable(self.answer) else self.answer
        return ApprovalAnswer(answer, self.by, "" if answer else "not now")

    def resolved(self, request: ApprovalRequest, answer: ApprovalAnswer) -> None:
        self.told.append(answer)


def failures(events: list[Event]) -> list[tuple[str, ErrorClass]]:
    return [(e.call_id, e.error_class) for e in events if isinstance(e, CallFailed)]


async def test_denied_by_rule_policy_with_reason_and_event(registry: ToolRegistry, seen: list):
    events: list[Event] = []
    policy = RulePolicy(
        [Rule("deny", "write_file", {"path": PathGlob(".git/**")}, "never touch .git")]
    )
    executor = ToolExecutor(registry, policy=policy, sinks=[CallbackSink(events.append)])
    outcome = await executor.execute_batch([write("w1", ".git/config"), write("w2")])
    assert outcome.results[0].error_class is ErrorClass.PERMISSION_DENIED
    assert outcome.results[0].text == ("Permission denied for tool 'write_file': never touch .git")
    assert not outcome.results[1].is_error
    assert seen == [{"path": "notes/a.md", "text": "x"}]
    assert failures(events) == [("w1", ErrorClass.PERMISSION_DENIED)]


def test_rule_policy_first_match_wins_and_file_errors_name_the_field(tmp_path: Path):
    policy = RulePolicy.from_dict(
        {
            "default": "deny",
            "rules": [
                {
                    "action": "allow",
                    "tool": "shell",
                    "args": {"command": {"command_prefix": "git status"}},
                },
                {"action": "ask", "tool": "shell"},
            ],
        }
    )
    shell = ToolDefinition(name="shell", description="d")
    other = ToolDefinition(name="other", description="d")
    assert type(policy.decide(shell, {"command": "git status -s"}, "root")).__name__ == "Allow"
    assert type(policy.decide(shell, {"command": "git status; rm -rf /"}, "root")).__name__ == "Ask"
    assert type(policy.decide(other, {}, "root")).__name__ == "Deny"
    bad = tmp_path / "policy.json"
    bad.write_text(json.dumps({"rules": [{"action": "allow", "args": {"p": {"fuzzy": 1}}}]}))
    with pytest.raises(ValueError, match=r"rules\[0\]\.args\.p"):
        RulePolicy.from_file(bad)
    with pytest.raises(ValueError, match="rule action must be one of"):
        RulePolicy.from_dict({"rules": [{"action": "maybe"}]})
    with pytest.raises(ValueError, match=r"unknown keys \['Rules', 'defualt'\]"):
        RulePolicy.from_dict({"defualt": "deny", "Rules": [{"action": "deny"}]})
    with pytest.raises(ValueError, match=r"rules\[0\]\.args: an object"):
        RulePolicy.from_dict({"rules": [{"action": "deny", "args": ["path"]}]})
    with pytest.raises(ValueError, match=r"rules\[0\]: tool pattern 'write_\[f\]ile'"):
        RulePolicy.from_dict({"rules": [{"action": "deny", "tool": "write_[f]ile"}]})


async def test_denied_by_user(registry: ToolRegistry, seen: list):
    executor = ToolExecutor(registry, approver=Scripted(False))
    outcome = await executor.execute_batch([write("w")])
    assert outcome.results[0].error_class is ErrorClass.USER_DENIED
    assert outcome.results[0].text == "The user denied this call of 'write_file': not now"
    assert seen == []


async def test_reads_are_auto_and_writes_prompt_by_default(registry: ToolRegistry):
    approver = Scripted(True)
    executor = ToolExecutor(registry, approver=approver)
    outcome = await executor.execute_batch([ToolCall("r", "read_file", {"path": "a"}), write("w")])
    assert not any(r.is_error for r in outcome.results)
    assert [r.call_id for r in approver.requests] == ["w"]


async def test_confirmation_timeout(registry: ToolRegistry, autojump_clock: object, seen: list):
    executor = ToolExecutor(
        registry, approver=Scripted(True, delay=1e6), approval=ApprovalConfig(timeout=30)
    )
    outcome = await executor.execute_batch([write("w")])
    assert outcome.results[0].error_class is ErrorClass.CONFIRMATION_TIMEOUT
    assert "within 30s" in outcome.results[0].text
    assert seen == []


async def test_prompt_once_is_remembered_for_the_session_only(registry: ToolRegistry):
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


async def test_prompt_once_remembers_a_no_too(registry: ToolRegistry):
    approver = Scripted(False)
    config = ApprovalConfig(per_tool={"write_file": "prompt_once"})
    session = ToolExecutor(registry, approver=approver, approval=config)
    outcome = await session.execute_batch([write("a"), write("b")])
    assert [r.error_class for r in outcome.results] == [ErrorClass.USER_DENIED] * 2
    assert "for the rest of this session" in outcome.results[1].text
    assert len(approver.requests) == 1


async def test_deny_mode_short_circuits(registry: ToolRegistry):
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


async def test_trusted_workspace_lowers_the_bar(registry: ToolRegistry):
    approver = Scripted(True)
    config = ApprovalConfig(
        trusted_workspaces=["/srv/proj"], trusted_modes={SideEffects.WRITE: ApprovalMode.AUTO}
    )
    trusted = ToolExecutor(registry, approver=approver, approval=config, workspace="/srv/proj")
    untrusted = ToolExecutor(registry, approver=approver, approval=config, workspace="/tmp/x")
    await trusted.execute_batch([write("t")])
    await untrusted.execute_batch([write("u")])
    assert [r.call_id for r in approver.requests] == ["u"]


async def test_first_answer_wins_and_the_others_are_told(
    registry: ToolRegistry, autojump_clock: object
):
    fast, slow = Scripted(False, delay=1.0, by="phone"), Scripted(True, delay=5.0, by="laptop")
    executor = ToolExecutor(registry, approver=FirstAnswer([slow, fast]))
    outcome = await executor.execute_batch([write("w")])
    assert outcome.results[0].error_class is ErrorClass.USER_DENIED
    assert slow.told == [ApprovalAnswer(False, "phone", "not now")]
    assert fast.told == []
    assert trio.current_time() == pytest.approx(1.0)  # the slow responder was cancelled


async def test_approval_is_bound_to_the_arguments_shown(registry: ToolRegistry, seen: list):
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


def test_what_a_human_is_shown_escapes_control_and_bidi_characters():
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


class Rewriter(CallHook):
    def __init__(self, arguments: dict[str, Any]) -> None:
        self.arguments = arguments
        self.after: list[str] = []

    def before_call(self, call, arguments, agent_path):  # type: ignore[no-untyped-def]
        return Rewrite(self.arguments) if call.name == "write_file" else None

    def after_call(self, call, result, agent_path):  # type: ignore[no-untyped-def]
        self.after.append(call.id)


async def test_rewritten_arguments_are_validated_and_policy_checked_again(
    registry: ToolRegistry, seen: list
):
    invalid = Rewriter({"text": "no path"})
    outcome = await ToolExecutor(registry, hooks=[invalid]).execute_batch([write("w")])
    assert outcome.results[0].error_class is ErrorClass.INVALID_ARGUMENTS
    assert "after the host rewrote them" in outcome.results[0].text
    policy = RulePolicy([Rule("deny", "write_file", {"path": PathGlob("secrets/**")}, "no")])
    sneaky = Rewriter({"path": "secrets/key", "text": "x"})
    outcome = await ToolExecutor(registry, policy=policy, hooks=[sneaky]).execute_batch(
        [write("w")]
    )
    assert outcome.results[0].error_class is ErrorClass.PERMISSION_DENIED
    fine = Rewriter({"path": "notes/b.md", "text": "rewritten"})
    await ToolExecutor(registry, hooks=[fine]).execute_batch([write("w")])
    assert seen == [{"path": "notes/b.md", "text": "rewritten"}]
    assert fine.after == ["w"]


async def test_hooks_skip_and_fail_closed(registry: ToolRegistry, seen: list):
    class Gate(CallHook):
        def before_call(self, call, arguments, agent_path):  # type: ignore[no-untyped-def]
            if call.id == "skip":
                return Skip("the user is editing this file")
            if call.id == "boom":
                raise RuntimeError("hook bug")
            return None

    outcome = await ToolExecutor(registry, hooks=[Gate()]).execute_batch(
        [write("skip"), write("boom"), write("ok")]
    )
    assert [r.error_class for r in outcome.results] == [
        ErrorClass.SKIPPED,
        ErrorClass.PERMISSION_DENIED,
        None,
    ]
    assert outcome.results[0].text == "Skipped by the host: the user is editing this file"
    assert len(seen) == 1


async def test_path_argument_outside_its_grant_is_refused(registry: ToolRegistry, seen: list):
    policy = CapabilityPolicy(
        {
            "root": Capabilities(paths=[PathGrant(".", "r"), PathGrant("notes", "rw")]),
            "root/helper": Capabilities(tools=["read_file"], paths=[PathGrant("notes", "r")]),
        }
    )
    root = ToolExecutor(registry, policy=policy)
    outcome = await root.execute_batch(
        [
            write("ok", "notes/x.md"),
            write("w", "src/main.py"),
            write("esc", "notes/../../etc/x"),
            ToolCall("r", "read_file", {"path": "src/main.py"}),
        ]
    )
    assert [r.error_class for r in outcome.results] == [
        None,
        ErrorClass.PERMISSION_DENIED,
        ErrorClass.PERMISSION_DENIED,
        None,
    ]
    assert "may not write 'src/main.py' (it may write: notes)" in outcome.results[1].text
    assert "uses '..', which this policy cannot check without the workspace" in (
        outcome.results[2].text
    )
    child = root.fork_for_subagent("helper")
    outcome = await child.execute_batch(
        [write("cw", "notes/x.md"), ToolCall("cr", "read_file", {"path": "src/a.py"})]
    )
    assert "is not granted tool 'write_file'" in outcome.results[0].text
    assert "may not read 'src/a.py' (it may read: notes)" in outcome.results[1].text
    grandchild = child.fork_for_subagent("deeper")  # inherits its parent's grants
    outcome = await grandchild.execute_batch([write("g", "notes/x.md")])
    assert outcome.results[0].error_class is ErrorClass.PERMISSION_DENIED


async def test_composed_policy_deny_wins(registry: ToolRegistry):
    allow_all_rules = RulePolicy([Rule("allow", "*")])
    ask_writes = RulePolicy([Rule("ask", "write_file")])
    caps = CapabilityPolicy({"root": Capabilities(paths=[PathGrant("notes", "rw")])})
    executor = ToolExecutor(
        registry,
        policy=ComposedPolicy([allow_all_rules, ask_writes, caps]),
        approver=Scripted(True),
    )
    outcome = await executor.execute_batch([write("in", "notes/a"), write("out", "src/a")])
    assert outcome.results[0].error_class is None  # asked and approved
    assert outcome.results[1].error_class is ErrorClass.PERMISSION_DENIED


async def test_a_pending_approval_holds_no_permit(autojump_clock: object):
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


async def test_audit_log_records_every_decision(registry: ToolRegistry, tmp_path: Path):
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


def test_audit_log_survives_a_crash_mid_batch(tmp_path: Path):
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


async def test_a_grant_is_judged_where_the_path_really_leads(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "private" / "inner").mkdir(parents=True)
    (root / "private" / "keys.txt").write_text("TOKEN=abc\n")
    (root / "src" / "ok.txt").write_text("fine\n")
    (root / "src" / "vendor").symlink_to("../private")
    (root / "src" / "lib").symlink_to("../private/inner")
    workspace = Workspace(root)
    registry = ToolRegistry()
    register_builtin_tools(registry, workspace)
    policy = CapabilityPolicy(
        {"root": Capabilities(paths=[PathGrant("src", "rw")])}, workspace=workspace
    )
    executor = ToolExecutor(registry, policy=policy)
    calls = {
        "read through a link": ("read_file", {"path": "src/vendor/keys.txt"}),
        "write through a link": ("write_file", {"path": "src/vendor/x.txt", "content": "x"}),
        "'..' after a link": ("write_file", {"path": "src/lib/../keys.txt", "content": "x"}),
        "new dirs under a link": ("write_file", {"path": "src/lib/new/x.txt", "content": "x"}),
        "'..' after a new dir": ("write_file", {"path": "src/new/../x.txt", "content": "x"}),
        "list, path left out": ("list_dir", {}),
        "search, path left out": ("search_files", {"pattern": "TOKEN"}),
        "absolute, outside": ("read_file", {"path": "/etc/passwd"}),
        "read inside": ("read_file", {"path": "src/ok.txt"}),
        "absolute, inside": ("read_file", {"path": str(root / "src" / "ok.txt")}),
        "new dirs inside": ("write_file", {"path": "src/a/b/c.txt", "content": "x"}),
        "'..' staying inside": ("read_file", {"path": "src/../src/ok.txt"}),
    }
    outcome = await executor.execute_batch(
        [ToolCall(why, name, arguments) for why, (name, arguments) in calls.items()]
    )
    verdicts = {r.call_id: r.error_class for r in outcome.results}
    denied = ErrorClass.PERMISSION_DENIED
    assert verdicts == {
        "read through a link": denied,
        "write through a link": denied,
        "'..' after a link": denied,
        "new dirs under a link": denied,
        "'..' after a new dir": denied,
        "list, path left out": denied,
        "search, path left out": denied,
        "absolute, outside": denied,
        "read inside": None,
        "absolute, inside": None,
        "new dirs inside": None,
        "'..' staying inside": None,
    }
    texts = {r.call_id: r.text for r in outcome.results}
    assert (
        "'src/vendor/keys.txt', which leads to 'private/keys.txt'" in texts["read through a link"]
    )
    assert "may not read '.'" in texts["list, path left out"]
    assert sorted(p.name for p in (root / "private").iterdir()) == ["inner", "keys.txt"]
    assert (root / "private" / "keys.txt").read_text() == "TOKEN=abc\n"


# -- nothing the model or a host component sends can get a call past the gate ----------


async def test_arguments_json_cannot_build_are_invalid_and_the_rest_run(
    registry: ToolRegistry, seen: list
) -> None:
    outcome = await ToolExecutor(registry).execute_batch(
        [
            ToolCall("huge", "write_file", '{"path": "a", "n": ' + "9" * 5000 + "}"),
            ToolCall("deep", "write_file", '{"path": ' + "[" * 100_000 + "]" * 100_000 + "}"),
            ToolCall("bytes", "write_file", {"path": b"notes/a.md"}),
            write("fine"),
        ]
    )
    assert [r.error_class for r in outcome.results] == [
        ErrorClass.INVALID_ARGUMENTS,
        ErrorClass.INVALID_ARGUMENTS,
        ErrorClass.INVALID_ARGUMENTS,
        None,
    ]
    assert "nested too deeply" in outcome.results[1].text
    assert [s["path"] for s in seen] == ["notes/a.md"]


async def test_a_policy_ask_is_not_answered_by_a_remembered_yes(
    registry: ToolRegistry, seen: list
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
    registry: ToolRegistry, seen: list, mock_clock: trio.testing.MockClock
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
    registry: ToolRegistry, seen: list, answer: object
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


async def test_a_policy_that_raises_denies(registry: ToolRegistry, seen: list) -> None:
    class Broken:
        def decide(self, definition: Any, arguments: Any, agent_path: str) -> Any:
            raise RuntimeError("policy bug")

    class Confused:
        def decide(self, definition: Any, arguments: Any, agent_path: str) -> Any:
            return True

    for policy, why in ((Broken(), "could not decide"), (Confused(), "not a decision")):
        outcome = await ToolExecutor(registry, policy=policy).execute_batch([write("w")])
        assert outcome.results[0].error_class is ErrorClass.PERMISSION_DENIED
        assert why in outcome.results[0].text
    assert seen == []


async def test_rules_see_a_path_where_it_really_leads(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / ".git").mkdir(parents=True)
    (root / ".git" / "config").write_text("[core]\n")
    (root / "notes").mkdir()
    (root / "notes" / "secret.txt").write_text("diary\n")
    (root / "public").symlink_to("notes")
    workspace = Workspace(root)
    registry = ToolRegistry()
    register_builtin_tools(registry, workspace)
    rules = [
        Rule("deny", "read_file", {"path": PathGlob("notes/**")}, "notes are private"),
        Rule("deny", "write_file", {"path": PathGlob(".git/**")}, "never write inside .git"),
    ]
    executor = ToolExecutor(registry, policy=RulePolicy(rules, workspace=workspace))
    outcome = await executor.execute_batch(
        [
            ToolCall("abs", "read_file", {"path": str(root / "notes" / "secret.txt")}),
            ToolCall("link", "read_file", {"path": "public/secret.txt"}),
            ToolCall("git", "write_file", {"path": f"{root}/.git/config", "content": "x"}),
            ToolCall("ok", "write_file", {"path": "public/new.txt", "content": "x"}),
        ]
    )
    assert [r.error_class for r in outcome.results] == [
        ErrorClass.PERMISSION_DENIED,
        ErrorClass.PERMISSION_DENIED,
        ErrorClass.PERMISSION_DENIED,
        None,
    ]
    assert (root / ".git" / "config").read_text() == "[core]\n"


async def test_a_grant_output_cap_covers_every_kind_of_output() -> None:
    @function_tool(side_effects=SideEffects.READ)
    async def text() -> str:
        """Long text."""
        return "t" * 1000

    @function_tool(side_effects=SideEffects.READ)
    async def data() -> list[int]:
        """A long JSON value."""
        return list(range(1000))

    @function_tool(side_effects=SideEffects.READ)
    async def small() -> dict[str, int]:
        """A short JSON value."""
        return {"a": 1}

    @function_tool(side_effects=SideEffects.READ)
    async def refuse() -> str:
        """A long error."""
        raise ToolError("e" * 1000)

    @function_tool(side_effects=SideEffects.READ)
    async def crash() -> str:
        """A long crash."""
        raise RuntimeError("c" * 1000)

    class Capped:
        def decide(self, definition: Any, arguments: Any, agent_path: str) -> Allow:
            return Allow(ExecutionGrant(max_output_chars=50))

    registry = ToolRegistry()
    for tool in (text, data, small, refuse, crash):
        registry.register(tool)
    outcome = await ToolExecutor(registry, policy=Capped()).execute_batch(
        [ToolCall(name, name, {}) for name in ("text", "data", "small", "refuse", "crash")]
    )
    for result in outcome.results[:2] + outcome.results[3:]:
        shown = "".join(getattr(b, "text", "") for b in result.content)
        assert len(shown) < 120, (result.call_id, shown)
        assert "[output truncated:" in shown, (result.call_id, shown)
    assert outcome.results[2].content == (JsonContent({"a": 1}),)
    assert outcome.results[3].error_class is ErrorClass.EXECUTION_ERROR


async def test_a_value_json_cannot_hold_is_an_invalid_argument_even_when_listed() -> None:
    @function_tool
    async def strict(path: str) -> str:
        """Takes only a path."""
        return path

    registry = ToolRegistry()
    registry.register(strict)
    outcome = await ToolExecutor(registry).execute_batch(
        [ToolCall("x", "strict", {"path": "a", "extra": b"x"})]
    )
    assert outcome.results[0].error_class is ErrorClass.INVALID_ARGUMENTS


async def test_the_file_tools_name_their_workspace_so_a_policy_without_one_follows_links(
    tmp_path: Path,
) -> None:
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "private").mkdir()
    (root / "private" / "keys.txt").write_text("TOKEN=abc\n")
    (root / "src" / "vendor").symlink_to("../private")
    (root / "src" / "ok.txt").write_text("fine\n")
    registry = ToolRegistry()
    register_builtin_tools(registry, Workspace(root))
    caps = CapabilityPolicy({"root": Capabilities(paths=[PathGrant("src", "rw")])})
    rules = RulePolicy([Rule("deny", "read_file", {"path": PathGlob("private/**")})])
    for policy in (caps, rules):  # neither was given the workspace
        outcome = await ToolExecutor(registry, policy=policy).execute_batch(
            [
                ToolCall("link", "read_file", {"path": "src/vendor/keys.txt"}),
                ToolCall("ok", "read_file", {"path": "src/ok.txt"}),
            ]
        )
        assert [r.error_class for r in outcome.results] == [ErrorClass.PERMISSION_DENIED, None]
