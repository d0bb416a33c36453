"""Random asyncio workloads through ``toolexec.aio``, checked call by call.

Theory of operation. Hypothesis draws a *workload*: a mode (guest or
thread) and a few asyncio *clients* sharing one bridged executor. Each
client runs a few batches, one after another, from its own asyncio task;
between two batches it goes on at once, yields one loop turn, or pauses
past the dispatcher's linger so the guest run goes back to waiting for
I/O. So batches reach the bridge in each of its states: handed to the idle
dispatcher, started in a task of their own while it is busy, or woken
through the I/O-wait thread. A batch's calls are drawn from:

- ``noop``: returns at once, never waits (the batch can finish in one step);
- ``hop``: yields to trio's scheduler a few times;
- ``aio_hop``: an ``asyncio_tool`` whose body yields to the asyncio loop;
- ``capped``: hops, under a per-tool cap of 1 (instrumented);
- ``write``: a serial mutator that hops, then appends to a shared log;
- ``boom``: raises;
- ``stuck`` and ``aio_stuck``: wait forever, in trio or in an asyncio
  body, until their tool timeout (3 ms) ends them;
- ``served``: asks the innermost of 0 - 2 service contexts (a trio task
  answering requests), entered through the bridge before the clients start
  and kept open across their batches, to echo its tag;
- ``delegate``: a ``SubAgentTool`` whose child agent (a scripted model)
  calls ``hop`` once, or delegates once more to a grandchild that does,
  and reports what its call answered.

Some batches are cancelled from the asyncio side after a random number of
loop turns (zero: before the awaiting task even starts), or awaited under
an ``asyncio.timeout`` of up to 3 ms. Some workloads close the executor
(leave its ``async with``) after a random number of loop turns, while
clients still run. In some, every ``write`` and ``delegate`` first asks an
``AsyncioApprover``, which answers on the loop after a few turns: yes for
calls at an even place in their batch, no for the others. Every event goes
to an ``AsyncioSink``.

The checks, for every example:

- a batch that was not cut short returns one result per call, in call
  order, with the call's id and the expected text or error class
  (``timeout`` for the stuck tools, ``user_denied`` for a refused write
  or delegation); each tool, a child agent's too, saw the context variable
  its own client set, never another's;
- a cancelled batch raises ``CancelledError`` and one past its asyncio
  deadline ``TimeoutError``, unless it ended first (then it returns the
  whole outcome); once the close begins, a batch either finishes whole or
  raises ``RuntimeError``;
- the writes of one batch reach the log in call order (approved ones
  only, when approving): all of them for a finished batch, a prefix of
  them for a cut one; no write is logged twice;
- two ``write`` calls never overlap, nor do two ``capped`` calls;
- every asyncio tool body and every approval has ended;
- the service contexts were each entered once and left once, in reverse
  order, after the batches;
- every event reached the sink on the loop's thread; each call of a batch
  that was sent and not cut by the close has exactly one end event, of the
  kind its result says, after its start event if it has one;
- once every client is done, and again after the close, the executor holds
  no permit, has no call in flight and nobody waits for one;
- the bridge closes within the deadline (nothing left running in the trio
  run) and no asyncio task outlives the example.

Real time: asyncio has no mock clock, so the pauses between batches, the
stuck tools' timeouts and the asyncio deadlines are real, each a few
milliseconds at most.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import json
import threading
from typing import TYPE_CHECKING, Any, Literal

import attrs
import trio
from hypothesis import event, given, settings
from hypothesis import strategies as st

import toolexec.aio
from stress.conftest import stress_profile
from toolexec import (
    BatchOutcome,
    ConcurrencyConfig,
    ErrorClass,
    SideEffects,
    SubAgentTool,
    ToolCall,
    ToolRegistry,
    function_tool,
)
from toolexec.approval import ApprovalAnswer, ApprovalConfig, ApprovalRequest
from toolexec.events import CallCompleted, CallFailed, CallStarted, Event
from toolexec.testing import ScriptedModel, tool_call

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

Tool = Literal[
    "noop", "hop", "aio_hop", "capped", "write", "boom", "stuck", "aio_stuck", "served", "delegate"
]
TOOLS: tuple[Tool, ...] = (  # the first shrinks best: the simplest
    "noop",
    "hop",
    "aio_hop",
    "capped",
    "write",
    "boom",
    "stuck",
    "aio_stuck",
    "served",
    "delegate",
)
ASKING = ("write", "delegate")  # the tools that need approval, when approving
Gap = Literal["none", "turn", "pause"]
Stop = Literal["none", "cancel", "deadline"]
PAUSE = 0.002  # seconds: past the dispatcher's linger (toolexec.aio.LINGER)
STUCK_TIMEOUT = 0.003  # seconds: the stuck tools' own timeout
TICK = 0.0005  # seconds: a batch's asyncio deadline is ``after`` of these
DEADLINE = 60.0  # seconds for a whole example: a hang is a failure


@attrs.frozen
class Call:
    tool: Tool
    hops: int


@attrs.frozen
class Batch:
    calls: tuple[Call, ...]
    stop: Stop  # cancelled after ``after`` loop turns, or a deadline ``after`` ticks away
    after: int
    gap: Gap  # before this batch


@attrs.frozen
class Workload:
    mode: toolexec.aio.Mode
    clients: tuple[tuple[Batch, ...], ...]
    close_after: int | None  # loop turns before closing while clients run
    approving: bool  # ``write`` calls ask an asyncio approver first
    services: int  # service contexts entered through the bridge, one inside the other


calls = st.builds(Call, st.sampled_from(TOOLS), st.integers(0, 3))
batches = st.builds(
    Batch,
    st.lists(calls, max_size=8).map(tuple),
    st.sampled_from(("none", "none", "cancel", "deadline")),
    st.integers(0, 6),
    st.sampled_from(("none", "none", "turn", "pause")),
)
workloads = st.builds(
    Workload,
    st.sampled_from(("guest", "guest", "guest", "thread")),
    st.lists(st.lists(batches, min_size=1, max_size=4).map(tuple), min_size=1, max_size=4).map(
        tuple
    ),
    st.none() | st.none() | st.integers(0, 4),
    st.booleans(),
    st.integers(0, 2),
)


def approved(call_id: str) -> bool:
    """The approver's answer: yes for calls at an even place in their batch.

    A child agent's calls (ids the scripted model made) are always approved.
    """
    client, _, place = call_id.rpartition(".")
    return not client or int(place) % 2 == 0


@attrs.frozen
class Sent:
    """A batch as sent, how it ended, and its outcome when it finished whole."""

    calls: list[ToolCall]
    end: Literal["whole", "cancelled", "closed"]
    outcome: BatchOutcome | None = None


# A request to a service context: the tag, and where to send the answer.
Request = tuple[str, "trio.MemorySendChannel[str]"]


@attrs.define
class World:
    """What the tools, the approver, the sink and the service contexts saw."""

    log: list[str] = attrs.Factory(list)  # the writes, in the order they happened
    running: dict[str, int] = attrs.Factory(lambda: {"write": 0, "capped": 0})
    most: dict[str, int] = attrs.Factory(lambda: {"write": 0, "capped": 0})  # high-water marks
    asyncio_bodies: int = 0  # running now
    asking: int = 0  # approvals under way
    events: list[tuple[int, Event]] = attrs.Factory(list)  # (thread, event), as delivered
    services: list[trio.MemorySendChannel[Request]] = attrs.Factory(list)  # innermost last
    context_log: list[str] = attrs.Factory(list)  # service contexts entered and left

    def deliver(self, event: Event) -> None:
        self.events.append((threading.get_ident(), event))

    async def ask(self, request: ApprovalRequest) -> ApprovalAnswer:
        """Answer after a few asyncio loop turns, on the loop's thread."""
        assert threading.current_thread() is threading.main_thread()
        event("an approval was asked")
        self.asking += 1
        try:
            for _ in range(json.loads(request.arguments).get("hops", 1)):
                await asyncio.sleep(0)
        finally:
            self.asking -= 1
        return ApprovalAnswer(approved(request.call_id), by="property")

    async def exclusive(self, name: str, hops: int) -> None:
        self.running[name] += 1
        self.most[name] = max(self.most[name], self.running[name])
        try:
            for _ in range(hops + 1):
                await trio.sleep(0)
        finally:
            self.running[name] -= 1


