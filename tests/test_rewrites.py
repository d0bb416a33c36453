"""The exact rewrites of oneOf and allOf: what they accept is what the original accepts.

Property tests against the compiled validator itself: for parts drawn from
a pool of the keywords real schemas use, a merged ``allOf`` accepts exactly
the values the ``allOf`` accepts, and a ``oneOf`` read as ``anyOf`` accepts
exactly what the ``oneOf`` does when its branches share no value.
"""

from __future__ import annotations

import re
from typing import Any

import jsonschema_rs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolexec._gate._rewrites import Conflict, merge_all_of, one_of_means_any_of


def _nowhere(ref: str) -> Any:
    raise LookupError(ref)


KEYWORDS: list[dict[str, Any]] = [
    {"type": "string"},
    {"type": "integer"},
    {"type": "number"},
    {"type": ["string", "null"]},
    {"type": "object"},
    {"minLength": 2},
    {"maxLength": 4},
    {"minimum": 0},
    {"maximum": 10},
    {"enum": ["a", "bb", 3, None]},
    {"enum": ["bb", "ccc", 3.0]},
    {"const": "bb"},
    {"required": ["k"]},
    {"properties": {"k": {"type": "string"}}},
    {"properties": {"k": {"maxLength": 1}}},
    {"properties": {"k": {"const": "x"}}, "required": ["k"]},
    {"properties": {"k": {"const": "y"}}, "required": ["k"]},
    {"description": "one"},
    {"description": "two", "title": "t"},
    {"additionalProperties": False, "properties": {"k": {}}},
]
VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-3, 12)
    | st.sampled_from([0.5, 3.0, -1.5])
    | st.sampled_from(["", "a", "bb", "ccc", "dddd", "eeeee", "x", "y"]),
    lambda inner: st.dictionaries(st.sampled_from(["k", "z"]), inner, max_size=2),
    max_leaves=4,
)
PART = st.lists(st.sampled_from(KEYWORDS), min_size=1, max_size=3).map(
    lambda chosen: {k: v for part in chosen for k, v in part.items()}
)


def valid(schema: Any, value: Any) -> bool:
    return bool(jsonschema_rs.Draft202012Validator(schema).is_valid(value))


@settings(max_examples=300, deadline=None)
@given(st.lists(PART, min_size=1, max_size=3), st.lists(VALUES, min_size=10, max_size=10))
def test_a_merged_all_of_accepts_what_the_all_of_accepts(
    parts: list[dict[str, Any]], values: list[Any]
) -> None:
    try:
        merged = merge_all_of({"allOf": parts}, _nowhere)
    except Conflict:
        return
    for value in values:
        assert valid(merged, value) == valid({"allOf": parts}, value), (parts, merged, value)


@settings(max_examples=300, deadline=None)
@given(st.lists(PART, min_size=2, max_size=3), st.lists(VALUES, min_size=10, max_size=10))
def test_a_one_of_read_as_any_of_accepts_what_it_accepts_when_branches_are_disjoint(
    branches: list[dict[str, Any]], values: list[Any]
) -> None:
    if not one_of_means_any_of(branches, _nowhere):
        return
    for value in values:
        matched = sum(valid(branch, value) for branch in branches)
        if matched > 1:  # only a redundant branch may overlap another
            continue
        assert valid({"anyOf": branches}, value) == valid({"oneOf": branches}, value)


@pytest.mark.parametrize(
    ("branches", "means_any_of"),
    [
        ([{"type": "string"}, {"type": "integer"}], True),
        ([{"type": "integer"}, {"type": "number"}], True),  # a type the other names too
        ([{"type": "string"}, {"enum": ["INF", "NaN"]}], True),  # values of the other's type
        ([{"type": "string"}, {"type": "string", "description": "again"}], True),
        ([{"type": "string"}, {"type": "string", "maxLength": 3}], False),
        ([{"enum": ["a", 1]}, {"enum": ["b", 2]}], True),
        ([{"type": "object"}, {"type": "object", "required": ["k"]}], False),
    ],
)
def test_which_one_ofs_mean_any_of(branches: list[Any], means_any_of: bool) -> None:
    assert one_of_means_any_of(branches, _nowhere) is means_any_of


