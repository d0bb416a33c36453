"""The executor's promises: order, overlap, admission, short-circuits, one result per call."""

from __future__ import annotations

import functools
import itertools
import threading
from typing import TYPE_CHECKING, Any

import pytest
import trio
import trio.testing

from conftest import KVTool, Recorder
from toolexec import (
    Batched,
    ConcurrencyConfig,
    Deny,
    ErrorClass,
    Parallel,
    RoutingClass,
    Sequential,
    SideEffects,
    ToolCall,
    ToolError,
    ToolExecutor,
    ToolRegistry,
    function_tool,
)
from toolexec._gate._policy import ALLOW
from toolexec.events import BatchFinished, CallbackSink, CallFailed

if TYPE_CHECKING:
    from collections.abc import Mapping

    from toolexec import Batch, ExecutionStrategy, ToolDefinition
    from toolexec.policy import Decision


def make_registry(rec: Recorder, delay: float = 1.0) -> ToolRegistry:
    registry = ToolRegistry()
    for name, effects in [
        ("read", SideEffects.READ),
        ("read2", SideEffects.READ),
        ("write", SideEffects.WRITE),
        ("promo", SideEffects.WRITE),
    ]:
        registry.register(functools.partial(KVTool, rec, name, effects, delay))
    registry.register(lambda: KVTool(rec, "slow", SideEffects.READ, 100.0, timeout=5.0))
    return registry


def read(cid: str, key: str = "A", **kw: object) -> ToolCall:
    return ToolCall(cid, "read", {"key": key, **kw})


def write(cid: str, key: str = "A", value: str = "new", **kw: object) -> ToolCall:
    return ToolCall(cid, "write", {"key": key, "value": value, **kw})


def assert_idle(executor: ToolExecutor) -> None:
    stats = executor.statistics()
    assert stats.read.borrowed == stats.serial_mut.borrowed == 0
    assert stats.concurrent_mut.borrowed == 0
    assert all(p.borrowed == 0 for p in stats.per_tool.values())
    assert stats.calls_in_flight == 0


async def test_read_write_read_sees_write_only_after(
    recorder: Recorder, autojump_clock: object
) -> None:
    recorder.store["A"] = "old"
    executor = ToolExecutor(make_registry(recorder))
    # The first read is slow and the write fast: without the barrier the
    # write would land before the first read returns.
    calls = [read("r1", delay=5.0), write("w1", delay=0.1), read("r2")]
    outcome = await executor.execute_batch(calls)
    assert [r.text for r in outcome.results] == ["old", "ok", "new"]
    assert recorder.log == [
        ("start", "r1"),
        ("end", "r1"),
        ("start", "w1"),
        ("end", "w1"),
        ("start", "r2"),
        ("end", "r2"),
    ]
    assert [r.routing for r in outcome.plan.runs] == [
        RoutingClass.READ_ONLY,
        RoutingClass.SERIAL_MUT,
        RoutingClass.READ_ONLY,
    ]


async def test_serial_mutators_run_one_at_a_time_in_emitted_order(
    recorder: Recorder, autojump_clock: object
) -> None:
    executor = ToolExecutor(make_registry(recorder))
    # Decreasing delays: any overlap or reordering would finish later calls first.
    calls = [write(f"w{i}", key=f"k{i}", delay=10.0 - i) for i in range(8)]
    outcome = await executor.execute_batch(calls)
    assert [r.call_id for r in outcome.results] == [f"w{i}" for i in range(8)]
    assert recorder.peak["write"] == 1
    assert recorder.order("start") == [f"w{i}" for i in range(8)]
    assert recorder.order("end") == [f"w{i}" for i in range(8)]
    assert len(outcome.plan.runs) == 1


async def test_calls_in_a_read_only_run_overlap(recorder: Recorder, autojump_clock: object) -> None:
    executor = ToolExecutor(make_registry(recorder))
    outcome = await executor.execute_batch([read(f"r{i}") for i in range(6)])
    assert recorder.total_peak == 6
    assert not any(r.is_error for r in outcome.results)


