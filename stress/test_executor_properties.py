"""Random batches through ``ToolExecutor``, checked against a plain in-order reference.

Theory of operation. Hypothesis draws a *case*: a handful of tools over one
shared, recorded key-value store (readers, overwriting and appending serial
mutators, a commutative promoted mutator, a tool that does nothing but sleep,
a tool that always fails; each sync or async, each with an optional timeout
and an optional per-tool cap), random class widths, a random strategy, a
batch of calls (some unknown, some with bad JSON or schema-invalid
arguments, some asked to fail, each sleeping a random mock time), optional
steering that fires at a random checkpoint, and an optional host cancel
(at a random mock time, before ``run()``, from an event sink inside the
call path, or in the same instant a run ends). The batch runs under ``trio.run`` with
``MockClock(autojump_threshold=0)``.

The checks, for every example: exactly one result per call, in call order,
ids and names matching; each result is the reference's, or ``skipped``
after steering fired, or ``cancelled`` after a host cancel (and a call that
had not ended when the host cancelled is ``cancelled``; after the first
cancelled run, every later run is cancelled); effects happened for exactly
the calls that succeeded; the final store equals the reference's over
exactly those calls, in call order; every read saw exactly the writes
emitted before it; calls overlap only within their run, serial mutators run
alone and in emitted order; class widths and per-tool caps are never
exceeded (instrumented high-water marks); afterwards ``statistics()`` shows
no borrowed or waiting permit and no call in flight, and every trio task
spawned during the batch has exited.

The reference executes the same calls one after another in call order with
the same failure rules: an unknown tool is ``not_found``, bad or invalid
arguments are ``invalid_arguments``, a call sleeping longer than its tool's
timeout is ``timeout``, a call asked to fail is ``execution_error``, anything
else succeeds and applies its effect. Delays are whole numbers and timeouts
end in ``.5``, so a call's fate under its deadline never depends on a tie.

Every tool applies its effect atomically, with no checkpoint after it, just
before it returns, so "the effect happened" and "the call succeeded" are the
same event for async tools. Sync tools run in worker threads the executor
may abandon on a host cancel; their effect is then recorded but the result
is ``cancelled``, which the checks allow (and nothing runs after a cancel, so
the order of effects is unaffected).

Sync tools and the mock clock: ``autojump_threshold=0`` jumps the clock as
soon as every task is blocked, including while a worker thread computes, so
a sync tool would always hit its deadline. A keep-alive task therefore spins
on ``trio.sleep(0)`` while a sync tool's thread is outstanding: the thread
takes zero mock time, as a fast blocking function should.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from typing import TYPE_CHECKING, Any, Literal

import attrs
import trio
import trio.testing
from hypothesis import event, given, settings
from hypothesis import strategies as st

from stress.conftest import stress_profile
from toolexec import (
    Batch,
    Batched,
    BatchOutcome,
    ConcurrencyConfig,
    ErrorClass,
    ExecutionStrategy,
    FunctionTool,
    Parallel,
    RoutingClass,
    Sequential,
    SideEffects,
    ToolCall,
    ToolContext,
    ToolError,
    ToolExecutor,
    ToolOutput,
    ToolRegistry,
    function_tool,
)
from toolexec.events import CallbackSink, CallCompleted, CallFailed, Event

if TYPE_CHECKING:
    from collections.abc import Mapping

KEYS = ("a", "b", "c")
FAILS = ("none", "raise", "tool_error", "error_output", "system_exit", "base", "generator_exit")
Op = Literal["read", "write", "append", "incr", "sleep", "boom"]
Fail = Literal[
    "none", "raise", "tool_error", "error_output", "system_exit", "base", "generator_exit"
]
OPS: tuple[Op, ...] = ("read", "write", "append", "incr", "sleep", "boom")
MUTATORS = ("write", "append", "incr")
TIMEOUTS = (None, None, None, 0.5, 1.5, 2.5)
DEFAULT_TIMEOUT = 60.0

# Host cancels. "at_time" cancels the batch from another task at a mock time
# when every call is parked, so only calls already running are interrupted;
# "enclosing" cancels a scope around ``run()`` instead, which must propagate
# (no outcome) and leave nothing running or held. The racing
# cancels land just as calls are about to start: before ``run()``, from an
# event sink inside the call path, or in the same instant a run ends. The
# promise is the same: a call that had not ended gets ``cancelled`` and never
# runs (the executor checks for cancellation after admission, before the
# tool starts).
CANCEL_MODES: tuple[str, ...] = (
    "none",
    "none",
    "at_time",
    "at_time",
    "enclosing",
    "before_run",
    "from_sink",
)
CANCEL_OFFSET = 0.0

Snapshot = tuple[tuple[str, Any], ...]


class OddBaseException(BaseException):
    """Neither cancellation nor an interrupt: a tool's failure like any other."""


