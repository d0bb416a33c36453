"""OTelSink: span names, GenAI attributes, errors, nesting, times and sub-agents."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
import trio
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from toolexec import (
    AgentLoop,
    BatchPlan,
    SideEffects,
    SubAgentTool,
    ToolCall,
    ToolContext,
    ToolError,
    ToolExecutor,
    ToolRegistry,
    function_tool,
)
from toolexec.approval import ApprovalAnswer, ApprovalRequest
from toolexec.events import (
    BatchFinished,
    BatchPlanned,
    CallProgress,
    InputInvalid,
    RunFinished,
)
from toolexec.otel import OTelSink
from toolexec.testing import ScriptedModel, tool_call

if TYPE_CHECKING:
    from collections.abc import Iterator


@function_tool(side_effects=SideEffects.READ)
async def look(seconds: int) -> str:
    """Take a while to read."""
    await trio.sleep(seconds)
    return "seen"


@function_tool(side_effects=SideEffects.WRITE)
async def put(seconds: int) -> str:
    """Take a while to write; fail on zero."""
    await trio.sleep(seconds)
    if seconds == 0:
        raise ToolError("nothing to put")
    return "put"


@function_tool(side_effects=SideEffects.READ)
async def tell(text: str, ctx: ToolContext) -> str:
    """Report progress, then answer."""
    ctx.report_progress(text)
    await trio.lowlevel.checkpoint()
    return text


@pytest.fixture
def provider() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()  # local: the global provider is left alone
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def registry(*tools: object) -> ToolRegistry:
    reg = ToolRegistry()
    for tool in (look, put, tell, *tools):
        reg.register(tool)  # type: ignore[arg-type]
    return reg


def by_name(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def tool_spans(spans: tuple[ReadableSpan, ...], tool: str = "") -> dict[str, ReadableSpan]:
    """The ``execute_tool`` spans (of ``tool``, if given) by call id."""
    found = {}
    for span in spans:
        if span.name.startswith(f"execute_tool {tool}"):
            assert span.attributes is not None
            found[str(span.attributes["gen_ai.tool.call.id"])] = span
    return found


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    found: int = span.context.span_id
    return found


async def test_spans_nest_batch_run_call_under_the_host_span(
    provider: tuple[TracerProvider, InMemorySpanExporter], autojump_clock: object
) -> None:
    tp, exporter = provider
    tracer = tp.get_tracer("test")
    executor = ToolExecutor(registry(), sinks=[OTelSink(tracer)])
    calls = [
        ToolCall("r1", "look", {"seconds": 2}),
        ToolCall("w1", "put", {"seconds": 1}),
        ToolCall("w2", "put", {"seconds": 0}),
        ToolCall("x", "nope", {}),
    ]
    with tracer.start_as_current_span("host turn") as host:
        await executor.execute_batch(calls)
    spans = exporter.get_finished_spans()

    (batch,) = by_name(spans, "toolexec.batch")
    assert parent_of(batch) == host.get_span_context().span_id
    assert batch.attributes is not None
    assert batch.attributes["toolexec.batch.id"] == "root:b0"
    assert batch.attributes["toolexec.batch.cancelled"] is False
    runs = sorted(by_name(spans, "toolexec.run"), key=lambda s: s.start_time or 0)
    assert [r.attributes and r.attributes["toolexec.run.routing"] for r in runs] == [
        "read_only",
        "serial_mut",
    ]
    assert all(parent_of(r) == span_id(batch) for r in runs)

    (read,) = by_name(spans, "execute_tool look")
    assert dict(read.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "look",
        "gen_ai.tool.call.id": "r1",
    }
    assert parent_of(read) == span_id(runs[0])
    assert read.status.status_code is StatusCode.UNSET
    # Spans carry the trio clock's times: the read took two (virtual) seconds.
    assert (read.end_time or 0) - (read.start_time or 0) == 2_000_000_000
    writes = tool_spans(spans, "put")
    assert parent_of(writes["w1"]) == parent_of(writes["w2"]) == span_id(runs[1])
    failed = writes["w2"]
    assert failed.attributes is not None
    assert failed.attributes["error.type"] == "execution_error"
    assert failed.status.status_code is StatusCode.ERROR
    assert "nothing to put" in (failed.status.description or "")
    # A call answered when the batch was planned hangs off the batch span.
    (unknown,) = by_name(spans, "execute_tool nope")
    assert parent_of(unknown) == span_id(batch)
    assert unknown.attributes is not None
    assert unknown.attributes["error.type"] == "not_found"
    assert len(spans) == 1 + 1 + 2 + 4


async def test_approvals_and_progress_are_events_on_the_call_span(
    provider: tuple[TracerProvider, InMemorySpanExporter], autojump_clock: object
) -> None:
    tp, exporter = provider

    class SlowHuman:
        async def request(self, request: ApprovalRequest) -> ApprovalAnswer:
            await trio.sleep(5)
            return ApprovalAnswer(request.call_id == "yes", "human")

    executor = ToolExecutor(registry(), sinks=[OTelSink(tp.get_tracer("t"))], approver=SlowHuman())
    await executor.execute_batch(
        [
            ToolCall("yes", "put", {"seconds": 1}),
            ToolCall("no", "put", {"seconds": 1}),
            ToolCall("t", "tell", {"text": "halfway"}),
        ]
    )
    spans = tool_spans(exporter.get_finished_spans())
    approved, denied = spans["yes"], spans["no"]
    assert [(e.name, e.attributes) for e in spans["t"].events] == [
        ("progress", {"message": "halfway"})
    ]
    assert [e.name for e in approved.events] == ["approval_requested", "approval_resolved"]
    assert approved.events[1].attributes == {"approved": True, "by": "human"}
    assert (approved.end_time or 0) - (approved.start_time or 0) == 6_000_000_000
    assert [e.name for e in denied.events] == ["approval_requested", "approval_resolved"]
    assert denied.attributes is not None
    assert denied.attributes["error.type"] == "user_denied"


async def test_sibling_sub_agents_sit_under_their_own_parent_call(
    provider: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    tp, exporter = provider

    researcher = SubAgentTool(
        name="researcher",
        description="Research.",
        system_prompt="You research.",
        model=lambda: ScriptedModel([tool_call("look", {"seconds": 0}), "done"]),
    )
    executor = ToolExecutor(registry(researcher), sinks=[OTelSink(tp.get_tracer("t"))])
    root = ScriptedModel(
        [[tool_call("researcher", {"task": t}, id=f"p-{t}") for t in "ab"], "all done"]
    )
    result = await AgentLoop(root, executor).run("go")
    assert result.finished
    path_of = {r.call_id: r.details["agent_path"] for r in result.transcript[-2].tool_results}

    spans = exporter.get_finished_spans()
    calls = tool_spans(spans, "researcher")
    batches = by_name(spans, "toolexec.batch")
    assert len(batches) == 3
    for call_id in ("p-a", "p-b"):
        (child,) = [
            b
            for b in batches
            if b.attributes and b.attributes["toolexec.agent.path"] == path_of[call_id]
        ]
        assert parent_of(child) == span_id(calls[call_id])
        runs = {
            span_id(r) for r in by_name(spans, "toolexec.run") if parent_of(r) == span_id(child)
        }
        looks = [s for s in by_name(spans, "execute_tool look") if parent_of(s) in runs]
        assert len(looks) == 1
    assert parent_of(calls["p-a"]) == parent_of(calls["p-b"])


def test_the_default_tracer_comes_from_the_global_provider() -> None:
    sink = OTelSink()
    assert sink.tracer is not None


async def test_a_cancelled_batch_ends_every_span(
    provider: tuple[TracerProvider, InMemorySpanExporter], autojump_clock: object
) -> None:
    tp, exporter = provider
    executor = ToolExecutor(registry(), sinks=[OTelSink(tp.get_tracer("t"))])
    batch = executor.prepare([ToolCall("r1", "look", {"seconds": 10})])
    async with trio.open_nursery() as nursery:
        nursery.start_soon(batch.run)
        await trio.sleep(1)
        batch.cancel()
    spans = exporter.get_finished_spans()
    assert sorted(s.name for s in spans) == ["execute_tool look", "toolexec.batch", "toolexec.run"]
    (batch_span,) = by_name(spans, "toolexec.batch")
    assert batch_span.attributes is not None
    assert batch_span.attributes["toolexec.batch.cancelled"] is True
    assert tool_spans(spans)["r1"].status.status_code is StatusCode.ERROR


def test_events_out_of_order_are_tolerated(
    provider: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    tp, exporter = provider
    sink = OTelSink(tp.get_tracer("t"))
    common: dict[str, Any] = {"agent_path": "root/x#1", "batch_id": "b", "time": 1.0}
    # An event of a batch the sink never saw begin is ignored.
    sink.emit(CallProgress(**common, call_id="c", tool_name="look", message="m"))
    # A parent call the sink does not know: the batch starts a trace of its own.
    plan = BatchPlan((), (), ())
    sink.emit(BatchPlanned(**common, plan=plan, parent_batch_id="p", parent_call_id="gone"))
    sink.emit(RunFinished(**common, index=0))
    sink.emit(InputInvalid(**common, call_id="c", tool_name="look", violations=()))  # not a span
    sink.emit(BatchFinished(**common, steering_messages=(), cancelled=False))
    (span,) = exporter.get_finished_spans()
    assert span.name == "toolexec.batch"
    assert span.parent is None


async def test_two_root_executors_sharing_one_sink_at_once_keep_their_own_spans(
    provider: tuple[TracerProvider, InMemorySpanExporter], autojump_clock: object
) -> None:
    # Both executors' first batch is ``root:b0``, open at the same time.
    tp, exporter = provider
    tracer = tp.get_tracer("test")
    sink = OTelSink(tracer)
    hosts: dict[str, int] = {}

    async def turn(name: str, seconds: int) -> None:
        executor = ToolExecutor(registry(), sinks=[sink])
        with tracer.start_as_current_span(f"host {name}") as host:
            hosts[name] = host.get_span_context().span_id
            await executor.execute_batch(
                [
                    ToolCall(f"{name}1", "look", {"seconds": seconds}),
                    ToolCall(f"{name}2", "tell", {"text": name}),
                ]
            )

    async with trio.open_nursery() as nursery:
        nursery.start_soon(turn, "a", 2)
        nursery.start_soon(turn, "b", 1)
    spans = exporter.get_finished_spans()
    by_id = {span_id(s): s for s in spans}
    batches = by_name(spans, "toolexec.batch")
    assert len(batches) == 2
    assert all(b.attributes and b.attributes["toolexec.batch.id"] == "root:b0" for b in batches)
    for name in ("a", "b"):
        for call in (f"{name}1", f"{name}2"):
            span = tool_spans(spans)[call]
            run = by_id[parent_of(span)]  # type: ignore[index]
            batch = by_id[parent_of(run)]  # type: ignore[index]
            assert batch.name == "toolexec.batch"
            assert parent_of(batch) == hosts[name]
    (progress,) = [e for e in tool_spans(spans)["b2"].events if e.name == "progress"]
    assert progress.attributes == {"message": "b"}


@pytest.mark.parametrize("mode", ["guest", "thread"])
def test_spans_nest_under_the_asyncio_hosts_span_across_the_bridge(
    provider: tuple[TracerProvider, InMemorySpanExporter], mode: str
) -> None:
    import asyncio

    import toolexec.aio

    tp, exporter = provider
    tracer = tp.get_tracer("test")

    async def main() -> int:
        async with toolexec.aio.open_executor(
            registry(),
            mode=mode,  # type: ignore[arg-type]
            sinks=[OTelSink(tracer)],
        ) as ex:
            with tracer.start_as_current_span("asyncio turn") as host:
                await ex.execute_batch([ToolCall("t", "tell", {"text": "hi"})])
            await ex.execute_batch([ToolCall("u", "tell", {"text": "no host span"})])
            found: int = host.get_span_context().span_id
            return found

    host_id = asyncio.run(main())
    spans = exporter.get_finished_spans()
    first, second = sorted(by_name(spans, "toolexec.batch"), key=lambda s: s.start_time or 0)
    assert parent_of(first) == host_id
    assert parent_of(second) is None
    (run,) = [s for s in by_name(spans, "toolexec.run") if parent_of(s) == span_id(first)]
    assert parent_of(tool_spans(spans)["t"]) == span_id(run)
