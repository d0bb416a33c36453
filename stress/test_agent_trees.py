"""Random agent trees: they always finish, and keep every ordering promise.

Theory of operation. Hypothesis draws a *tree*: each agent has up to three
turns, each turn a batch of up to five calls mixing reads, default (serial)
mutators, promoted (concurrent) mutators, calls to an unknown tool, and
sub-agent calls, each starting a child agent with its own random turns; up
to depth 4 and up to 6 children per agent. It also draws every pool width
(read, concurrent-mutator, serial-mutator, and a per-tool cap on the
sub-agent tool) from 1 to 3, and a strategy. One shared ``TreeModel``
answers for every agent: the task names the node, the number of assistant
messages so far names the turn.

The tree runs under ``MockClock(autojump_threshold=0)`` and ``fail_after``:
when every task is blocked the clock jumps to the next deadline, so a
deadlock ends as ``TooSlowError`` instead of hanging, and a slow tree costs
no wall time. The checks:

- the root finishes with the answer of its last turn;
- every call anywhere in the tree gets exactly one result event, and only
  the calls to the unknown tool are errors;
- default mutators never overlap more than the serial width allows,
  *across the whole tree* (with width 1: never), and reads stay within the
  shared read width;
- concurrent mutators (promoted writes and sub-agent calls) stay within the
  concurrent-mutator width *per agent*, and sub-agent calls within their
  per-tool cap per agent;
- every event of a child happens while one of its parent's sub-agent calls
  is running (events are causally nested), and names that call and its
  batch as its parent (``parent_call_id``, ``parent_batch_id``); the root's
  events name none;
- traced through ``OTelSink``, every call has one span, and the nearest call
  span above it is the one of the call that spawned its agent (none for the
  root's calls).
"""

from __future__ import annotations

import itertools
from collections import Counter
from typing import TYPE_CHECKING, Any, Literal

import attrs
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from stress.conftest import stress_profile
from toolexec import (
    AgentLoop,
    AgentTree,
    Batched,
    ConcurrencyConfig,
    ErrorClass,
    ExecutionStrategy,
    Parallel,
    RoutingClass,
    Sequential,
    SideEffects,
    SubAgentTool,
    ToolCall,
    ToolExecutor,
    ToolRegistry,
    TreeLimits,
    function_tool,
)
from toolexec.events import (
    CallbackSink,
    CallCompleted,
    CallFailed,
    CallStarted,
    Event,
    EventSink,
)
from toolexec.models import ModelResponse

if TYPE_CHECKING:
    from collections.abc import Sequence

    from toolexec import ToolDefinition
    from toolexec.models import Message

# Slow (tests/README.md): random agent trees, traced.
pytestmark = pytest.mark.slow

Kind = Literal["read", "write", "promo", "unknown", "sub"]
MAX_DEPTH = 4
MAX_FAN_OUT = 6


@attrs.frozen
class CallSpec:
    id: str
    kind: Kind
    delay: int
    child: str | None = None


@attrs.frozen
class Node:
    id: str
    depth: int
    turns: tuple[tuple[CallSpec, ...], ...]


@attrs.frozen
class Case:
    nodes: dict[str, Node]
    config: ConcurrencyConfig
    strategy: ExecutionStrategy

    @property
    def calls(self) -> list[CallSpec]:
        return [c for n in self.nodes.values() for turn in n.turns for c in turn]


@st.composite
def cases(draw: st.DrawFn) -> Case:
    budget = [draw(st.integers(0, 24))]  # sub-agents left to place
    ids = itertools.count()
    nodes: dict[str, Node] = {}

    def node(depth: int) -> str:
        nid = f"n{next(ids)}"
        children = 0
        turns = []
        for t in range(draw(st.integers(0 if depth else 1, 3))):
            calls = []
            for i in range(draw(st.integers(1, 5))):
                kinds: list[Kind] = ["read", "write", "promo", "unknown"]
                if depth < MAX_DEPTH and children < MAX_FAN_OUT and budget[0] > 0:
                    kinds += ["sub", "sub"]
                kind = draw(st.sampled_from(kinds))
                child = None
                if kind == "sub":
                    budget[0] -= 1
                    children += 1
                    child = node(depth + 1)
                calls.append(CallSpec(f"{nid}.{t}.{i}", kind, draw(st.integers(0, 3)), child))
            turns.append(tuple(calls))
        nodes[nid] = Node(nid, depth, tuple(turns))
        return nid

    node(0)
    width = st.integers(1, 3)
    config = ConcurrencyConfig(
        read_width=draw(width),
        concurrent_mut_width=draw(width),
        serial_mut_width=draw(width),
        per_tool={"sub": draw(width)},
        promoted=frozenset({"promo"}),
    )
    strategy = draw(st.sampled_from([Parallel(), Sequential(), Batched(2)]))
    return Case(nodes, config, strategy)


