"""Streamed batches: calls added as a model writes them give what the whole batch gives.

A streamed batch (``ToolExecutor.open_batch``) plans each call as it is
added and starts it once its run is open. The property below replays random
batches (reads, serial writes, promoted writes, short-circuits; JSON text
arguments; random gaps between calls) both ways on a mock clock and
compares results, order, plans and steering. The other tests pin down when
calls start, what a closed batch refuses, and cancellation.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import Scripted
from toolexec import (
    Allow,
    Batched,
    ConcurrencyConfig,
    ErrorClass,
    Parallel,
    Sequential,
    SideEffects,
    ToolCall,
    ToolExecutor,
    ToolRegistry,
    function_tool,
)
from toolexec.policy import CallHook

if TYPE_CHECKING:
    from collections.abc import Callable


def _store_registry(store: dict[str, int], log: list[str]) -> ToolRegistry:
    registry = ToolRegistry()

    @function_tool(side_effects=SideEffects.READ)
    async def get(key: str, wait: int = 0) -> str:
        """Read a key after ``wait`` ticks."""
        log.append(f"start get {key}")
        await trio.sleep(wait)
        return f"{key}={store.get(key)}"

    @function_tool(side_effects=SideEffects.WRITE)
    async def put(key: str, value: int, wait: int = 0) -> str:
        """Write a key after ``wait`` ticks."""
        log.append(f"start put {key}")
        await trio.sleep(wait)
        store[key] = value
        return f"{key}:={value}"

    @function_tool(side_effects=SideEffects.WRITE)
    async def bump(key: str, wait: int = 0) -> str:
        """Add one to a key (promoted: runs concurrently with other bumps)."""
        await trio.sleep(wait)
        store[key] = store.get(key, 0) + 1
        return f"{key}+1"

    for tool in (get, put, bump):
        registry.register(tool)
    return registry


KEYS = st.sampled_from(["a", "b"])
WAITS = st.integers(min_value=0, max_value=3)
CALL: st.SearchStrategy[tuple[str, dict[str, Any]]] = st.one_of(
    st.builds(lambda k, w: ("get", {"key": k, "wait": w}), KEYS, WAITS),
    st.builds(
        lambda k, v, w: ("put", {"key": k, "value": v, "wait": w}), KEYS, st.integers(0, 9), WAITS
    ),
    st.builds(lambda k, w: ("bump", {"key": k, "wait": w}), KEYS, WAITS),
    st.just(("nope", {})),  # not found: answered at once
    st.just(("get", {"key": 3})),  # invalid: answered at once
)
STRATEGY = st.sampled_from([Parallel(), Sequential(), Batched(2)])


# What a feed reads ahead (``Batch.expect``) before adding a call: nothing; the call
# itself; other arguments for the same tool (the text changed after it looked
# complete); or the same text for another tool.
READ_AHEAD = st.sampled_from(["none", "same", "other arguments", "other tool"])


def _read_ahead(batch: Any, call: ToolCall, how: str) -> None:
    if how == "same":
        batch.expect(call)
    elif how == "other arguments":
        batch.expect(ToolCall(call.id, call.name, json.dumps({"key": "b", "value": 7})))
    elif how == "other tool":
        batch.expect(ToolCall(call.id, "get", call.arguments))


def _run_both(
    specs: list[tuple[str, dict[str, Any]]],
    gaps: list[int],
    strategy: Any,
    steer_after: int | None,
    *,
    gated: bool = False,
    reads: list[str] | None = None,
) -> tuple[Any, Any]:
    """The same calls planned whole, then streamed with ``gaps`` between them (each
    read ahead as ``reads`` says, a gap before it is added)."""

    async def once(streamed: bool) -> Any:
        store: dict[str, int] = {}
        polls = [0]

        def steering() -> list[str] | None:
            polls[0] += 1
            return ["stop"] if steer_after is not None and polls[0] > steer_after else None

        executor = ToolExecutor(
            _store_registry(store, []),
            ConcurrencyConfig(
                read_width=2, promoted={"bump"}, per_tool={"get": 1} if gated else {}
            ),
            strategy=strategy,
            steering=steering,
            approver=Scripted(lambda request: request.tool_name != "bump", delay=1)
            if gated
            else None,
        )
        calls = [ToolCall(f"c{i}", name, json.dumps(args)) for i, (name, args) in enumerate(specs)]
        if not streamed:
            outcome = await executor.execute_batch(calls)
            return outcome, dict(store)
        batch = executor.open_batch()

        async def feed() -> None:
            for call, gap, how in zip(calls, gaps, reads or ["none"] * len(calls), strict=False):
                _read_ahead(batch, call, how)
                await trio.sleep(gap)
                batch.add(call)
            batch.close()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(feed)
            outcome = await batch.run()
        return outcome, dict(store)

    def run(streamed: bool) -> Any:
        return trio.run(once, streamed, clock=trio.testing.MockClock(autojump_threshold=0))

    return run(False), run(True)


def _seen(outcome: Any) -> list[tuple[str, str, bool, ErrorClass | None]]:
    return [(r.call_id, r.text, r.is_error, r.error_class) for r in outcome.results]


@settings(max_examples=60, deadline=None)
@given(
    specs=st.lists(CALL, max_size=8),
    gaps=st.lists(st.integers(min_value=0, max_value=4), min_size=8, max_size=8),
    strategy=STRATEGY,
    steer_after=st.one_of(st.none(), st.integers(min_value=0, max_value=4)),
    reads=st.lists(READ_AHEAD, min_size=8, max_size=8),
)
def test_a_streamed_batch_gives_what_the_whole_batch_gives(
    specs: list[tuple[str, dict[str, Any]]],
    gaps: list[int],
    strategy: Any,
    steer_after: int | None,
    reads: list[str],
) -> None:
    """Whatever was read ahead: a call is planned as it was finally added."""
    (whole, whole_store), (streamed, streamed_store) = _run_both(
        specs, gaps, strategy, steer_after, reads=reads
    )
    assert _seen(streamed) == _seen(whole)
    assert streamed.plan == whole.plan
    assert streamed.steering_messages == whole.steering_messages
    assert streamed_store == whole_store


@settings(max_examples=25, deadline=None)
@given(
    specs=st.lists(CALL, max_size=6),
    gaps=st.lists(st.integers(min_value=0, max_value=4), min_size=6, max_size=6),
    steer_after=st.one_of(st.none(), st.integers(min_value=0, max_value=3)),
    reads=st.lists(READ_AHEAD, min_size=6, max_size=6),
)
def test_streamed_calls_that_wait_for_a_human_or_a_tool_cap_agree_too(
    specs: list[tuple[str, dict[str, Any]]],
    gaps: list[int],
    steer_after: int | None,
    reads: list[str],
) -> None:
    """Writes are approved after a tick (bumps refused); reads are capped at one."""
    (whole, whole_store), (streamed, streamed_store) = _run_both(
        specs, gaps, Parallel(), steer_after, gated=True, reads=reads
    )
    assert _seen(streamed) == _seen(whole)
    assert streamed.plan == whole.plan
    assert streamed_store == whole_store


async def test_a_call_starts_as_soon_as_its_run_is_open(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Reads start while later calls are still being written; a write waits for its run."""
    log: list[str] = []
    executor = ToolExecutor(_store_registry({}, log))
    batch = executor.open_batch()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(batch.run)
        batch.add(ToolCall("1", "get", {"key": "a", "wait": 5}))
        await trio.testing.wait_all_tasks_blocked()
        assert log == ["start get a"]  # started before the model wrote the next call
        batch.add(ToolCall("2", "get", {"key": "b", "wait": 5}))
        await trio.testing.wait_all_tasks_blocked()
        assert log == ["start get a", "start get b"]  # same run: starts at once
        batch.add(ToolCall("3", "put", {"key": "a", "value": 1}))
        await trio.testing.wait_all_tasks_blocked()
        assert log == ["start get a", "start get b"]  # a new run: waits for the reads
        await trio.sleep(5)
        await trio.testing.wait_all_tasks_blocked()
        assert log[-1] == "start put a"
        batch.close()


