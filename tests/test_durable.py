"""Durable execution in one process: records, resume rules, replay, approvals (docs/durable.md).

A crash is simulated here by cancelling the host's scope while a tool runs
(nothing after it is written, as after a kill), then resuming with a fresh
``Journal`` over the same file, as a new process would. Real processes
killed with SIGKILL: ``test_durable_processes.py`` and the chaos test.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, ClassVar

import attrs
import pytest
import trio
import trio.testing

from toolexec import (
    ErrorClass,
    SideEffects,
    SubAgentTool,
    ToolCall,
    ToolContext,
    ToolDefinition,
    ToolExecutor,
    ToolOutput,
    ToolRegistry,
    function_tool,
)
from toolexec.approval import ApprovalAnswer, ApprovalConfig, ApprovalMode, AutoApprover
from toolexec.durable import (
    CallKey,
    CallRecord,
    Journal,
    Phase,
    Question,
    SQLiteStore,
    answer_question,
    open_store,
    pending_questions,
)
from toolexec.events import ApprovalRequested, CallbackSink, Event
from toolexec.testing import ScriptedModel

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path


@attrs.define
class World:
    """What the tools did: every effect, in order, never forgotten."""

    effects: list[str] = attrs.field(factory=list)
    hold: trio.Event | None = None  # set: the write tool blocks here
    entered: trio.Event = attrs.field(factory=trio.Event)


def make_registry(world: World) -> ToolRegistry:
    @function_tool(side_effects=SideEffects.READ)
    async def read(key: str) -> str:
        """Read a key."""
        world.effects.append(f"read {key}")
        await trio.lowlevel.checkpoint()
        return f"value of {key}"

    @function_tool(side_effects=SideEffects.WRITE)
    async def append(line: str) -> str:
        """Append a line."""
        world.effects.append(f"append {line}")
        if world.hold is not None:
            world.entered.set()
            await world.hold.wait()
        return f"appended {line}"

    registry = ToolRegistry()
    registry.register(read)
    registry.register(append)
    registry.register(Upsert(world))
    return registry


@attrs.define
class Upsert:
    """An idempotent write: it records the idempotency key it was given."""

    world: World
    definition: ClassVar[ToolDefinition] = ToolDefinition(
        "upsert",
        "Set a key, once per idempotency key.",
        {"type": "object", "properties": {"key": {"type": "string"}}},
        side_effects=SideEffects.WRITE,
        idempotent=True,
    )

    def __call__(self) -> Upsert:
        return self

    async def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        self.world.effects.append(f"upsert {arguments['key']} {ctx.idempotency_key}")
        if self.world.hold is not None:
            self.world.entered.set()
            await self.world.hold.wait()
        return ToolOutput.text("set")


async def journal_at(path: Path, session: str = "s1", **kw: Any) -> Journal:
    return await Journal.open(SQLiteStore(path), session, **kw)


CALLS = [
    ToolCall("c1", "read", {"key": "a"}),
    ToolCall("c2", "append", {"line": "one"}),
    ToolCall("c3", "missing", {}),
    ToolCall("c4", "upsert", {"key": "k"}),
    ToolCall("c5", "read", {"key": "b"}),
]


def _comparable(events: list[Event]) -> list[tuple[str, Any]]:
    out = []
    for e in events:
        fields = attrs.asdict(e, recurse=False)
        for noisy in ("time", "duration", "batch_id", "plan"):
            fields.pop(noisy, None)
        out.append((type(e).__name__, sorted(fields.items(), key=lambda kv: kv[0])))
    return out


def _same(a: Any, b: Any) -> None:
    assert attrs.evolve(a, duration=0.0, details={}) == attrs.evolve(b, duration=0.0, details={})


async def test_a_journal_changes_no_result_order_or_event(tmp_path: Path) -> None:
    plain_events: list[Event] = []
    durable_events: list[Event] = []
    plain_world, durable_world = World(), World()
    plain = ToolExecutor(make_registry(plain_world), sinks=[CallbackSink(plain_events.append)])
    durable = ToolExecutor(
        make_registry(durable_world),
        sinks=[CallbackSink(durable_events.append)],
        journal=await journal_at(tmp_path / "j.db"),
    )
    first = await plain.execute_batch(CALLS)
    second = await durable.execute_batch(CALLS)
    for a, b in zip(first.results, second.results, strict=True):
        if a.tool_name == "upsert":
            assert b.text == a.text
        else:
            _same(a, b)
    assert first.plan == second.plan
    assert _comparable(plain_events) == _comparable(durable_events)
    assert [e.split(" ")[:2] for e in plain_world.effects] == [
        e.split(" ")[:2] for e in durable_world.effects
    ]


async def test_every_call_is_recorded_with_its_plan_and_result(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "j.db")
    journal = await Journal.open(store, "s1")
    executor = ToolExecutor(make_registry(World()), journal=journal)
    outcome = await executor.execute_batch(CALLS, batch_key="turn-1")
    records = {r.key.call_id: r for r in await store.load("s1")}
    assert sorted(records) == ["c1", "c2", "c3", "c4", "c5"]
    for i, call in enumerate(CALLS):
        record = records[call.id]
        times = json.loads(record.result or "")["times"]
        if call.name == "missing":  # answered at plan time: it never started
            assert times["started"] is None
        else:
            assert times["planned"] <= times["started"] <= times["finished"]
        assert record.key == CallKey("s1", "root", "turn-1", call.id)
        assert (record.index, record.tool, record.phase) == (i, call.name, Phase.FINISHED)
        assert json.loads(record.arguments) == call.arguments
        assert record.result is not None
    assert records["c2"].attempt == 1
    assert records["c1"].rerun
    assert not records["c2"].rerun
    assert records["c4"].rerun  # idempotent
    assert outcome.results[2].error_class is ErrorClass.NOT_FOUND
    await store.aclose()


async def test_a_batch_submitted_again_is_replayed_identically(tmp_path: Path) -> None:
    world = World()
    first = await ToolExecutor(
        make_registry(world), journal=await journal_at(tmp_path / "j.db")
    ).execute_batch(CALLS)
    done = len(world.effects)
    again = await ToolExecutor(
        make_registry(world), journal=await journal_at(tmp_path / "j.db")
    ).execute_batch(CALLS)
    assert len(world.effects) == done  # nothing ran again
    for a, b in zip(first.results, again.results, strict=True):
        assert b.details.get("replayed") is True
        assert attrs.evolve(b, details={k: v for k, v in b.details.items() if k != "replayed"}) == a
    # Planned again: the replayed calls were answered at plan time, no run holds them.
    assert again.plan.runs == ()


async def crash_during(
    executor: ToolExecutor, world: World, calls: list[ToolCall], *, let_through: int = 0
) -> None:
    """Run ``calls`` (a batch) until a held tool is entered after ``let_through``
    held tools went on, then stop the host as a kill would."""
    await crash_while(world, executor.execute_batch, calls, let_through=let_through)


async def crash_while(world: World, fn: Any, *args: Any, let_through: int = 0) -> None:
    """Run ``fn(*args)`` as ``crash_during`` runs a batch."""
    world.hold = trio.Event()
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(fn, *args)
            for _ in range(let_through):
                await world.entered.wait()
                world.entered = trio.Event()
                held, world.hold = world.hold, trio.Event()
                held.set()
            await world.entered.wait()
            scope.cancel()
    world.hold = None
    world.entered = trio.Event()


async def test_resume_rules_for_each_kind_of_call(tmp_path: Path) -> None:
    world = World()
    calls = [
        ToolCall("r1", "read", {"key": "a"}),
        ToolCall("w1", "append", {"line": "first"}),
        ToolCall("w2", "append", {"line": "second"}),
        ToolCall("w3", "append", {"line": "third"}),
    ]
    executor = ToolExecutor(make_registry(world), journal=await journal_at(tmp_path / "j.db"))
    # w1 completes; w2 is running when the host dies; w3 never starts.
    await crash_during(executor, world, calls, let_through=1)
    assert world.effects == ["read a", "append first", "append second"]
    resumed = ToolExecutor(make_registry(world), journal=await journal_at(tmp_path / "j.db"))
    outcome = await resumed.execute_batch(calls)
    r1, w1, w2, w3 = outcome.results
    # The read's run ended (its result was written then) and w1's result was
    # written with w2's claim: both are replayed; w2 is interrupted, w3 runs.
    assert world.effects[3:] == ["append third"]
    assert w2.is_error
    assert w2.error_class is ErrorClass.EXECUTION_ERROR
    assert w2.details == {"interrupted": True}
    assert "may or may not have taken effect" in w2.text
    assert w3.text == "appended third"
    assert (r1.text, r1.details) == ("value of a", {"replayed": True})
    assert (w1.text, w1.details) == ("appended first", {"replayed": True})
    # And the answers stand: a third attempt repeats nothing and says the same.
    third = ToolExecutor(make_registry(world), journal=await journal_at(tmp_path / "j.db"))
    final = await third.execute_batch(calls)
    assert len(world.effects) == 4
    assert [r.text for r in final.results] == [r.text for r in outcome.results]


async def test_an_idempotent_call_reruns_with_the_same_key(tmp_path: Path) -> None:
    world = World()
    calls = [ToolCall("u1", "upsert", {"key": "k"})]
    executor = ToolExecutor(make_registry(world), journal=await journal_at(tmp_path / "j.db"))
    await crash_during(executor, world, calls)
    resumed = ToolExecutor(make_registry(world), journal=await journal_at(tmp_path / "j.db"))
    outcome = await resumed.execute_batch(calls)
    assert outcome.results[0].text == "set"
    first, second = world.effects
    assert first == second  # same key, so the far side can tell it is one effect
    assert len(first.split(" ")[2]) == 32


async def test_a_write_interrupted_mid_run_is_reported_never_repeated(tmp_path: Path) -> None:
    world = World()
    calls = [ToolCall("w", "append", {"line": "x"})]
    executor = ToolExecutor(make_registry(world), journal=await journal_at(tmp_path / "j.db"))
    await crash_during(executor, world, calls)
    resumed = ToolExecutor(make_registry(world), journal=await journal_at(tmp_path / "j.db"))
    result = await resumed.execute_call(calls[0])
    assert world.effects == ["append x"]
    assert result.details == {"interrupted": True}


async def test_order_and_caps_hold_with_a_journal(tmp_path: Path) -> None:
    world = World()
    overlap = {"now": 0, "most": 0}

    @function_tool(side_effects=SideEffects.READ)
    async def slow_read(n: int) -> int:
        """Read slowly."""
        overlap["now"] += 1
        overlap["most"] = max(overlap["most"], overlap["now"])
        await trio.testing.wait_all_tasks_blocked()
        overlap["now"] -= 1
        return n

    registry = make_registry(world)
    registry.register(slow_read)
    from toolexec import ConcurrencyConfig

    executor = ToolExecutor(
        registry,
        config=ConcurrencyConfig(per_tool={"slow_read": 3}),
        journal=await journal_at(tmp_path / "j.db"),
    )
    calls = [ToolCall(f"a{i}", "append", {"line": str(i)}) for i in range(5)]
    calls += [ToolCall(f"s{i}", "slow_read", {"n": i}) for i in range(8)]
    outcome = await executor.execute_batch(calls)
    assert world.effects == [f"append {i}" for i in range(5)]
    assert [r.call_id for r in outcome.results] == [c.id for c in calls]
    assert overlap["most"] == 3


async def test_a_sub_agent_resumes_without_repeating_its_writes(tmp_path: Path) -> None:
    world = World()

    def child_model() -> ScriptedModel:
        return ScriptedModel(
            [
                [ToolCall("k1", "append", {"line": "child one"})],
                [ToolCall("k2", "append", {"line": "child two"})],
                "done",
            ]
        )

    def registry() -> ToolRegistry:
        reg = make_registry(world)
        reg.register(SubAgentTool("helper", "Helps.", "You help.", child_model))
        return reg

    calls = [ToolCall("p1", "helper", {"task": "write twice"})]
    executor = ToolExecutor(registry(), journal=await journal_at(tmp_path / "j.db"))
    await crash_during(executor, world, calls, let_through=1)  # while "child two" runs
    assert world.effects == ["append child one", "append child two"]
    resumed = ToolExecutor(registry(), journal=await journal_at(tmp_path / "j.db"))
    outcome = await resumed.execute_batch(calls)
    assert world.effects == ["append child one", "append child two"]  # nothing repeated
    assert outcome.results[0].text == "done"


async def test_a_session_resumes_from_its_records_alone(tmp_path: Path) -> None:
    world = World()
    calls = [ToolCall("w1", "append", {"line": "x"}), ToolCall("r1", "read", {"key": "a"})]
    done = [ToolCall("w0", "append", {"line": "before"})]
    executor = ToolExecutor(make_registry(world), journal=await journal_at(tmp_path / "j.db"))
    await executor.execute_batch(done)
    await crash_during(executor, world, calls)
    resumed = ToolExecutor(make_registry(world), journal=await journal_at(tmp_path / "j.db"))
    (outcome,) = await resumed.resume_session()  # the finished batch is left alone
    w1, r1 = outcome.results
    assert w1.details == {"interrupted": True}
    assert r1.text == "value of a"
    assert world.effects == ["append before", "append x", "read a"]
    assert await resumed.resume_session() == []
    with pytest.raises(RuntimeError, match="journal"):
        await ToolExecutor(make_registry(world)).resume_session()


async def test_a_streamed_batch_is_refused_with_a_journal(tmp_path: Path) -> None:
    executor = ToolExecutor(make_registry(World()), journal=await journal_at(tmp_path / "j.db"))
    with pytest.raises(ValueError, match="streamed batch"):
        executor.open_batch()


async def test_prepare_needs_the_records_loaded(tmp_path: Path) -> None:
    journal = Journal(store=SQLiteStore(tmp_path / "j.db"), session="s1")
    executor = ToolExecutor(make_registry(World()), journal=journal)
    with pytest.raises(RuntimeError, match="not loaded"):
        executor.prepare(CALLS)
    await executor.execute_batch(CALLS[:1])  # loads them
    assert journal.loaded
    assert executor.prepare(CALLS[:1]).calls == CALLS[:1]


def test_journal_settings_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="lease"):
        Journal(store=SQLiteStore(tmp_path / "j.db"), session="s", lease=0)
    with pytest.raises(TypeError, match="Journal"):
        ToolExecutor(ToolRegistry(), journal="j.db")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="synchronous"):
        SQLiteStore(tmp_path / "j.db", synchronous="OFF")
    with pytest.raises(ValueError, match="journal"):
        open_store("")


# -- approvals ----------------------------------------------------------------------


def asking(world: World, journal: Journal, **kw: Any) -> ToolExecutor:
    return ToolExecutor(
        make_registry(world),
        approval=ApprovalConfig(
            per_tool={"append": ApprovalMode.PROMPT}, timeout=kw.pop("timeout", 600)
        ),
        journal=journal,
        **kw,
    )


async def test_a_question_is_answered_from_the_journal(tmp_path: Path) -> None:
    world = World()
    store = SQLiteStore(tmp_path / "j.db")
    journal = await Journal.open(store, "s1", poll_interval=0.01)
    executor = asking(world, journal)
    call = ToolCall("w", "append", {"line": "x"})
    async with trio.open_nursery() as nursery:
        nursery.start_soon(executor.execute_call, call)
        question = await open_question(store)
        assert question.tool_name == "append"
        assert json.loads(question.arguments) == {"line": "x"}
        assert "append" in question.summary
        assert question.deadline is not None
        other = SQLiteStore(tmp_path / "j.db")  # another process, say
        assert await answer_question(other, question.id, True, by="ops")
        with pytest.raises(LookupError, match="no open question"):  # the first answer stands
            await answer_question(other, question.id, False)
        await other.aclose()
    assert world.effects == ["append x"]
    # Resumed: the answered call is finished; nothing is asked or run again.
    again = asking(world, await journal_at(tmp_path / "j.db"))
    result = await again.execute_call(call)
    assert result.details.get("replayed") is True
    assert world.effects == ["append x"]


async def open_question(store: SQLiteStore) -> Question:
    """The one open question, once it is there."""
    while not (questions := await pending_questions(store)):
        await trio.sleep(0.01)
    (question,) = questions
    return question


async def ask_then_die(executor: ToolExecutor, call: ToolCall, store: SQLiteStore) -> Question:
    """Run ``call`` until its question is in the journal, then stop as a killed host would."""
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(executor.execute_call, call)
            question = await open_question(store)
            scope.cancel()
    return question


async def test_a_resumed_session_waits_for_the_same_question(tmp_path: Path) -> None:
    world = World()
    store = SQLiteStore(tmp_path / "j.db")
    call = ToolCall("w", "append", {"line": "x"})
    executor = asking(world, await Journal.open(store, "s1", poll_interval=0.01))
    before = await ask_then_die(executor, call, store)
    asked = trio.Event()

    def on_event(event: Event) -> None:
        if isinstance(event, ApprovalRequested):
            asked.set()

    resumed = asking(
        world,
        await Journal.open(store, "s1", poll_interval=0.01),
        sinks=[CallbackSink(on_event)],
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(resumed.execute_call, call)
        await asked.wait()
        (after,) = await pending_questions(store)
        assert after == before  # the same question, the same deadline
        await answer_question(store, after.id, False, reason="not today")
    records = await store.load("s1")
    assert json.loads(records[0].answer or "")["reason"] == "not today"
    assert world.effects == []
    # Denied: a third host is told the same, without a question.
    third = asking(world, await Journal.open(store, "s1", poll_interval=0.01))
    result = await third.execute_call(call)
    assert result.error_class is ErrorClass.USER_DENIED
    assert await pending_questions(store) == []


async def test_a_timeout_keeps_its_deadline_across_a_restart(tmp_path: Path) -> None:
    world = World()
    store = SQLiteStore(tmp_path / "j.db")
    call = ToolCall("w", "append", {"line": "x"})
    executor = asking(world, await Journal.open(store, "s1", poll_interval=0.01), timeout=0.3)
    question = await ask_then_die(executor, call, store)
    assert question.deadline is not None
    resumed = asking(world, await Journal.open(store, "s1", poll_interval=0.01), timeout=600)
    result = await resumed.execute_call(call)  # the old deadline, not a new 600 s
    assert result.error_class is ErrorClass.CONFIRMATION_TIMEOUT
    assert world.effects == []


async def test_the_local_approver_answers_into_the_journal(tmp_path: Path) -> None:
    world = World()
    store = SQLiteStore(tmp_path / "j.db")
    journal = await Journal.open(store, "s1")
    executor = asking(world, journal, approver=AutoApprover(by="bot"))
    await executor.execute_call(ToolCall("w", "append", {"line": "x"}))
    (record,) = await store.load("s1")
    answer = json.loads(record.answer or "")
    assert answer.pop("at") > 0
    assert answer == {"approved": True, "by": "bot", "reason": ""}
    assert world.effects == ["append x"]


class Counting:
    """An approver that answers ``approved`` and counts the questions it was asked."""

    def __init__(self, approved: bool) -> None:
        self.approved, self.asked = approved, 0

    async def request(self, request: Any) -> ApprovalAnswer:
        self.asked += 1
        return ApprovalAnswer(self.approved, by="ops")


@pytest.mark.parametrize("approved", [True, False])
async def test_a_prompt_once_answer_holds_for_the_session_s_other_processes(
    tmp_path: Path, approved: bool
) -> None:
    """A host asks once for a ``prompt_once`` tool; another host of the session (its own
    journal, its own memory), and one resumed later, take that answer without asking."""

    def once(world: World, journal: Journal, approver: Counting) -> ToolExecutor:
        config = ApprovalConfig(per_tool={"append": ApprovalMode.PROMPT_ONCE})
        return ToolExecutor(make_registry(world), approval=config, approver=approver,
                            journal=journal)  # fmt: skip

    world = World()
    first, second, later = Counting(approved), Counting(not approved), Counting(not approved)
    a = once(world, await journal_at(tmp_path / "j.db"), first)
    b = once(world, await journal_at(tmp_path / "j.db"), second)
    results = [await a.execute_call(ToolCall("w1", "append", {"line": "a"}))]
    results.append(await b.execute_call(ToolCall("w2", "append", {"line": "b"})))
    c = once(world, await journal_at(tmp_path / "j.db"), later)
    results.append(await c.execute_call(ToolCall("w3", "append", {"line": "c"})))
    assert (first.asked, second.asked, later.asked) == (1, 0, 0)
    if approved:
        assert world.effects == ["append a", "append b", "append c"]
    else:
        assert world.effects == []
        assert {r.error_class for r in results} == {ErrorClass.USER_DENIED}
    other = await journal_at(tmp_path / "j.db", session="s2")  # another session asks anew
    fresh = Counting(approved)
    await once(world, other, fresh).execute_call(ToolCall("w4", "append", {"line": "d"}))
    assert fresh.asked == 1


async def test_a_remote_answer_beats_a_slower_local_one(tmp_path: Path) -> None:
    world = World()
    store = SQLiteStore(tmp_path / "j.db")

    @attrs.frozen
    class Slow:
        async def request(self, request: object) -> ApprovalAnswer:
            await trio.sleep(600)
            return ApprovalAnswer(True, "local")

    journal = await Journal.open(store, "s1", poll_interval=0.01)
    executor = asking(world, journal, approver=Slow())
    async with trio.open_nursery() as nursery:
        nursery.start_soon(executor.execute_call, ToolCall("w", "append", {"line": "x"}))
        while not (questions := await pending_questions(store, "s1")):
            await trio.sleep(0.01)
        await answer_question(store, questions[0].id, False, by="remote")
    assert world.effects == []


async def test_records_written_directly_drive_the_resume(tmp_path: Path) -> None:
    """A record a store holds (from any host) decides, whatever this process saw."""
    store = SQLiteStore(tmp_path / "j.db")
    key = CallKey("s1", "root", "b", "w")
    await store.write([CallRecord(key=key, tool="append", phase=Phase.STARTED, attempt=1)])
    world = World()
    executor = ToolExecutor(make_registry(world), journal=await Journal.open(store, "s1"))
    outcome = await executor.execute_batch([ToolCall("w", "append", {"line": "x"})], batch_key="b")
    assert outcome.results[0].details == {"interrupted": True}
    assert world.effects == []


# -- several owners, backends, broken parts ---------------------------------------------


async def wait_for(predicate: Any) -> None:
    """Wait until ``await predicate()`` is true (the store is polled, as a host would)."""
    while not await predicate():
        await trio.sleep(0.01)


async def test_a_call_leased_by_another_owner_is_waited_for_then_replayed(tmp_path: Path) -> None:
    world = World()
    calls = [ToolCall("w", "append", {"line": "x"})]
    first = ToolExecutor(
        make_registry(world),
        journal=await journal_at(tmp_path / "j.db", lease=2.0, poll_interval=0.01),
    )
    second = ToolExecutor(
        make_registry(world),
        journal=await journal_at(tmp_path / "j.db", lease=2.0, poll_interval=0.01),
    )
    store = SQLiteStore(tmp_path / "j.db")
    key = CallKey("s1", "root", "b", "w")
    world.hold = trio.Event()
    outcomes: dict[str, Any] = {}

    async def run(executor: ToolExecutor) -> None:
        # By executor, not by when each returned: the one that waited may return first.
        name = "ran" if executor is first else "waited"
        outcomes[name] = await executor.execute_batch(calls, batch_key="b")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run, first)
        await world.entered.wait()
        claimed = await store.get(key)
        assert claimed is not None
        assert claimed.lease_until is not None
        nursery.start_soon(run, second)  # it finds the call leased, and waits

        async def renewed() -> bool:
            now = await store.get(key)
            return (
                now is not None
                and now.lease_until is not None
                and (
                    now.lease_until > claimed.lease_until  # type: ignore[operator]
                )
            )

        await wait_for(renewed)  # the running owner keeps its lease live
        assert world.hold is not None
        world.hold.set()
    assert world.effects == ["append x"]
    ran, waited = outcomes["ran"], outcomes["waited"]
    assert ran.results[0].text == "appended x"
    assert waited.results[0].text == "appended x"
    assert waited.results[0].details == {"replayed": True}
    await store.aclose()


async def test_a_lease_that_expires_without_a_result_means_interrupted(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "j.db")
    key = CallKey("s1", "root", "b", "w")
    dead = CallRecord(
        key=key, tool="append", phase=Phase.STARTED, attempt=1, lease_owner="dead", lease_until=0.0
    )
    await store.write([dead])
    journal = await journal_at(tmp_path / "j.db", lease=30, poll_interval=0.01)
    # The lease is still live when the call is planned, and ends while it waits.
    journal.keep(attrs.evolve(dead, lease_until=1e18))
    await store.write([attrs.evolve(dead, lease_until=0.0)])
    world = World()
    executor = ToolExecutor(make_registry(world), journal=journal)
    outcome = await executor.execute_batch([ToolCall("w", "append", {"line": "x"})], batch_key="b")
    assert outcome.results[0].details == {"interrupted": True}
    assert world.effects == []
    await store.aclose()


async def test_a_claimed_call_runs_on_the_backend_its_grant_names(tmp_path: Path) -> None:
    from toolexec import Allow
    from toolexec.policy import ExecutionGrant

    ran_on: list[str] = []

    @attrs.frozen
    class Recording:
        async def run(self, tool: Any, arguments: Mapping[str, Any], ctx: ToolContext) -> Any:
            ran_on.append(ctx.call_id)
            return await tool.execute(arguments, ctx)

    @attrs.frozen
    class ToRecording:
        def decide(self, definition: Any, arguments: Any, agent_path: str) -> Allow:
            return Allow(ExecutionGrant(sandbox="rec"))

    world = World()
    executor = ToolExecutor(
        make_registry(world),
        policy=ToRecording(),
        backends={"rec": Recording()},
        journal=await journal_at(tmp_path / "j.db"),
    )
    outcome = await executor.execute_batch([ToolCall("w", "append", {"line": "x"})])
    assert outcome.results[0].text == "appended x"
    assert ran_on == ["w"]
    (record,) = (await journal_at(tmp_path / "j.db")).records()
    assert json.loads(record.grant or "")["sandbox"] == "rec"


async def test_a_broken_approver_still_refuses_with_a_journal(tmp_path: Path) -> None:
    @attrs.frozen
    class Broken:
        async def request(self, request: object) -> object:
            return "yes"

    world = World()
    executor = asking(world, await journal_at(tmp_path / "j.db"), approver=Broken())
    result = await executor.execute_call(ToolCall("w", "append", {"line": "x"}))
    assert result.error_class is ErrorClass.PERMISSION_DENIED
    assert world.effects == []


async def test_a_failed_write_leaves_the_store_as_it_was(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "j.db")
    good = CallRecord(key=CallKey("s1", "root", "b", "ok"), tool="t")
    bad = CallRecord(key=CallKey("s1", "root", "b", "bad"), tool=None)  # type: ignore[arg-type]
    with pytest.raises(Exception, match="NOT NULL"):
        await store.write([good, bad])
    with pytest.raises(Exception, match="NOT NULL"):
        await store.claim(bad, 0.0)
    assert await store.load("s1") == []
    await store.aclose()


def test_the_question_commands_in_this_process(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from toolexec._cli._main import main

    path = str(tmp_path / "j.db")
    asked = CallRecord(
        key=CallKey("s1", "root", "b", "w"),
        tool="append",
        question=json.dumps({"summary": "root: append [write] {}", "tool_name": "append"}),
        deadline=1.0,
    )
    store = SQLiteStore(path)
    trio.run(store.write, [asked])
    assert main(["questions", path, "--session", "s1"]) == 0
    listed = capsys.readouterr().out
    assert listed == f"{asked.question_id}  root: append [write] {{}} (timed out)\n"
    assert main(["approve", path, asked.question_id, "--by", "me"]) == 0
    assert capsys.readouterr().out == f"approved {asked.question_id}\n"
    with pytest.raises(SystemExit) as exit_:
        main(["deny", path, asked.question_id])
    assert exit_.value.code == 2
    with pytest.raises(SystemExit):
        main(["questions", str(tmp_path / "missing.db")])
    trio.run(store.aclose)


# -- agent loops ----------------------------------------------------------------------


async def test_a_loop_resumes_from_its_last_checkpoint(tmp_path: Path) -> None:
    from toolexec import AgentLoop, StopReason

    world = World()
    first_model = ScriptedModel(
        [
            [ToolCall("t1", "append", {"line": "one"})],
            [ToolCall("t2", "append", {"line": "two"}), ToolCall("t3", "read", {"key": "k"})],
            "never asked",
        ]
    )
    executor = ToolExecutor(make_registry(world), journal=await journal_at(tmp_path / "j.db"))
    loop = AgentLoop(first_model, executor, system_prompt="Be brief.")
    await crash_while(world, loop.run, "write twice", let_through=1)  # while "two" runs
    # A new host: its model is asked only for what comes after the checkpoint.
    second_model = ScriptedModel(["done"])
    resumed = ToolExecutor(make_registry(world), journal=await journal_at(tmp_path / "j.db"))
    result = await AgentLoop(second_model, resumed, system_prompt="Be brief.").run("write twice")
    assert result.stop_reason is StopReason.FINISHED
    assert result.text == "done"
    assert (result.turns, result.tool_calls) == (3, 3)
    assert len(second_model.requests) == 1
    assert world.effects == ["append one", "append two", "read k"]  # nothing repeated
    t2, t3 = result.transcript[-2].tool_results
    assert t2.details == {"interrupted": True}
    assert t3.text == "value of k"
    # Stopped: run again, it answers from its checkpoint without asking anyone.
    third = ToolExecutor(make_registry(world), journal=await journal_at(tmp_path / "j.db"))
    again = await AgentLoop(ScriptedModel([]), third).run("write twice")
    assert (again.text, again.transcript) == (result.text, result.transcript)


async def test_loops_with_other_keys_keep_their_own_checkpoints(tmp_path: Path) -> None:
    from toolexec import AgentLoop

    executor = ToolExecutor(make_registry(World()), journal=await journal_at(tmp_path / "j.db"))
    a = await AgentLoop(ScriptedModel(["a"]), executor, checkpoint_key="a").run("hi")
    b = await AgentLoop(ScriptedModel(["b"]), executor, checkpoint_key="b").run("hi")
    assert (a.text, b.text) == ("a", "b")
