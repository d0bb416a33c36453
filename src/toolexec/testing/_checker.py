"""``check_ordering``: random batches through a user's executor, in one call.

Theory of operation. Hypothesis draws batches over the tools of the
registry the factory's executor holds (``tool_calls``). Each example gets
a fresh executor from the factory, runs the batch once through
``check_batch``'s recording, and, when a reference is asked for, compares
each result with it: the user's own function of the calls, or
``"sequential"``, the same factory's executor running the batch one call
at a time in call order. A broken promise raises ``OrderingError``;
hypothesis shrinks the batch and re-raises the error of the smallest batch
it found, whose message lists that batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import attrs
import hypothesis
from hypothesis import HealthCheck, Phase, Verbosity, given

from .._core._plan import Sequential
from ._batchcheck import OrderingError, run_and_check
from ._checks import as_expected, report
from ._recording import record_batch
from ._strategies import tool_calls

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from .._core._executor import ToolExecutor
    from .._core._types import ToolCall
    from ._checks import Expected

__all__ = ["check_ordering", "sequential_reference"]

_SETTINGS = {
    "deadline": None,  # one example is a whole trio run
    "suppress_health_check": [
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
        HealthCheck.data_too_large,
    ],
    "verbosity": Verbosity.quiet,  # the OrderingError shows the batch itself
    # No "explain" phase: it re-runs the shrunk batch hundreds of times to say
    # which argument matters, and the OrderingError already names the calls.
    "phases": [Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
}


def sequential_reference(
    make_executor: Callable[[], ToolExecutor],
    calls: Sequence[ToolCall],
    snapshot: Callable[[ToolExecutor], object] | None = None,
) -> tuple[list[Expected], object]:
    """Run ``calls`` one at a time, in call order, on a fresh executor.

    Returns:
        Each call's result as an expectation, and the state afterwards
        (``None`` without a snapshot hook).
    """
    executor = attrs.evolve(make_executor(), strategy=Sequential())
    recording = record_batch(executor, calls)
    assert recording.outcome is not None
    state = None if snapshot is None else snapshot(executor)
    return as_expected(recording.outcome.results), state


def _one_example(
    make_executor: Callable[[], ToolExecutor],
    calls: Sequence[ToolCall],
    reference: Literal["sequential"] | Callable[[Sequence[ToolCall]], Sequence[Expected]] | None,
    snapshot: Callable[[ToolExecutor], object] | None,
) -> None:
    expected: Sequence[Expected] | None = None
    ref_state: object = None
    source = "the reference"
    if reference == "sequential":
        expected, ref_state = sequential_reference(make_executor, calls, snapshot)
        source = "running the calls one at a time in call order"
    elif reference is not None and not isinstance(reference, str):
        expected = reference(calls)
    executor = make_executor()
    recording, found = run_and_check(executor, calls, snapshot, expected, source)
    if reference == "sequential" and snapshot is not None:
        state = snapshot(executor)
        if state != ref_state:
            found.append(f"the state after the batch is {state!r}; in call order, {ref_state!r}")
    if found:
        raise OrderingError(report(calls, recording.routing, found), calls, found)


def check_ordering(
    make_executor: Callable[[], ToolExecutor],
    *,
    examples: int = 100,
    max_calls: int = 8,
    reference: Literal["sequential"]
    | Callable[[Sequence[ToolCall]], Sequence[Expected]]
    | None = None,
    snapshot: Callable[[ToolExecutor], object] | None = None,
    invalid: bool = True,
    seed: int | None = None,
) -> None:
    """Check that random batches through your executor keep every ordering promise.

    Hypothesis draws batches over your registry (valid calls with arguments
    from each tool's schema, and, with ``invalid``, calls its schema refuses,
    malformed JSON and unknown tools). Each batch runs on a fresh executor
    from ``make_executor`` under ``trio.run`` with
    ``MockClock(autojump_threshold=0)``, with every tool wrapped to record
    when it began and returned. The promises:

    * one result per call, in call order, ids and tool names matching;
    * calls ``i < j`` overlap only when both are read-only or both are
      concurrent mutators; otherwise ``i`` returned before ``j`` began (reads
      never see a later write; serial mutators overlap nothing);
    * no tool over its per-tool cap, no class over its width;
    * with ``snapshot``: the state never changes while only read-only calls
      run (a tool declared ``READ`` that writes is caught);
    * no permit, call, tool or trio task left over after the batch;
    * with ``reference``: each result is the reference's.

    Example::

        def test_my_tools_keep_order():
            check_ordering(make_executor, snapshot=lambda ex: ex.service(Store).copy())

    Args:
        make_executor: returns a new ``ToolExecutor`` with fresh tool state
            each time it is called.
        examples: how many batches to try.
        max_calls: the most calls in a batch.
        reference: ``"sequential"`` (the same executor's configuration run
            one call at a time must give the same results, and the same
            state with ``snapshot``), or a function of the calls returning,
            per call, the text of its successful result, its
            ``ErrorClass``, or ``None`` for anything.
        snapshot: a function of the executor returning a comparable copy of
            the state its tools act on.
        invalid: also draw invalid calls and unknown tools.
        seed: fix hypothesis's seed, for a run that is the same every time.

    Raises:
        OrderingError: a batch broke a promise; the message shows the
            smallest such batch hypothesis found, and every broken promise.
    """
    registry = make_executor().registry
    strategy = tool_calls(registry, max_size=max_calls, invalid=invalid, unknown=invalid)

    # A fixed seed is a run the same every time: no examples replayed from
    # hypothesis's database of earlier failures either.
    fixed = {} if seed is None else {"database": None}

    @hypothesis.settings(max_examples=examples, **_SETTINGS, **fixed)  # type: ignore[arg-type]
    @given(strategy)
    def check(calls: list[ToolCall]) -> None:
        _one_example(make_executor, calls, reference, snapshot)

    if seed is not None:
        check = hypothesis.seed(seed)(check)
    check()