# Set by each client in its own task; the batches it sends, and their tools
# (asyncio bodies too), see a copy of that task's context variables.
CLIENT: contextvars.ContextVar[str] = contextvars.ContextVar("client", default="none")


def seen(tag: str) -> str:
    """The answer of a tool that succeeds: its tag and the client it ran for."""
    return f"{tag}@{CLIENT.get()}"


@contextlib.asynccontextmanager
async def service(world: World, name: str) -> AsyncIterator[None]:
    """A trio service that lives across batches: a task answering requests."""

    async def serve(requests: trio.MemoryReceiveChannel[Request]) -> None:
        async for tag, reply in requests:
            await trio.sleep(0)
            await reply.send(tag)

    world.context_log.append(f"enter {name}")
    send, receive = trio.open_memory_channel[Request](0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve, receive)
        world.services.append(send)
        try:
            yield
        finally:
            world.services.remove(send)
            nursery.cancel_scope.cancel()
            world.context_log.append(f"exit {name}")


def registry_for(world: World) -> ToolRegistry:
    @function_tool(side_effects=SideEffects.READ)
    async def noop(tag: str, hops: int) -> str:
        """Return the tag at once."""
        return seen(tag)

    @function_tool(side_effects=SideEffects.READ)
    async def hop(tag: str, hops: int) -> str:
        """Yield to trio ``hops`` times, then return the tag."""
        for _ in range(hops):
            await trio.sleep(0)
        return seen(tag)

    @function_tool(side_effects=SideEffects.READ)
    @toolexec.aio.asyncio_tool
    async def aio_hop(tag: str, hops: int) -> str:
        """Yield to the asyncio loop ``hops`` times, then return the tag."""
        world.asyncio_bodies += 1
        try:
            for _ in range(hops):
                await asyncio.sleep(0)
        finally:
            world.asyncio_bodies -= 1
        return seen(tag)

    @function_tool(side_effects=SideEffects.READ, timeout=STUCK_TIMEOUT)
    async def stuck(tag: str, hops: int) -> str:
        """Wait in trio until the timeout."""
        await trio.sleep_forever()

    @function_tool(side_effects=SideEffects.READ, timeout=STUCK_TIMEOUT)
    @toolexec.aio.asyncio_tool
    async def aio_stuck(tag: str, hops: int) -> str:
        """Wait in asyncio until the timeout."""
        world.asyncio_bodies += 1
        try:
            await asyncio.Event().wait()
        finally:
            world.asyncio_bodies -= 1
        return seen(tag)

    @function_tool(side_effects=SideEffects.READ)
    async def capped(tag: str, hops: int) -> str:
        """Hop under a per-tool cap of one."""
        await world.exclusive("capped", hops)
        return seen(tag)

    @function_tool(side_effects=SideEffects.EXECUTE)
    async def write(tag: str, hops: int) -> str:
        """Hop, then append the tag to the log (no checkpoint after it)."""
        await world.exclusive("write", hops)
        world.log.append(tag)
        return seen(tag)

    @function_tool(side_effects=SideEffects.READ)
    async def boom(tag: str, hops: int) -> str:
        """Fail."""
        raise RuntimeError(f"boom {tag}")

    @function_tool(side_effects=SideEffects.READ)
    async def served(tag: str, hops: int) -> str:
        """Have the innermost service context echo the tag (or echo it here if none)."""
        if world.services:
            reply, replies = trio.open_memory_channel[str](1)
            await world.services[-1].send((tag, reply))
            tag = await replies.receive()
        return seen(tag)

    def first_step(messages: Any) -> ToolCall:
        # The task is the tag, with one ">" per level still to go down: the
        # child hands the rest to a grandchild, or hops with the tag.
        task: str = messages[-1].text
        if task.endswith(">"):
            return tool_call("delegate", {"task": task[:-1]})
        return tool_call("hop", {"tag": task, "hops": 1})

    def child() -> ScriptedModel:
        return ScriptedModel(
            [first_step, lambda messages: f"child got {messages[-1].tool_results[0].text}"]
        )

    delegate = SubAgentTool(
        name="delegate",
        description="Hand the tag to a child agent.",
        system_prompt="You hop.",
        model=child,
    )

    registry = ToolRegistry()
    for tool in (noop, hop, aio_hop, capped, write, boom, stuck, aio_stuck, served, delegate):
        registry.register(tool)
    return registry


