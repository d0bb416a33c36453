"""Resource-keyed conflicts: calls ordered by what they touch, not by their class.

The user-facing story: docs/resources.md.

Theory of operation. A tool may declare, per call, the resources the call
touches (``ToolDefinition.resources``: arguments -> ``Resource`` values, each
a key and whether it is written). Keys are paths in one hierarchy: a key
covers every key it is a prefix of, so ``("file", "srv", "p")`` covers the
files below ``/srv/p``, and the empty key is *everything*. Two accesses
conflict when one key covers the other and at least one of them writes.

When an executor is built with ``resource_conflicts=True``:

1. *Plan* (``keyed_cut``): contiguous calls whose tools declare resources
   form one *keyed run* (still cut by the strategy's chunk size); calls of
   tools that declare nothing keep their class runs, so they stay barriers.
2. *Declare* (``KeyedRun``): when the keyed run starts, the declarations
   are evaluated in a worker thread (a file tool resolves its paths in its
   workspace there, so the keys are the paths the calls will really use).
   A write of everything (a shell command) may change what paths resolve to,
   so the calls after it are declared only once it has finished.
3. *Order*: each call waits for every earlier call of the run it conflicts
   with, then runs through the normal call path (approval, per-tool and
   class permits, deadline). Waiting happens before any permit is taken, and
   only on earlier calls, so the run cannot deadlock. A mutator whose keys
   are all narrower than everything is admitted as a concurrent mutator: its
   keys, not the serial pool, keep it apart from what it conflicts with.

Results stay in call order (each call fills its own slot). A streamed batch
(``ToolExecutor.open_batch``) cuts its calls into the same runs as they come
(``keyed_place``), and its keyed run declares and starts each call as it
arrives: the same order, the same overlap.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from ._drive import run_call
from ._resource_keys import Resource
from ._types import RoutingClass

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ._call import Runtime
    from ._lifecycle import CallSlot
    from ._plan import ExecutionStrategy
    from ._report import Reporter
    from ._types import ToolDefinition

__all__ = ["KeyedRun", "declares_resources", "keyed_cut", "keyed_place"]

_log = logging.getLogger("toolexec")


_EVERYTHING = (Resource.everything(),)


def declares_resources(definition: ToolDefinition) -> bool:
    """Whether calls of this tool are ordered by their resources under the mode."""
    return definition.resources is not None and not definition.is_recursive


def keyed_cut(
    strategy: ExecutionStrategy, slots: Sequence[CallSlot]
) -> list[tuple[RoutingClass, list[int], bool]]:
    """Runs for the resource mode: ``(routing, call indices, keyed)`` in emitted order.

    Contiguous calls that declare resources form one keyed run (chunked as
    the strategy chunks runs); the other calls keep the class runs. A keyed
    run's routing is the strongest class of its calls.
    """
    runs: list[tuple[RoutingClass, list[int]]] = []
    keyed: list[bool] = []
    for slot in slots:
        keyed_place(strategy, runs, keyed, slot)
    return [(route, indices, k) for (route, indices), k in zip(runs, keyed, strict=True)]


def keyed_place(
    strategy: ExecutionStrategy,
    runs: list[tuple[RoutingClass, list[int]]],
    keyed: list[bool],
    slot: CallSlot,
) -> bool:
    """Put a planned call into ``runs`` (``keyed`` says which are keyed); whether it opened one.

    ``keyed_cut`` is this over a whole batch; a streamed batch places its
    calls one by one as they come, so both cut a batch into the same runs.
    """
    route = slot.routing
    if route is RoutingClass.SHORT_CIRCUIT:
        return False
    assert slot.entry is not None
    mine = declares_resources(slot.entry.definition)
    if runs:
        last_route, indices = runs[-1]
        joins = keyed[-1] == mine and (mine or last_route is route)
        if joins and strategy._joins(len(indices)):  # noqa: SLF001 (the chunk size)
            indices.append(slot.index)
            if _STRENGTH[route] > _STRENGTH[last_route]:
                runs[-1] = (route, indices)
            return False
    runs.append((route, [slot.index]))
    keyed.append(mine)
    return True


_STRENGTH = {
    RoutingClass.READ_ONLY: 0,
    RoutingClass.CONCURRENT_MUT: 1,
    RoutingClass.SERIAL_MUT: 2,
    RoutingClass.SHORT_CIRCUIT: -1,
}


def _declared(slot: CallSlot) -> tuple[Resource, ...]:
    """The call's resources; everything (written) if its declaration fails."""
    assert slot.entry is not None
    declare = slot.entry.definition.resources
    assert declare is not None
    try:
        found = tuple(declare(slot.arguments))
    except Exception:
        _log.exception(
            "resources of tool %r raised for call %r; ordering it as touching everything",
            slot.call.name,
            slot.call.id,
        )
        return _EVERYTHING
    if not all(isinstance(r, Resource) for r in found):
        _log.error(
            "resources of tool %r returned %r, not Resource values; ordering call %r as "
            "touching everything",
            slot.call.name,
            found,
            slot.call.id,
        )
        return _EVERYTHING
    return found


