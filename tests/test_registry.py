"""Registration: schema checks, names, duplicates, and function tools."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import pytest

from toolexec import (
    JsonContent,
    RegistrationError,
    SideEffects,
    ToolCall,
    ToolContext,
    ToolDefinition,
    ToolExecutor,
    ToolOutput,
    ToolRegistry,
    function_tool,
)


def tool_with_schema(schema: dict[str, Any], name: str = "t") -> Any:
    class T:
        definition = ToolDefinition(name=name, description="d", input_schema=schema)

        async def execute(self, arguments: Any, ctx: ToolContext) -> ToolOutput:
            return ToolOutput.text("ok")

    return T


@pytest.mark.parametrize(
    "keyword", ["$ref", "oneOf", "allOf", "not", "if", "then", "else", "patternProperties"]
)
def test_constructs_outside_the_portable_subset_are_refused_with_their_place(keyword: str) -> None:
    value: Any = (
        {"^x": {}}
        if keyword == "patternProperties"
        else ("#/x" if keyword == "$ref" else ([{}] if keyword.endswith("Of") else {}))
    )
    schema = {
        "type": "object",
        "properties": {"p": {"type": "object", "properties": {"q": {keyword: value}}}},
    }
    with pytest.raises(RegistrationError) as info:
        ToolRegistry().register(tool_with_schema(schema))
    assert repr(keyword) in str(info.value)
    assert "#/properties/p/properties/q" in str(info.value)
    assert "\n" not in str(info.value)
    if keyword != "$ref":
        assert "which OpenAI refuses in function parameters" in str(info.value)


def test_anyof_and_local_refs_are_kept_and_validated() -> None:
    node = {
        "type": "object",
        "properties": {"label": {"type": "string"}, "children": {"$ref": "#/$defs/Nodes"}},
        "required": ["label"],
        "additionalProperties": False,
    }
    schema = {
        "type": "object",
        "properties": {
            "flag": {
                "anyOf": [
                    {"type": "boolean", "description": "on or off"},
                    {"type": "string", "description": "a mode"},
                    {"type": "string", "description": "a mode"},
                ]
            },
            "tree": {"$ref": "#/$defs/Node"},
            "first": {"$ref": "#/$defs/Nodes/items"},
            "odd key": {"$ref": "#/$defs/a~1b%20c"},
            "again": {"$ref": "#"},
        },
        "$defs": {
            "Node": node,
            "Nodes": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
            "a/b c": {"type": "integer"},
        },
    }
    registry = ToolRegistry()
    registry.register(tool_with_schema(schema))
    compiled = registry.lookup("t").schema  # type: ignore[union-attr]
    assert compiled.schema is schema
    good = {"flag": "x", "tree": {"label": "a", "children": [{"label": "b"}]}, "odd key": 3}
    assert compiled.is_valid(good)
    assert compiled.is_valid({"flag": True, "first": {"label": "c"}})
    assert compiled.is_valid({"again": {"again": {"flag": False}}})
    assert not compiled.is_valid({"again": {"again": {"flag": 2}}})
    bad: list[dict[str, Any]] = [
        {"flag": 1},
        {"tree": {"children": []}},
        {"odd key": "3"},
        {"first": {}},
    ]
    for arguments in bad:
        assert not compiled.is_valid(arguments), arguments


@pytest.mark.parametrize(
    ("schema", "says"),
    [
        (
            {"type": "object", "anyOf": [{"required": ["a"]}, {"required": ["b"]}]},
            "uses 'anyOf' at the top level, which OpenAI and Anthropic refuse",
        ),
        (
            {"type": "object", "enum": [{}]},
            "uses 'enum' at the top level, which OpenAI refuses",
        ),
        (
            {"type": "object", "properties": {"a": {"$ref": "https://example.test/a.json"}}},
            "schema at #/properties/a uses '$ref' 'https://example.test/a.json', which is not "
            "local to the schema",
        ),
        (
            {
                "type": "object",
                "properties": {"a": {"$ref": "#/$defs/A/prefixItems/1"}},
                "$defs": {"A": {"prefixItems": [{}]}},
            },
            "points to nothing in the schema",
        ),
        (
            {"type": "object", "properties": {"a": {"type": "string", "pattern": "(?<=a)b\\"}}},
            "input_schema cannot be compiled: ",
        ),
        (
            {"type": "object", "properties": {"a": {"oneOf": 3}}},
            "input_schema is not a valid JSON Schema at properties/a/oneOf: 3 is not of type",
        ),
    ],
)
def test_what_no_provider_or_validator_can_take_is_refused_on_one_line(
    schema: dict[str, Any], says: str
) -> None:
    with pytest.raises(RegistrationError) as info:
        ToolRegistry().register(tool_with_schema(schema))
    assert says in str(info.value)
    assert "\n" not in str(info.value)


def test_invalid_schema_and_non_object_schema_are_refused() -> None:
    with pytest.raises(RegistrationError, match="not a valid JSON Schema"):
        ToolRegistry().register(tool_with_schema({"type": "object", "required": "x"}))
    with pytest.raises(RegistrationError, match='"type": "object"'):
        ToolRegistry().register(tool_with_schema({"type": "string"}))


@pytest.mark.parametrize("name", ["", "has space", "x" * 65, "dots.not.ok", "ümlaut"])
def test_names_providers_reject_are_refused(name: str) -> None:
    with pytest.raises(RegistrationError, match="invalid tool name"):
        ToolRegistry().register(tool_with_schema({"type": "object"}, name=name))


def test_duplicate_names_are_refused() -> None:
    registry = ToolRegistry()
    registry.register(tool_with_schema({"type": "object"}))
    with pytest.raises(RegistrationError, match="already registered"):
        registry.register(tool_with_schema({"type": "object"}))


def test_a_factory_that_returns_no_tool_is_refused() -> None:
    with pytest.raises(RegistrationError, match="not a Tool"):
        ToolRegistry().register(lambda: object())  # type: ignore[arg-type, return-value]


def test_factories_give_each_call_a_fresh_instance() -> None:
    made: list[object] = []

    class Counting:
        definition = ToolDefinition(name="c", description="d")

        def __init__(self) -> None:
            made.append(self)

        async def execute(self, arguments: Any, ctx: ToolContext) -> ToolOutput:
            return ToolOutput.text(str(id(self)))

    registry = ToolRegistry()
    registry.register(Counting)
    import trio

    async def main() -> list[str]:
        outcome = await ToolExecutor(registry).execute_batch(
            [ToolCall("a", "c"), ToolCall("b", "c")]
        )
        return [r.text for r in outcome.results]

    texts = trio.run(main)
    assert len(set(texts)) == 2
    assert len(made) == 3


def test_function_tool_derives_the_schema_from_the_signature() -> None:
    @function_tool(side_effects=SideEffects.READ)
    async def search(
        query: Annotated[str, "what to look for"],
        mode: Literal["fast", "full"] = "fast",
        limit: int | None = None,
        tags: list[str] | None = None,
        ctx: ToolContext | None = None,
    ) -> str:
        """Search the notes.

        Args:
            limit: at most this many hits.
        """
        return query

    d = search.definition
    assert d.name == "search"
    assert d.description == "Search the notes."
    assert d.side_effects is SideEffects.READ
    props = d.input_schema["properties"]
    assert props["query"] == {"type": "string", "description": "what to look for"}
    assert props["mode"] == {"type": "string", "enum": ["fast", "full"], "default": "fast"}
    assert props["limit"] == {
        "type": ["integer", "null"],
        "description": "at most this many hits.",
        "default": None,
    }
    assert props["tags"]["type"] == ["array", "null"]
    assert d.input_schema["required"] == ["query"]
    assert "ctx" not in props
    ToolRegistry().register(search)


def test_function_tool_default_is_the_unsafe_side_effect() -> None:
    @function_tool
    def f(x: int) -> int:
        return x

    assert f.definition.side_effects is SideEffects.EXECUTE
    assert f.definition.effective_timeout == 600.0


def test_function_tool_refuses_unmappable_parameters() -> None:
    with pytest.raises(RegistrationError, match="no JSON Schema mapping"):

        @function_tool
        def g(x: complex) -> None: ...

    with pytest.raises(RegistrationError, match=r"\*args"):

        @function_tool
        def h(*xs: int) -> None: ...


async def test_function_tools_sync_and_async_run_and_return_values() -> None:
    @function_tool(side_effects=SideEffects.NONE)
    def add(a: int, b: int) -> int:
        return a + b

    @function_tool(side_effects=SideEffects.NONE)
    async def greet(name: str, ctx: ToolContext) -> str:
        return f"hello {name} from {ctx.call_id}"

    registry = ToolRegistry()
    registry.register(add)
    registry.register(greet)
    outcome = await ToolExecutor(registry).execute_batch(
        [ToolCall("1", "add", {"a": 2, "b": 3}), ToolCall("2", "greet", '{"name": "ada"}')]
    )
    assert outcome.results[0].content == (JsonContent(5),)
    assert outcome.results[1].text == "hello ada from 2"