_TOOL_NAMES = {"read": "read", "write": "write", "promo": "promo", "unknown": "nope"}


@attrs.define
class TreeModel:
    """Answers for every agent of the tree from its node's spec."""

    nodes: dict[str, Node]

    async def respond(
        self, messages: Sequence[Message], tools: Sequence[ToolDefinition]
    ) -> ModelResponse:
        await trio.lowlevel.checkpoint()
        node = self.nodes[next(m.text for m in messages if m.role == "user")]
        turn = sum(m.role == "assistant" for m in messages)
        if turn == len(node.turns):
            return ModelResponse(f"done {node.id}")
        return ModelResponse(tool_calls=tuple(_call(c) for c in node.turns[turn]))


def _call(spec: CallSpec) -> ToolCall:
    if spec.kind == "sub":
        return ToolCall(spec.id, "sub", {"task": spec.child})
    return ToolCall(spec.id, _TOOL_NAMES[spec.kind], {"delay": spec.delay})


@attrs.define
class Watch:
    """Counts what runs at once: per class across the tree, and per agent."""

    running: Counter[str] = attrs.field(factory=Counter)
    peak: Counter[str] = attrs.field(factory=Counter)
    routing: dict[str, RoutingClass] = attrs.field(factory=dict)
    results: Counter[str] = attrs.field(factory=Counter)
    errors: dict[str, ErrorClass] = attrs.field(factory=dict)
    live_subs: Counter[str] = attrs.field(factory=Counter)
    orphans: list[Event] = attrs.field(factory=list)
    events: list[Event] = attrs.field(factory=list)

    def enter(self, key: str) -> None:
        self.running[key] += 1
        self.peak[key] = max(self.peak[key], self.running[key])

    def leave(self, key: str) -> None:
        self.running[key] -= 1

    def on_event(self, event: Event) -> None:
        self.events.append(event)
        path = event.agent_path
        if "/" in path and self.live_subs[path.rsplit("/", 1)[0]] == 0:
            self.orphans.append(event)
        if isinstance(event, CallStarted):
            self.routing[event.call_id] = event.routing
            if event.routing is RoutingClass.CONCURRENT_MUT:
                self.enter(f"cmut {path}")
            if event.tool_name == "sub":
                self.enter(f"sub {path}")
                self.live_subs[path] += 1
        elif isinstance(event, (CallCompleted, CallFailed)):
            self.results[event.call_id] += 1
            if isinstance(event, CallFailed):
                self.errors[event.call_id] = event.error_class
            if self.routing.get(event.call_id) is RoutingClass.CONCURRENT_MUT:
                self.leave(f"cmut {path}")
            if event.tool_name == "sub" and event.call_id in self.routing:
                self.leave(f"sub {path}")
                self.live_subs[path] -= 1


def make_registry(case: Case, watch: Watch) -> ToolRegistry:
    registry = ToolRegistry()

    def leaf(name: str, effects: SideEffects, key: str) -> None:
        @function_tool(name=name, side_effects=effects)
        async def tool(delay: int) -> str:
            """A leaf call that takes ``delay`` seconds of mock time."""
            watch.enter(key)
            try:
                await trio.sleep(delay)
                await trio.lowlevel.checkpoint()
            finally:
                watch.leave(key)
            return f"{name} ok"

        registry.register(tool)

    leaf("read", SideEffects.READ, "read (tree)")
    leaf("write", SideEffects.WRITE, "write (tree)")
    leaf("promo", SideEffects.WRITE, "promo (any agent)")
    registry.register(
        SubAgentTool(
            name="sub",
            description="Delegate to a child agent.",
            system_prompt="You are a child agent.",
            model=TreeModel(case.nodes),
            timeout=10.0**9,  # longer than the guard: a deadlock must hit the guard
        )
    )
    return registry


async def run_case(case: Case, *sinks: EventSink) -> tuple[Any, Watch]:
    watch = Watch()
    executor = ToolExecutor(
        make_registry(case, watch),
        config=case.config,
        strategy=case.strategy,
        sinks=[CallbackSink(watch.on_event), *sinks],
        services=[AgentTree(TreeLimits(MAX_DEPTH, MAX_FAN_OUT, max_agents=1000))],
    )
    with trio.fail_after(10.0**7):  # a deadlock ends here, as TooSlowError
        result = await AgentLoop(TreeModel(case.nodes), executor).run("n0")
    return result, watch