def _writes_everything(resources: tuple[Resource, ...]) -> bool:
    return any(r.write and not r.key for r in resources)


def _declare_segment(slots: Sequence[CallSlot]) -> list[tuple[Resource, ...]]:
    """Declarations of ``slots`` up to and including the first that writes everything."""
    out: list[tuple[Resource, ...]] = []
    for slot in slots:
        resources = _declared(slot)
        out.append(resources)
        if _writes_everything(resources):
            break
    return out


def _conflict(a: tuple[Resource, ...], b: tuple[Resource, ...]) -> bool:
    return any(x.conflicts_with(y) for x in a for y in b)


class KeyedRun:
    """A keyed run: each call starts after the earlier calls of the run it conflicts with.

    A whole batch's run holds its calls from the start. A streamed batch's
    run grows: ``offer`` says a call was appended to ``slots``, ``close``
    that none will be; each call is declared and started as it comes, as the
    calls of a whole run are, so writes to different files overlap either way.
    """

    def __init__(
        self, rt: Runtime, slots: Sequence[CallSlot], report: Reporter, *, closed: bool = True
    ) -> None:
        self._rt, self._slots, self._report = rt, slots, report
        self._closed = closed
        self._more: trio.Event | None = None
        self.blocked = True  # other tasks may have run meanwhile (a driver's flag)

    def offer(self) -> None:
        """A call was added to the run."""
        if self._more is not None:
            self._more.set()

    def close(self) -> None:
        """No more calls."""
        self._closed = True
        self.offer()

    async def run(self) -> None:
        """Run every call of the run to its result."""
        slots = self._slots
        done: list[trio.Event] = []
        declared: list[tuple[Resource, ...]] = []
        writers: list[int] = []  # calls that write something: all a read can wait for
        async with trio.open_nursery() as nursery:
            while True:
                start = len(declared)
                if start == len(slots):
                    if self._closed:
                        return
                    self._more = trio.Event()
                    await self._more.wait()
                    continue
                if start and _writes_everything(declared[-1]):
                    await done[-1].wait()  # it may change what the paths after it resolve to
                segment = await trio.to_thread.run_sync(
                    _declare_segment, slots[start:], abandon_on_cancel=True
                )
                for resources in segment:
                    j = len(declared)
                    writes = any(r.write for r in resources)
                    earlier = range(j) if writes else writers
                    waits = [done[i] for i in earlier if _conflict(declared[i], resources)]
                    declared.append(resources)
                    done.append(trio.Event())
                    if writes:
                        writers.append(j)
                    slot = slots[j]
                    if slot.routing is RoutingClass.SERIAL_MUT and all(r.key for r in resources):
                        slot.routing = RoutingClass.CONCURRENT_MUT  # its keys order it
                    nursery.start_soon(_after, waits, done[j], self._rt, slot, self._report)


async def _after(
    waits: list[trio.Event], mine: trio.Event, rt: Runtime, slot: CallSlot, report: Reporter
) -> None:
    try:
        for event in waits:
            if not event.is_set():
                await event.wait()
        await run_call(rt, slot, report, None, True)  # this task is the call's own
    finally:
        mine.set()