async def test_nothing_of_the_next_run_starts_before_the_previous_ends(
    recorder: Recorder, autojump_clock: object
) -> None:
    executor = ToolExecutor(make_registry(recorder), config=ConcurrencyConfig(promoted={"promo"}))
    calls = [
        read("r1", delay=3.0),
        read("r2", delay=1.0),
        ToolCall("p1", "promo", {"key": "x", "delay": 2.0}),
        ToolCall("p2", "promo", {"key": "y", "delay": 1.0}),
        write("w1"),
        read("r3"),
    ]
    outcome = await executor.execute_batch(calls)
    runs = [set(r.call_ids) for r in outcome.plan.runs]
    assert runs == [{"r1", "r2"}, {"p1", "p2"}, {"w1"}, {"r3"}]
    position = {(k, cid): i for i, (k, cid) in enumerate(recorder.log)}
    for earlier, later in itertools.pairwise(runs):
        last_end = max(position[("end", c)] for c in earlier)
        first_start = min(position[("start", c)] for c in later)
        assert last_end < first_start
    assert recorder.peak["promo"] == 2  # promoted mutators overlap each other


async def test_short_circuits_answer_at_once_without_permit_or_split(
    recorder: Recorder, autojump_clock: object
) -> None:
    class DenyNamed:
        def decide(
            self, definition: ToolDefinition, arguments: Mapping[str, Any], agent_path: str
        ) -> Decision:
            return (
                Deny("reads of 'secret' are not allowed") if arguments["key"] == "secret" else ALLOW
            )

    executor = ToolExecutor(make_registry(recorder), policy=DenyNamed())
    seen_borrowed: list[int] = []

    async def watch() -> None:
        await trio.sleep(0.5)  # mid-run
        seen_borrowed.append(executor.statistics().read.borrowed)

    calls = [
        read("r1"),
        ToolCall("u", "nope", {}),
        ToolCall("j", "read", '{"key": '),
        ToolCall("s", "read", {"key": 3}),
        read("d", key="secret"),
        read("r2"),
    ]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch)
        outcome = await executor.execute_batch(calls)
    classes = [r.error_class for r in outcome.results]
    assert classes == [
        None,
        ErrorClass.NOT_FOUND,
        ErrorClass.INVALID_ARGUMENTS,
        ErrorClass.INVALID_ARGUMENTS,
        ErrorClass.PERMISSION_DENIED,
        None,
    ]
    assert recorder.order("start") in (["r1", "r2"], ["r2", "r1"])  # nothing else ran
    assert len(outcome.plan.runs) == 1  # the four short-circuits did not split the run
    assert seen_borrowed == [2]  # only the two real reads hold permits
    assert outcome.plan.short_circuited == (1, 2, 3, 4)
    assert outcome.results[1].text.startswith("Tool 'nope' not found. Available: read,")
    assert "reads of 'secret' are not allowed" in outcome.results[4].text
    assert all(r.routing is RoutingClass.SHORT_CIRCUIT for r in outcome.results[1:5])


async def test_validation_lists_every_violation_with_its_path(recorder: Recorder) -> None:
    executor = ToolExecutor(make_registry(recorder))
    outcome = await executor.execute_batch(
        [ToolCall("c", "write", {"value": 1, "delay": "soon", "extra": True})]
    )
    text = outcome.results[0].text
    assert outcome.results[0].error_class is ErrorClass.INVALID_ARGUMENTS
    for fragment in ["$: ", "'key'", "$.value: ", "$.delay: ", "extra"]:
        assert fragment.strip("'") in text.replace('"', "'").replace("'", ""), fragment
    assert len(outcome.results[0].details["violations"]) == 4


