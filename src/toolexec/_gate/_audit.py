"""A JSON-lines audit log of every decision about every call.

Each event is one line, written with a single ``write`` on a file opened
for appending, so a crash mid-batch leaves only whole lines behind (at
worst the last event is missing, never half-written). Lines record: the
call's start (it was allowed and admitted), invalid input, approval
requested and resolved (by whom), and the result (completed, or failed with
its error class and message), each with the agent path, batch, call id,
tool and time; results carry the duration.
"""

from __future__ import annotations

import enum
import json
import os
from typing import TYPE_CHECKING, Any

import attrs

from .._core._events import (
    ApprovalRequested,
    ApprovalResolved,
    CallCompleted,
    CallFailed,
    CallStarted,
    Event,
    InputInvalid,
)

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

__all__ = ["JsonlAuditSink"]

_KINDS: dict[type, str] = {
    CallStarted: "call.started",
    InputInvalid: "call.input_invalid",
    ApprovalRequested: "approval.requested",
    ApprovalResolved: "approval.resolved",
    CallCompleted: "call.completed",
    CallFailed: "call.failed",
}


def _plain(_inst: object, _field: object, value: Any) -> Any:
    return value.value if isinstance(value, enum.Enum) else value


@attrs.define(eq=False)
class JsonlAuditSink:
    """An event sink appending one JSON object per call decision to a file.

    Example::

        audit = JsonlAuditSink.open("audit.jsonl")
        executor = ToolExecutor(registry, sinks=[audit])
        ...
        audit.close()

    Args:
        fd: a file descriptor opened for appending (use ``open``).
        fsync: also ``fsync`` after every line (survives power loss, slower).
    """

    fd: int
    fsync: bool = False

    @classmethod
    def open(cls, path: str | Path, *, fsync: bool = False) -> JsonlAuditSink:
        """Open (creating if needed) ``path`` for appending."""
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        return cls(fd, fsync)

    def emit(self, event: Event) -> None:
        """Append the event as one line, if it is a call decision."""
        kind = _KINDS.get(type(event))
        if kind is None:
            return
        record = {"event": kind, **attrs.asdict(event, value_serializer=_plain)}
        line = json.dumps(record, ensure_ascii=False, default=str) + "\n"
        os.write(self.fd, line.encode("utf-8"))
        if self.fsync:
            os.fsync(self.fd)

    def record(self, kind: str, fields: Mapping[str, Any]) -> None:
        """Append one line of ``kind`` for a decision made outside an executor.

        The IPC supervisor writes ``tool.call.dispatched`` and
        ``tool.call.denied`` this way, beside the executor's own lines.
        """
        line = json.dumps({"event": kind, **fields}, ensure_ascii=False, default=str) + "\n"
        os.write(self.fd, line.encode("utf-8"))
        if self.fsync:
            os.fsync(self.fd)

    def close(self) -> None:
        """Close the file."""
        os.close(self.fd)