@settings(settings.get_profile(stress_profile()))
@given(cases())
def test_random_trees_finish_and_keep_their_promises(case: Case) -> None:
    result, watch = trio.run(run_case, case, clock=trio.testing.MockClock(autojump_threshold=0))
    config = case.config

    assert result.finished
    assert result.text == "done n0"

    # Exactly one result per call, anywhere in the tree; only unknown tools fail.
    expected = {c.id for c in case.calls}
    assert set(watch.results) == expected
    assert set(watch.results.values()) <= {1}
    unknown = {c.id for c in case.calls if c.kind == "unknown"}
    assert watch.errors == dict.fromkeys(unknown, ErrorClass.NOT_FOUND)

    # Shared pools bound the whole tree; forked pools bound each agent.
    assert watch.peak["write (tree)"] <= config.serial_mut_width
    assert watch.peak["read (tree)"] <= config.read_width
    per_agent = [v for k, v in watch.peak.items() if k.startswith("cmut ")]
    assert max(per_agent, default=0) <= config.concurrent_mut_width
    subs = [v for k, v in watch.peak.items() if k.startswith("sub ")]
    assert max(subs, default=0) <= config.per_tool["sub"]
    assert all(v == 0 for v in watch.running.values())

    # A child's events all happen inside one of its parent's sub-agent calls,
    # and each names that call and its batch as its parent.
    assert watch.orphans == []
    check_parent_links(case, watch.events)


def check_parent_links(case: Case, events: list[Event]) -> None:
    """Every event names the call (and batch) that spawned its agent; the root's name none."""
    spawner = {c.child: c.id for c in case.calls if c.child is not None}
    node_of_batch: dict[str, str] = {}
    batch_of_call: dict[str, str] = {}
    for event in events:
        if isinstance(event, CallStarted | CallCompleted | CallFailed):
            node_of_batch[event.batch_id] = event.call_id.split(".")[0]
            batch_of_call[event.call_id] = event.batch_id
    for event in events:
        node = node_of_batch.get(event.batch_id)
        if node is None:  # a batch none of whose calls started (not in these trees)
            continue
        parent_call = spawner.get(node)
        assert event.parent_call_id == parent_call, (node, event)
        expected_batch = None if parent_call is None else batch_of_call[parent_call]
        assert event.parent_batch_id == expected_batch, (node, event)


@settings(settings.get_profile(stress_profile()))
@given(cases())
def test_random_trees_trace_as_their_call_tree(case: Case) -> None:
    """With ``OTelSink``: each call's span sits under the span of the call that
    spawned its agent (through its run's and batch's spans), never a sibling's."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from toolexec.otel import OTelSink

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        sink = OTelSink(provider.get_tracer("stress"))
        result, _ = trio.run(
            run_case, case, sink, clock=trio.testing.MockClock(autojump_threshold=0)
        )
        spans = exporter.get_finished_spans()
    finally:
        provider.shutdown()
    assert result.finished
    by_id = {span.context.span_id: span for span in spans if span.context is not None}
    call_span: dict[str, int] = {}
    for span in spans:
        if span.name.startswith("execute_tool ") and span.context is not None:
            assert span.attributes is not None
            call_id = str(span.attributes["gen_ai.tool.call.id"])
            assert call_id not in call_span, f"two spans for {call_id}"
            call_span[call_id] = span.context.span_id
    assert set(call_span) == {c.id for c in case.calls}
    spawner = {c.child: c.id for c in case.calls if c.child is not None}

    def enclosing_call(span_id: int) -> int | None:
        """The nearest ``execute_tool`` span above this one, if any."""
        parent = by_id[span_id].parent
        while parent is not None:
            above = by_id[parent.span_id]
            if above.name.startswith("execute_tool "):
                return parent.span_id
            parent = above.parent
        return None

    for call_id, span_id in call_span.items():
        spawned_by = spawner.get(call_id.split(".")[0])
        expected = None if spawned_by is None else call_span[spawned_by]
        assert enclosing_call(span_id) == expected, (call_id, spawned_by)
    assert all(span.end_time is not None for span in spans)


def test_a_wide_deep_tree_at_width_one_finishes() -> None:
    """The tightest case, fixed: every pool at width 1, a full tree of depth 4."""
    nodes: dict[str, Node] = {}
    ids = itertools.count()

    def node(depth: int) -> str:
        nid = f"n{next(ids)}"
        calls: list[CallSpec] = [CallSpec(f"{nid}.0.w", "write", 1)]
        if depth < MAX_DEPTH:
            calls += [CallSpec(f"{nid}.0.s{i}", "sub", 0, node(depth + 1)) for i in range(2)]
        calls.append(CallSpec(f"{nid}.0.r", "read", 1))
        nodes[nid] = Node(nid, depth, (tuple(calls),))
        return nid

    node(0)
    config = ConcurrencyConfig(1, 1, 1, per_tool={"sub": 1}, promoted=frozenset({"promo"}))
    case = Case(nodes, config, Parallel())
    result, watch = trio.run(run_case, case, clock=trio.testing.MockClock(autojump_threshold=0))
    assert result.text == "done n0"
    assert len(watch.results) == len(case.calls) == 31 * 2 + 30
    assert watch.peak["write (tree)"] == 1