def test_a_tool_call_needs_a_string_id_and_name() -> None:
    with pytest.raises(TypeError, match=r"ToolCall\.id must be a string, got int"):
        ToolCall(1, "read", {})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"ToolCall\.name must be a string, got None"):
        ToolCall("1", None, {})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("arguments", "said"),
    [(5, "got a number"), ([1], "got an array"), (None, "got null"), (True, "got a boolean")],
)
async def test_arguments_that_are_a_value_not_json_text_are_named(
    recorder: Recorder, arguments: Any, said: str
) -> None:
    outcome = await ToolExecutor(make_registry(recorder)).execute_batch(
        [ToolCall("c", "read", arguments)]
    )
    (result,) = outcome.results
    assert result.error_class is ErrorClass.INVALID_ARGUMENTS
    assert result.text == f"Invalid arguments for tool 'read': expected a JSON object, {said}."


async def test_a_models_huge_bad_input_comes_back_as_a_short_error() -> None:
    @function_tool(side_effects=SideEffects.NONE)
    def count(n: int, tags: list[str]) -> str:
        """Count."""
        return str(n)

    registry = ToolRegistry()
    registry.register(count)
    huge = "z" * 1_000_000
    outcome = await ToolExecutor(registry).execute_batch(
        [
            ToolCall("many", "count", {"n": 1, "tags": list(range(100))}),
            ToolCall("long", "count", {"n": huge, "tags": []}),
            ToolCall("name", "x" * 1_000_000, {}),
        ]
    )
    many, long, name = outcome.results
    # The first 20 violations, in index order (10 after 9), then a count of the rest.
    listed = many.details["violations"]
    assert listed[:11] == [f"$.tags[{i}]: expected a string, got the number {i}" for i in range(11)]
    assert listed[20:] == ["80 more violations not shown"]
    assert many.text.endswith("- 80 more violations not shown")
    # A huge value is shown by its two ends, with what was left out counted.
    assert len(long.text) < 500
    assert long.text.startswith("Invalid arguments for tool 'count':\n- $.n: expected an integer")
    assert long.text.endswith('zzz"')
    assert "characters]…" in long.text
    assert name.error_class is ErrorClass.NOT_FOUND
    assert len(name.text) < 500
    assert name.text.endswith("Available: count")


async def test_caps_are_never_exceeded(recorder: Recorder, autojump_clock: object) -> None:
    config = ConcurrencyConfig(read_width=3, per_tool={"read": 2})
    executor = ToolExecutor(make_registry(recorder), config=config)
    calls = [read(f"a{i}") for i in range(10)] + [
        ToolCall(f"b{i}", "read2", {"key": "k"}) for i in range(10)
    ]
    calls = [c for pair in zip(calls[:10], calls[10:], strict=True) for c in pair]
    outcome = await executor.execute_batch(calls)
    assert recorder.peak["read"] == 2
    assert recorder.total_peak == 3
    assert len(outcome.results) == 20
    assert_idle(executor)


@pytest.mark.parametrize("how", ["success", "error", "timeout", "cancel"])
async def test_every_permit_is_released(
    recorder: Recorder, autojump_clock: object, how: str
) -> None:
    config = ConcurrencyConfig(per_tool={"slow": 1, "read": 1, "write": 1})
    executor = ToolExecutor(make_registry(recorder), config=config)
    tool = "slow" if how in ("timeout", "cancel") else "read"
    calls = [ToolCall(f"c{i}", tool, {"key": "k", "fail": how == "error"}) for i in range(3)]
    calls.append(write("w"))
    batch = executor.prepare(calls)
    async with trio.open_nursery() as nursery:
        if how == "cancel":
            nursery.start_soon(_cancel_later, batch, 1.0)
        outcome = await batch.run()
    expected = {
        "success": None,
        "error": ErrorClass.EXECUTION_ERROR,
        "timeout": ErrorClass.TIMEOUT,
        "cancel": ErrorClass.CANCELLED,
    }[how]
    assert [r.error_class for r in outcome.results[:3]] == [expected] * 3
    assert_idle(executor)


async def _cancel_later(batch: Batch, delay: float) -> None:
    await trio.sleep(delay)
    batch.cancel()


