"""A hypothesis strategy for batches of tool calls over a registry.

Each call in a drawn batch is, by weight: a valid call to a registered tool
(arguments from its schema, sent as a mapping or as JSON text), a call with
arguments its schema refuses or with malformed JSON text, or a call to a
tool name the registry does not hold. Ids are ``c0``, ``c1``... in call
order, so a counter-example reads in the order the model emitted it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from hypothesis import strategies as st

from .._core._types import ToolCall
from ._schemas import invalid_arguments, tool_arguments

if TYPE_CHECKING:
    from .._core._registry import ToolRegistry

__all__ = ["tool_calls"]


def _unknown_name(registry: ToolRegistry) -> str:
    name = "no_such_tool"
    while name in registry:
        name += "_"
    return name


def _valid(registry: ToolRegistry, name: str) -> st.SearchStrategy[tuple[str, Any]]:
    entry = registry.lookup(name)
    assert entry is not None
    args = tool_arguments(entry.schema.schema).filter(entry.schema.is_valid)
    as_text = st.booleans()
    return st.tuples(args, as_text).map(
        lambda pair: (name, json.dumps(pair[0]) if pair[1] else pair[0])
    )


def _invalid(registry: ToolRegistry, name: str) -> st.SearchStrategy[tuple[str, Any]]:
    entry = registry.lookup(name)
    assert entry is not None
    return invalid_arguments(entry.schema).map(lambda args: (name, args))


def tool_calls(
    registry: ToolRegistry,
    *,
    min_size: int = 1,
    max_size: int = 8,
    invalid: bool = True,
    unknown: bool = True,
) -> st.SearchStrategy[list[ToolCall]]:
    """Draw batches of ``ToolCall`` s over the tools in ``registry``.

    Example::

        @given(calls=tool_calls(registry, max_size=5))
        def test_batches(calls): ...

    Args:
        registry: the tools to call; each call's arguments are drawn from
            its tool's input schema.
        min_size: the fewest calls in a batch.
        max_size: the most calls in a batch.
        invalid: also draw calls whose arguments the schema refuses, or
            whose JSON text does not parse (about one call in six).
        unknown: also draw calls to a tool the registry does not hold
            (about one call in twelve).

    Returns:
        A strategy of lists of calls with ids ``c0``, ``c1``... in order.
    """
    names = registry.names()
    if not names:
        raise ValueError("tool_calls needs a registry with at least one tool")
    valid = st.one_of([_valid(registry, n) for n in names])
    kinds: list[st.SearchStrategy[tuple[str, Any]]] = [valid] * 9
    if invalid:
        kinds += [st.one_of([_invalid(registry, n) for n in names])] * 2
    if unknown:
        kinds.append(st.just((_unknown_name(registry), {})))
    one = st.one_of(kinds)
    return st.lists(one, min_size=min_size, max_size=max_size).map(
        lambda pairs: [ToolCall(f"c{i}", name, args) for i, (name, args) in enumerate(pairs)]
    )
