"""Tools the remote-worker tests serve (``toolexec serve --tools remote_tools:TOOLS``).

They keep their state in this module, so in a worker process it is the
worker's: a key-value store whose reads see exactly the writes before them,
writes that say whether anything else was running (a serial mutator must
run alone), reads of ``peek`` that wait until two of them overlap (the test
caps ``peek`` at two), and ``hold``, which runs until cancelled and leaves a
file saying so. The host runs the same tools in-process for comparison
(``reset()`` first).
"""

from __future__ import annotations

from pathlib import Path

import trio

from toolexec import SideEffects, ToolContext, ToolOutput, function_tool

STORE: dict[str, str] = {}
ACTIVE: set[str] = set()
PEEKING: set[str] = set()
OVERLAPPED: set[str] = set()
PEAK = [0]
_LOT = trio.lowlevel.ParkingLot()


def reset() -> None:
    """Forget every key and count (for a run of these tools in the test process)."""
    for state in (STORE, ACTIVE, PEEKING, OVERLAPPED):
        state.clear()
    PEAK[0] = 0


@function_tool(side_effects=SideEffects.READ)
async def get(key: str, ctx: ToolContext) -> str:
    """Read a key."""
    ACTIVE.add(ctx.call_id)
    try:
        await trio.lowlevel.checkpoint()
        return STORE.get(key, "<unset>")
    finally:
        ACTIVE.discard(ctx.call_id)


@function_tool(side_effects=SideEffects.READ)
async def peek(key: str, ctx: ToolContext) -> str:
    """Read a key once another peek has run beside it (or after a minute)."""
    me = ctx.call_id
    ACTIVE.add(me)
    PEEKING.add(me)
    PEAK[0] = max(PEAK[0], len(PEEKING))
    if len(PEEKING) > 1:
        OVERLAPPED.update(PEEKING)
        _LOT.unpark_all()
    try:
        with trio.move_on_after(60):  # a hang guard only: peeks run in twos
            while me not in OVERLAPPED:
                await _LOT.park()
        return f"{STORE.get(key, '<unset>')} (peeks at once: {PEAK[0]})"
    finally:
        PEEKING.discard(me)
        OVERLAPPED.discard(me)
        ACTIVE.discard(me)


@function_tool(side_effects=SideEffects.WRITE)
async def put(key: str, value: str, ctx: ToolContext) -> str:
    """Write a key; say what else was running."""
    others = sorted(ACTIVE)
    ACTIVE.add(ctx.call_id)
    try:
        ctx.report_progress(f"writing {key}")
        ctx.update(ToolOutput.text(f"about to write {key}", key=key))
        await trio.lowlevel.checkpoint()
        STORE[key] = value
        return f"{key}={value}; running beside it: {others or 'nothing'}"
    finally:
        ACTIVE.discard(ctx.call_id)


@function_tool(side_effects=SideEffects.EXECUTE)
async def hold(marker: str, ctx: ToolContext) -> str:
    """Run until cancelled; then write ``<marker>.cancelled``."""
    Path(marker + ".started").write_text("started")
    ctx.report_progress("holding")
    try:
        await trio.sleep_forever()
    except trio.Cancelled:
        Path(marker + ".cancelled").write_text("cancelled")
        raise
    return "unreachable"


@function_tool(side_effects=SideEffects.READ)
async def fail(reason: str) -> str:
    """Fail with ``reason``."""
    raise ValueError(reason)


TOOLS = [get, peek, put, hold, fail]
