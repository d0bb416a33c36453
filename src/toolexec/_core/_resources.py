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
2. *Declare* (``run_keyed``): when the keyed run starts, the declarations
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

Results stay in call order (each call fills its own slot).
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

__all__ = ["declares_resources", "keyed_cut", "run_keyed"]

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
    runs: list[tuple[RoutingClass, list[int], bool]] = []
    for slot in slots:
        route = slot.routing
        if route is RoutingClass.SHORT_CIRCUIT:
            continue
        assert slot.entry is not None
        keyed = declares_resources(slot.entry.definition)
        if runs:
            last_route, indices, last_keyed = runs[-1]
            joins = last_keyed == keyed and (keyed or last_route is route)
            if joins and strategy._joins(len(indices)):  # noqa: SLF001 (the chunk size)
                indices.append(slot.index)
                if _STRENGTH[route] > _STRENGTH[last_route]:
                    runs[-1] = (route, indices, keyed)
                continue
        runs.append((route, [slot.index], keyed))
    return runs


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


async def run_keyed(rt: Runtime, slots: Sequence[CallSlot], report: Reporter) -> None:
    """Run a keyed run: each call after the earlier calls it conflicts with."""
    n = len(slots)
    done = [trio.Event() for _ in range(n)]
    declared: list[tuple[Resource, ...]] = []
    writers: list[int] = []  # calls that write something: all a read can wait for
    async with trio.open_nursery() as nursery:
        start = 0
        while start < n:
            segment = await trio.to_thread.run_sync(
                _declare_segment, slots[start:], abandon_on_cancel=True
            )
            for resources in segment:
                j = len(declared)
                writes = any(r.write for r in resources)
                earlier = range(j) if writes else writers
                waits = [done[i] for i in earlier if _conflict(declared[i], resources)]
                declared.append(resources)
                if writes:
                    writers.append(j)
                slot = slots[j]
                if slot.routing is RoutingClass.SERIAL_MUT and all(r.key for r in resources):
                    slot.routing = RoutingClass.CONCURRENT_MUT  # its keys order it
                nursery.start_soon(_after, waits, done[j], rt, slot, report)
            start += len(segment)
            if start < n:  # the segment ended on a write of everything: let it finish
                await done[start - 1].wait()


async def _after(
    waits: list[trio.Event], mine: trio.Event, rt: Runtime, slot: CallSlot, report: Reporter
) -> None:
    try:
        for event in waits:
            if not event.is_set():
                await event.wait()
        await run_call(rt, slot, report)
    finally:
        mine.set()