def tool_calls(client: int, index: int, batch: Batch) -> list[ToolCall]:
    """The batch's calls; each call's id is its tag (a sub-agent's task)."""
    sent = []
    for i, c in enumerate(batch.calls):
        tag = f"{client}.{index}.{i}"
        if c.tool == "delegate":  # an odd ``hops`` goes one level deeper
            arguments: dict[str, Any] = {"task": tag + ">" * (c.hops % 2)}
        else:
            arguments = {"tag": tag, "hops": c.hops}
        sent.append(ToolCall(tag, c.tool, arguments))
    return sent


def check_outcome(outcome: BatchOutcome, sent: list[ToolCall], approving: bool) -> None:
    assert [r.call_id for r in outcome.results] == [c.id for c in sent]
    for result, call in zip(outcome.results, sent, strict=True):
        if call.name in ASKING and approving and not approved(call.id):
            assert result.is_error
            assert result.error_class is ErrorClass.USER_DENIED, result.text
        elif call.name == "boom":
            assert result.is_error
            assert result.error_class is ErrorClass.EXECUTION_ERROR
        elif call.name in ("stuck", "aio_stuck"):
            assert result.is_error
            assert result.error_class is ErrorClass.TIMEOUT, result.text
        elif call.name == "delegate":  # the deepest child's call saw the client too
            assert not result.is_error, result.text
            levels = 1 + str(call.arguments).count(">")
            event(f"a delegation ended, {levels} level(s) down")
            answer = f"{call.id}@{call.id.split('.')[0]}"
            assert result.text == "child got " * levels + answer
        else:
            assert not result.is_error, result.text
            assert result.text == f"{call.id}@{call.id.split('.')[0]}"  # its own client's


