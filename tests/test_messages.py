"""One bound on every message: what a model or a runner sent never comes back whole.

A text from outside is quoted by at most ``CLIP_CHARS`` characters, and a
message (an error result, a policy's denial, a supervisor's answer or
refusal) is at most ``MESSAGE_CHARS``, both cut by ``clip``. And a path that
leads out of the workspace is refused without saying where it leads.
"""

from __future__ import annotations

import json
import logging
import os
from typing import TYPE_CHECKING, Any

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from toolexec import (
    SideEffects,
    ToolCall,
    ToolContext,
    ToolDefinition,
    ToolExecutor,
    ToolOutput,
    ToolRegistry,
    Workspace,
    function_tool,
    register_builtin_tools,
)
from toolexec._core._messages import CLIP_CHARS, MESSAGE_CHARS, bounded, clip
from toolexec.ipc import RunnerConfig, Supervisor
from toolexec.policy import (
    CallHook,
    Capabilities,
    CapabilityPolicy,
    Deny,
    PathGlob,
    PathGrant,
    Prefix,
    Rule,
    RulePolicy,
    Skip,
)

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

MB = 1 << 20


class Save:
    """A tool with a path argument and an argument of each kind the model fills."""

    definition = ToolDefinition(
        name="save",
        description="Save a note.",
        input_schema={
            "type": "object",
            "properties": {"path": {"type": "string"}, "n": {"type": "integer"}},
            "additionalProperties": False,
        },
        side_effects=SideEffects.READ,
        path_arguments={"path": "r"},
    )

    async def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        return ToolOutput.text("saved")


@function_tool(side_effects=SideEffects.READ)
async def fail(text: str) -> str:
    """Raise with the text."""
    raise ValueError(f"cannot use {text}")


class SkipWithReason(CallHook):
    def before_call(self, call: Any, arguments: Any, agent_path: str) -> Skip | None:
        return Skip(f"not {arguments['text']}") if call.name == "fail" else None


def _registry(workspace: Workspace | None = None) -> ToolRegistry:
    reg = ToolRegistry()
    reg.register(Save)
    reg.register(fail)
    if workspace is not None:
        register_builtin_tools(reg, workspace)
    return reg


def _line(cid: str, tool: str, args: Any) -> bytes:
    return json.dumps({"op": "tool_call", "tool_call_id": cid, "tool": tool, "args": args}).encode()


async def _answers(supervisor: Supervisor, runner: RunnerConfig, lines: list[bytes]) -> list[Any]:
    """Each line's answer from a supervisor, the runner's output left open meanwhile."""
    to_sup, from_runner = trio.testing.memory_stream_one_way_pair()
    to_runner, from_sup = trio.testing.memory_stream_one_way_pair()
    data = bytearray()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(supervisor.serve, runner, from_runner, to_runner)
        for line in lines:
            await to_sup.send_all(line + b"\n")
        while data.count(b"\n") < len(lines):
            data += await from_sup.receive_some()
        await to_sup.aclose()
    return [json.loads(line) for line in data.split(b"\n")[:-1]]


# -- the rule ------------------------------------------------------------------------------


def test_the_rule_keeps_two_ends_and_counts_the_rest() -> None:
    assert clip("short") == "short"
    text = "a" * 150 + "b" * 150
    shown = clip(text)
    assert len(shown) <= CLIP_CHARS + 30
    assert shown.startswith("a" * 100)
    assert shown.endswith("b" * 60)
    assert "…[" in shown
    assert len(bounded("x" * 10 * MB)) <= MESSAGE_CHARS
    assert bounded("fine") == "fine"


# -- regressions, one a kind of message ----------------------------------------------------


async def test_an_unknown_tool_name_of_1_mb_is_clipped_in_tool_not_found() -> None:
    supervisor = Supervisor(ToolExecutor(_registry()))
    (answer,) = await _answers(supervisor, RunnerConfig("r"), [_line("c", "n" * MB, {})])
    assert answer["error"] == "tool_not_found"
    assert len(answer["message"]) < 500
    assert answer["message"].endswith("Available: save, fail")


@pytest.mark.parametrize("with_workspace", [False, True])
async def test_a_1_mb_path_is_clipped_in_fs_denied(tmp_path: Path, with_workspace: bool) -> None:
    workspace = Workspace(tmp_path) if with_workspace else None
    supervisor = Supervisor(ToolExecutor(_registry(), workspace=workspace))
    runner = RunnerConfig("r", Capabilities(["save"], [PathGrant("notes")]))
    lines = [_line("c", "save", {"path": "/" + "p" * MB}), _line("d", "save", {"path": "q" * MB})]
    for answer in await _answers(supervisor, runner, lines):
        assert answer["error"] == "fs_denied"
        assert len(answer["message"]) < 600
        assert "characters]" in answer["message"]


