"""Typed parameters of function tools: schema, refusal and the values the body gets."""

from __future__ import annotations

import dataclasses
import enum
import subprocess
import sys
from collections.abc import Callable
from typing import Annotated, Any, Literal, NotRequired, Optional, TypedDict

import annotated_types as at
import pytest
import trio
from pydantic import BaseModel, Field, StringConstraints, field_validator

from toolexec import (
    ErrorClass,
    FunctionTool,
    RegistrationError,
    SideEffects,
    ToolCall,
    ToolContext,
    ToolExecutor,
    ToolRegistry,
    function_tool,
)
from toolexec.events import CallbackSink, CallProgress


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclasses.dataclass
class Point:
    x: int
    y: Annotated[int, "the y coordinate"] = 0


@dataclasses.dataclass
class Shape:
    points: list[Point]
    color: Color = Color.RED
    tags: list[str] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        if "bad" in self.tags:
            raise ValueError("'bad' is not a tag")


class Options(TypedDict):
    depth: int
    note: NotRequired[str]


class Owner(BaseModel):
    """Who owns the shape."""

    name: str = Field(description="the owner's name", max_length=5)
    email: str | None = None
    tier: Color = Color.BLUE

    @field_validator("name")
    @classmethod
    def _no_root(cls, value: str) -> str:
        if value == "root":
            raise ValueError("root owns nothing")
        return value


class Node(BaseModel):
    children: list[Node] = []


received: list[Any] = []


@function_tool(side_effects=SideEffects.READ)
def draw(
    color: Color,
    shape: Shape,
    owner: Owner,
    label: Annotated[str, Field(description="a label", max_length=5)],
    options: Options | None = None,
    owners: list[Owner] | None = None,
    scale: Annotated[float, at.Gt(0), at.Le(10)] = 1.0,
    code: Annotated[str, StringConstraints(pattern=r"^[a-z]+$", min_length=2)] = "ab",
) -> str:
    """Draw a shape."""
    received[:] = [color, shape, owner, label, options, owners, scale, code]
    return "drawn"


def run_call(tool: FunctionTool, arguments: dict[str, Any]) -> Any:
    registry = ToolRegistry()
    registry.register(tool)

    async def main() -> Any:
        outcome = await ToolExecutor(registry).execute_batch(
            [ToolCall("c1", tool.definition.name, arguments)]
        )
        return outcome.results[0]

    return trio.run(main)


GOOD: dict[str, Any] = {
    "color": "blue",
    "shape": {"points": [{"x": 1}, {"x": 2, "y": 3}]},
    "owner": {"name": "ann"},
    "label": "hi",
}


def test_the_schema_carries_descriptions_defaults_and_constraints() -> None:
    schema = draw.definition.input_schema
    props = schema["properties"]
    assert schema["required"] == ["color", "shape", "owner", "label"]
    assert props["color"] == {"type": "string", "enum": ["red", "blue"]}
    point = props["shape"]["properties"]["points"]["items"]
    assert point["properties"]["y"] == {
        "type": "integer",
        "description": "the y coordinate",
        "default": 0,
    }
    assert point["required"] == ["x"]
    assert props["shape"]["properties"]["color"]["default"] == "red"
    assert props["shape"]["required"] == ["points"]
    assert "default" not in props["shape"]["properties"]["tags"]
    assert props["owner"]["properties"]["name"] == {
        "type": "string",
        "description": "the owner's name",
        "maxLength": 5,
    }
    assert props["owner"]["description"] == "Who owns the shape."
    assert props["owner"]["properties"]["email"]["type"] == ["string", "null"]
    assert props["owner"]["properties"]["tier"] == {
        "type": "string",
        "enum": ["red", "blue"],
        "default": "blue",
    }
    assert props["label"] == {"type": "string", "description": "a label", "maxLength": 5}
    assert props["options"]["type"] == ["object", "null"]
    assert props["options"]["required"] == ["depth"]
    assert props["owners"]["type"] == ["array", "null"]
    assert props["scale"] == {
        "type": "number",
        "exclusiveMinimum": 0,
        "maximum": 10,
        "default": 1.0,
    }
    assert props["code"] == {
        "type": "string",
        "minLength": 2,
        "pattern": "^[a-z]+$",
        "default": "ab",
    }
    assert "$ref" not in repr(schema)
    assert "anyOf" not in repr(schema)


