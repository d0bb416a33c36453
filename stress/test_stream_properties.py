"""Streamed batches under random feeds, cancels and steering, against the whole batch.

Theory of operation. A streamed batch (``ToolExecutor.open_batch``) takes
its calls from a feed while it runs. Hypothesis draws the calls (reads,
serial writes, promoted writes, a tool that raises, one stuck until its
timeout, an unknown tool, invalid arguments; JSON text arguments), the
gaps between them (zero: several calls in one instant), how many calls are
added before ``run`` starts (all of them, and the close, included), the
executor's configuration (strategy, read width, a per-tool cap) and a stop:
none, steering after a few polls, ``Batch.cancel`` at a random instant, or
a cancel of the scope around the batch at a random instant. Everything
runs on a mock clock.

The checks, for every example:

- with no stop, or steering (whatever the feed read ahead of each call
  with ``Batch.expect``: the call, other text, or nothing): the streamed
  outcome (results, plan, steering messages) and the final store equal
  those of the same calls run as a whole batch (``execute_batch``);
- with ``Batch.cancel``: one result per call added, in order; a call whose
  tool never started is answered ``cancelled``, ``skipped`` or at once (not
  found, invalid); a call answered ``ok`` ran its tool to the end;
- with a scope cancel: ``run`` raises ``Cancelled`` (alone, or in a
  nursery's exception group), unless it returned first;
- either way: the store holds exactly the writes whose tool ran to the end,
  applied in call order; a tool started at most once per call; adding after
  ``run`` has returned raises ``RuntimeError``; afterwards the executor
  holds no permit and has no call in flight.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import attrs
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from stress.conftest import stress_profile
from toolexec import (
    Batched,
    BatchOutcome,
    ConcurrencyConfig,
    ErrorClass,
    ExecutionStrategy,
    Parallel,
    Sequential,
    SideEffects,
    ToolCall,
    ToolExecutor,
    ToolRegistry,
    function_tool,
)

Stop = Literal["none", "steer", "cancel", "scope"]


@attrs.frozen
class Case:
    specs: tuple[tuple[str, dict[str, Any]], ...]
    gaps: tuple[int, ...]  # ticks before each add (and one more before the close)
    before_run: int  # adds (and, past the last, the close) done before run starts
    strategy: ExecutionStrategy
    read_width: int
    capped: bool  # ``get`` capped at one call at a time
    stop: Stop
    at: int  # ticks into the feed (cancel, scope) or polls (steer)
    # What the feed reads ahead (``Batch.expect``) a gap before adding each call:
    # nothing, the call itself, or other text for it (the model wrote on).
    reads: tuple[Literal["none", "same", "other"], ...] = ()


KEYS = st.sampled_from(["a", "b"])
WAITS = st.integers(0, 3)
CALLS = st.one_of(
    st.builds(lambda k, w: ("get", {"key": k, "wait": w}), KEYS, WAITS),
    st.builds(
        lambda k, v, w: ("put", {"key": k, "value": v, "wait": w}), KEYS, st.integers(0, 9), WAITS
    ),
    st.builds(lambda k, w: ("bump", {"key": k, "wait": w}), KEYS, WAITS),
    st.just(("boom", {})),
    st.just(("stuck", {})),
    st.just(("nope", {})),
    st.just(("get", {"key": 3})),
)


@st.composite
def cases(draw: st.DrawFn) -> Case:
    specs = tuple(draw(st.lists(CALLS, max_size=8)))
    return Case(
        specs=specs,
        gaps=tuple(
            draw(st.lists(st.integers(0, 3), min_size=len(specs) + 1, max_size=len(specs) + 1))
        ),
        before_run=draw(st.integers(0, len(specs) + 1)),
        strategy=draw(st.sampled_from([Parallel(), Sequential(), Batched(2)])),
        read_width=draw(st.integers(1, 3)),
        capped=draw(st.booleans()),
        stop=draw(st.sampled_from(["none", "steer", "cancel", "scope"])),
        at=draw(st.integers(0, 12)),
        reads=tuple(
            draw(
                st.lists(
                    st.sampled_from(["none", "same", "other"]),
                    min_size=len(specs),
                    max_size=len(specs),
                )
            )
        ),
    )


@attrs.define
class World:
    store: dict[str, int] = attrs.field(factory=dict)
    started: list[str] = attrs.field(factory=list)  # call tags, as their tools start
    ended: list[str] = attrs.field(factory=list)  # as their tools run to the end
    writes: list[tuple[str, str, int | None]] = attrs.field(factory=list)  # (tag, key, value)


def registry_for(world: World) -> ToolRegistry:
    registry = ToolRegistry()

    @function_tool(side_effects=SideEffects.READ)
    async def get(tag: str, key: str, wait: int = 0) -> str:
        """Read a key after ``wait`` ticks."""
        world.started.append(tag)
        await trio.sleep(wait)
        world.ended.append(tag)
        return f"{key}={world.store.get(key)}"

    @function_tool(side_effects=SideEffects.WRITE)
    async def put(tag: str, key: str, value: int, wait: int = 0) -> str:
        """Write a key after ``wait`` ticks."""
        world.started.append(tag)
        await trio.sleep(wait)
        world.store[key] = value
        world.writes.append((tag, key, value))
        world.ended.append(tag)
        return f"{key}:={value}"

    @function_tool(side_effects=SideEffects.WRITE)
    async def bump(tag: str, key: str, wait: int = 0) -> str:
        """Add one to a key (promoted: bumps run concurrently)."""
        world.started.append(tag)
        await trio.sleep(wait)
        world.store[key] = world.store.get(key, 0) + 1
        world.writes.append((tag, key, None))
        world.ended.append(tag)
        return f"{key}+1"

    @function_tool(side_effects=SideEffects.READ)
    async def boom(tag: str) -> str:
        """Raise."""
        world.started.append(tag)
        await trio.sleep(0)
        world.ended.append(tag)
        raise ValueError("boom")

    @function_tool(side_effects=SideEffects.READ, timeout=2)
    async def stuck(tag: str) -> str:
        """Wait until the tool timeout."""
        world.started.append(tag)
        await trio.sleep_forever()
        return "never"

    for tool in (get, put, bump, boom, stuck):
        registry.register(tool)
    return registry


def make_calls(case: Case) -> list[ToolCall]:
    calls = []
    for i, (name, args) in enumerate(case.specs):
        arguments = dict(args, tag=f"c{i}") if name != "nope" and args.get("key") != 3 else args
        calls.append(ToolCall(f"c{i}", name, json.dumps(arguments)))
    return calls


def executor_for(case: Case, world: World) -> ToolExecutor:
    polls = [0]

    def steering() -> list[str] | None:
        polls[0] += 1
        return ["stop"] if case.stop == "steer" and polls[0] > case.at else None

    return ToolExecutor(
        registry_for(world),
        ConcurrencyConfig(
            read_width=case.read_width,
            promoted={"bump"},
            per_tool={"get": 1} if case.capped else {},
        ),
        strategy=case.strategy,
        steering=steering,
    )


@attrs.define
class Streamed:
    outcome: BatchOutcome | None = None
    raised: BaseException | None = None
    added: int = 0
    ran: bool = False  # run was called (a scope cancel may come first)
    refused_after_run: bool = False


async def stream(case: Case, world: World) -> Streamed:
    executor = executor_for(case, world)
    calls = make_calls(case)
    batch = executor.open_batch()
    seen = Streamed()
    run_now = trio.Event()

    async def feed() -> None:
        for i in range(len(calls) + 1):
            if i == case.before_run:
                run_now.set()
            if i < len(calls) and case.reads[i] != "none":
                call = calls[i]
                other = json.dumps({"tag": "other", "key": "b"})
                batch.expect(
                    call if case.reads[i] == "same" else attrs.evolve(call, arguments=other)
                )
            await trio.sleep(case.gaps[i])
            try:
                if i < len(calls):
                    batch.add(calls[i])
                    seen.added += 1
                else:
                    batch.close()
            except RuntimeError:  # the batch has finished (cancelled)
                return
        run_now.set()

    async def stopper(scope: trio.CancelScope) -> None:
        await trio.sleep(case.at)
        if case.stop == "cancel":
            batch.cancel()
        elif case.stop == "scope":
            scope.cancel()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(feed)
        with trio.CancelScope() as scope:
            if case.stop in ("cancel", "scope"):
                nursery.start_soon(stopper, scope)
            await run_now.wait()
            seen.ran = True
            try:
                seen.outcome = await batch.run()
            except BaseException as exc:  # (a scope cancel, from a nursery: in a group)
                seen.raised = exc
                raise
            finally:
                nursery.cancel_scope.cancel()  # the feed and the stopper stop here
    try:
        batch.add(ToolCall("late", "get", json.dumps({"tag": "late", "key": "a"})))
    except RuntimeError:
        seen.refused_after_run = True
    stats = executor.statistics()
    assert stats.calls_in_flight == 0, stats
    for pool in (stats.read, stats.concurrent_mut, stats.serial_mut, *stats.per_tool.values()):
        assert (pool.borrowed, pool.waiting) == (0, 0), stats
    return seen


async def whole(case: Case, world: World) -> BatchOutcome:
    return await executor_for(case, world).execute_batch(make_calls(case))


def replayed(world: World) -> dict[str, int]:
    store: dict[str, int] = {}
    for _, key, value in world.writes:
        store[key] = store.get(key, 0) + 1 if value is None else value
    return store


def only_cancelled(exc: BaseException | None) -> bool:
    """``exc`` is ``trio.Cancelled``, or a group (of groups) of nothing else."""
    if isinstance(exc, BaseExceptionGroup):
        return all(only_cancelled(e) for e in exc.exceptions)
    return isinstance(exc, trio.Cancelled)


def seen_of(outcome: BatchOutcome) -> list[tuple[str, str, bool, ErrorClass | None]]:
    return [(r.call_id, r.text, r.is_error, r.error_class) for r in outcome.results]


def run_case(case: Case) -> None:
    def on_clock(fn: Any, *args: Any) -> Any:
        return trio.run(fn, *args, clock=trio.testing.MockClock(autojump_threshold=0))

    world = World()
    seen: Streamed = on_clock(stream, case, world)
    assert seen.refused_after_run or not seen.ran
    assert len(world.started) == len(set(world.started)), world.started
    assert world.store == replayed(world)
    put_order = [tag for tag, _, value in world.writes if value is not None]
    assert put_order == sorted(put_order, key=lambda t: int(t[1:])), "serial writes out of order"
    if case.stop == "scope":
        assert seen.outcome is not None or not seen.ran or only_cancelled(seen.raised)
        return
    assert seen.outcome is not None
    outcome = seen.outcome
    assert [r.call_id for r in outcome.results] == [f"c{i}" for i in range(seen.added)]
    if case.stop == "cancel":
        for result in outcome.results:
            tag = result.call_id
            if (
                result.error_class is ErrorClass.CANCELLED
                or result.error_class is ErrorClass.SKIPPED
            ):
                continue
            if not result.is_error:
                assert tag in world.ended, f"{tag} answered ok but its tool did not finish"
            elif tag not in world.started:
                assert result.error_class in (
                    ErrorClass.NOT_FOUND,
                    ErrorClass.INVALID_ARGUMENTS,
                ), result
        return
    reference_world = World()
    reference: BatchOutcome = on_clock(whole, case, reference_world)
    assert seen_of(outcome) == seen_of(reference)
    assert outcome.plan == reference.plan
    assert outcome.steering_messages == reference.steering_messages
    assert world.store == reference_world.store


@settings(settings.get_profile(stress_profile()))
@given(cases())
def test_streamed_batches_agree_with_the_whole_batch_and_leave_nothing(case: Case) -> None:
    run_case(case)
