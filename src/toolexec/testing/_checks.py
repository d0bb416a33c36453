"""The promises a recorded batch is checked against, and the report of a broken one.

Theory of operation. Each check reads a ``Recording`` and returns one line
per broken promise, naming the calls by id and tool:

* *results*: exactly one result per call, in call order, ids and tool names
  matching, ``is_error`` exactly when there is an error class;
* *order*: calls ``i < j`` may overlap only when both route as read-only or
  both as concurrent mutators; otherwise ``i``'s tool returned before
  ``j``'s began (so a read never sees a later write, an earlier read never
  runs after a mutator, and a serial mutator overlaps nothing);
* *caps*: calls of one tool in flight never exceeded the tool's cap, nor
  calls of one class their class width;
* *reads*: the snapshot never changed while only read-only calls ran;
* *leftovers*: no permit borrowed or awaited, no call in flight, no task
  left, no tool still running, after the batch;
* *reference*: each result is what the in-order reference expected.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, TypeAlias

from .._core._types import ErrorClass, RoutingClass, ToolResult

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from .._core._executor import ToolExecutor
    from .._core._types import ToolCall
    from ._recording import Recording, Span

__all__ = [
    "Expected",
    "as_expected",
    "describe_call",
    "expectation_problems",
    "problems",
    "report",
]

#: What an in-order reference expects of one call: the text of a successful
#: result, the error class of a failed one, or ``None`` for "anything".
Expected: TypeAlias = str | ErrorClass | None

_MAY_OVERLAP = (RoutingClass.READ_ONLY, RoutingClass.CONCURRENT_MUT)


def problems(recording: Recording, executor: ToolExecutor) -> list[str]:
    """Every promise the recorded batch broke, one line each."""
    return [
        *_results(recording),
        *_order(recording),
        *_caps(recording, executor),
        *_reads(recording),
        *_leftovers(recording),
    ]


def _name(span: Span) -> str:
    return f"{span.call_id} {span.tool}"


def _results(recording: Recording) -> Iterator[str]:
    assert recording.outcome is not None
    results, calls = recording.outcome.results, recording.calls
    if [r.call_id for r in results] != [c.id for c in calls]:
        yield f"results {[r.call_id for r in results]} do not match calls {[c.id for c in calls]}"
        return
    for call, result in zip(calls, results, strict=True):
        if result.tool_name != call.name:
            yield f"{call.id}: result names tool {result.tool_name!r}, the call {call.name!r}"
        if result.is_error != (result.error_class is not None):
            yield f"{call.id}: is_error={result.is_error} with error_class={result.error_class}"


def _order(recording: Recording) -> Iterator[str]:
    spans = sorted(recording.spans, key=lambda s: s.index)
    for k, first in enumerate(spans):
        for later in spans[k + 1 :]:
            if first.routing is later.routing and first.routing in _MAY_OVERLAP:
                continue
            if first.overlaps(later):
                yield (
                    f"{_name(later)} ({later.routing.value}) overlapped earlier "
                    f"{_name(first)} ({first.routing.value})"
                )
            elif later.start < first.start:
                yield (
                    f"{_name(later)} ({later.routing.value}) ran before earlier "
                    f"{_name(first)} ({first.routing.value})"
                )


def _caps(recording: Recording, executor: ToolExecutor) -> Iterator[str]:
    config = executor.config
    widths = {
        RoutingClass.READ_ONLY: config.read_width,
        RoutingClass.CONCURRENT_MUT: config.concurrent_mut_width,
        RoutingClass.SERIAL_MUT: config.serial_mut_width,
    }
    for tool, peak in sorted(recording.peak_tool.items()):
        cap = config.per_tool.get(tool)
        if cap is not None and peak > cap:
            yield f"{peak} calls of {tool} ran at once; its cap is {cap}"
    for routing, peak in sorted(recording.peak_class.items(), key=lambda kv: kv[0].value):
        if peak > widths[routing]:
            yield f"{peak} {routing.value} calls ran at once; the class width is {widths[routing]}"


def _reads(recording: Recording) -> Iterator[str]:
    for change in recording.changes:
        names = ", ".join(
            f"{_name(s)} (declared {recording.definitions[s.tool].side_effects})"
            for s in change.spans
        )
        yield (
            f"the state changed while only read-only calls ran: {names}; "
            f"before {change.before!r}, after {change.after!r}"
        )


def _leftovers(recording: Recording) -> Iterator[str]:
    stats = recording.statistics
    assert stats is not None
    pools = {
        "read": stats.read,
        "concurrent_mut": stats.concurrent_mut,
        "serial_mut": stats.serial_mut,
        **{f"tool {name}": pool for name, pool in stats.per_tool.items()},
    }
    for name, pool in pools.items():
        if pool.borrowed or pool.waiting:
            yield (
                f"after the batch, the {name} limiter has {pool.borrowed} permit(s) out, "
                f"{pool.waiting} waiting"
            )
    if stats.calls_in_flight:
        yield f"after the batch, {stats.calls_in_flight} call(s) are still in flight"
    if recording.active:
        yield f"after the batch, these tools still run: {', '.join(recording.active)}"
    if recording.leftover_tasks:
        yield f"after the batch, {recording.leftover_tasks} trio task(s) are still alive"


def expectation_problems(
    results: Sequence[ToolResult], expected: Sequence[Expected], source: str
) -> Iterator[str]:
    """Where ``results`` differ from what an in-order reference expected."""
    if len(expected) != len(results):
        yield f"the reference gave {len(expected)} expectation(s) for {len(results)} call(s)"
        return
    for result, want in zip(results, expected, strict=True):
        got = _as_expected(result)
        if want is not None and got != want:
            yield (
                f"{result.call_id} {result.tool_name}: got {_show(got)}, but {source} "
                f"gives {_show(want)}"
            )


def _as_expected(result: ToolResult) -> Expected:
    return result.error_class if result.is_error else result.text


def _show(value: Expected) -> str:
    return f"error {value.value}" if isinstance(value, ErrorClass) else repr(value)


def as_expected(results: Sequence[ToolResult]) -> list[Expected]:
    """Results as a reference's expectations (text, or error class)."""
    return [_as_expected(r) for r in results]


def describe_call(call: ToolCall, routing: RoutingClass) -> str:
    """One line for a counter-example: id, tool, arguments, routing."""
    args: Any = call.arguments
    shown = args if isinstance(args, str) else json.dumps(args, sort_keys=True, default=repr)
    return f"  {call.id} {call.name} {shown} -> {routing.value}"


def report(calls: Sequence[ToolCall], routing: dict[str, RoutingClass], found: list[str]) -> str:
    """The counter-example: the batch, then every broken promise."""
    lines = [f"toolexec ordering check failed on a batch of {len(calls)} call(s):"]
    lines += [describe_call(c, routing.get(c.id, RoutingClass.SHORT_CIRCUIT)) for c in calls]
    lines.append("broken promises:")
    lines += [f"  - {line}" for line in found]
    return "\n".join(lines)
