"""Pools shared by a tree of agents, admitting the agents in turn.

The user-facing story: docs/concepts.md, "Forking for sub-agents".

Theory of operation. ``trio.CapacityLimiter`` is first come, first served:
a released token goes straight to the task that has waited longest, and
``acquire_nowait`` never jumps the queue. That is fair between *waiters*,
not between *agents*: an agent that queues many calls at once (a run whose
calls wait on per-tool caps or approvals, each in its own task) puts all of
them ahead of a sibling whose first call arrives a moment later, and the
sibling waits for the whole lot.

FIFO is not fair between subtrees either: a sibling that starts five
sub-agents of its own has five queues to the other sibling's one.

``FairLimiter`` keeps one queue per agent (a ``Lane``), and lanes form a
tree like the agents do. A released token is handed down from the top: at
each level, among the members with waiters (the agent's own calls, and each
child's subtree), to the one served longest ago. Siblings therefore
alternate, whatever the size of their subtrees, and an agent's own calls
keep their order. "Served longest ago" rather than "next in a rotation":
an agent whose calls run one at a time is never waiting at the instant its
own call releases the token, and a rotation would send it to the back every
time; by age it keeps its claim. A token is never taken past a waiter
(``nowait`` fails while anyone waits), so nobody barges. Each executor of a
tree holds its own lane of the shared read and serial-mutator pools, a child
of its parent's (``_limits.Pools``). As in trio's own limiter, the methods
that change the queues are protected from ``KeyboardInterrupt`` landing
half-way.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

import attrs
import trio

if TYPE_CHECKING:
    from trio.lowlevel import Task

__all__ = ["FairLimiter", "Lane", "LimiterStatistics"]


@attrs.frozen
class LimiterStatistics:
    """A snapshot of a ``FairLimiter`` (the fields of trio's limiter statistics)."""

    borrowed_tokens: int
    total_tokens: int
    borrowers: list[object]
    tasks_waiting: int


class FairLimiter:
    """A capacity limiter whose lanes (agents) take turns; FIFO within a lane.

    Lanes form a tree like the agents do (``lane.child()`` for a sub-agent),
    and turns are taken level by level: a released token goes to the agent
    itself or to one of its children's subtrees, in rotation, so sibling
    agents get alternate turns however many calls (or sub-agents) each has.
    """

    __slots__ = ("_borrowers", "_ticks", "_top", "_total")

    def __init__(self, total_tokens: int) -> None:
        if isinstance(total_tokens, bool) or not isinstance(total_tokens, int) or total_tokens < 1:
            raise ValueError(f"total_tokens must be an integer >= 1, got {total_tokens!r}")
        self._total = total_tokens
        self._borrowers: set[object] = set()
        self._top = Lane(self, None)  # the root of the lanes; never queues itself
        self._ticks = 0  # tokens handed to waiters so far: the clock of ``served``

    def lane(self) -> Lane:
        """A new top-level lane (a root agent's)."""
        return self._top.child()

    @property
    def total_tokens(self) -> int:
        """How many borrowers may hold a token at once."""
        return self._total

    @property
    def borrowed_tokens(self) -> int:
        """How many tokens are held now."""
        return len(self._borrowers)

    @property
    def available_tokens(self) -> int:
        """How many tokens are free now."""
        return self._total - len(self._borrowers)

    def statistics(self) -> LimiterStatistics:
        """Tokens held and free, and how many tasks wait."""
        return LimiterStatistics(
            len(self._borrowers), self._total, list(self._borrowers), self._top.pending
        )

    @trio.lowlevel.enable_ki_protection
    def take_nowait(self, borrower: object) -> None:
        """Take a token now, or raise ``trio.WouldBlock`` (also while anyone waits)."""
        if borrower in self._borrowers:
            raise RuntimeError("this borrower already holds one of this limiter's tokens")
        if len(self._borrowers) < self._total and not self._top.pending:
            self._borrowers.add(borrower)
        else:
            raise trio.WouldBlock

    @trio.lowlevel.enable_ki_protection
    def served(self, lane: Lane) -> None:
        """Record that ``lane`` took a token without waiting: a turn it has had."""
        self._ticks += 1
        lane.own_served = self._ticks
        node: Lane | None = lane
        while node is not None:
            node.served = self._ticks
            node = node.parent

    @trio.lowlevel.enable_ki_protection
    async def wait_turn(self, lane: Lane, borrower: object) -> None:
        """Queue in ``lane`` until a token is handed to ``borrower``."""
        entry = (trio.lowlevel.current_task(), borrower)
        lane.push(entry)

        def abort(_raise_cancel: object) -> trio.lowlevel.Abort:
            lane.drop(entry)
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)

    @trio.lowlevel.enable_ki_protection
    def release(self, borrower: object) -> None:
        """Give a token back; the lane whose turn it is gets it."""
        if borrower not in self._borrowers:
            raise RuntimeError("this borrower does not hold any of this limiter's tokens")
        self._borrowers.remove(borrower)
        while self._top.pending and len(self._borrowers) < self._total:
            self._ticks += 1
            task, waiter = self._top.pop_next(self._ticks)
            self._borrowers.add(waiter)
            trio.lowlevel.reschedule(task)


