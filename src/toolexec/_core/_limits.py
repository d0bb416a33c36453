"""Admission: class limiters, per-tool limiters, and how sub-agents fork them.

Theory of operation (for users: docs/concepts.md, "Admission" and "Forking
for sub-agents"). Every executing call takes at most
two permits, always in this order: its tool's limiter (only if the host set
a cap for that name), then its class limiter. A forked executor (a
sub-agent's) gets *fresh* concurrent-mutator and per-tool limiters and
*shares* the read and serial-mutator ones. Recursive calls hold a
concurrent-mutator permit while their child runs; since the child has its
own concurrent-mutator pool and no non-recursive call waits while holding a
permit, no cycle of waits can form, so the tree cannot deadlock, while
default mutators stay serial across the whole tree. The shared pools admit
the agents of the tree in turn, each through its own lane (``_fairness``),
so no agent's calls can crowd out a sibling's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs
import trio

from ._fairness import FairLimiter, Lane
from ._types import RoutingClass, strings

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = ["ConcurrencyConfig", "ExecutorStatistics", "PoolStatistics"]


def _width(_inst: object, attr: attrs.Attribute[int], value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{attr.name} must be an integer >= 1, got {value!r}")


def _caps(_inst: object, _attr: object, value: Mapping[str, int]) -> None:
    for name, cap in value.items():
        if not isinstance(cap, int) or isinstance(cap, bool) or cap < 1:
            raise ValueError(f"per_tool cap for {name!r} must be an integer >= 1, got {cap!r}")


def _names(names: Iterable[str]) -> frozenset[str]:
    return frozenset(strings(names, "promoted"))


ClassPool = trio.CapacityLimiter | Lane
"""A class's pool as an executor sees it: trio's limiter, or its lane of a shared one."""


@attrs.frozen
class ConcurrencyConfig:
    """Widths of the class pools, per-tool caps, and promoted mutators.

    Args:
        read_width: how many read-only calls may run at once (shared by the
            whole agent tree). The default, 128, lets an ordinary batch of
            I/O-bound reads (a model sends up to about a hundred calls) all
            wait at once, while holding the sockets a flood of network
            reads can open well under the usual limit of 1024 descriptors;
            file reads are bounded further by trio's worker threads (40).
            The measurements: docs/performance.md, "The read width".
        concurrent_mut_width: how many concurrent-mutator calls may run at
            once per agent (recursive calls and promoted tools).
        serial_mut_width: how many default mutators may run at once across
            the whole tree; 1 keeps them strictly serial.
        per_tool: caps for individual tool names, per agent.
        promoted: mutating tools the host declares safe to run concurrently
            with each other (they route as concurrent mutators).
    """

    read_width: int = attrs.field(default=128, validator=_width)
    concurrent_mut_width: int = attrs.field(default=10, validator=_width)
    serial_mut_width: int = attrs.field(default=1, validator=_width)
    per_tool: Mapping[str, int] = attrs.field(factory=dict, validator=_caps)
    promoted: frozenset[str] = attrs.field(default=frozenset(), converter=_names)


@attrs.frozen
class PoolStatistics:
    """A snapshot of one limiter."""

    total: int
    borrowed: int
    waiting: int


@attrs.frozen
class ExecutorStatistics:
    """A snapshot of an executor's limiters and in-flight calls."""

    read: PoolStatistics
    concurrent_mut: PoolStatistics
    serial_mut: PoolStatistics
    per_tool: Mapping[str, PoolStatistics]
    calls_in_flight: int


def _snapshot(limiter: trio.CapacityLimiter | FairLimiter) -> PoolStatistics:
    s = limiter.statistics()
    return PoolStatistics(int(s.total_tokens), s.borrowed_tokens, s.tasks_waiting)


@attrs.define(eq=False)
class Pools:
    """The limiters one executor admits calls through.

    The shared read and serial-mutator pools are ``FairLimiter`` s: this
    executor admits through its own lane of each (``by_class``), so the
    agents of a tree take turns in them (``_fairness``).
    """

    config: ConcurrencyConfig
    read: FairLimiter
    serial_mut: FairLimiter
    # The parent executor's lanes of the read and serial pools (None: a root).
    parent_lanes: tuple[Lane, Lane] | None = None
    concurrent_mut: trio.CapacityLimiter = attrs.field(init=False)
    per_tool: dict[str, trio.CapacityLimiter] = attrs.field(init=False)
    by_class: dict[RoutingClass, ClassPool] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.concurrent_mut = trio.CapacityLimiter(self.config.concurrent_mut_width)
        self.per_tool = {n: trio.CapacityLimiter(c) for n, c in self.config.per_tool.items()}
        if self.parent_lanes is None:
            read, serial = self.read.lane(), self.serial_mut.lane()
        else:
            read, serial = (lane.child() for lane in self.parent_lanes)
        self.by_class = {
            RoutingClass.READ_ONLY: read,
            RoutingClass.CONCURRENT_MUT: self.concurrent_mut,
            RoutingClass.SERIAL_MUT: serial,
        }

    @classmethod
    def create(cls, config: ConcurrencyConfig) -> Pools:
        """Fresh limiters of the configured widths."""
        return cls(
            config,
            FairLimiter(config.read_width),
            FairLimiter(config.serial_mut_width),
        )

    def fork(self) -> Pools:
        """Shared read and serial limiters; fresh concurrent and per-tool ones."""
        lanes = (self.by_class[RoutingClass.READ_ONLY], self.by_class[RoutingClass.SERIAL_MUT])
        read, serial = lanes
        assert isinstance(read, Lane)
        assert isinstance(serial, Lane)
        return Pools(self.config, self.read, self.serial_mut, (read, serial))

    def statistics(self, calls_in_flight: int) -> ExecutorStatistics:
        """A snapshot of every limiter."""
        return ExecutorStatistics(
            read=_snapshot(self.read),
            concurrent_mut=_snapshot(self.concurrent_mut),
            serial_mut=_snapshot(self.serial_mut),
            per_tool={n: _snapshot(lim) for n, lim in self.per_tool.items()},
            calls_in_flight=calls_in_flight,
        )