_BASE_FAILURES: dict[str, type[BaseException]] = {
    "system_exit": SystemExit,
    "base": OddBaseException,
    "generator_exit": GeneratorExit,
}

# Steering answers: the message in every accepted form, and "no message" in every form.
STEER_FORMS: tuple[Any, ...] = ("stop", ["stop"], ("stop",))
QUIET_FORMS: tuple[Any, ...] = (None, [], (), "")


# -- the case -------------------------------------------------------------


@attrs.frozen
class ToolSpec:
    """One random tool: what it does, how it runs, how it is limited."""

    name: str
    op: Op
    sync: bool
    effects: SideEffects
    promoted: bool
    timeout: float | None
    cap: int | None

    @property
    def routing(self) -> RoutingClass:
        if self.effects.is_read_only:
            return RoutingClass.READ_ONLY
        return RoutingClass.CONCURRENT_MUT if self.promoted else RoutingClass.SERIAL_MUT


@attrs.frozen
class CallSpec:
    """One random call: a tool call, or a call that must short-circuit."""

    kind: Literal["tool", "unknown", "bad_json", "invalid"]
    tool: int = 0
    key: str = "a"
    value: int = 0
    delay: int = 0
    fail: str = "none"
    as_text: bool = False


@attrs.frozen
class Case:
    tools: tuple[ToolSpec, ...]
    calls: tuple[CallSpec, ...]
    config: ConcurrencyConfig
    strategy: ExecutionStrategy
    cancel: Literal["none", "at_time", "enclosing", "before_run", "from_sink"]
    cancel_at: float
    steer_at: int | None
    steer_async: bool
    steer_form: Any = "stop"
    quiet_form: Any = None


@st.composite
def tool_specs(draw: st.DrawFn, index: int) -> ToolSpec:
    op = draw(st.sampled_from(OPS))
    promoted = False
    if op == "read":
        effects = SideEffects.READ
    elif op == "sleep":
        effects = SideEffects.NONE
    elif op == "incr":
        # Promoted mutators run together, so the host only promotes ones
        # that commute; an increment does.
        effects, promoted = SideEffects.WRITE, True
    elif op == "boom":
        effects = draw(st.sampled_from([SideEffects.READ, SideEffects.WRITE]))
        promoted = effects is SideEffects.WRITE and draw(st.booleans())
    else:
        effects = draw(st.sampled_from([SideEffects.WRITE, SideEffects.EXECUTE]))
    return ToolSpec(
        name=f"{op}_{index}",
        op=op,
        sync=draw(st.booleans()),
        effects=effects,
        promoted=promoted,
        timeout=draw(st.sampled_from(TIMEOUTS)),
        cap=draw(st.none() | st.integers(1, 3)),
    )


@st.composite
def call_specs(draw: st.DrawFn, n_tools: int) -> CallSpec:
    roll = draw(st.integers(0, 11))
    if roll == 0:
        return CallSpec("unknown")
    if roll == 1:
        return CallSpec("bad_json")
    if roll == 2:
        return CallSpec("invalid", tool=draw(st.integers(0, n_tools - 1)))
    return CallSpec(
        "tool",
        tool=draw(st.integers(0, n_tools - 1)),
        key=draw(st.sampled_from(KEYS)),
        value=draw(st.integers(0, 9)),
        delay=draw(st.sampled_from((0, 0, 1, 2, 3))),
        fail=draw(st.sampled_from(FAILS[:1] * 6 + FAILS[1:])),
        as_text=draw(st.booleans()),
    )


