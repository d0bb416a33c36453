"""Hooks: skip a call, rewrite its arguments (checked again), see it end."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from conftest import write
from toolexec import ErrorClass, ToolExecutor, ToolRegistry
from toolexec.policy import CallHook, PathGlob, Rewrite, Rule, RulePolicy, Skip

if TYPE_CHECKING:
    from collections.abc import Mapping

    from toolexec import ToolCall, ToolResult
    from toolexec.policy import HookDecision


class Rewriter(CallHook):
    def __init__(self, arguments: dict[str, Any]) -> None:
        self.arguments = arguments
        self.after: list[str] = []

    def before_call(
        self, call: ToolCall, arguments: Mapping[str, Any], agent_path: str
    ) -> HookDecision:
        return Rewrite(self.arguments) if call.name == "write_file" else None

    def after_call(self, call: ToolCall, result: ToolResult, agent_path: str) -> None:
        self.after.append(call.id)


async def test_rewritten_arguments_are_validated_and_policy_checked_again(
    registry: ToolRegistry, seen: list[dict[str, Any]]
) -> None:
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


async def test_hooks_skip_and_fail_closed(
    registry: ToolRegistry, seen: list[dict[str, Any]]
) -> None:
    class Gate(CallHook):
        def before_call(
            self, call: ToolCall, arguments: Mapping[str, Any], agent_path: str
        ) -> HookDecision:
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