async def run_client(
    ex: toolexec.aio.AsyncioExecutor, client: int, plan: tuple[Batch, ...], workload: Workload
) -> list[Sent]:
    """Run the client's batches; return each one as sent, with how it ended.

    A batch is cut short by its cancel, or by the executor's close when
    it closes: then it fails with ``RuntimeError``, and the client goes on
    sending (a later batch may still finish whole, or fail the same way).
    """
    CLIENT.set(str(client))  # in this client's task only: gather gave it a context of its own
    done: list[Sent] = []
    for index, batch in enumerate(plan):
        if batch.gap == "turn":
            await asyncio.sleep(0)
        elif batch.gap == "pause":
            await asyncio.sleep(PAUSE)
        sent = tool_calls(client, index, batch)
        try:
            outcome = await send(ex, sent, batch)
        except RuntimeError as exc:
            message = str(exc)
            assert workload.close_after is not None, message
            assert "stopped" in message or "closed" in message, message
            event("a batch met the close")
            done.append(Sent(sent, "closed"))
        except asyncio.CancelledError:
            assert batch.stop == "cancel"  # nobody else cancels
            event("a batch was cancelled")
            done.append(Sent(sent, "cancelled"))
        except TimeoutError:
            assert batch.stop == "deadline"
            event("a batch hit its asyncio deadline")
            done.append(Sent(sent, "cancelled"))
        else:
            if batch.stop != "none":
                event(f"a batch ended before its {batch.stop}")
            check_outcome(outcome, sent, workload.approving)
            done.append(Sent(sent, "whole", outcome))
    return done


async def send(
    ex: toolexec.aio.AsyncioExecutor, sent: list[ToolCall], batch: Batch
) -> BatchOutcome:
    """Run one batch, cancelled or under a deadline as the batch says."""
    if batch.stop == "deadline":
        async with asyncio.timeout(batch.after * TICK):
            return await ex.execute_batch(sent)
    task = asyncio.create_task(ex.execute_batch(sent))
    if batch.stop == "cancel":
        for _ in range(batch.after):
            await asyncio.sleep(0)
        task.cancel()
    return await task