@st.composite
def cases(draw: st.DrawFn) -> Case:
    n_tools = draw(st.integers(1, 6))
    tools = tuple(draw(tool_specs(i)) for i in range(n_tools))
    calls = tuple(draw(st.lists(call_specs(n_tools), min_size=1, max_size=16)))
    config = ConcurrencyConfig(
        read_width=draw(st.integers(1, 4)),
        concurrent_mut_width=draw(st.integers(1, 4)),
        serial_mut_width=draw(st.integers(1, 3)),
        per_tool={t.name: t.cap for t in tools if t.cap is not None},
        promoted=frozenset(t.name for t in tools if t.promoted),
    )
    strategy = draw(
        st.sampled_from([Parallel(), Sequential()]) | st.builds(Batched, st.integers(1, 4))
    )
    return Case(
        tools=tools,
        calls=calls,
        config=config,
        strategy=strategy,
        cancel=draw(st.sampled_from(CANCEL_MODES)),
        # a mock time for "at_time" (off the grid of call ends and deadlines
        # unless racing cancels are on), the result events before "from_sink"
        cancel_at=draw(st.integers(0, 24).map(lambda k: k / 2 + CANCEL_OFFSET)),
        steer_at=draw(st.none() | st.integers(1, 4)),
        steer_async=draw(st.booleans()),
        steer_form=draw(st.sampled_from(STEER_FORMS)),
        quiet_form=draw(st.sampled_from(QUIET_FORMS)),
    )


def to_tool_call(case: Case, index: int) -> ToolCall:
    spec = case.calls[index]
    cid = f"c{index}"
    if spec.kind == "unknown":
        return ToolCall(cid, "no_such_tool", {})
    if spec.kind == "bad_json":
        return ToolCall(cid, case.tools[0].name, '{"key": "a", "value":')
    name = case.tools[spec.tool].name
    if spec.kind == "invalid":
        return ToolCall(cid, name, {"key": "z", "value": "x", "delay": -1, "extra": 1})
    args = {"key": spec.key, "value": spec.value, "delay": spec.delay, "fail": spec.fail}
    return ToolCall(cid, name, json.dumps(args) if spec.as_text else args)


# -- the instrumented world -----------------------------------------------


