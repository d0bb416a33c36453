"""The executor's gate path: what a model, a policy or a grant hands it.

Whatever arrives (arguments JSON cannot build, a value JSON has no type for,
a policy that raises or answers nonsense, a grant's output cap) becomes a
result; nothing gets a call past the gate. Routing, order and admission are
in ``test_executor.py``.
"""

from __future__ import annotations

from typing import Any

from conftest import write
from toolexec import (
    Allow,
    ErrorClass,
    JsonContent,
    SideEffects,
    ToolCall,
    ToolError,
    ToolExecutor,
    ToolRegistry,
    function_tool,
)
from toolexec.policy import ExecutionGrant


async def test_arguments_json_cannot_build_are_invalid_and_the_rest_run(
    registry: ToolRegistry, seen: list[dict[str, Any]]
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


async def test_a_policy_that_raises_denies(
    registry: ToolRegistry, seen: list[dict[str, Any]]
) -> None:
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