async def test_fork_shares_read_and_serial_pools_only(recorder: Recorder) -> None:
    config = ConcurrencyConfig(per_tool={"read": 2})
    parent = ToolExecutor(make_registry(recorder), config=config)
    child = parent.fork_for_subagent("researcher")
    assert child.pools.read is parent.pools.read
    assert child.pools.serial_mut is parent.pools.serial_mut
    assert child.pools.concurrent_mut is not parent.pools.concurrent_mut
    assert child.pools.per_tool["read"] is not parent.pools.per_tool["read"]
    assert child.pools.concurrent_mut.total_tokens == parent.pools.concurrent_mut.total_tokens
    assert child.pools.per_tool["read"].total_tokens == 2
    assert child.agent_path == "root/researcher"
    assert child.registry is parent.registry
    assert child.policy is parent.policy


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        (Parallel(), [["r0", "r1", "r2"], ["w0", "w1"], ["r3", "r4"]]),
        (Sequential(), [["r0"], ["r1"], ["r2"], ["w0"], ["w1"], ["r3"], ["r4"]]),
        (Batched(2), [["r0", "r1"], ["r2"], ["w0", "w1"], ["r3", "r4"]]),
    ],
)
async def test_strategies_cut_where_design_says(
    recorder: Recorder, strategy: ExecutionStrategy, expected: list[list[str]]
) -> None:
    executor = ToolExecutor(make_registry(recorder), strategy=strategy)
    calls = [
        read("r0"),
        read("r1"),
        ToolCall("bad", "nope"),
        read("r2"),
        write("w0"),
        write("w1"),
        read("r3"),
        read("r4"),
    ]
    plan = executor.prepare(calls).plan
    assert [list(r.call_ids) for r in plan.runs] == expected


@pytest.mark.parametrize("strategy", [Parallel(), Sequential(), Batched(2)])
async def test_steering_skips_exactly_the_calls_not_started(
    recorder: Recorder, autojump_clock: object, strategy: ExecutionStrategy
) -> None:
    polls = 0

    def steering() -> list[str]:
        nonlocal polls
        polls += 1
        return ["stop, use the other file"] if polls == 1 else []

    executor = ToolExecutor(make_registry(recorder), strategy=strategy, steering=steering)
    calls = [read("r0"), read("r1"), write("w0"), read("r2")]
    outcome = await executor.execute_batch(calls)
    first_run = outcome.plan.runs[0].call_ids
    for result in outcome.results:
        if result.call_id in first_run:
            assert not result.is_error
        else:
            assert result.error_class is ErrorClass.SKIPPED
            assert "Skipped" in result.text
    assert set(recorder.order("start")) == set(first_run)
    assert outcome.steering_messages == ("stop, use the other file",)


async def test_one_result_per_call_in_order_whatever_fails(
    recorder: Recorder, autojump_clock: object
) -> None:
    @function_tool(side_effects=SideEffects.READ)
    async def explode(kind: str) -> str:
        if kind == "tool_error":
            raise ToolError("the file is locked; retry later", details={"holder": 42})
        raise ValueError("boom")

    registry = make_registry(recorder)
    registry.register(explode)
    executor = ToolExecutor(registry)
    calls = [
        ToolCall("e1", "explode", {"kind": "tool_error"}),
        ToolCall("e2", "explode", {"kind": "value"}),
        ToolCall("t", "slow", {"key": "k"}),
        read("ok"),
        ToolCall("x", "nope"),
    ]
    outcome = await executor.execute_batch(calls)
    assert [r.call_id for r in outcome.results] == ["e1", "e2", "t", "ok", "x"]
    assert [r.error_class for r in outcome.results] == [
        ErrorClass.EXECUTION_ERROR,
        ErrorClass.EXECUTION_ERROR,
        ErrorClass.TIMEOUT,
        None,
        ErrorClass.NOT_FOUND,
    ]
    assert outcome.results[0].text == "the file is locked; retry later"
    assert outcome.results[0].details == {"holder": 42}  # for the host, as a ToolOutput's
    assert outcome.results[1].text == "Tool 'explode' failed: ValueError: boom"
    assert "timed out after 5s" in outcome.results[2].text
    assert outcome.results[2].duration == pytest.approx(5.0)