@attrs.define(eq=False)
class World:
    """The shared store and everything the checks need to know about a run."""

    case: Case
    lock: threading.Lock = attrs.field(factory=threading.Lock)
    store: dict[str, Any] = attrs.field(factory=dict)
    applied: list[str] = attrs.field(factory=list)
    observed: dict[str, Snapshot] = attrs.field(factory=dict)
    run_of: dict[str, int] = attrs.field(factory=dict)
    active: dict[str, ToolSpec] = attrs.field(factory=dict)
    by_class: Counter[RoutingClass] = attrs.field(factory=Counter)
    by_tool: Counter[str] = attrs.field(factory=Counter)
    peak_class: Counter[RoutingClass] = attrs.field(factory=Counter)
    peak_tool: Counter[str] = attrs.field(factory=Counter)
    starts: list[str] = attrs.field(factory=list)
    ended: set[str] = attrs.field(factory=set)
    ended_at_cancel: frozenset[str] | None = None
    violations: list[str] = attrs.field(factory=list)
    # sync tools: call id -> "queued" | "dropped" | "running" | "done"
    threads: dict[str, str] = attrs.field(factory=dict)
    threads_done: threading.Condition = attrs.field(init=False)
    outstanding: int = 0
    spin: trio.Event = attrs.field(factory=trio.Event)

    def __attrs_post_init__(self) -> None:
        self.threads_done = threading.Condition(self.lock)

    def enter(self, call_id: str, spec: ToolSpec) -> None:
        """Record a call starting; note any overlap the plan forbids."""
        run = self.run_of.get(call_id)
        for other in self.active:
            if self.run_of.get(other) != run:
                self.violations.append(f"{call_id} (run {run}) overlapped {other}")
            elif spec.routing is RoutingClass.SERIAL_MUT:
                self.violations.append(f"serial {call_id} overlapped {other}")
        self.active[call_id] = spec
        self.starts.append(call_id)
        self.by_class[spec.routing] += 1
        self.by_tool[spec.name] += 1
        self.peak_class[spec.routing] = max(
            self.peak_class[spec.routing], self.by_class[spec.routing]
        )
        self.peak_tool[spec.name] = max(self.peak_tool[spec.name], self.by_tool[spec.name])

    def leave(self, call_id: str, spec: ToolSpec) -> None:
        with self.lock:
            self.ended.add(call_id)
        del self.active[call_id]
        self.by_class[spec.routing] -= 1
        self.by_tool[spec.name] -= 1

    def effect(self, spec: ToolSpec, call_id: str, args: Mapping[str, Any]) -> ToolOutput:
        """Fail as asked, or apply the tool's effect atomically (any thread)."""
        with self.lock:
            self.ended.add(call_id)
        fail = args["fail"]
        if spec.op == "boom" or fail == "raise":
            raise RuntimeError(f"{call_id} blew up")
        if fail in _BASE_FAILURES:  # a BaseException other than Cancelled/KeyboardInterrupt
            raise _BASE_FAILURES[fail](call_id)
        if fail == "tool_error":
            raise ToolError(f"{call_id} refused")
        if fail == "error_output":
            return ToolOutput.text(f"{call_id} could not", is_error=True)
        with self.lock:
            if spec.op == "read":
                self.observed[call_id] = snapshot(self.store)
            elif spec.op in MUTATORS:
                apply_op(self.store, spec.op, args["key"], args["value"])
                self.applied.append(call_id)
        return ToolOutput.text("ok")

    def cancel(self, scope: Batch | trio.CancelScope) -> None:
        """Cancel the batch (or a scope around it), noting which calls had ended."""
        with self.lock:
            if self.ended_at_cancel is None:
                self.ended_at_cancel = frozenset(self.ended)
        scope.cancel()

    def run_in_thread(self, spec: ToolSpec, call_id: str, args: Mapping[str, Any]) -> ToolOutput:
        with self.lock:
            if self.threads[call_id] == "dropped":
                return ToolOutput.text("dropped")
            self.threads[call_id] = "running"
        try:
            return self.effect(spec, call_id, args)
        finally:
            with self.lock:
                self.threads[call_id] = "done"
                self.threads_done.notify_all()

    def wait_for_threads(self) -> None:
        """Wait until no abandoned worker thread can still touch the store."""
        with self.lock:
            ok = self.threads_done.wait_for(
                lambda: all(s in ("done", "dropped") for s in self.threads.values()), timeout=30
            )
        assert ok, f"worker threads still running: {self.threads}"

    async def keep_alive(self) -> None:
        """Keep the mock clock from jumping while a worker thread computes."""
        while True:
            await self.spin.wait()
            while self.outstanding:
                await trio.sleep(0)
            self.spin = trio.Event()


def snapshot(store: Mapping[str, Any]) -> Snapshot:
    return tuple(sorted(store.items()))


def apply_op(store: dict[str, Any], op: str, key: str, value: int) -> None:
    if op == "write":
        store[key] = (value,)
    elif op == "append":
        store[key] = (*store.get(key, ()), value)
    else:
        store[f"#{key}"] = store.get(f"#{key}", 0) + value


def make_tool(world: World, spec: ToolSpec) -> Any:
    """The registered factory: an async function tool, or a sync one behind a bridge."""
    if not spec.sync:

        async def run_async(
            key: Literal["a", "b", "c"],
            value: int,
            delay: int,
            fail: Fail,
            ctx: ToolContext,
        ) -> ToolOutput:
            args = {"key": key, "value": value, "fail": fail}
            world.enter(ctx.call_id, spec)
            try:
                if delay:  # a zero delay means no checkpoint at all
                    await trio.sleep(delay)
                return world.effect(spec, ctx.call_id, args)
            finally:
                world.leave(ctx.call_id, spec)

        return _function(spec, run_async)

    def run_sync(
        key: Literal["a", "b", "c"],
        value: int,
        delay: int,
        fail: Fail,
        ctx: ToolContext,
    ) -> ToolOutput:
        return world.run_in_thread(spec, ctx.call_id, {"key": key, "value": value, "fail": fail})

    return SyncBridge(world, spec, _function(spec, run_sync))


