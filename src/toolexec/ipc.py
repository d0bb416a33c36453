"""Tools for agents in other processes: the supervisor/runner JSON-lines protocol.

An agent running in a subprocess (a *runner*) asks a ``Supervisor`` to run
tools: it writes ``{"op": "tool_call", "tool_call_id", "tool", "args"}``
lines and reads ``{"op": "tool_response", "tool_call_id", "ok", ...}``
lines back. The supervisor hosts a ``ToolExecutor``; each runner has its
own agent path and ``Capabilities`` (``RunnerConfig``), and every call,
allowed or denied, is recorded in the audit log. ``RunnerClient`` (blocking)
and ``TrioRunnerClient`` are the runner's side. Error slugs map onto
``ErrorClass`` through ``SLUG_OF`` and ``ERROR_CLASS_OF``; docs/ipc.md has
the table, the batching rules and what a hostile runner meets.

Example::

    from toolexec.ipc import RunnerConfig, Supervisor
    from toolexec.policy import Capabilities, PathGrant

    supervisor = Supervisor(executor)
    status = await supervisor.run_process(
        ["python", "agent.py"],
        RunnerConfig("agent", Capabilities(["read_file"], [PathGrant("notes")])),
    )
"""

from __future__ import annotations

from ._core._public import fixup_module_metadata as _fixup_module_metadata
from ._ipc._client import CallSpec, RunnerClient, ToolResponse, TrioRunnerClient
from ._ipc._protocol import (
    DEFAULT_MAX_LINE_BYTES,
    ERROR_CLASS_OF,
    PROTOCOL_SLUGS,
    SLUG_OF,
    LineSplitter,
    ProtocolError,
    ToolCallMessage,
    decode_message,
)
from ._ipc._supervisor import AuditLog, RunnerConfig, RunnerStatistics, Supervisor

__all__ = [
    "AuditLog",
    "CallSpec",
    "DEFAULT_MAX_LINE_BYTES",
    "ERROR_CLASS_OF",
    "LineSplitter",
    "PROTOCOL_SLUGS",
    "ProtocolError",
    "RunnerClient",
    "RunnerConfig",
    "RunnerStatistics",
    "SLUG_OF",
    "Supervisor",
    "ToolCallMessage",
    "ToolResponse",
    "TrioRunnerClient",
    "decode_message",
]

_fixup_module_metadata(__name__, __all__)
