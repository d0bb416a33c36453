"""Check one batch against the executor's promises: ``check_batch``.

This module does not import hypothesis; ``check_ordering`` and
``OrderingMachine`` draw the batches and call it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._checks import expectation_problems, problems, report
from ._recording import record_batch

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from .._core._batch import BatchOutcome
    from .._core._executor import ToolExecutor
    from .._core._types import ToolCall
    from ._checks import Expected
    from ._recording import Recording

__all__ = ["OrderingError", "check_batch", "run_and_check"]


class OrderingError(AssertionError):
    """A batch broke one of the executor's promises; the message shows the batch.

    Attributes:
        calls: the batch, in call order.
        problems: one line per broken promise.
    """

    def __init__(self, message: str, calls: Sequence[ToolCall], problems: Sequence[str]) -> None:
        super().__init__(message)
        self.calls = tuple(calls)
        self.problems = tuple(problems)


def run_and_check(
    executor: ToolExecutor,
    calls: Sequence[ToolCall],
    snapshot: Callable[[ToolExecutor], object] | None,
    expected: Sequence[Expected] | None,
    source: str,
) -> tuple[Recording, list[str]]:
    """Record one batch and list every promise it broke (private to the package)."""
    look = None if snapshot is None else (lambda: snapshot(executor))
    recording = record_batch(executor, calls, look)
    found = problems(recording, executor)
    if expected is not None and recording.outcome is not None:
        found += expectation_problems(recording.outcome.results, expected, source)
    return recording, found


def check_batch(
    executor: ToolExecutor,
    calls: Sequence[ToolCall],
    *,
    snapshot: Callable[[ToolExecutor], object] | None = None,
    expected: Sequence[Expected] | None = None,
) -> BatchOutcome:
    """Run one batch through ``executor`` and check every ordering promise.

    The batch runs under its own ``trio.run`` with
    ``MockClock(autojump_threshold=0)`` (tools that sleep cost no time),
    through a copy of the executor whose tools are wrapped to record when
    each call began and returned. See ``check_ordering`` for the promises.

    Example::

        outcome = check_batch(executor, [tool_call("get", {"key": "a"}, id="c0")])

    Args:
        executor: the executor under test; its limiters and tools' state are
            used (and changed) as by any batch.
        calls: the batch; every call needs its own id.
        snapshot: a function of ``executor`` returning a comparable copy of
            the state the tools act on; with it, a read-only call that
            changes the state is caught.
        expected: per call, what an in-order run gives: the text of a
            successful result, an ``ErrorClass``, or ``None`` for anything.

    Returns:
        The batch's outcome, when every promise held.

    Raises:
        OrderingError: a promise was broken; the message lists the batch and
            every broken promise.
        ValueError: two calls share an id.
    """
    recording, found = run_and_check(executor, calls, snapshot, expected, "the reference")
    if found:
        raise OrderingError(report(calls, recording.routing, found), calls, found)
    assert recording.outcome is not None
    return recording.outcome
