"""Strategies and the partition of a routed batch into runs.

The user-facing story: docs/concepts.md, "Runs" and "Strategies and steering".

Pure functions over routing classes; no I/O, no trio. Short-circuited calls
never appear in a run and never split one: they have no effect to order
against.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from ._display import display_text
from ._types import RoutingClass

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["Batched", "BatchPlan", "ExecutionStrategy", "Parallel", "RunPlan", "Sequential"]


class ExecutionStrategy:
    """How a batch is cut into runs, and where steering is checked.

    Use one of ``Parallel()`` (the default), ``Sequential()`` or
    ``Batched(size)``.
    """

    def cut(self, routes: Sequence[RoutingClass]) -> list[tuple[RoutingClass, list[int]]]:
        """Cut call indices into runs of one routing class, in emitted order."""
        runs: list[tuple[RoutingClass, list[int]]] = []
        for i, route in enumerate(routes):
            self.place(runs, i, route)
        return runs

    def place(
        self, runs: list[tuple[RoutingClass, list[int]]], index: int, route: RoutingClass
    ) -> bool:
        """Put call ``index`` into ``runs`` (in place): join the last run or open one.

        Returns whether it opened a new run. ``cut`` is ``place`` over a whole
        batch; a streamed batch places its calls one by one as they come, so
        both cut a batch into the same runs.
        """
        if route is RoutingClass.SHORT_CIRCUIT:
            return False
        if runs and runs[-1][0] is route and self._joins(len(runs[-1][1])):
            runs[-1][1].append(index)
            return False
        runs.append((route, [index]))
        return True

    def _joins(self, run_length: int) -> bool:
        return True


@attrs.frozen
class Parallel(ExecutionStrategy):
    """Contiguous runs of one class; steering is checked between runs."""


@attrs.frozen
class Sequential(ExecutionStrategy):
    """Every call is its own run; steering is checked after each call."""

    def _joins(self, run_length: int) -> bool:
        return False


def _positive(_inst: object, _attr: object, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"Batched size must be an integer >= 1, got {value!r}")


@attrs.frozen
class Batched(ExecutionStrategy):
    """Runs cut into chunks of at most ``size`` calls; steering after each chunk."""

    size: int = attrs.field(validator=_positive)

    def _joins(self, run_length: int) -> bool:
        return run_length < self.size


@attrs.frozen
class RunPlan:
    """One run: calls of one routing class, executed after the previous run."""

    index: int
    routing: RoutingClass
    call_indices: tuple[int, ...]
    call_ids: tuple[str, ...]
    tool_names: tuple[str, ...]
    #: Ordered by resources (``resource_conflicts=True``), not as one class:
    #: each call waits only for earlier calls touching what it touches.
    keyed: bool = False


@attrs.frozen
class BatchPlan:
    """The runs of a batch, and which calls were answered without running."""

    runs: tuple[RunPlan, ...]
    short_circuited: tuple[int, ...]
    short_circuited_ids: tuple[str, ...] = ()

    def describe(self) -> str:
        """One line per run, for people: ``run 1 read_only: c1 read_file, ...``.

        Call ids and tool names come from the model: they are escaped, so
        none can break a line or send a terminal control sequence.
        """
        lines = [
            f"run {r.index} {'keyed' if r.keyed else r.routing.value}: "
            + ", ".join(
                f"{display_text(cid)} {display_text(name)}"
                for cid, name in zip(r.call_ids, r.tool_names, strict=True)
            )
            for r in self.runs
        ]
        if self.short_circuited:
            ids = ", ".join(map(display_text, self.short_circuited_ids)) or str(
                list(self.short_circuited)
            )
            lines.append(f"answered without running: {ids}")
        return "\n".join(lines)
