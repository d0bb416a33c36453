"""``toolexec.testing``'s strategies: batches of calls and arguments drawn from schemas."""

from __future__ import annotations

import subprocess
import sys
from typing import Any, Literal

import pytest
import trio
from hypothesis import given, settings

import toolexec.testing as testing
from toolexec import SideEffects, ToolCall, ToolRegistry, function_tool
from toolexec._schema import compile_schema
from toolexec.testing import tool_arguments, tool_calls
from toolexec.testing._schemas import BAD_JSON, invalid_arguments

Key = Literal["a", "b"]


class Store(dict[str, int]):
    """The state every tool below acts on, handed to the executor as a service."""


def registry_over(store: Store, *, sneaky_get: bool = False) -> ToolRegistry:
    """get (read), put (serial mutator), incr (promoted), count (a sync read)."""

    @function_tool(side_effects=SideEffects.READ)
    async def get(key: Key, delay: Literal[0, 1, 2] = 1) -> str:
        """Read a key."""
        await trio.sleep(delay)
        if sneaky_get:  # the planted bug: a "read" that writes
            store[key] = store.get(key, 0) + 1
        return f"{key}={store.get(key, 0)}"

    @function_tool(side_effects=SideEffects.WRITE)
    async def put(key: Key, value: int, delay: Literal[0, 1, 2] = 1) -> str:
        """Overwrite a key."""
        await trio.sleep(delay)
        store[key] = value
        return "ok"

    @function_tool(side_effects=SideEffects.WRITE)
    async def incr(key: Key, delay: Literal[0, 1, 2] = 1) -> str:
        """Add one to a key (commutes with itself, so the host promotes it)."""
        await trio.sleep(delay)
        store[key] = store.get(key, 0) + 1
        return "ok"

    @function_tool(side_effects=SideEffects.NONE)
    def count() -> str:
        """Count the keys, in a worker thread."""
        return str(len(store))

    registry = ToolRegistry()
    for tool in (get, put, incr, count):
        registry.register(tool)
    return registry


# -- the strategies ----------------------------------------------------------

SCHEMA = {
    "type": "object",
    "properties": {
        "s": {"type": "string", "minLength": 2, "maxLength": 4},
        "p": {"type": "string", "pattern": "^[a-c]{2}$"},
        "i": {"type": "integer", "exclusiveMinimum": 1, "maximum": 4},
        "j": {"type": "integer", "minimum": 0.5, "exclusiveMaximum": 3},
        "n": {"type": "number", "minimum": -1, "exclusiveMaximum": 1},
        "b": {"type": "boolean"},
        "z": {"type": "null"},
        "e": {"enum": ["x", "y"]},
        "c": {"const": 7},
        "t": {"type": ["integer", "string"], "minimum": 0, "maxLength": 1},
        "l": {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2},
        "o": {"properties": {"k": {"type": "boolean"}}, "required": ["k"]},
        "any": {},
        "never": False,
        "untyped": {"items": True},
        "odd": {"type": "string", "format": "date"},
        "described": {"description": "no type, no properties: any scalar"},
    },
    "required": ["s", "i", "o"],
}
COMPILED = compile_schema(SCHEMA, tool="t")


@given(arguments=tool_arguments(SCHEMA))
def test_drawn_arguments_satisfy_their_schema(arguments: dict[str, Any]) -> None:
    assert COMPILED.is_valid(arguments), arguments
    assert "never" not in arguments


@given(arguments=invalid_arguments(COMPILED))
def test_invalid_arguments_are_refused(arguments: dict[str, Any] | str) -> None:
    if isinstance(arguments, str):
        assert arguments == BAD_JSON
    else:
        assert not COMPILED.is_valid(arguments), arguments


@given(arguments=invalid_arguments(compile_schema({"type": "object"}, tool="t")))
def test_a_schema_with_no_properties_breaks_into_bad_json(arguments: dict[str, Any] | str) -> None:
    assert arguments == BAD_JSON


@given(calls=tool_calls(registry_over(Store()), max_size=12))
def test_drawn_batches_have_ordered_unique_ids(calls: list[ToolCall]) -> None:
    assert [c.id for c in calls] == [f"c{i}" for i in range(len(calls))]
    assert all(c.name in ("get", "put", "incr", "count", "no_such_tool") for c in calls)


def test_unknown_names_avoid_registered_ones() -> None:
    registry = registry_over(Store())

    @function_tool(name="no_such_tool")
    def taken() -> str:
        """Squat the default unknown name."""
        return ""

    registry.register(taken)

    @given(calls=tool_calls(registry, invalid=False))
    @settings(max_examples=30)
    def check(calls: list[ToolCall]) -> None:
        assert all(c.name in registry or c.name == "no_such_tool_" for c in calls)

    check()


def test_an_empty_registry_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one tool"):
        tool_calls(ToolRegistry())


# -- hypothesis stays optional -----------------------------------------------


def test_importing_toolexec_testing_does_not_import_hypothesis() -> None:
    code = (
        "import sys; import toolexec.testing as t; "
        "assert 'hypothesis' not in sys.modules, 'imported'; "
        "t.ScriptedModel; t.tool_call; print('ok')"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "ok"


def test_without_hypothesis_the_checks_say_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delitem(vars(testing), "tool_calls", raising=False)
    monkeypatch.delitem(sys.modules, "toolexec.testing._strategies", raising=False)
    monkeypatch.setitem(sys.modules, "hypothesis", None)
    with pytest.raises(ImportError, match="needs hypothesis"):
        testing.tool_calls  # noqa: B018
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        testing.nothing  # noqa: B018


def test_lazy_names_load_once_under_their_public_module() -> None:
    assert testing.tool_calls is tool_calls
    assert tool_calls.__module__ == "toolexec.testing"