def _function(spec: ToolSpec, fn: Any) -> FunctionTool:
    return function_tool(name=spec.name, side_effects=spec.effects, timeout=spec.timeout)(fn)


@attrs.frozen
class SyncBridge:
    """Sleep the call's mock delay, then run the sync function tool in its thread."""

    world: World
    spec: ToolSpec
    inner: FunctionTool

    @property
    def definition(self) -> Any:
        return self.inner.definition

    async def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        world, cid = self.world, ctx.call_id
        world.enter(cid, self.spec)
        try:
            if arguments["delay"]:
                await trio.sleep(arguments["delay"])
            world.threads[cid] = "queued"
            world.outstanding += 1
            world.spin.set()
            try:
                return await self.inner.execute(arguments, ctx)
            finally:
                world.outstanding -= 1
                with world.lock:
                    if world.threads[cid] == "queued":
                        world.threads[cid] = "dropped"
        finally:
            world.leave(cid, self.spec)

    def __call__(self) -> SyncBridge:
        return self


class TaskCounter(trio.abc.Instrument):
    """Tracks live trio tasks, to show a batch leaves none behind."""

    def __init__(self) -> None:
        self.live: set[trio.lowlevel.Task] = set()

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.live.add(task)

    def task_exited(self, task: trio.lowlevel.Task) -> None:
        self.live.discard(task)


@attrs.define
class Run:
    """What one example produced."""

    batch: Batch
    outcome: BatchOutcome | None  # None: an enclosing scope cancelled the run
    executor: ToolExecutor
    cancel_fired: bool = False
    steer_fired_after: int | None = None
    leftover_tasks: int = 0


def execute(case: Case, world: World) -> Run:
    registry = ToolRegistry()
    for spec in case.tools:
        registry.register(make_tool(world, spec))
    counter = TaskCounter()
    polls = results_seen = 0
    state: dict[str, Any] = {"done": False, "cancel_fired": False, "steer": None}
    batches: list[Batch] = []
    outer = trio.CancelScope()

    def cancel_now() -> None:
        target = outer if case.cancel == "enclosing" else batches[0]
        if not state["done"]:
            state["cancel_fired"] = True
            world.cancel(target)
        else:  # a cancel after the batch returned must be harmless
            target.cancel()

    def on_event(event: Event) -> None:
        # The host reacts to the n-th result event by cancelling (from inside
        # the executor's own call path, not from another task).
        nonlocal results_seen
        if isinstance(event, CallCompleted | CallFailed):
            results_seen += 1
            if case.cancel == "from_sink" and results_seen == int(case.cancel_at) + 1:
                cancel_now()

    executor = ToolExecutor(registry, case.config, case.strategy, sinks=[CallbackSink(on_event)])
    calls = [to_tool_call(case, i) for i in range(len(case.calls))]

    def steer_now() -> Any:
        nonlocal polls
        polls += 1
        if polls == case.steer_at:
            state["steer"] = polls - 1  # fired after run number polls - 1
            return case.steer_form
        return case.quiet_form

    async def steer_async() -> Any:
        await trio.sleep(0)
        return steer_now()

    steering: Any = None
    if case.steer_at is not None:
        steering = steer_async if case.steer_async else steer_now

    async def cancel_later(at: float) -> None:
        await trio.sleep(at)
        cancel_now()

    async def main() -> Run:
        batch = executor.prepare(calls)
        batches.append(batch)
        for run in batch.plan.runs:
            world.run_of.update(dict.fromkeys(run.call_ids, run.index))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(world.keep_alive)
            if case.cancel in ("at_time", "enclosing"):
                nursery.start_soon(cancel_later, case.cancel_at)
            before = set(counter.live)
            if case.cancel == "before_run":
                cancel_now()
            outcome = None
            with outer:
                outcome = await batch.run(steering=steering)
            state["done"] = True
            leftover = len(counter.live - before)
            nursery.cancel_scope.cancel()
        return Run(batch, outcome, executor, leftover_tasks=leftover)

    clock = trio.testing.MockClock(autojump_threshold=0)
    result = trio.run(main, clock=clock, instruments=[counter])
    result.cancel_fired = state["cancel_fired"]
    result.steer_fired_after = state["steer"]
    world.wait_for_threads()
    return result


