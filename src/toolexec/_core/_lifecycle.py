"""The lifecycle of one call, as an explicit state machine with no I/O.

::

    PLANNED --> DONE                      short-circuit: answered at once
    PLANNED --> QUEUED                    placed in a run
    QUEUED  --> APPROVING --> ADMITTING   waiting for a human, then permits
    QUEUED  --> ADMITTING --> RUNNING --> DONE
    QUEUED | APPROVING | ADMITTING | RUNNING --> DONE   (skipped, cancelled,
                                                         denied, timed out)

A result can be set only once, and only by the transition to DONE, so
"exactly one result per call" is enforced here rather than hoped for.
The executor drives it; an illegal transition raises ``InternalError``.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any

from ._errors import InternalError
from ._messages import bounded
from ._types import ErrorClass, RoutingClass, TextContent, ToolCall, ToolResult

if TYPE_CHECKING:
    from .._gate._approval import ApprovalMode
    from .._gate._policy import ExecutionGrant
    from ._backend import Backend
    from ._registry import RegisteredTool

__all__ = ["CallSlot", "State", "error_result"]


class State(enum.Enum):
    PLANNED = "planned"
    QUEUED = "queued"
    APPROVING = "approving"
    ADMITTING = "admitting"
    RUNNING = "running"
    DONE = "done"


# Allowed moves to a non-final state. Looked up by identity on the hot path
# (hashing enum members costs a Python-level call per lookup).
_NEXT: dict[str, tuple[State, ...]] = {
    "planned": (State.QUEUED,),
    "queued": (State.APPROVING, State.ADMITTING),
    "approving": (State.ADMITTING,),
    "admitting": (State.RUNNING,),
    "running": (),
    "done": (),
}


class CallSlot:
    """One call's place in a batch: where it is in its lifecycle, and its result."""

    __slots__ = (
        "arguments",
        "backend",
        "call",
        "entry",
        "grant",
        "index",
        "needs_approval",
        "reason",
        "result",
        "routing",
        "state",
    )

    def __init__(self, index: int, call: ToolCall) -> None:
        self.index = index
        self.call = call
        self.state = State.PLANNED
        self.result: ToolResult | None = None
        self.entry: RegisteredTool | None = None
        self.arguments: dict[str, Any] = _NOT_PARSED  # set by planning; never mutated in place
        self.grant: ExecutionGrant | None = None
        self.backend: Backend | None = None  # None: the host, in this task
        self.routing = RoutingClass.SHORT_CIRCUIT
        self.needs_approval: ApprovalMode | None = None  # when a human must answer
        self.reason = ""

    def advance(self, new: State) -> None:
        """Move to a non-final state, or raise ``InternalError``."""
        if new not in _NEXT[self.state._value_]:
            raise InternalError(
                f"call {self.call.id!r}: illegal transition {self.state.value} -> {new.value}"
            )
        self.state = new

    def finish(self, result: ToolResult) -> None:
        """Set the one result and move to DONE, or raise ``InternalError``."""
        if self.state is State.DONE:
            raise InternalError(f"call {self.call.id!r} would get a second result")
        self.state = State.DONE
        self.result = result

    @property
    def started(self) -> bool:
        """Whether the call got past waiting in its run."""
        return self.state in (State.APPROVING, State.ADMITTING, State.RUNNING)


_NOT_PARSED: dict[str, Any] = {}


def error_result(slot: CallSlot, error_class: ErrorClass, text: str, **kw: Any) -> ToolResult:
    """An error result for the slot's call, tagged with its routing class.

    Its text is ``bounded``: a tool's own error or an exception's words may
    quote whatever the model sent.
    """
    return ToolResult(
        slot.call.id,
        slot.call.name,
        (TextContent(bounded(text)),),
        True,
        error_class,
        routing=slot.routing,
        **kw,
    )
