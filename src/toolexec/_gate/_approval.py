"""Human approval: modes by side-effect class, approvers, and what they are shown.

Theory of operation. At planning time the executor asks ``ApprovalConfig``
for the call's mode (per-tool override, else the trusted-workspace mode,
else the side-effect default). ``deny`` short-circuits the call; ``auto``
lets it run; ``prompt`` and ``prompt_once`` make it wait, *before*
admission, so a pending human answer never holds a permit. The request
carries the canonical JSON of the arguments, and the call runs with exactly
those arguments, so an approval cannot be reused for something it did not
show. ``prompt_once`` answers are remembered per tool for the executor's
session (its forks share the memory; a new executor starts empty).
"""

from __future__ import annotations

import enum
import json
import sys
from typing import TYPE_CHECKING, Any, Protocol, TextIO, runtime_checkable

import attrs
import trio

from .._core._display import display_text
from .._core._types import SideEffects, ToolDefinition, strings

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

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


class ApprovalMode(enum.Enum):
    """What happens before a call of some class runs."""

    AUTO = "auto"
    PROMPT = "prompt"
    PROMPT_ONCE = "prompt_once"
    DENY = "deny"


_DEFAULT_MODES = {
    SideEffects.NONE: ApprovalMode.AUTO,
    SideEffects.READ: ApprovalMode.AUTO,
    SideEffects.WRITE: ApprovalMode.PROMPT,
    SideEffects.EXECUTE: ApprovalMode.PROMPT,
    SideEffects.NETWORK: ApprovalMode.PROMPT,
}


def _modes(value: Mapping[SideEffects, ApprovalMode | str]) -> dict[SideEffects, ApprovalMode]:
    return {**_DEFAULT_MODES, **{SideEffects(k): ApprovalMode(v) for k, v in value.items()}}


def _per_tool(value: Mapping[str, ApprovalMode | str]) -> dict[str, ApprovalMode]:
    return {k: ApprovalMode(v) for k, v in value.items()}


def _trusted(value: Mapping[SideEffects, ApprovalMode | str]) -> dict[SideEffects, ApprovalMode]:
    return {SideEffects(k): ApprovalMode(v) for k, v in value.items()}


def _roots(roots: Iterable[str]) -> tuple[str, ...]:
    return strings(roots, "trusted_workspaces")


def _positive(_inst: object, _attr: object, value: float) -> None:
    if not value > 0:
        raise ValueError(f"approval timeout must be positive seconds, got {value!r}")


@attrs.frozen
class ApprovalConfig:
    """Which calls need a human, and how long to wait for one.

    Args:
        modes: mode per side-effect class, merged over the defaults
            (``NONE``/``READ`` auto; ``WRITE``/``EXECUTE``/``NETWORK`` prompt).
        per_tool: modes for individual tools; they win over everything.
        trusted_workspaces: workspace roots where ``trusted_modes`` apply.
        trusted_modes: modes used inside a trusted workspace (e.g. writes
            ``auto`` while ``EXECUTE`` still prompts).
        timeout: seconds to wait for an answer; then ``confirmation_timeout``.
    """

    modes: Mapping[SideEffects, ApprovalMode] = attrs.field(factory=dict, converter=_modes)
    per_tool: Mapping[str, ApprovalMode] = attrs.field(factory=dict, converter=_per_tool)
    trusted_workspaces: tuple[str, ...] = attrs.field(default=(), converter=_roots)
    trusted_modes: Mapping[SideEffects, ApprovalMode] = attrs.field(
        factory=dict, converter=_trusted
    )
    timeout: float = attrs.field(default=300.0, validator=_positive)

    @classmethod
    def auto(cls) -> ApprovalConfig:
        """Approve everything without asking (what ``--yes`` means)."""
        return cls(modes=dict.fromkeys(SideEffects, ApprovalMode.AUTO))

    def mode_for(self, definition: ToolDefinition, workspace: object = None) -> ApprovalMode:
        """The mode for a call of this tool in this workspace."""
        mode = self.per_tool.get(definition.name)
        if mode is not None:
            return mode
        trusted = self.trusted_modes.get(definition.side_effects)
        if trusted is not None and workspace is not None:
            root = str(getattr(workspace, "root", workspace))
            if root in self.trusted_workspaces:
                return trusted
        return self.modes[definition.side_effects]


