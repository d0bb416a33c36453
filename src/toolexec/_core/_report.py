"""What a batch tells its observers: events to the sinks, results to the hooks.

One ``Reporter`` per batch fills the fields every event shares (agent path,
batch id, time, and for a sub-agent's batch the parent call). Observers
never hurt a call: a sink or hook that raises is logged and skipped
(``emit_to`` does the same for sinks).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ._events import (
    CallCompleted,
    CallFailed,
    CallProgress,
    CallUpdate,
    InputInvalid,
    emit_to,
)
from ._types import ErrorClass

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._gate._hooks import CallHook
    from ._events import Event, EventSink
    from ._journaling import BatchJournal
    from ._lifecycle import CallSlot
    from ._types import ToolCall

__all__ = ["Reporter"]

_log = logging.getLogger("toolexec")


@attrs.frozen
class Reporter:
    """Sends one batch's events to its sinks and its results to the hooks."""

    agent_path: str
    batch_id: str
    sinks: tuple[EventSink, ...]
    hooks: tuple[CallHook, ...]
    # (batch id, call id) of the call whose sub-agent runs this batch, if any.
    parent: tuple[str, str] | None = None
    # The batch's journal (docs/durable.md); None when durability is off.
    journal: BatchJournal | None = None

    @property
    def observed(self) -> bool:
        """Whether anyone hears progress (a sink or a hook)."""
        return bool(self.sinks or self.hooks)

    def emit(self, kind: Callable[..., Event], **fields: Any) -> None:
        """Send ``kind(...)`` to the sinks, filling the common fields."""
        if self.sinks:
            now = trio.current_time()
            parent_batch, parent_call = self.parent or (None, None)
            event = kind(
                agent_path=self.agent_path,
                batch_id=self.batch_id,
                time=now,
                parent_batch_id=parent_batch,
                parent_call_id=parent_call,
                **fields,
            )
            emit_to(self.sinks, event)

    def call_event(self, kind: Callable[..., Event], call: ToolCall, **fields: Any) -> None:
        """Send ``kind(...)`` for ``call``."""
        if self.sinks:
            self.emit(kind, call_id=call.id, tool_name=call.name, **fields)

    def settle(self, slot: CallSlot) -> None:
        """Tell the hooks and sinks a call's result (once, when it is set)."""
        result = slot.result
        if result is None:
            return
        for hook in self.hooks:
            try:
                hook.after_call(slot.call, result, self.agent_path)
            except Exception:
                _log.exception("after_call hook %r raised; ignored", hook)
        if not self.sinks:
            return
        if result.error_class is ErrorClass.INVALID_ARGUMENTS:
            violations = tuple(result.details.get("violations", [result.text]))
            self.call_event(InputInvalid, slot.call, violations=violations)
        if result.error_class is not None:
            self.call_event(
                CallFailed,
                slot.call,
                error_class=result.error_class,
                message=result.text,
                duration=result.duration,
            )
        else:
            self.call_event(CallCompleted, slot.call, duration=result.duration)

    def progress_emitter(self, call: ToolCall) -> Callable[[str, Any], None]:
        """The function a call's ``ToolContext`` reports progress through."""

        def emit(kind: str, payload: Any) -> None:
            if kind == "progress":
                for hook in self.hooks:
                    try:
                        hook.on_progress(call, str(payload), self.agent_path)
                    except Exception:
                        _log.exception("on_progress hook %r raised; ignored", hook)
                self.call_event(CallProgress, call, message=str(payload))
            else:
                self.call_event(CallUpdate, call, partial=payload)

        return emit
