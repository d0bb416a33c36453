"""Hooks: host code that sees every call before and after it runs.

``before_call`` runs at planning time, after the arguments validated and
before the policy: it may let the call through (return ``None``), skip it
with a reason, or rewrite its arguments (which are then validated and
policy-checked again, so a hook cannot smuggle invalid input past the gate).
A hook that raises fails closed: the call is denied. ``after_call`` sees
every result; ``on_progress`` every progress message. Both are observers:
if they raise, the error is logged and the call is unaffected.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

import attrs

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .._core._types import ToolCall, ToolResult

__all__ = ["CallHook", "HookDecision", "Rewrite", "Skip"]


@attrs.frozen
class Skip:
    """Do not run the call; the model is told ``reason``."""

    reason: str


@attrs.frozen
class Rewrite:
    """Run the call with these arguments instead (validated again)."""

    arguments: Mapping[str, Any]


HookDecision: TypeAlias = Skip | Rewrite | None


class CallHook:
    """Subclass and override what you need; every method defaults to a no-op."""

    def before_call(
        self, call: ToolCall, arguments: Mapping[str, Any], agent_path: str
    ) -> HookDecision:
        """Inspect a call before it is routed: ``None``, ``Skip`` or ``Rewrite``."""
        return None

    def after_call(self, call: ToolCall, result: ToolResult, agent_path: str) -> None:
        """See a call's result (every call, whatever its class)."""

    def on_progress(self, call: ToolCall, message: str, agent_path: str) -> None:
        """See a progress message of a running call."""
