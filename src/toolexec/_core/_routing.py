"""Plan time: decide, for each call, whether it runs and how.

The user-facing story: docs/concepts.md, "Routing", and docs/security.md.

Theory of operation. ``Planner.plan_call`` walks a call through a fixed
sequence of steps, all synchronous and free of I/O: look the tool up, parse
the arguments, validate them, ask the hooks, ask the policy, settle the
approval mode, find the backend. Each step either records what it learned
on the call's slot and returns ``None``, or returns the error result that
answers the call at once (a *short-circuit*: no permit, no execution, and it
never splits a run). A call that passes every step gets its routing class
and is queued; the strategy then cuts the queued calls into runs.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from .._gate._approval import ApprovalMode
from .._gate._hooks import Rewrite, Skip
from .._gate._policy import HOST, HOST_GRANT, Allow, AllowAll, Ask, Deny
from . import _messages as say
from ._lifecycle import CallSlot, State, error_result
from ._registry import integral_arguments
from ._types import ErrorClass, RoutingClass, SideEffects

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._gate._approval import ApprovalConfig
    from .._gate._hooks import CallHook
    from .._gate._policy import ToolPolicy
    from ._backend import Backend
    from ._registry import RegisteredTool, ToolRegistry
    from ._types import PathResolver, ToolCall, ToolResult

__all__ = ["Expected", "Planner", "valid_arguments"]

_log = logging.getLogger("toolexec")

_scan: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def _object_of(text: str) -> dict[str, Any] | None:
    """The JSON object ``text`` holds, as ``json.loads`` reads it; ``None`` for
    anything else (``json.loads`` then says what is wrong, in its words).

    The per-call path, as models send arguments: ``json.loads`` without its
    three Python frames, through the decoder's scanner (C in CPython), which
    reads one value from an index and raises ``StopIteration`` where none
    starts.
    """
    try:
        value, end = _scan(text, 0)
    except (StopIteration, ValueError, RecursionError):
        return None
    if type(value) is dict and (end == len(text) or not text[end:].strip()):
        return value
    return None


_PROMPTED_BY_ASK = (ApprovalMode.AUTO, ApprovalMode.PROMPT_ONCE)


@attrs.frozen(kw_only=True)
class Planner:
    """The plan-time half of an executor: its tools, gate and backends."""

    registry: ToolRegistry
    policy: ToolPolicy
    hooks: tuple[CallHook, ...]
    approval: ApprovalConfig | None
    workspace: PathResolver | None
    promoted: frozenset[str]
    agent_path: str
    backends: Mapping[str, Backend]
    # Whether every approval mode is ``auto`` (or nothing is configured): then
    # only a policy's ``Ask`` makes a call wait, and a call costs no lookup.
    _auto_only: bool = attrs.field(init=False)
    # Whether the policy is ``AllowAll`` (the default): it allows every call on
    # the host, which is what a call that asks no policy gets, so none is asked.
    _allows_all: bool = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        approval = self.approval
        modes = (
            ()
            if approval is None
            else (
                *approval.modes.values(),
                *approval.per_tool.values(),
                *approval.trusted_modes.values(),
            )
        )
        object.__setattr__(self, "_auto_only", all(m is ApprovalMode.AUTO for m in modes))
        object.__setattr__(self, "_allows_all", type(self.policy) is AllowAll)

    def plan_call(self, slot: CallSlot, expected: Expected | None = None) -> None:
        """Answer the call at once, or route it and queue it.

        ``expected``: what ``expect`` read from the same call's text before
        it was complete; used if the call is that text and its tool is still
        the one registered, otherwise the call is read afresh.
        """
        if expected is not None and expected.fits(slot.call, self.registry):
            slot.entry, slot.arguments = expected.entry, expected.arguments
            failure = self._gate(slot)
        else:
            failure = (
                self._lookup(slot) or self._parse(slot) or self._validate(slot) or self._gate(slot)
            )
        if failure is not None:
            slot.finish(failure)
            return
        slot.routing = self._route(slot)
        slot.advance(State.QUEUED)

    def expect(self, call: ToolCall) -> Expected | None:
        """Read a call's tool and arguments ahead of ``plan_call``; ``None`` if they
        do not make a valid call (``plan_call`` then says why).

        Only what is toolexec's own and free of effects is done here: the
        lookup, the JSON and the schema. Hooks, policy and approval are asked
        at ``plan_call``, once, with the call as it finally stands.
        """
        entry = self.registry.lookup(call.name)
        text = call.arguments
        if entry is None or type(text) is not str or (value := _object_of(text)) is None:
            return None
        arguments = valid_arguments(entry, value)
        return None if arguments is None else Expected(call.name, text, entry, arguments)

    def _gate(self, slot: CallSlot) -> ToolResult | None:
        """The steps after the arguments: hooks, policy, approval mode, backend."""
        return (
            (self._hooks(slot) if self.hooks else None)
            or (None if self._allows_all else self._decide(slot))
            or self._approval_mode(slot)
            or self._backend(slot)
        )

    def _lookup(self, slot: CallSlot) -> ToolResult | None:
        slot.entry = self.registry.lookup(slot.call.name)
        if slot.entry is None:
            text = say.not_found(slot.call.name, self.registry.names())
            return error_result(slot, ErrorClass.NOT_FOUND, text)
        return None

    def _parse(self, slot: CallSlot) -> ToolResult | None:
        raw, name = slot.call.arguments, slot.call.name
        if type(raw) is str and (value := _object_of(raw)) is not None:
            slot.arguments = value
            return None
        if isinstance(raw, dict):
            slot.arguments = raw
            return None
        if isinstance(raw, Mapping):
            slot.arguments = dict(raw)
            return None
        if not isinstance(raw, str | bytes | bytearray):  # a value, not JSON text: say what
            return error_result(slot, ErrorClass.INVALID_ARGUMENTS, say.not_an_object(name, raw))
        try:
            value = json.loads(raw) if raw.strip() else {}
        except RecursionError:
            return error_result(slot, ErrorClass.INVALID_ARGUMENTS, say.json_too_deep(name))
        except (ValueError, AttributeError, TypeError) as exc:  # ValueError: 5000 digits
            return error_result(slot, ErrorClass.INVALID_ARGUMENTS, say.json_invalid(name, exc))
        if not isinstance(value, dict):
            return error_result(slot, ErrorClass.INVALID_ARGUMENTS, say.not_an_object(name, value))
        slot.arguments = value
        return None

    def _validate(self, slot: CallSlot, *, rewritten: bool = False) -> ToolResult | None:
        entry = slot.entry
        assert entry is not None
        arguments = valid_arguments(entry, slot.arguments)
        if arguments is not None:
            slot.arguments = arguments
            return None
        violations = violations_of(entry, slot.arguments)
        if not violations:
            return None
        text = say.invalid(slot.call.name, violations, rewritten=rewritten)
        return error_result(
            slot, ErrorClass.INVALID_ARGUMENTS, text, details={"violations": violations}
        )

    def _hooks(self, slot: CallSlot) -> ToolResult | None:
        for hook in self.hooks:
            try:
                decision = hook.before_call(slot.call, slot.arguments, self.agent_path)
            except Exception as exc:
                _log.exception("before_call hook %r raised; denying the call", hook)
                text = say.hook_failed(slot.call.name, exc)
                return error_result(slot, ErrorClass.PERMISSION_DENIED, text)
            if decision is None:
                continue
            failure = self._apply_hook(slot, hook, decision)
            if failure is not None:
                return failure
        return None

    def _apply_hook(self, slot: CallSlot, hook: CallHook, decision: object) -> ToolResult | None:
        name = slot.call.name
        if isinstance(decision, Skip):
            return error_result(slot, ErrorClass.SKIPPED, say.skipped_by_host(decision.reason))
        if not isinstance(decision, Rewrite):  # fail closed, as for a hook that raises
            _log.error("before_call hook %r returned %r, not a decision; denying", hook, decision)
            text = say.hook_not_a_decision(name, decision)
            return error_result(slot, ErrorClass.PERMISSION_DENIED, text)
        if not isinstance(decision.arguments, Mapping):
            _log.error("before_call hook %r rewrote to %r; denying", hook, decision.arguments)
            text = say.bad_rewrite(name, decision.arguments)
            return error_result(slot, ErrorClass.PERMISSION_DENIED, text)
        slot.arguments = dict(decision.arguments)
        return self._validate(slot, rewritten=True)

    def _decide(self, slot: CallSlot) -> ToolResult | None:
        assert slot.entry is not None
        try:
            decision = self.policy.decide(slot.entry.definition, slot.arguments, self.agent_path)
        except Exception as exc:  # fail closed, like a hook that raises
            _log.exception("policy %r raised; denying the call", self.policy)
            decision = Deny(say.policy_failed(exc))
        if not isinstance(decision, (Allow, Ask, Deny)):
            decision = Deny(say.policy_not_a_decision(decision))
        if isinstance(decision, Deny):
            text = say.denied(slot.call.name, decision.reason)
            return error_result(slot, ErrorClass.PERMISSION_DENIED, text)
        slot.grant = decision.grant
        if isinstance(decision, Ask):
            slot.reason = decision.reason
            slot.needs_approval = ApprovalMode.PROMPT
        return None

    def _approval_mode(self, slot: CallSlot) -> ToolResult | None:
        if slot.needs_approval is None and self._auto_only:
            return None  # every mode is auto, and the policy did not ask
        assert slot.entry is not None
        definition = slot.entry.definition
        mode = ApprovalMode.AUTO
        if self.approval is not None:
            mode = self.approval.mode_for(definition, self.workspace)
        if mode is ApprovalMode.DENY:
            text = say.mode_denies(slot.call.name, definition.side_effects)
            return error_result(slot, ErrorClass.PERMISSION_DENIED, text)
        # A policy ``Ask`` is answered by a human whatever was remembered for
        # the tool: prompt_once covers the tool, not this particular question.
        if slot.needs_approval is ApprovalMode.PROMPT and mode in _PROMPTED_BY_ASK:
            mode = ApprovalMode.PROMPT
        slot.needs_approval = None if mode is ApprovalMode.AUTO else mode
        return None

    def _backend(self, slot: CallSlot) -> ToolResult | None:
        grant = slot.grant or HOST_GRANT
        if grant is HOST_GRANT or grant.sandbox == HOST:
            return None
        slot.backend = self.backends.get(grant.sandbox)
        if slot.backend is None:
            text = say.unknown_sandbox(slot.call.name, grant.sandbox, [HOST, *self.backends])
            return error_result(slot, ErrorClass.EXECUTION_ERROR, text)
        return None

    def _route(self, slot: CallSlot) -> RoutingClass:
        entry = slot.entry
        assert entry is not None
        definition = entry.definition
        if definition.is_recursive:
            return RoutingClass.CONCURRENT_MUT
        if entry.read_only or _classified_read_only(entry, slot.arguments):
            return RoutingClass.READ_ONLY
        if definition.name in self.promoted:
            return RoutingClass.CONCURRENT_MUT
        return RoutingClass.SERIAL_MUT


@attrs.frozen
class Expected:
    """A call's tool and validated arguments, read before the call was complete."""

    name: str
    text: str
    entry: RegisteredTool
    arguments: dict[str, Any]

    def fits(self, call: ToolCall, registry: ToolRegistry) -> bool:
        """Whether ``call`` is the call this was read from, its tool unchanged."""
        return (
            call.arguments == self.text
            and call.name == self.name
            and registry.lookup(self.name) is self.entry
        )