def check_quiet(ex: toolexec.aio.AsyncioExecutor) -> None:
    stats = ex.executor.statistics()
    assert stats.calls_in_flight == 0
    for pool in (stats.read, stats.concurrent_mut, stats.serial_mut, *stats.per_tool.values()):
        assert (pool.borrowed, pool.waiting) == (0, 0), stats


def check_writes(world: World, finished: list[Sent], approving: bool) -> None:
    for batch in finished:
        writes = [
            c.id for c in batch.calls if c.name == "write" and (not approving or approved(c.id))
        ]
        logged = [tag for tag in world.log if tag in set(writes)]
        if batch.end == "whole":
            assert logged == writes
        else:
            assert logged == writes[: len(logged)]
    assert len(world.log) == len(set(world.log))  # each write at most once
    assert world.most["write"] <= 1
    assert world.most["capped"] <= 1
    assert world.asyncio_bodies == 0
    assert world.asking == 0


def check_events(world: World, finished: list[Sent]) -> None:
    """Events: on the loop's thread; per call, one start before one end."""
    assert {thread for thread, _ in world.events} <= {threading.get_ident()}
    started: dict[str, list[int]] = collections.defaultdict(list)
    ended: dict[str, list[tuple[int, Event]]] = collections.defaultdict(list)
    for at, (_, e) in enumerate(world.events):
        if isinstance(e, CallStarted):
            started[e.call_id].append(at)
        elif isinstance(e, (CallCompleted, CallFailed)):
            ended[e.call_id].append((at, e))
    for batch in finished:
        told = any(started[c.id] or ended[c.id] for c in batch.calls)
        if batch.end == "cancelled" and not told:
            continue  # cancelled before it was sent
        for i, call in enumerate(batch.calls):
            assert len(started[call.id]) <= 1
            if batch.end == "closed":  # the run may stop before it reports
                assert len(ended[call.id]) <= 1
                continue
            ((at, end),) = ended[call.id]
            assert all(start < at for start in started[call.id])
            if batch.outcome is not None:
                failed = batch.outcome.results[i].is_error
                assert isinstance(end, CallFailed if failed else CallCompleted)


async def run_workload(workload: Workload) -> None:
    world = World()
    config = ConcurrencyConfig(per_tool={"capped": 1})
    options: dict[str, Any] = {"config": config, "sinks": [toolexec.aio.AsyncioSink(world.deliver)]}
    if workload.approving:
        options.update(approver=toolexec.aio.AsyncioApprover(world.ask), approval=ApprovalConfig())
    async with asyncio.timeout(DEADLINE):
        async with toolexec.aio.open_executor(
            registry_for(world), mode=workload.mode, **options
        ) as ex:
            for i in range(workload.services):
                await ex.enter(service(world, f"s{i}"))
            clients = asyncio.gather(
                *(run_client(ex, i, plan, workload) for i, plan in enumerate(workload.clients))
            )
            if workload.close_after is None:
                await clients
                check_quiet(ex)
            else:
                for _ in range(workload.close_after):
                    await asyncio.sleep(0)
        results = await clients  # after the close, when closing early
        check_quiet(ex)
    await asyncio.sleep(0)  # the sink's last callbacks, scheduled before the close ended
    finished = [batch for client in results for batch in client]
    check_writes(world, finished, workload.approving)
    check_events(world, finished)
    names = [f"s{i}" for i in range(workload.services)]
    assert world.context_log == [f"enter {n}" for n in names] + [
        f"exit {n}" for n in reversed(names)
    ]
    assert asyncio.all_tasks() == {asyncio.current_task()}


@settings(settings.get_profile(stress_profile()))
@given(workloads)
def test_bridged_batches_keep_order_and_leave_nothing(workload: Workload) -> None:
    asyncio.run(run_workload(workload))


def test_the_pause_outlasts_the_dispatchers_linger() -> None:
    # The "pause" gap is meant to let the guest run go back to waiting for I/O.
    assert toolexec.aio.LINGER < PAUSE
