"""The executor's gate path: what a model, a policy or a grant hands it.

Whatever arrives (arguments JSON cannot build, a value JSON has no type for,
a policy that raises or answers nonsense, a grant's output cap) becomes a
result; nothing gets a call past the gate. Routing, order and admission are
in ``test_executor.py``.
"""

from __future__ import annotations

import re
from typing import Any, Literal

import attrs
import trio

from conftest import write
from toolexec import (
    Allow,
    ErrorClass,
    JsonContent,
    SideEffects,
    ToolCall,
    ToolDefinition,
    ToolError,
    ToolExecutor,
    ToolOutput,
    ToolRegistry,
    function_tool,
)
from toolexec._core._messages import CLIP_CHARS, ENUM_CHARS, ENUM_SHOWN
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


# -- what an invalid_arguments result tells the model ----------------------------


def _violations_of(schema: dict[str, Any], arguments: dict[str, Any]) -> list[str]:
    registry = ToolRegistry()
    registry.register(
        _Schema(ToolDefinition("t", "A tool.", {"type": "object", "properties": schema}))
    )
    outcome = trio.run(ToolExecutor(registry).execute_batch, [ToolCall("1", "t", arguments)])
    result = outcome.results[0]
    assert result.error_class is ErrorClass.INVALID_ARGUMENTS
    return list(result.details["violations"])


@attrs.frozen
class _Schema:
    definition: ToolDefinition

    def __call__(self) -> _Schema:
        return self

    async def execute(self, arguments: Any, ctx: Any) -> ToolOutput:  # pragma: no cover
        raise AssertionError("an invalid call never runs")


async def test_an_enum_error_lists_every_allowed_value() -> None:
    @function_tool(side_effects=SideEffects.READ)
    async def query(database: Literal["all", "postgres", "mysql", "sqlite", "oracle"]) -> str:
        """Query a database."""
        raise AssertionError("never runs")  # pragma: no cover

    registry = ToolRegistry()
    registry.register(query)
    outcome = await ToolExecutor(registry).execute_batch(
        [ToolCall("1", "query", {"database": "mongo"})]
    )
    text = outcome.results[0].text
    assert '"mongo"' in text
    for allowed in ("all", "postgres", "mysql", "sqlite", "oracle"):
        assert f'"{allowed}"' in text, text


def test_enum_and_const_errors_list_the_allowed_values_up_to_the_bound() -> None:
    [const] = _violations_of({"a": {"const": "x"}}, {"a": "y"})
    assert const == '$.a: "y" is not allowed; the only allowed value is "x"'
    [few] = _violations_of({"a": {"enum": [1, "two", None]}}, {"a": 3})
    assert few == '$.a: 3 is not one of the allowed values: 1, "two", null'
    # More than ENUM_SHOWN values: the first ENUM_SHOWN, then a count of the rest.
    many = [f"v{i}" for i in range(ENUM_SHOWN + 30)]
    [listed] = _violations_of({"a": {"enum": many}}, {"a": "w"})
    assert all(f'"v{i}"' in listed for i in range(ENUM_SHOWN))
    assert f'"v{ENUM_SHOWN}"' not in listed
    assert listed.endswith("and 30 more")
    # Long values: as many as ENUM_CHARS characters hold, each clipped.
    long = [c * 150 for c in "abcdefghij"]
    [clipped] = _violations_of({"a": {"enum": long}}, {"a": "z"})
    assert len(clipped) < ENUM_CHARS + 100
    assert clipped.startswith('$.a: "z" is not one of the allowed values: "aaa')
    assert re.search(r"and \d+ more$", clipped)
    huge = ["x" * 10_000]
    [one] = _violations_of({"a": {"enum": huge}}, {"a": "z" * 10_000})
    assert len(one) < 2 * CLIP_CHARS + 200
    assert "characters]…" in one


def test_a_type_error_says_what_was_expected_and_what_was_sent() -> None:
    found = _violations_of(
        {
            "n": {"type": "integer"},
            "s": {"type": "string"},
            "o": {"type": ["integer", "null"]},
            "l": {"type": "array"},
            "b": {"type": "boolean"},
            "x": {"type": "object"},
        },
        {"n": "3", "s": 4.5, "o": True, "l": {"k": 1}, "b": None, "x": [1, 2]},
    )
    assert found == [
        "$.b: expected a boolean, got null",
        "$.l: expected an array, got an object",
        '$.n: expected an integer, got the string "3"',
        "$.o: expected an integer or null, got the boolean true",
        "$.s: expected a string, got the number 4.5",
        "$.x: expected an object, got an array",
    ]
    [huge] = _violations_of({"n": {"type": "integer"}}, {"n": "z" * 1_000_000})
    assert len(huge) < 2 * CLIP_CHARS + 100
    assert huge.startswith('$.n: expected an integer, got the string "zzz')
    assert "characters]…" in huge