class Lane:
    """One agent's place in a ``FairLimiter``, with the ``CapacityLimiter`` methods
    the executor uses (``acquire_on_behalf_of`` and its ``_nowait`` form,
    ``release_on_behalf_of``, ``available_tokens``, ``statistics``).

    ``own`` holds the agent's waiting calls in order; ``turns`` holds the
    members with waiters: the lane itself (standing for ``own``) and the
    child lanes with waiters below them; ``pending`` counts the waiters in
    the whole subtree.
    """

    __slots__ = ("own", "own_served", "parent", "pending", "served", "shared", "turns")

    def __init__(self, shared: FairLimiter, parent: Lane | None) -> None:
        self.shared = shared
        self.parent = parent
        self.own: deque[tuple[Task, object]] = deque()
        self.turns: list[Lane] = []
        self.pending = 0
        self.served = 0  # when this subtree last got a token (a tick of the limiter)
        self.own_served = 0  # when this agent's own calls last got one

    def child(self) -> Lane:
        """A lane for a sub-agent: it takes turns with this agent and its other children."""
        return Lane(self.shared, self)

    @property
    def total_tokens(self) -> int:
        """The shared limiter's size."""
        return self.shared.total_tokens

    @property
    def borrowed_tokens(self) -> int:
        """Tokens held now, by any lane."""
        return self.shared.borrowed_tokens

    @property
    def available_tokens(self) -> int:
        """Tokens free now."""
        return self.shared.available_tokens

    def statistics(self) -> LimiterStatistics:
        """The shared limiter's statistics."""
        return self.shared.statistics()

    def acquire_on_behalf_of_nowait(self, borrower: object) -> None:
        """Take a token now, or raise ``trio.WouldBlock`` (also while anyone waits)."""
        self.shared.take_nowait(borrower)
        self.shared.served(self)

    async def acquire_on_behalf_of(self, borrower: object) -> None:
        """Take a token, waiting for this lane's turn if none is free."""
        await trio.lowlevel.checkpoint_if_cancelled()
        try:
            self.acquire_on_behalf_of_nowait(borrower)
        except trio.WouldBlock:
            await self.shared.wait_turn(self, borrower)
        else:
            await trio.lowlevel.cancel_shielded_checkpoint()

    def release_on_behalf_of(self, borrower: object) -> None:
        """Give the token back; the next lane in turn gets it."""
        self.shared.release(borrower)

    # -- the queue (synchronous; only FairLimiter calls these) ----------------

    def push(self, entry: tuple[Task, object]) -> None:
        """Queue a waiter here; join the rotations above that had no waiter."""
        self.own.append(entry)
        if len(self.own) == 1:
            self.turns.append(self)
        node: Lane | None = self
        while node is not None:
            node.pending += 1
            parent = node.parent
            if parent is not None and node.pending == 1:
                parent.turns.append(node)
            node = parent

    def drop(self, entry: tuple[Task, object]) -> None:
        """Remove a cancelled waiter; leave the rotations that have no waiter left."""
        self.own.remove(entry)
        if not self.own:
            self.turns.remove(self)
        node: Lane | None = self
        while node is not None:
            node.pending -= 1
            parent = node.parent
            if parent is not None and not node.pending:
                parent.turns.remove(node)
            node = parent

    def pop_next(self, now: int) -> tuple[Task, object]:
        """The waiter whose turn it is in this subtree: at each level, the member
        served longest ago (a member that was busy rather than waiting keeps its
        claim, so one that queues its calls one at a time is not passed over)."""
        member = min(self.turns, key=self._last_served)
        if member is self:
            entry = self.own.popleft()
            self.own_served = now
            if not self.own:
                self.turns.remove(self)
        else:
            entry = member.pop_next(now)
            member.served = now
            if not member.pending:
                self.turns.remove(member)
        self.pending -= 1
        return entry

    def _last_served(self, member: Lane) -> int:
        return self.own_served if member is self else member.served
