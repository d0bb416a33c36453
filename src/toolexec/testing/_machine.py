"""``OrderingMachine``: batches one after another on one executor, checked each time.

Theory of operation. A hypothesis ``RuleBasedStateMachine`` whose one rule
draws a batch over the executor's registry and runs it through
``check_batch``'s recording (each batch its own ``trio.run`` under a mock
clock; the executor and its tools' state live across them). With
``sequential_reference``, a second executor from the same factory runs the
same batches one call at a time in call order: each result must match, and
the invariant holds the two states equal between batches. Another invariant
shows that no permit and no call is left between batches.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import attrs
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from .._core._plan import Sequential
from ._batchcheck import OrderingError, run_and_check
from ._checks import as_expected, report
from ._recording import record_batch
from ._strategies import tool_calls

if TYPE_CHECKING:
    from .._core._executor import ToolExecutor

__all__ = ["OrderingMachine"]


class OrderingMachine(RuleBasedStateMachine):
    """A stateful test: random batches, one after another, on one executor.

    Subclass it, say how to build the executor (and, optionally, how to
    snapshot its tools' state), and hand its ``TestCase`` to pytest::

        class NotesMachine(OrderingMachine):
            sequential_reference = True

            def make_executor(self):
                return ToolExecutor(make_registry(), services=[Notes()])

            def snapshot(self, executor):
                return executor.service(Notes).copy()

        TestNotes = NotesMachine.TestCase

    Each step draws a batch and checks it as ``check_batch`` does; between
    steps, no permit is held and no call is in flight, and with
    ``sequential_reference`` the state equals the in-order reference's.

    Attributes:
        max_calls: the most calls in one batch.
        invalid: also draw invalid calls and unknown tools.
        sequential_reference: keep a second executor that runs every batch
            one call at a time in call order, and require the same results
            and the same state.
    """

    max_calls: ClassVar[int] = 6
    invalid: ClassVar[bool] = True
    sequential_reference: ClassVar[bool] = False

    def __init__(self) -> None:
        super().__init__()
        self.executor = self.make_executor()
        self.reference: ToolExecutor | None = None
        if self.sequential_reference:
            self.reference = attrs.evolve(self.make_executor(), strategy=Sequential())

    def make_executor(self) -> ToolExecutor:
        """Build the executor under test, with fresh tool state (override this)."""
        raise NotImplementedError(f"{type(self).__name__} must define make_executor()")

    def snapshot(self, executor: ToolExecutor) -> object:
        """A comparable copy of the state ``executor``'s tools act on (override this).

        The default, ``None``, never changes, so no state check happens.
        """
        return None

    @rule(data=st.data())
    def run_a_batch(self, data: Any) -> None:
        """Draw a batch, run it, and check every promise."""
        calls = data.draw(
            tool_calls(
                self.executor.registry,
                max_size=self.max_calls,
                invalid=self.invalid,
                unknown=self.invalid,
            ),
            label="calls",
        )
        expected = None
        if self.reference is not None:
            outcome = record_batch(self.reference, calls).outcome
            assert outcome is not None
            expected = as_expected(outcome.results)
        recording, found = run_and_check(
            self.executor, calls, self.snapshot, expected, "the in-order reference"
        )
        if found:
            raise OrderingError(report(calls, recording.routing, found), calls, found)

    @invariant()
    def nothing_held_between_batches(self) -> None:
        """No permit borrowed or awaited, no call in flight."""
        stats = self.executor.statistics()
        pools = [stats.read, stats.concurrent_mut, stats.serial_mut, *stats.per_tool.values()]
        assert all(p.borrowed == 0 and p.waiting == 0 for p in pools), stats
        assert stats.calls_in_flight == 0, stats

    @invariant()
    def same_state_as_the_reference(self) -> None:
        """With ``sequential_reference``, the state equals the in-order run's."""
        if self.reference is None:
            return
        state, want = self.snapshot(self.executor), self.snapshot(self.reference)
        assert state == want, f"state {state!r}; the in-order reference has {want!r}"
