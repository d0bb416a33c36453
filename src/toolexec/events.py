"""Events: what the executor reports while it works, and the sinks that take it.

Every event is a frozen value naming the agent path and the batch it
happened in; ``Event`` is their union. Give sinks to the executor
(``ToolExecutor(registry, sinks=[...])``): ``CallbackSink`` calls a function,
``ChannelSink`` feeds a bounded trio channel, ``JsonlAuditSink`` appends one
JSON line per event, ``TraceRecorder`` builds a Chrome/Perfetto timeline.
Emitting never blocks a call and never raises into it. For OpenTelemetry
spans see ``toolexec.otel.OTelSink``.

Example::

    from toolexec.events import CallbackSink, CallFailed

    def show(event):
        if isinstance(event, CallFailed):
            print(event.call_id, event.error_class)

    executor = ToolExecutor(registry, sinks=[CallbackSink(show)])
"""

from __future__ import annotations

from ._core._events import (
    ApprovalRequested,
    ApprovalResolved,
    BatchFinished,
    BatchPlanned,
    CallbackSink,
    CallCompleted,
    CallFailed,
    CallProgress,
    CallStarted,
    CallUpdate,
    ChannelSink,
    Event,
    EventSink,
    InputInvalid,
    RunFinished,
    RunStarted,
)
from ._core._public import fixup_module_metadata as _fixup_module_metadata
from ._core._trace import TraceRecorder
from ._gate._audit import JsonlAuditSink

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
    "JsonlAuditSink",
    "RunFinished",
    "RunStarted",
    "TraceRecorder",
]

_fixup_module_metadata(__name__, __all__)