def valid_arguments(entry: RegisteredTool, arguments: dict[str, Any]) -> dict[str, Any] | None:
    """``arguments`` as the tool takes them (integers made ``int``), or ``None``
    if they break its schema (``violations_of`` says how)."""
    try:
        if entry.schema.is_valid(arguments):
            return integral_arguments(entry, arguments) if entry.integers else arguments
    except (TypeError, ValueError):
        pass  # a value JSON has no type for: violations_of words it
    return None


def _classified_read_only(entry: RegisteredTool, arguments: Mapping[str, Any]) -> bool:
    classifier = entry.definition.classifier
    if classifier is None:
        return False
    try:
        effects = classifier(arguments)
    except Exception:
        _log.exception("classifier of tool %r raised; routing as declared", entry.definition.name)
        return False
    return isinstance(effects, SideEffects) and effects.is_read_only


def violations_of(entry: RegisteredTool, arguments: Mapping[str, Any]) -> list[str]:
    """What is wrong with ``arguments`` for the tool's schema (nothing: ``[]``)."""
    try:
        if entry.schema.is_valid(arguments):
            return []
        return entry.schema.violations(arguments) or ["$: the arguments do not match"]
    except (TypeError, ValueError) as exc:  # a value JSON has no type for (bytes, ...)
        return [f"$: {exc}; arguments must be JSON values"]