async def test_host_cancel_answers_every_unfinished_call(
    recorder: Recorder, autojump_clock: object
) -> None:
    executor = ToolExecutor(make_registry(recorder))
    calls = [read("r0", delay=1.0), ToolCall("s", "slow", {"key": "k"}), write("w0"), read("r1")]
    batch = executor.prepare(calls)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_cancel_later, batch, 2.0)
        outcome = await batch.run()
    assert outcome.cancelled
    assert [r.error_class for r in outcome.results] == [
        None,
        ErrorClass.CANCELLED,
        ErrorClass.CANCELLED,
        ErrorClass.CANCELLED,
    ]
    assert recorder.total_running == 0
    assert_idle(executor)


async def test_cancel_all_cancels_every_running_batch(
    recorder: Recorder, autojump_clock: object
) -> None:
    executor = ToolExecutor(make_registry(recorder))
    outcomes = []

    async def run_one(key: str) -> None:
        outcomes.append(await executor.execute_batch([ToolCall(key, "slow", {"key": key})]))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_one, "a")
        nursery.start_soon(run_one, "b")
        await trio.testing.wait_all_tasks_blocked()
        executor.cancel_all()
    assert [o.results[0].error_class for o in outcomes] == [ErrorClass.CANCELLED] * 2


async def test_enclosing_cancellation_propagates_and_leaves_nothing_running(
    recorder: Recorder, autojump_clock: object
) -> None:
    executor = ToolExecutor(make_registry(recorder))
    with trio.move_on_after(2.0) as scope:
        await executor.execute_batch([ToolCall("s", "slow", {"key": "k"}), read("r")])
    assert scope.cancelled_caught
    assert recorder.total_running == 0
    assert_idle(executor)


async def test_keyboard_interrupt_is_never_a_result(recorder: Recorder) -> None:
    @function_tool(side_effects=SideEffects.READ)
    async def interrupt() -> str:
        raise KeyboardInterrupt

    registry = make_registry(recorder)
    registry.register(interrupt)
    with pytest.raises(KeyboardInterrupt):
        await ToolExecutor(registry).execute_batch([ToolCall("k", "interrupt")])


async def test_sync_tool_thread_is_abandoned_on_cancel(recorder: Recorder) -> None:
    release = threading.Event()
    entered = trio.Event()
    token = trio.lowlevel.current_trio_token()

    @function_tool(side_effects=SideEffects.READ)
    def block() -> str:
        token.run_sync_soon(entered.set)
        release.wait()
        return "finished"

    registry = make_registry(recorder)
    registry.register(block)
    executor = ToolExecutor(registry)
    batch = executor.prepare([ToolCall("b", "block")])
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_cancel_when, batch, entered)
            outcome = await batch.run()
    finally:
        release.set()
    assert outcome.results[0].error_class is ErrorClass.CANCELLED
    assert_idle(executor)


async def _cancel_when(batch: Batch, event: trio.Event) -> None:
    await event.wait()
    batch.cancel()


async def test_events_cover_the_lifecycle_and_a_raising_sink_is_harmless(
    recorder: Recorder,
) -> None:
    seen: list[str] = []

    def explode(event: object) -> None:
        raise RuntimeError("sink bug")

    executor = ToolExecutor(
        make_registry(recorder, delay=0.0),
        sinks=[CallbackSink(explode), CallbackSink(lambda e: seen.append(type(e).__name__))],
    )
    outcome = await executor.execute_batch([read("r"), ToolCall("bad", "read", {})])
    assert not outcome.results[0].is_error
    assert seen == [
        "BatchPlanned",
        "InputInvalid",
        "CallFailed",
        "RunStarted",
        "CallStarted",
        "CallCompleted",
        "RunFinished",
        "BatchFinished",
    ]


async def test_a_batch_runs_once(recorder: Recorder) -> None:
    batch = ToolExecutor(make_registry(recorder, delay=0.0)).prepare([read("r")])
    await batch.run()
    with pytest.raises(RuntimeError, match="already run"):
        await batch.run()