@pytest.mark.parametrize("with_workspace", [False, True])
def test_a_capability_policys_denial_clips_a_long_path(
    tmp_path: Path, with_workspace: bool
) -> None:
    policy = CapabilityPolicy(
        {"root": Capabilities(["save"], [PathGrant("notes")])},
        workspace=Workspace(tmp_path) if with_workspace else None,
    )
    for path in ["/" + "p" * MB, "../" + "p" * MB, "q" * 4000, "q/" * 2000, "r" * MB]:
        decision = policy.decide(Save.definition, {"path": path}, "root")
        assert isinstance(decision, Deny)
        assert len(decision.reason) < 600, path[:10]


async def test_the_executors_messages_are_bounded_whatever_the_model_sent(tmp_path: Path) -> None:
    huge = "h" * MB
    policy = CapabilityPolicy({"root": Capabilities(["*"], [PathGrant("notes")])})
    executor = ToolExecutor(_registry(), policy=policy, hooks=[SkipWithReason()])
    plain = ToolExecutor(_registry())
    outcome = await executor.execute_batch(
        [
            ToolCall("name", huge, {}),
            ToolCall("key", "save", {huge: 1}),
            ToolCall("value", "save", {"n": huge}),
            ToolCall("path", "save", {"path": huge}),
            ToolCall("skip", "fail", {"text": huge}),
        ]
    )
    (raised,) = (await plain.execute_batch([ToolCall("raised", "fail", {"text": huge})])).results
    for result in (*outcome.results, raised):
        assert result.is_error, result.call_id
        assert len(result.text) <= MESSAGE_CHARS, result.call_id
    assert raised.text.startswith("Tool 'fail' failed: ValueError: cannot use hhh")


def test_a_rule_policys_denial_is_bounded() -> None:
    policy = RulePolicy([Rule("deny", "save", {"path": PathGlob("**")}, "r" * MB)], "deny")
    decision = policy.decide(Save.definition, {"path": "x"}, "root")
    assert isinstance(decision, Deny)
    assert len(decision.reason) <= MESSAGE_CHARS
    assert policy.decide(Save.definition, {"path": 1}, "root") == Deny("no rule allows it")


# -- a link out of the workspace ------------------------------------------------------------


@pytest.fixture
def linked(tmp_path: Path) -> tuple[Path, str]:
    """A workspace whose ``out`` links to a host directory beside it."""
    root, host = tmp_path / "ws", tmp_path / "host-secret-place"
    root.mkdir()
    host.mkdir()
    (host / "file.txt").write_text("secret")
    os.symlink(host, root / "out")
    return root, "host-secret-place"


async def test_fs_denied_for_a_link_out_of_the_workspace_names_no_host_path(
    linked: tuple[Path, str],
) -> None:
    root, secret = linked
    workspace = Workspace(root)
    reg = ToolRegistry()
    register_builtin_tools(reg, workspace)
    supervisor = Supervisor(ToolExecutor(reg, workspace=workspace))
    runner = RunnerConfig("r", Capabilities(["read_file"], [PathGrant(".")]))
    (answer,) = await _answers(
        supervisor, runner, [_line("c", "read_file", {"path": "out/file.txt"})]
    )
    assert answer["error"] == "fs_denied"
    assert "symbolic link 'out'" in answer["message"]
    assert secret not in answer["message"]
    assert str(root.parent) not in answer["message"]


async def test_a_tools_refusal_of_a_link_out_of_the_workspace_names_no_host_path(
    linked: tuple[Path, str],
) -> None:
    root, secret = linked
    workspace = Workspace(root)
    reg = ToolRegistry()
    register_builtin_tools(reg, workspace)
    (result,) = (
        await ToolExecutor(reg).execute_batch(
            [ToolCall("c", "read_file", {"path": "out/file.txt"})]
        )
    ).results
    assert result.is_error
    assert "leads outside the workspace" in result.text
    assert secret not in result.text
    entry = reg.lookup("read_file")
    assert entry is not None
    policy = CapabilityPolicy({"root": Capabilities()}, workspace=workspace)
    decision = policy.decide(entry.definition, {"path": "out/file.txt"}, "root")
    assert isinstance(decision, Deny)
    assert secret not in decision.reason


# -- the property --------------------------------------------------------------------------