def test_the_body_receives_typed_values() -> None:
    arguments = {
        **GOOD,
        "options": {"depth": 2},
        "owners": [{"name": "bo", "tier": "red"}],
        "shape": {**GOOD["shape"], "color": "blue"},
    }
    result = run_call(draw, arguments)
    assert result.error_class is None, result.text
    color, shape, owner, label, options, owners, scale, code = received
    assert color is Color.BLUE
    assert shape == Shape([Point(1), Point(2, 3)], Color.BLUE)
    assert isinstance(owner, Owner)
    assert owner.tier is Color.BLUE
    assert (label, options, scale, code) == ("hi", {"depth": 2}, 1.0, "ab")
    assert owners == [Owner(name="bo", tier=Color.RED)]


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"label": "7 chars"}, "$.label"),
        ({"owner": {"name": "toolong"}}, "$.owner.name"),
        ({"color": "green"}, "$.color"),
        ({"shape": {"points": [{"x": "1"}]}}, "$.shape.points[0].x"),
        ({"scale": 0}, "$.scale"),
        ({"code": "A1"}, "$.code"),
        ({"owner": {"name": "root"}}, "$.owner.name: Value error, root owns nothing"),
        ({"owners": [{"name": "a"}, {"name": "root"}]}, "$.owners[1].name: Value error"),
        ({"shape": {"points": [], "tags": ["bad"]}}, "$.shape: ValueError: 'bad' is not a tag"),
    ],
)
def test_a_violating_call_is_invalid_arguments_with_a_json_path(
    change: dict[str, Any], path: str
) -> None:
    received.clear()
    result = run_call(draw, {**GOOD, **change})
    assert result.error_class is ErrorClass.INVALID_ARGUMENTS
    assert any(v.startswith(path) for v in result.details["violations"]), result.details
    assert received == []


def tool_for(annotation: Any) -> FunctionTool:
    def fn(value: Any) -> None: ...

    fn.__annotations__ = {"value": annotation}
    return function_tool(fn)


def refused(annotation: Any) -> str:
    with pytest.raises(RegistrationError) as info:
        tool_for(annotation)
    message = str(info.value)
    assert "parameter 'value'" in message
    return message


@dataclasses.dataclass
class Loop:
    next: Loop | None = None


class Wide(TypedDict):
    a: Point | Shape


class Recursive(BaseModel):
    child: Recursive | None = None


class Either(BaseModel):
    value: Point | Shape


class Opaque:
    pass


@pytest.mark.parametrize(
    ("annotation", "words"),
    [
        (set[int], "set[int] has no JSON Schema mapping: JSON has no sets"),
        (frozenset, "frozenset has no JSON Schema mapping: JSON has no sets"),
        (tuple[int, str], "use list[X]"),
        (Callable[[int], int], "a function cannot be sent as JSON"),
        (Opaque, "annotation Opaque has no JSON Schema mapping"),
        (complex, "annotation complex has no"),
        (Loop, "field 'next' of Loop: annotation Loop has"),
        (Point | Shape, "needs anyOf"),
        (Wide, "field 'a' of Wide"),
        (Recursive, "Recursive refers to itself"),
        (Node, "Node refers to itself"),
        (Either, "needs anyOf"),
        (dict[int, str], "keys are strings"),
        (Literal[1.5j], "JSON scalars"),
        (Annotated[str, at.Gt(1)], "applies to integer or number values only"),
        (Annotated[int, at.MinLen(1)], "applies to string or array or object"),
        (Annotated[int, at.Gt("1")], "not a JSON number"),
        (Annotated[int, at.Predicate(bool)], "is not a constraint"),
        (Annotated[int, ("minimum", 5)], "metadata ('minimum', 5) is not a constraint"),
        (Annotated[str, StringConstraints(to_lower=True)], "to_lower=True"),
        (Annotated[str, Field(alias="v")], "Field(alias=...)"),
        (Annotated[str, Field(default="x")], "give the default in the signature"),
    ],
)
def test_an_unsupported_annotation_is_refused_with_its_name(annotation: Any, words: str) -> None:
    assert words in refused(annotation)