def canonical_json(arguments: Mapping[str, Any]) -> str:
    """The one text form of a call's arguments: sorted keys, no spaces, ASCII."""
    return json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


@attrs.frozen
class ApprovalRequest:
    """A call waiting for a human: what it is and exactly what it will do.

    ``arguments`` is the canonical JSON the call will run with; ``summary``
    is safe to print (control and bidi characters escaped).
    """

    call_id: str
    tool_name: str
    agent_path: str
    side_effects: SideEffects
    arguments: str
    reason: str = ""

    @property
    def summary(self) -> str:
        """One line for a person: the tool, its effect and its escaped arguments."""
        why = f" ({display_text(self.reason)})" if self.reason else ""
        return (
            f"{display_text(self.agent_path)}: {display_text(self.tool_name)} "
            f"[{self.side_effects.value}] {display_text(self.arguments)}{why}"
        )


@attrs.frozen
class ApprovalAnswer:
    """A human's answer: yes or no, who said it, and optionally why."""

    approved: bool = attrs.field(validator=attrs.validators.instance_of(bool))
    by: str = ""
    reason: str = ""


@runtime_checkable
class Approver(Protocol):
    """Answers approval requests (a terminal, a web UI, a chat bot...)."""

    async def request(self, request: ApprovalRequest) -> ApprovalAnswer:
        """Wait for a decision on one call. May be cancelled (timeout, cancel)."""
        ...


@attrs.frozen
class AutoApprover:
    """Answers every request at once with ``approved`` (for tests and ``--yes``)."""

    approved: bool = True
    by: str = "auto"

    async def request(self, request: ApprovalRequest) -> ApprovalAnswer:
        """Answer immediately."""
        return ApprovalAnswer(self.approved, self.by)


@attrs.define(eq=False)
class FirstAnswer:
    """Asks several responders at once; the first answer wins.

    The others are cancelled and, if they have a ``resolved(request,
    answer)`` method, told the outcome so they can update what they show.
    """

    responders: Sequence[Approver]

    async def request(self, request: ApprovalRequest) -> ApprovalAnswer:
        """Ask everyone; return the first answer."""
        winner: list[tuple[int, ApprovalAnswer]] = []
        async with trio.open_nursery() as nursery:
            for i, responder in enumerate(self.responders):
                nursery.start_soon(self._ask, i, responder, request, winner, nursery.cancel_scope)
        index, answer = winner[0]
        for i, responder in enumerate(self.responders):
            resolved = getattr(responder, "resolved", None)
            if i != index and callable(resolved):
                resolved(request, answer)
        return answer

    @staticmethod
    async def _ask(
        index: int,
        responder: Approver,
        request: ApprovalRequest,
        winner: list[tuple[int, ApprovalAnswer]],
        scope: trio.CancelScope,
    ) -> None:
        answer = await responder.request(request)
        if not winner:
            winner.append((index, answer))
            scope.cancel()


@attrs.define(eq=False)
class TerminalApprover:
    """Asks on a terminal: prints the summary, reads ``y``/``n`` from a stream.

    Reading happens in a worker thread that is abandoned on cancel, so a
    timeout or cancel never waits for a keypress. End of input means no.
    """

    input: TextIO = attrs.field(factory=lambda: sys.stdin)
    output: TextIO = attrs.field(factory=lambda: sys.stderr)
    by: str = "terminal"

    async def request(self, request: ApprovalRequest) -> ApprovalAnswer:
        """Ask and wait for a line."""
        self.output.write(f"approve {request.summary}? [y/N] ")
        self.output.flush()
        line = await trio.to_thread.run_sync(self.input.readline, abandon_on_cancel=True)
        approved = line.strip().lower() in ("y", "yes")
        return ApprovalAnswer(approved, self.by, "" if approved else "answered no")

    def resolved(self, request: ApprovalRequest, answer: ApprovalAnswer) -> None:
        """Show that someone else answered first."""
        verdict = "approved" if answer.approved else "denied"
        who = display_text(str(answer.by))
        self.output.write(f"\n{display_text(request.call_id)} was {verdict} by {who}\n")
