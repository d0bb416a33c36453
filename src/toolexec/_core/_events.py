"""Typed events and the sinks that receive them (docs/concepts.md, "Events").

Events are frozen values. Every event names the agent path it happened in
(``root``, ``root/researcher#2``) and the batch; times are trio clock times.
An event of a sub-agent's batch also names the call that started the
sub-agent (``parent_batch_id``, ``parent_call_id``); at the root both are
``None``. These fields, common to all, are declared once
(``_EventFields``) and come first in every event's fields and repr.

Sinks are synchronous and must not block: emitting happens on the call's
path. A sink that raises is logged and otherwise ignored; a full channel
sink drops the event and counts it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol, TypeAlias, runtime_checkable

import attrs
import trio

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._plan import BatchPlan
    from ._types import ErrorClass, RoutingClass, ToolOutput

__all__ = [
    "ApprovalRequested",
    "ApprovalResolved",
    "BatchFinished",
    "BatchPlanned",
    "CallCompleted",
    "CallFailed",
    "CallProgress",
    "CallStarted",
    "CallUpdate",
    "CallbackSink",
    "ChannelSink",
    "Event",
    "EventSink",
    "InputInvalid",
    "RunFinished",
    "RunStarted",
]

_log = logging.getLogger("toolexec.events")


@attrs.frozen(kw_only=True)
class _EventFields:
    """The fields every event has, first and in this order: where and when.

    Each event class adds its own after them. All are keyword-only, so the
    common fields with defaults may come before an event's required ones.
    """

    agent_path: str
    batch_id: str
    time: float
    parent_batch_id: str | None = None
    parent_call_id: str | None = None


@attrs.frozen(kw_only=True)
class BatchPlanned(_EventFields):
    """A batch was routed and cut into runs; ``plan`` shows them."""

    plan: BatchPlan


@attrs.frozen(kw_only=True)
class RunStarted(_EventFields):
    """Run ``index`` of a batch began (the previous run has ended)."""

    index: int
    routing: RoutingClass
    call_ids: tuple[str, ...]


@attrs.frozen(kw_only=True)
class RunFinished(_EventFields):
    """Every call of run ``index`` has its result."""

    index: int


@attrs.frozen(kw_only=True)
class CallStarted(_EventFields):
    """A call was admitted and its tool began executing."""

    call_id: str
    tool_name: str
    routing: RoutingClass


@attrs.frozen(kw_only=True)
class CallProgress(_EventFields):
    """A running tool reported progress (host-only text)."""

    call_id: str
    tool_name: str
    message: str


@attrs.frozen(kw_only=True)
class CallUpdate(_EventFields):
    """A running tool streamed a partial output (host-only)."""

    call_id: str
    tool_name: str
    partial: ToolOutput


@attrs.frozen(kw_only=True)
class CallCompleted(_EventFields):
    """A call finished without error."""

    call_id: str
    tool_name: str
    duration: float


@attrs.frozen(kw_only=True)
class CallFailed(_EventFields):
    """A call got an error result (of any class, including skipped)."""

    call_id: str
    tool_name: str
    error_class: ErrorClass
    message: str
    duration: float


@attrs.frozen(kw_only=True)
class InputInvalid(_EventFields):
    """A call's arguments did not parse or failed the schema."""

    call_id: str
    tool_name: str
    violations: tuple[str, ...]


@attrs.frozen(kw_only=True)
class ApprovalRequested(_EventFields):
    """A call waits for a human decision (it holds no permit meanwhile)."""

    call_id: str
    tool_name: str
    summary: str


@attrs.frozen(kw_only=True)
class ApprovalResolved(_EventFields):
    """A pending approval was answered (or timed out)."""

    call_id: str
    tool_name: str
    approved: bool
    by: str


@attrs.frozen(kw_only=True)
class BatchFinished(_EventFields):
    """Every call of a batch has its result."""

    steering_messages: tuple[str, ...]
    cancelled: bool


Event: TypeAlias = (
    BatchPlanned
    | RunStarted
    | RunFinished
    | CallStarted
    | CallProgress
    | CallUpdate
    | CallCompleted
    | CallFailed
    | InputInvalid
    | ApprovalRequested
    | ApprovalResolved
    | BatchFinished
)


@runtime_checkable
class EventSink(Protocol):
    """Receives events. ``emit`` must return promptly and should not raise."""

    def emit(self, event: Event) -> None:
        """Take one event."""
        ...


@attrs.define(eq=False)
class CallbackSink:
    """A sink that calls ``fn(event)`` for every event."""

    fn: Callable[[Event], object]

    def emit(self, event: Event) -> None:
        """Pass the event to the callback."""
        self.fn(event)


@attrs.define(eq=False)
class ChannelSink:
    """A sink feeding a bounded trio memory channel; never blocks.

    When the channel is full (or its receiver is closed) the event is
    dropped and counted in ``dropped``: a slow consumer cannot stall calls.

    Example::

        sink, events = ChannelSink.open(1000)
        executor = ToolExecutor(registry, sinks=[sink])
        async for event in events: ...
    """

    send_channel: trio.MemorySendChannel[Event]
    dropped: int = 0

    @classmethod
    def open(cls, max_buffer_size: int) -> tuple[ChannelSink, trio.MemoryReceiveChannel[Event]]:
        """A sink and the receive side of its channel."""
        send, receive = trio.open_memory_channel[Event](max_buffer_size)
        return cls(send), receive

    def emit(self, event: Event) -> None:
        """Put the event in the channel, or drop and count it."""
        try:
            self.send_channel.send_nowait(event)
        except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
            self.dropped += 1

    def close(self) -> None:
        """Close the send side, ending the receiver's iteration."""
        self.send_channel.close()


def emit_to(sinks: tuple[EventSink, ...], event: Event) -> None:
    """Deliver an event to every sink; a raising sink is logged, not propagated."""
    for sink in sinks:
        try:
            sink.emit(event)
        except Exception:
            _log.exception("event sink %r raised; event dropped for it", sink)
