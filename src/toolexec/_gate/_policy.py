"""The policy protocol: allow (with a grant), deny with a reason, or ask a human.

A policy is consulted once per call, after the arguments are validated and
before the call is routed, so a denial is a short-circuit that costs no
permit. Policies are synchronous and pure: they run on the hot path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, runtime_checkable

import attrs

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from .._core._types import ToolDefinition

__all__ = ["Allow", "AllowAll", "Ask", "Decision", "Deny", "ExecutionGrant", "ToolPolicy"]


# The name of the built-in backend, the one that runs a call in this process on
# this trio loop (``HostBackend``): the sandbox of a grant that names no other.
HOST = "host"


def _optional_positive(_inst: object, attr: attrs.Attribute[Any], value: float | None) -> None:
    if value is not None and not value > 0:
        raise ValueError(f"{attr.name} must be positive or None, got {value!r}")


@attrs.frozen
class ExecutionGrant:
    """What an allowed call may use.

    The executor enforces ``timeout`` (the call's deadline is the smaller of
    this and the tool's) and ``max_output_chars`` (what the model would read
    beyond it, text, JSON or an error message, is cut, and the result says
    so). ``sandbox`` names the backend that runs the call (``"host"``, in
    this process, unless the executor was given others); ``limits`` are
    passed to that backend and to the tool in ``ToolContext.grant``.
    """

    sandbox: str = HOST
    timeout: float | None = attrs.field(default=None, validator=_optional_positive)
    max_output_chars: int | None = attrs.field(default=None, validator=_optional_positive)
    limits: Mapping[str, Any] = attrs.field(factory=dict)


HOST_GRANT = ExecutionGrant()


def _tighter(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else min(a, b)


def tightest(grants: Iterable[ExecutionGrant]) -> ExecutionGrant:
    """One grant no looser than any of ``grants``: the smallest timeout and
    output cap, the first sandbox that is not the host, every limit (the
    earlier grant's value winning)."""
    grant = ExecutionGrant()
    for g in grants:
        grant = ExecutionGrant(
            grant.sandbox if grant.sandbox != HOST else g.sandbox,
            _tighter(grant.timeout, g.timeout),
            _tighter(grant.max_output_chars, g.max_output_chars),  # type: ignore[arg-type]
            {**g.limits, **grant.limits},
        )
    return grant


@attrs.frozen
class Allow:
    """Run the call under ``grant``."""

    grant: ExecutionGrant = HOST_GRANT


@attrs.frozen
class Deny:
    """Refuse the call; ``reason`` is shown to the model."""

    reason: str


@attrs.frozen
class Ask:
    """Run the call only if the approver says yes."""

    reason: str = ""
    grant: ExecutionGrant = HOST_GRANT


Decision: TypeAlias = Allow | Deny | Ask

ALLOW = Allow()


@runtime_checkable
class ToolPolicy(Protocol):
    """Decides, per call, whether it may run."""

    def decide(
        self, definition: ToolDefinition, arguments: Mapping[str, Any], agent_path: str
    ) -> Decision:
        """Return ``Allow``, ``Deny(reason)`` or ``Ask``."""
        ...


@attrs.frozen
class AllowAll:
    """The policy that allows every call on the host."""

    def decide(
        self, definition: ToolDefinition, arguments: Mapping[str, Any], agent_path: str
    ) -> Decision:
        """Allow."""
        return ALLOW