def test_a_recursive_dataclass_names_the_loop() -> None:
    assert "refers to itself, which needs $ref" in refused(Loop)


class Mixed(enum.Enum):
    ONE = 1
    TWO = "two"


def test_more_shapes_map_to_the_portable_subset() -> None:
    @function_tool
    def f(
        mixed: Mixed,
        either: int | str,
        maybe: int | str | None,
        table: dict[str, Point],
        plain: dict[str, Any],
        sized: Annotated[list[int], at.Len(1, 3)],
        fields: Annotated[dict[str, int], at.MaxLen(2)],
        strict: Annotated[int, Field(strict=True, ge=0)],
        lit: Literal["a", "b"] | None = None,
        anything: Any = None,
        when: list[Optional[Color]] | None = None,  # noqa: UP045 - the old spelling works too
    ) -> None:
        received[:] = [mixed, table, when]

    props = f.definition.input_schema["properties"]
    assert props["mixed"] == {"enum": [1, "two"]}
    assert props["either"] == {"type": ["integer", "string"]}
    assert props["maybe"] == {"type": ["integer", "string", "null"]}
    assert props["table"]["additionalProperties"]["required"] == ["x"]
    assert props["plain"] == {"type": "object"}
    assert props["sized"] == {
        "type": "array",
        "items": {"type": "integer"},
        "minItems": 1,
        "maxItems": 3,
    }
    assert props["fields"]["maxProperties"] == 2
    assert props["strict"] == {"type": "integer", "minimum": 0}
    assert props["lit"]["enum"] == ["a", "b", None]
    assert props["anything"] == {"default": None}
    result = run_call(
        f,
        {
            "mixed": 1,
            "either": 1,
            "maybe": None,
            "table": {"k": {"x": 1}},
            "plain": {},
            "sized": [1],
            "fields": {},
            "strict": 1,
            "when": ["red", None],
        },
    )
    assert result.error_class is None, result.text
    assert received == [Mixed.ONE, {"k": Point(1)}, [Color.RED, None]]
    result = run_call(
        f,
        {
            "mixed": 1,
            "either": 1,
            "maybe": None,
            "table": {"k": {"x": 1}},
            "plain": {},
            "sized": [1, 2, 3, 4],
            "fields": {},
            "strict": 1,
        },
    )
    assert result.details["violations"][0].startswith("$.sized")


def test_a_default_json_cannot_show_is_left_out_but_keeps_the_parameter_optional() -> None:
    @function_tool
    def f(size: float = float("inf"), point: Point | None = Point(1)) -> None: ...  # noqa: B008

    props = f.definition.input_schema["properties"]
    assert props["size"] == {"type": "number"}
    assert "default" not in props["point"]
    assert "required" not in f.definition.input_schema


def test_a_pydantic_schema_with_an_unknown_reference_or_no_schema_is_refused() -> None:
    class Broken(BaseModel):
        @classmethod
        def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
            return {"type": "object", "properties": {"a": {"$ref": "#/$defs/Gone"}}}

    assert "does not define" in refused(Broken)

    class Odd(BaseModel):
        @classmethod
        def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
            raise TypeError("no schema here")

    assert "pydantic gives no JSON Schema for it (no schema here)" in refused(Odd)

    class Legacy(BaseModel):
        @classmethod
        def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
            inner = {"type": "integer", "title": "I"}
            return {
                "type": "object",
                "$defs": {"I": inner},
                "properties": {"a": {"allOf": [{"$ref": "#/$defs/I"}], "description": "d"}},
            }

    assert tool_for(Legacy).definition.input_schema["properties"]["value"]["properties"]["a"] == {
        "type": "integer",
        "description": "d",
    }