async def test_a_call_streamed_while_every_call_waits_wakes_a_waiting_worker(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """While the run's calls all wait, a worker already waits for the next call: adding
    one starts no task (the cost of a task's start is not on the call's path), and the
    run never keeps more than one such worker, however many calls come and go."""
    ran_in: list[object] = []
    registry = ToolRegistry()

    @function_tool(side_effects=SideEffects.READ)
    async def nap(ticks: int) -> str:
        """Note the task that runs the call, then sleep."""
        ran_in.append(trio.lowlevel.current_task())
        await trio.sleep(ticks)
        return "ok"

    registry.register(nap)
    executor = ToolExecutor(registry)
    batch = executor.open_batch()
    living = trio.lowlevel.current_statistics
    baseline = living().tasks_living
    async with trio.open_nursery() as nursery:
        nursery.start_soon(batch.run)
        for i in range(5):
            batch.add(ToolCall(str(i), "nap", {"ticks": 10}))
            await trio.testing.wait_all_tasks_blocked()
            before = living().tasks_living
            batch.add(ToolCall(f"{i}b", "nap", {"ticks": 1}))
            assert living().tasks_living == before  # woken, not started
            await trio.testing.wait_all_tasks_blocked()
            await trio.sleep(2)  # the short call ends; its worker waits again or ends
            await trio.testing.wait_all_tasks_blocked()
        # five 10-tick calls still wait; beside them the batch's task and one spare
        assert living().tasks_living == before == baseline + 5 + 1
        batch.close()
    assert len(ran_in) == 10


async def test_reading_a_call_ahead_asks_no_hook_or_policy_and_starts_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``expect`` reads the tool and arguments only; the hook and the policy are asked
    once, at ``add``, with the call as added, and only then does the tool start."""
    log: list[str] = []

    class Recorder(CallHook):
        def before_call(self, call: ToolCall, arguments: Any, agent_path: str) -> None:
            log.append(f"hook {call.arguments}")

    class Allowing:
        def decide(self, tool: Any, arguments: Any, agent_path: str) -> Allow:
            log.append(f"policy {arguments}")
            return Allow()

    executor = ToolExecutor(_store_registry({}, log), policy=Allowing(), hooks=[Recorder()])
    batch = executor.open_batch()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(batch.run)
        batch.expect(ToolCall("1", "get", '{"key": "a"}'))
        await trio.testing.wait_all_tasks_blocked()
        assert log == []
        batch.add(ToolCall("1", "get", '{"key": "a"}'))
        await trio.testing.wait_all_tasks_blocked()
        assert log == ['hook {"key": "a"}', "policy {'key': 'a'}", "start get a"]
        batch.close()


async def test_a_call_that_changed_after_it_was_read_ahead_is_read_afresh() -> None:
    """The model wrote on past the brace that closed the object: the call's text as
    added is invalid, whatever was read ahead; other valid text is the one used."""
    executor = ToolExecutor(_store_registry({"a": 1, "b": 2}, []))
    batch = executor.open_batch()
    batch.expect(ToolCall("1", "get", '{"key": "a"}'))
    batch.add(ToolCall("1", "get", '{"key": "a"}}'))
    batch.expect(ToolCall("2", "get", '{"key": "a"}'))
    batch.add(ToolCall("2", "get", '{"key": "b"}'))
    batch.expect(ToolCall("3", "get", '{"key": "a"}'))
    batch.add(ToolCall("3", "nope", '{"key": "a"}'))
    batch.close()
    outcome = await batch.run()
    assert [r.error_class for r in outcome.results] == [
        ErrorClass.INVALID_ARGUMENTS,
        None,
        ErrorClass.NOT_FOUND,
    ]
    assert outcome.results[1].text == "b=2"


async def test_a_tool_registered_again_after_the_read_ahead_is_the_one_that_runs() -> None:
    registry = _store_registry({"a": 1}, [])
    executor = ToolExecutor(registry)
    batch = executor.open_batch()
    batch.expect(ToolCall("1", "get", '{"key": "a"}'))
    registry.unregister("get")

    @function_tool(side_effects=SideEffects.READ)
    async def get(name: str) -> str:
        """The new ``get``: takes ``name``."""
        return name

    registry.register(get)
    batch.add(ToolCall("1", "get", '{"key": "a"}'))
    batch.close()
    (result,) = (await batch.run()).results
    assert result.error_class is ErrorClass.INVALID_ARGUMENTS
    assert "name" in result.text


async def test_reading_ahead_checks_its_call_and_is_a_no_op_once_closed() -> None:
    executor = ToolExecutor(_store_registry({}, []))
    batch = executor.open_batch()
    with pytest.raises(TypeError, match=r"Batch\.expect takes a ToolCall"):
        batch.expect({"id": "1"})  # type: ignore[arg-type]
    batch.close()
    batch.expect(ToolCall("1", "get", '{"key": "a"}'))  # nothing to read ahead for
    assert (await batch.run()).results == ()
    executor.prepare([]).expect(ToolCall("1", "get", "{}"))  # a whole batch: nothing


async def test_a_closed_or_whole_batch_refuses_calls() -> None:
    executor = ToolExecutor(_store_registry({}, []))
    whole = executor.prepare([])
    with pytest.raises(RuntimeError, match="planned whole"):
        whole.add(ToolCall("1", "get", {"key": "a"}))
    streamed = executor.open_batch()
    with pytest.raises(TypeError, match="takes a ToolCall"):
        streamed.add({"id": "1"})  # type: ignore[arg-type]
    streamed.close()
    streamed.close()  # closing twice does nothing
    with pytest.raises(RuntimeError, match="closed or has finished"):
        streamed.add(ToolCall("1", "get", {"key": "a"}))
    outcome = await streamed.run()
    assert outcome.results == ()


async def test_cancelling_a_streamed_batch_answers_every_call_added(
    autojump_clock: trio.testing.MockClock,
) -> None:
    executor = ToolExecutor(_store_registry({}, []))
    batch = executor.open_batch()
    async with trio.open_nursery() as nursery:

        async def feed() -> None:
            batch.add(ToolCall("1", "get", {"key": "a", "wait": 10}))
            batch.add(ToolCall("2", "put", {"key": "a", "value": 1}))
            await trio.sleep(1)
            batch.cancel()

        nursery.start_soon(feed)
        outcome = await batch.run()
    assert [r.error_class for r in outcome.results] == [ErrorClass.CANCELLED] * 2
    assert outcome.cancelled
    assert [run.call_ids for run in outcome.plan.runs] == [("1",), ("2",)]
    with pytest.raises(RuntimeError, match="closed or has finished"):
        batch.add(ToolCall("3", "get", {"key": "a"}))


async def test_cancelling_a_streamed_batch_while_a_worker_waits_for_calls_leaves_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A cancel that lands while the run's workers wait for the model's next call
    (one call blocked, a spare waiting) answers the call ``cancelled``, the batch
    stays refusing calls, and no task of the batch is left."""
    executor = ToolExecutor(_store_registry({}, []))
    batch = executor.open_batch()
    before = trio.lowlevel.current_statistics().tasks_living
    async with trio.open_nursery() as nursery:
        nursery.start_soon(batch.run)
        batch.add(ToolCall("1", "get", {"key": "a", "wait": 10}))
        await trio.testing.wait_all_tasks_blocked()
        batch.cancel()
    assert trio.lowlevel.current_statistics().tasks_living == before
    with pytest.raises(RuntimeError, match="closed or has finished"):
        batch.add(ToolCall("2", "get", {"key": "a"}))
    assert executor.statistics().calls_in_flight == 0


async def test_expect_add_or_close_from_another_thread_is_refused_and_the_batch_goes_on(
    autojump_clock: trio.testing.MockClock,
) -> None:
    executor = ToolExecutor(_store_registry({"a": 1}, []))
    batch = executor.open_batch()
    refused: list[str] = []

    def feeder() -> None:  # a worker thread, as a blocking SDK's stream reader would be
        attempts: list[Callable[[], None]] = [
            lambda: batch.expect(ToolCall("1", "get", '{"key": "a"}')),
            lambda: batch.add(ToolCall("1", "get", {"key": "a"})),
            batch.close,
        ]
        for attempt in attempts:
            try:
                attempt()
            except RuntimeError as exc:
                refused.append(str(exc))
        trio.from_thread.run_sync(batch.add, ToolCall("2", "get", {"key": "a"}))
        trio.from_thread.run_sync(batch.close)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.to_thread.run_sync, feeder)
        outcome = await batch.run()
    assert [r.text for r in outcome.results] == ["a=1"]  # only the call added in the run
    assert len(refused) == 3
    assert all("outside the trio run" in text and "trio.from_thread" in text for text in refused)


async def test_add_or_close_from_another_trio_run_is_refused_and_the_batch_goes_on() -> None:
    executor = ToolExecutor(_store_registry({"a": 1}, []))
    batch = executor.open_batch()
    refused: list[str] = []

    async def other_run() -> None:  # a stream reader with a trio run of its own
        try:
            batch.add(ToolCall("1", "get", {"key": "a"}))
        except RuntimeError as exc:
            refused.append(str(exc))
        try:
            batch.close()
        except RuntimeError as exc:
            refused.append(str(exc))

    def feeder() -> None:
        trio.run(other_run)
        trio.from_thread.run_sync(batch.add, ToolCall("2", "get", {"key": "a"}))
        trio.from_thread.run_sync(batch.close)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(batch.run)
        await trio.testing.wait_all_tasks_blocked()
        await trio.to_thread.run_sync(feeder)
    assert len(refused) == 2
    assert all("another trio run" in text and "trio_token=" in text for text in refused)
    assert batch.calls == [ToolCall("2", "get", {"key": "a"})]
