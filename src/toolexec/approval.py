"""Approval: which calls wait for a human, and who answers.

``ApprovalConfig`` gives each side-effect class a mode (``auto``,
``prompt``, ``prompt_once``, ``deny``), with per-tool overrides and a
timeout; an ``Approver`` answers ``ApprovalRequest`` values.
``TerminalApprover`` asks on a terminal, ``AutoApprover`` answers
without asking, and ``FirstAnswer`` races several approvers. A call waits
for its answer before it takes any permit, and runs with exactly the
arguments the request showed.

Example::

    from toolexec.approval import ApprovalConfig, ApprovalMode, TerminalApprover

    executor = ToolExecutor(
        registry,
        approval=ApprovalConfig(per_tool={"shell": ApprovalMode.PROMPT}),
        approver=TerminalApprover(),
    )
"""

from __future__ import annotations

from ._core._public import fixup_module_metadata as _fixup_module_metadata
from ._gate._approval import (
    ApprovalAnswer,
    ApprovalConfig,
    ApprovalMode,
    ApprovalRequest,
    Approver,
    AutoApprover,
    FirstAnswer,
    TerminalApprover,
)

__all__ = [
    "ApprovalAnswer",
    "ApprovalConfig",
    "ApprovalMode",
    "ApprovalRequest",
    "Approver",
    "AutoApprover",
    "FirstAnswer",
    "TerminalApprover",
]

_fixup_module_metadata(__name__, __all__)