def test_ctx_is_injected_and_progress_reaches_the_sinks() -> None:
    @function_tool(side_effects=SideEffects.READ)
    async def count(words: list[str], ctx: ToolContext) -> int:
        ctx.report_progress(f"counting {len(words)} words")
        return len(words)

    assert "ctx" not in count.definition.input_schema["properties"]
    registry = ToolRegistry()
    registry.register(count)
    seen: list[str] = []

    def on_event(event: object) -> None:
        if isinstance(event, CallProgress):
            seen.append(event.message)

    async def main() -> Any:
        executor = ToolExecutor(registry, sinks=[CallbackSink(on_event)])
        return await executor.execute_batch([ToolCall("c", "count", {"words": ["a", "b"]})])

    outcome = trio.run(main)
    assert outcome.results[0].text == "2"
    assert seen == ["counting 2 words"]


def test_nothing_imports_pydantic_when_no_tool_uses_it() -> None:
    code = (
        "import sys, enum, dataclasses\n"
        "from typing import Annotated\n"
        "import toolexec\n"
        "class C(enum.Enum):\n    A = 'a'\n"
        "@dataclasses.dataclass\nclass P:\n    x: int\n"
        "@toolexec.function_tool\n"
        "def f(c: C, p: P, n: Annotated[int, 'n'] = 1) -> str:\n    return ''\n"
        "toolexec.ToolRegistry().register(f)\n"
        "assert 'pydantic' not in sys.modules, 'pydantic imported'\n"
        "assert 'annotated_types' not in sys.modules, 'annotated_types imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@dataclasses.dataclass
class Seeded:
    size: int
    seed: dataclasses.InitVar[int]

    def __post_init__(self, seed: int) -> None:
        self.size += seed


@dataclasses.dataclass
class Unresolved:
    thing: NoSuchType  # type: ignore[name-defined]  # noqa: F821


def test_a_dataclass_init_that_takes_more_than_fields_or_does_not_resolve_is_refused() -> None:
    assert "its __init__ also takes ['seed'], which are not fields" in refused(Seeded)
    assert "its annotations do not resolve" in refused(Unresolved)


class Strict(BaseModel, extra="forbid"):
    value: int | str | None = None
    tier: Color | None = None


def test_a_model_s_scalar_union_is_a_type_list_and_forbidden_extras_stay() -> None:
    schema = tool_for(Strict).definition.input_schema["properties"]["value"]
    assert schema["properties"]["value"] == {"type": ["integer", "string", "null"], "default": None}
    assert schema["additionalProperties"] is False
    assert schema["properties"]["tier"]["enum"] == ["red", "blue", None]


@dataclasses.dataclass
class Team:
    owner: Owner


def test_a_model_inside_a_dataclass_reports_the_full_path() -> None:
    result = run_call(tool_for(Team), {"value": {"owner": {"name": "root"}}})
    assert result.details["violations"] == ["$.value.owner.name: Value error, root owns nothing"]


def test_a_model_schema_with_an_unportable_keyword_is_refused() -> None:
    class Negated(BaseModel):
        @classmethod
        def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
            return {"type": "object", "properties": {"a": {"not": {"type": "string"}}}}

    assert "its schema needs 'not'" in refused(Negated)


OPAQUE = object()


def test_list_and_dict_defaults_show_and_containers_convert_with_paths() -> None:
    @function_tool
    def f(
        shapes: dict[str, Shape],
        anything: list,  # type: ignore[type-arg]
        tags: list[str] = ["a"],  # noqa: B006
        weights: dict[str, int] = {"a": 1},  # noqa: B006
        odd: list[Any] = [OPAQUE],  # noqa: B006
        odd_map: dict[str, Any] = {"a": OPAQUE},  # noqa: B006
    ) -> None:
        received[:] = [shapes]

    props = f.definition.input_schema["properties"]
    assert props["anything"] == {"type": "array"}
    assert props["tags"]["default"] == ["a"]
    assert props["weights"]["default"] == {"a": 1}
    assert "default" not in props["odd"]
    assert "default" not in props["odd_map"]
    result = run_call(f, {"shapes": {"k": {"points": [], "tags": ["bad"]}}, "anything": []})
    assert result.details["violations"] == ["$.shapes.k: ValueError: 'bad' is not a tag"]
    result = run_call(f, {"shapes": {"k": {"points": [{"x": 1}]}}, "anything": [1]})
    assert result.error_class is None, result.text
    assert received == [{"k": Shape([Point(1)])}]


class Level(enum.Enum):
    LOW = 1
    HIGH = 2


@dataclasses.dataclass
class Box:
    side: int


class Inputs(TypedDict):
    count: int


def test_an_integral_float_reaches_an_int_parameter_as_an_int() -> None:
    got: list[Any] = []

    @function_tool(side_effects=SideEffects.READ)
    def count(
        n: int,
        pick: Literal[1, 2],
        maybe: int | None,
        either: int | str,
        ns: list[int],
        by_name: dict[str, int],
        box: Box,
        inputs: Inputs,
        level: Level,
        bounded: Annotated[int, at.Ge(0)],
        real: float,
        number: int | float,
        mixed: Literal[1, "one"],
    ) -> str:
        """Count."""
        got[:] = [n, pick, maybe, either, ns, by_name, box, inputs, level, bounded, real, number]
        got.append(mixed)
        return "ok"

    arguments = {
        "n": 2.0,
        "pick": 2.0,
        "maybe": 3.0,
        "either": 4.0,
        "ns": [1.0, 2],
        "by_name": {"a": 5.0},
        "box": {"side": 6.0},
        "inputs": {"count": 7.0},
        "level": 2.0,
        "bounded": 8.0,
        "real": 9.0,
        "number": 10.0,
        "mixed": 1.0,
    }
    result = run_call(count, arguments)
    assert result.error_class is None, result.text
    expected = [2, 2, 3, 4, [1, 2], {"a": 5}, Box(6), {"count": 7}, Level.HIGH, 8, 9.0, 10.0, 1]
    assert got == expected
    kinds = [type(value) for value in got]
    assert kinds == [int, int, int, int, list, dict, Box, dict, Level, int, float, float, int]
    assert [type(v) for v in got[4]] == [int, int]
    assert [type(got[5]["a"]), type(got[6].side), type(got[7]["count"])] == [int, int, int]
    # A float with a fraction is still refused.
    refused = run_call(count, {**arguments, "n": 2.5, "pick": 1.5})
    assert refused.error_class is ErrorClass.INVALID_ARGUMENTS
    assert "$.n: expected an integer, got the number 2.5" in refused.text
    assert "$.pick: 1.5 is not one of the allowed values: 1, 2" in refused.text


def test_a_parameter_without_an_annotation_takes_any_value_with_a_warning() -> None:
    with pytest.warns(UserWarning, match=r"parameter 'raw' has no annotation") as caught:

        @function_tool(side_effects=SideEffects.READ)
        def loose(raw, typed: Any = None) -> str:  # type: ignore[no-untyped-def]
            """Take anything."""
            return repr(raw)

    assert len(caught) == 1  # ``Any`` says it on purpose: no warning
    assert caught[0].filename == __file__  # the line that made the tool
    assert loose.definition.input_schema["properties"]["raw"] == {}
    assert run_call(loose, {"raw": [1, {"a": None}]}).text == "[1, {'a': None}]"


def test_an_async_tool_of_ints_keeps_its_fast_path_and_gets_ints() -> None:
    @function_tool(side_effects=SideEffects.READ)
    async def add(a: int, b: int | None = None, c: Literal[1, 2] = 1) -> str:
        """Add."""
        return repr([a, b, c])

    # Still called directly, without execute (only the int conversion in front),
    # and still known not to suspend.
    assert add.bare is not None
    assert add.coroutine_function is add.fn
    registry = ToolRegistry()
    registry.register(add)
    assert registry.lookup("add").never_suspends  # type: ignore[union-attr]
    assert run_call(add, {"a": 2.0, "b": 3.0, "c": 2.0}).text == "[2, 3, 2]"
    assert run_call(add, {"a": 2, "b": None}).text == "[2, None, 1]"