#: Sizes up to 10 MB, the huge ones drawn rarely (one draw in four, 10 MB one in twelve):
#: the strings are built by repetition, cheaply.
SMALL = st.integers(0, 5000)
SIZES = st.one_of(SMALL, SMALL, SMALL, st.sampled_from([64 * 1024, MB, 10 * MB]))
PIECES = st.sampled_from(["a", "/", "é", "ab/", "../", "\n", "\x1b[2J", "\u202e", "😀", "%s"])
WHERE = st.sampled_from(
    ["tool name", "path", "argument", "argument name", "exception", "hook reason", "op"]
)


def _big(piece: str, size: int) -> str:
    return (piece * (size // len(piece) + 1))[:size]


def _calls(where: str, big: str) -> list[tuple[str, dict[str, Any]]]:
    """Calls, ``(tool, arguments)``, that put ``big`` where the model would."""
    calls: dict[str, list[tuple[str, dict[str, Any]]]] = {
        "tool name": [(big or "x", {})],
        "path": [("save", {"path": big}), ("read_file", {"path": big})],
        "argument": [("save", {"n": big}), ("fail", {"text": [big]})],
        "argument name": [("save", {big: 1})],
        "exception": [("fail", {"text": big})],
        "hook reason": [("fail", {"text": big})],
        "op": [],
    }
    return calls[where]


def _ipc_lines(where: str, big: str) -> list[bytes]:
    lines = [_line(f"i{i}", tool, args) for i, (tool, args) in enumerate(_calls(where, big))]
    if where == "op":
        lines.append(json.dumps({"op": big, "tool_call_id": "o"}).encode())
        lines.append(json.dumps({"op": "tool_call", "tool_call_id": "p", "tool": big}).encode())
    return lines


def _policy_reasons(where: str, big: str) -> list[str]:
    """What the built-in policies say when they deny what carries ``big``."""
    reasons = []
    caps = {"root": Capabilities(["save"], [PathGrant("notes")])}
    rules = [Rule("deny", "save", {"path": Prefix("/")}), Rule("deny", "*", {"n": PathGlob("*")})]
    for policy in (CapabilityPolicy(caps), RulePolicy(rules, "deny")):
        for tool, args in _calls(where, big):
            if tool == "save":
                decision = policy.decide(Save.definition, args, "root")
                if isinstance(decision, Deny):
                    reasons.append(decision.reason)
    return reasons


@settings(max_examples=25, deadline=None)
@given(size=SIZES, piece=PIECES, where=WHERE)
def test_no_message_is_longer_than_the_bound(
    tmp_path_factory: pytest.TempPathFactory, size: int, piece: str, where: str
) -> None:
    big = _big(piece, size)
    root = tmp_path_factory.getbasetemp() / "bounded"
    root.mkdir(exist_ok=True)
    workspace = Workspace(root)
    policy = CapabilityPolicy({"root": Capabilities(["*"], [PathGrant("notes")])})
    hooks = [SkipWithReason()] if where == "hook reason" else []
    executor = ToolExecutor(_registry(workspace), policy=policy, hooks=hooks, workspace=workspace)
    runner = RunnerConfig("r", Capabilities(["save", "fail", "read_file"], [PathGrant("notes")]))
    calls = [ToolCall(f"c{i}", tool, args) for i, (tool, args) in enumerate(_calls(where, big))]

    async def main() -> list[str]:
        outcome = await executor.execute_batch(calls)
        messages = [r.text for r in outcome.results if r.is_error]
        answers = await _answers(Supervisor(executor), runner, _ipc_lines(where, big))
        return messages + [a["message"] for a in answers if "message" in a]

    toolexec_log = logging.getLogger("toolexec")
    toolexec_log.disabled = True  # it logs each failing tool's traceback, huge text and all
    try:
        messages = trio.run(main) + _policy_reasons(where, big)
    finally:
        toolexec_log.disabled = False
    assert messages
    for message in messages:
        assert len(message) <= MESSAGE_CHARS


def test_a_remote_wire_error_quoting_a_huge_value_is_bounded() -> None:
    """What a peer sends comes back in the remote protocol's refusals bounded too."""
    from toolexec._backends._remote_wire import WireError, parse_request
    from toolexec._core._messages import MESSAGE_CHARS

    huge = "x" * 10_000_000
    with pytest.raises(WireError) as caught:
        parse_request(
            (
                '{"id": "1", "call_id": "c", "tool": "t", "arguments": {}, "timeout": "'
                + huge
                + '"}'
            ).encode()
        )
    assert len(str(caught.value)) <= MESSAGE_CHARS
    assert len(str(WireError("y" * 10_000_000))) <= MESSAGE_CHARS