@pytest.mark.parametrize(
    ("raw", "said"),
    [("null", "got null"), ("[1]", "got an array"), ('"x"', "got a string"), ("3", "got a number")],
)
async def test_arguments_that_are_not_an_object_are_named_in_json_terms(
    recorder: Recorder, raw: str, said: str
) -> None:
    outcome = await ToolExecutor(make_registry(recorder)).execute_batch(
        [ToolCall("c", "read", raw)]
    )
    assert outcome.results[0].error_class is ErrorClass.INVALID_ARGUMENTS
    assert outcome.results[0].text == (
        f"Invalid arguments for tool 'read': expected a JSON object, {said}."
    )


async def test_an_empty_batch_has_no_runs_and_no_results(recorder: Recorder) -> None:
    outcome = await ToolExecutor(make_registry(recorder)).execute_batch([])
    assert outcome.results == ()
    assert outcome.plan.runs == ()


async def test_enclosing_cancellation_still_reports_every_unfinished_call(
    recorder: Recorder, autojump_clock: object
) -> None:
    events: list[object] = []
    executor = ToolExecutor(make_registry(recorder), sinks=[CallbackSink(events.append)])
    with trio.move_on_after(2.0):
        await executor.execute_batch(
            [read("r", delay=1.0), ToolCall("s", "slow", {"key": "k"}), write("w")]
        )
    failed = {e.call_id: e.error_class for e in events if isinstance(e, CallFailed)}
    assert failed == {"s": ErrorClass.CANCELLED, "w": ErrorClass.CANCELLED}
    assert isinstance(events[-1], BatchFinished)
    assert events[-1].cancelled


@pytest.mark.parametrize(
    ("calls", "said"),
    [
        ([{"id": "1", "name": "read"}], r"item 0 is a dict \(\{'id': '1'"),
        ([read("r"), ("2", "read", {})], "item 1 is a tuple"),
        (read("r"), "got one ToolCall: put it in a list, or use execute_call"),
        ("read", "got a str"),
        ({"id": "1"}, "got a dict"),
    ],
)
async def test_a_batch_of_anything_but_tool_calls_is_a_clear_type_error(
    recorder: Recorder, calls: Any, said: str
) -> None:
    executor = ToolExecutor(make_registry(recorder))
    with pytest.raises(TypeError, match=said):
        await executor.execute_batch(calls)
    with pytest.raises(TypeError, match="execute_call takes a ToolCall, got dict"):
        await executor.execute_call({"id": "1"})  # type: ignore[arg-type]
    assert_idle(executor)
    assert recorder.log == []  # nothing ran


@pytest.mark.parametrize("how", ["batch.cancel", "executor.cancel_all"])
async def test_a_cancel_from_another_thread_reaches_the_batch(how: str) -> None:
    started = trio.Event()

    @function_tool(side_effects=SideEffects.READ)
    async def wait() -> str:
        """Wait until cancelled."""
        started.set()
        await trio.sleep_forever()
        return "never"

    registry = ToolRegistry()
    registry.register(wait)
    executor = ToolExecutor(registry)
    batch = executor.prepare([ToolCall("1", "wait", {}), ToolCall("2", "wait", {})])

    def stop_button() -> None:  # another thread, as a UI's would be
        trio.from_thread.run(started.wait)
        if how == "batch.cancel":
            batch.cancel()
        else:
            executor.cancel_all()

    with trio.fail_after(30):  # a guard against a hang, not a timing
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.to_thread.run_sync, stop_button)
            outcome = await batch.run()
    assert outcome.cancelled
    assert [r.error_class for r in outcome.results] == [ErrorClass.CANCELLED] * 2
    assert_idle(executor)
    # trio's own cancel state is intact: an enclosing deadline still fires.
    with trio.move_on_after(0) as scope:
        await trio.sleep_forever()
    assert scope.cancelled_caught
    batch.cancel()  # after the batch, from the run's thread: nothing happens