# -- the reference ----------------------------------------------------------


def expected_class(case: Case, index: int) -> ErrorClass | None:
    """What a plain in-order run answers for call ``index`` (None: success)."""
    spec = case.calls[index]
    if spec.kind == "unknown":
        return ErrorClass.NOT_FOUND
    if spec.kind in ("bad_json", "invalid"):
        return ErrorClass.INVALID_ARGUMENTS
    tool = case.tools[spec.tool]
    if spec.delay > (tool.timeout or DEFAULT_TIMEOUT):
        return ErrorClass.TIMEOUT
    if tool.op == "boom" or spec.fail != "none":
        return ErrorClass.EXECUTION_ERROR
    return None


def replay(case: Case, applied: set[str]) -> tuple[dict[str, Any], list[Snapshot]]:
    """Apply, in call order, the effects of exactly the calls in ``applied``.

    Returns the final store and, for each call, the store it should see.
    """
    store: dict[str, Any] = {}
    seen: list[Snapshot] = []
    for i, spec in enumerate(case.calls):
        seen.append(snapshot(store))
        tool = case.tools[spec.tool]
        if spec.kind == "tool" and tool.op in MUTATORS and f"c{i}" in applied:
            apply_op(store, tool.op, spec.key, spec.value)
    return store, seen


# -- the property -----------------------------------------------------------


def check(case: Case, world: World, run: Run) -> None:
    outcome = run.outcome
    if outcome is None:
        # Cancelled from an enclosing scope: no results, but the world must be
        # as consistent as after any other cancel.
        assert run.cancel_fired
        assert world.ended_at_cancel is not None
        for cid in world.applied:
            tool = case.tools[case.calls[int(cid[1:])].tool]
            assert tool.sync or cid in world.ended_at_cancel, cid
        check_world(case, world, run)
        event("cancel=enclosing propagated")
        return
    results = outcome.results
    calls = [to_tool_call(case, i) for i in range(len(case.calls))]

    # One result per call, in call order, ids matching.
    assert [r.call_id for r in results] == [c.id for c in calls]
    assert [r.tool_name for r in results] == [c.name for c in calls]
    for r in results:
        assert r.is_error == (r.error_class is not None), r

    # The host's cancel is reported exactly when it landed during the run
    # (a cancel of an enclosing scope is not the batch's to report).
    batch_cancelled = run.cancel_fired and case.cancel != "enclosing"
    assert outcome.cancelled == batch_cancelled
    steered = run.steer_fired_after
    assert outcome.steering_messages == (("stop",) if steered is not None else ())

    # Each call's fate: the reference's, or skipped/cancelled where allowed.
    for i, r in enumerate(results):
        want = expected_class(case, i)
        spec = case.calls[i]
        if spec.kind != "tool":
            assert r.error_class is want, (r, want)
            continue
        allowed = {want}
        if steered is not None and world.run_of[r.call_id] > steered:
            # (a cancel that lands while the skipped results are handed out
            # still marks the outcome cancelled)
            allowed = {ErrorClass.SKIPPED}
            if outcome.cancelled:
                allowed.add(ErrorClass.CANCELLED)
        elif outcome.cancelled:
            allowed.add(ErrorClass.CANCELLED)
        assert r.error_class in allowed, (r, allowed)
        assert r.routing is case.tools[spec.tool].routing, r

    # A call that had not ended when the host cancelled gets ``cancelled``.
    if batch_cancelled:
        assert world.ended_at_cancel is not None
        for r in results:
            if r.error_class not in (ErrorClass.CANCELLED, ErrorClass.SKIPPED):
                assert r.call_id in world.ended_at_cancel or world.run_of.get(r.call_id) is None, (
                    f"{r.call_id} had not ended when the batch was cancelled, "
                    f"yet its result is {r.error_class}"
                )

    # A cancel stops everything after the run it landed in.
    cancelled_runs = [
        world.run_of[r.call_id] for r in results if r.error_class is ErrorClass.CANCELLED
    ]
    if cancelled_runs:
        first = min(cancelled_runs)
        for r in results:
            if world.run_of.get(r.call_id, -1) > first:
                assert r.error_class is ErrorClass.CANCELLED, r

    # Effects happened exactly for the calls that succeeded (a sync call
    # abandoned by a host cancel may have applied its effect).
    applied = set(world.applied)
    for i, r in enumerate(results):
        spec = case.calls[i]
        if spec.kind != "tool" or case.tools[spec.tool].op not in MUTATORS:
            continue
        tool = case.tools[spec.tool]
        if r.error_class is None:
            assert r.call_id in applied, r
        elif r.call_id in applied:
            assert tool.sync, r
            assert r.error_class is ErrorClass.CANCELLED, r
    if not outcome.cancelled and steered is None:
        successes = {r.call_id for r in results if r.error_class is None}
        assert applied <= successes

    for i, r in enumerate(results):
        read = case.calls[i].kind == "tool" and case.tools[case.calls[i].tool].op == "read"
        if read and r.error_class is None:
            assert r.call_id in world.observed, f"successful read {r.call_id} observed nothing"

    check_world(case, world, run)
    event(f"cancel={case.cancel} fired={outcome.cancelled}")
    event(f"successes={sum(r.error_class is None for r in results) > 0}")
    event(f"steered={steered is not None}")
    event(f"strategy={type(case.strategy).__name__}")