def _defs(**schemas: Any) -> Any:
    """A ``look`` over ``#/$defs/<name>`` refs to ``schemas``."""

    def look(ref: str) -> Any:
        return schemas[ref.removeprefix("#/$defs/")]

    return look


@pytest.mark.parametrize(
    ("parts", "merged"),
    [
        (
            [{"minLength": 1, "maximum": 5}, {"minLength": 3, "maximum": 2.5}],
            {"minLength": 3, "maximum": 2.5},
        ),
        ([{"enum": [1, "a", None]}, {"enum": ["a", None, 2.0]}], {"enum": ["a", None]}),
        ([{"type": ["integer", "string"]}, {"type": "number"}], {"type": "integer"}),
        ([{"type": "number"}, {"type": ["integer", "null"]}], {"type": "integer"}),
        (
            [{"type": ["string", "null"]}, {"type": ["null", "string"]}],
            {"type": ["string", "null"]},
        ),
        ([True, {"allOf": [{"minimum": 1}, {"minimum": 2}]}], {"minimum": 2}),
        (
            [{"$ref": "#/$defs/A"}, {"required": ["k"]}],
            {"properties": {"k": {}}, "required": ["k"]},
        ),
        (
            [{"properties": {"k": {"$ref": "#/$defs/A"}}}, {"properties": {"k": {"title": "K"}}}],
            {"properties": {"k": {"properties": {"k": {}}, "title": "K"}}},
        ),
    ],
)
def test_all_of_parts_that_agree_merge(parts: list[Any], merged: dict[str, Any]) -> None:
    assert merge_all_of({"allOf": parts}, _defs(A={"properties": {"k": {}}})) == merged


@pytest.mark.parametrize(
    ("parts", "why"),
    [
        ([{"enum": [1]}, {"enum": [2]}], "allOf parts conflict on 'enum'"),
        ([{"type": "string"}, {"type": ["integer", "null"]}], "allOf parts conflict on 'type'"),
        ([{"format": "date"}, {"format": "uuid"}], "allOf parts conflict on 'format'"),
        ([False], "allOf part is not an object schema"),
        ([{"$ref": "#/$defs/Gone"}], "allOf part $ref '#/$defs/Gone' points to nothing"),
        ([{"$ref": "#/$defs/Loop"}], "allOf parts refer to each other in a cycle"),
        (
            [{"properties": {"k": {"type": "string"}}}, {"properties": {"k": {"type": "null"}}}],
            "allOf parts define property 'k' differently",
        ),
    ],
)
def test_all_of_parts_that_conflict_are_refused(parts: list[Any], why: str) -> None:
    look = _defs(Loop={"allOf": [{"$ref": "#/$defs/Loop"}]})
    with pytest.raises(Conflict, match=re.escape(why)):
        merge_all_of({"allOf": parts}, look)


@pytest.mark.parametrize(
    ("branches", "means_any_of"),
    [
        ([False, {"type": "string"}], True),
        ([{"const": True}, {"const": False}], True),
        ([{"const": [1]}, {"const": {"a": 1}}], True),
        ([{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}], True),
        ([{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Gone"}], False),
        ([{"anyOf": [{"type": "string"}, {"type": "null"}]}, {"type": "integer"}], True),
        ([{"anyOf": [{"type": "string"}, {"type": "null"}]}, {"type": "null"}], False),
        ([{"allOf": [{"type": "string"}]}, {"type": "integer"}], True),
        ([{"$ref": "#/$defs/Few", "enum": ["x"]}, {"enum": ["y", "z"]}], True),
        ([{"$ref": "#/$defs/Gone"}, {"type": "string"}], False),
        ([True, {"type": "string"}], False),
        ([{"enum": [1.0, 2]}, {"type": "integer"}], True),
    ],
)
def test_which_one_ofs_mean_any_of_through_refs(branches: list[Any], means_any_of: bool) -> None:
    pet = {"type": "object", "required": ["kind"]}
    look = _defs(
        Cat={**pet, "properties": {"kind": {"const": "cat"}}},
        Dog={**pet, "properties": {"kind": {"enum": ["dog"]}}},
        Few={"enum": ["x", "y"]},
    )
    assert one_of_means_any_of(branches, look) is means_any_of