def check_world(case: Case, world: World, run: Run) -> None:
    """Check the store, the reads, overlaps, caps, permits and tasks."""
    # The final store is the reference's, over exactly the calls that applied.
    applied = set(world.applied)
    assert len(applied) == len(world.applied), "an effect was applied twice"
    final, seen = replay(case, applied)
    assert world.store == final

    # Every read saw exactly the writes emitted before it.
    for cid, observed in world.observed.items():
        assert observed == seen[int(cid[1:])], (cid, observed, seen[int(cid[1:])])

    # Overlap only within a run; serial mutators alone and in emitted order.
    assert not world.violations, world.violations
    for plan in run.batch.plan.runs:
        if plan.routing is RoutingClass.SERIAL_MUT:
            order = [c for c in world.starts if c in plan.call_ids]
            assert order == sorted(order, key=lambda c: int(c[1:])), order

    # Calls that queue for one permit at a time are admitted in emitted order:
    # a tool capped at 1, and every call of a run whose class pool is 1 wide.
    config = case.config
    widths = {
        RoutingClass.READ_ONLY: config.read_width,
        RoutingClass.CONCURRENT_MUT: config.concurrent_mut_width,
        RoutingClass.SERIAL_MUT: 1,
    }
    capped = {name for name, cap in config.per_tool.items() if cap == 1}
    for plan in run.batch.plan.runs:
        started = [c for c in world.starts if c in plan.call_ids]
        groups = [
            [c for c in started if case.tools[case.calls[int(c[1:])].tool].name == name]
            for name in capped
        ]
        if widths[plan.routing] == 1 and not set(plan.tool_names) & set(config.per_tool):
            groups.append(started)
        for group in groups:
            assert group == sorted(group, key=lambda c: int(c[1:])), (plan, group)

    # Caps never exceeded.
    for routing, peak in world.peak_class.items():
        assert peak <= widths[routing], (routing, peak)
    for name, peak in world.peak_tool.items():
        assert peak <= config.per_tool.get(name, peak), (name, peak)

    # Nothing held, nothing running, nothing left behind.
    stats = run.executor.statistics()
    for pool in (stats.read, stats.concurrent_mut, stats.serial_mut, *stats.per_tool.values()):
        assert pool.borrowed == 0, stats
        assert pool.waiting == 0, stats
    assert stats.calls_in_flight == 0, stats
    assert not world.active, world.active
    assert run.leftover_tasks == 0


@settings(settings.get_profile(stress_profile()))
@given(case=cases())
def test_random_batches_agree_with_in_order_reference(case: Case) -> None:
    """Random batches give the reference's results, store, reads and limits."""
    world = World(case)
    run = execute(case, world)
    check(case, world, run)
