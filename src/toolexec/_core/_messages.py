"""Every text the executor shows the model, in one place, and the one rule that bounds them.

A model reads these to decide what to do next, so each one says what went
wrong with *this* call and, where it can, what to do instead. The functions
are pure; the planning and run paths only pick which one applies.

The bound (docs/security.md): a text that came from outside (a tool name,
a path, an argument, an id, an exception's words) is quoted by at most
``CLIP_CHARS`` characters, and a whole message, here or in a policy's
denial or the IPC supervisor's answers, is at most ``MESSAGE_CHARS``; both
cut by ``clip``, which keeps the two ends and counts what it left out.
An error listing a schema's allowed values shows at most ``ENUM_SHOWN``
of them and ``ENUM_CHARS`` characters of them, each clipped, then counts
the rest.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from ._types import SideEffects

SKIPPED = "Skipped: the user sent a new message before this call started."
CANCELLED = "Cancelled: the host cancelled this call before it finished."

_JSON_KINDS = {
    list: "an array",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


#: How much of a text that came from outside (a name, a value, a path) one message shows.
CLIP_CHARS = 200
#: The longest message toolexec writes for a model or a runner, in characters.
MESSAGE_CHARS = 4000
_COUNTED = 32  # room for clip's "…[N characters]…"
#: How many allowed values an enum error lists; the rest are counted.
ENUM_SHOWN = 20
#: How many characters of allowed values an enum error lists (at least one value).
ENUM_CHARS = 400


def clip(text: str, limit: int = CLIP_CHARS) -> str:
    """``text``, or, past ``limit`` characters, its two ends and how much is left out.

    A model's huge value must not come back to it as a huge error message.
    """
    if len(text) <= limit:
        return text
    head, tail = limit * 2 // 3, limit // 3
    return f"{text[:head]}…[{len(text) - head - tail} characters]…{text[-tail:]}"


def bounded(message: str) -> str:
    """``message``, or, past ``MESSAGE_CHARS``, its two ends (``clip``).

    Every message leaves through this: an error result's text, a policy's
    denial, a supervisor's refusal.
    """
    if len(message) <= MESSAGE_CHARS:
        return message
    return clip(message, MESSAGE_CHARS - _COUNTED)


_SCHEMA_KINDS = {
    "integer": "an integer",
    "number": "a number",
    "string": "a string",
    "boolean": "a boolean",
    "array": "an array",
    "object": "an object",
    "null": "null",
}


def json_text(value: object) -> str:
    """``value`` (a JSON value: the validator met it) as JSON text, clipped."""
    return clip(json.dumps(value, ensure_ascii=False))


def _sent(value: object) -> str:
    """What the model sent, named for a type error: its JSON kind, and a scalar's value."""
    if isinstance(value, bool):
        return f"the boolean {json_text(value)}"
    if isinstance(value, str):
        return f"the string {json_text(value)}"
    if isinstance(value, int | float):
        return f"the number {json_text(value)}"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return "null"  # the one JSON value left


def wrong_type(expected: Iterable[str], value: object) -> str:
    """A value of the wrong JSON type: what the schema expects, and what came."""
    kinds = sorted(expected, key=lambda kind: kind == "null")  # "an integer or null"
    wanted = " or ".join(_SCHEMA_KINDS.get(kind, kind) for kind in kinds)
    return f"expected {wanted}, got {_sent(value)}"


def not_one_of(value: object, allowed: Sequence[object]) -> str:
    """A value outside an enum: the allowed values, up to the bound, then a count."""
    shown: list[str] = []
    used = 0
    for option in allowed[:ENUM_SHOWN]:
        text = json_text(option)
        if shown and used + len(text) > ENUM_CHARS:
            break
        shown.append(text)
        used += len(text) + 2
    more = len(allowed) - len(shown)
    rest = f", and {more} more" if more else ""
    return f"{json_text(value)} is not one of the allowed values: {', '.join(shown)}{rest}"


def not_the_constant(value: object, allowed: object) -> str:
    """A value other than a ``const``: the one allowed value."""
    return f"{json_text(value)} is not allowed; the only allowed value is {json_text(allowed)}"


def not_found(name: str, available: Iterable[str]) -> str:
    names = ", ".join(available) or "(none)"
    return f"Tool '{clip(name)}' not found. Available: {names}"


def json_too_deep(name: str) -> str:
    return (
        f"Invalid arguments for tool '{name}': the JSON is nested too deeply. "
        "Send a flatter JSON object."
    )


def json_invalid(name: str, error: Exception) -> str:
    return (
        f"Invalid arguments for tool '{name}': the arguments are not valid JSON ({error}). "
        "Send a JSON object."
    )


def not_an_object(name: str, value: object) -> str:
    kind = _JSON_KINDS.get(type(value), "a value of another kind")
    return f"Invalid arguments for tool '{name}': expected a JSON object, got {kind}."


def invalid(name: str, violations: Sequence[str], *, rewritten: bool = False) -> str:
    when = " after the host rewrote them" if rewritten else ""
    return f"Invalid arguments for tool '{name}'{when}:\n- " + "\n- ".join(violations)


def denied(name: str, reason: str) -> str:
    return f"Permission denied for tool '{name}': {reason}"


def hook_failed(name: str, error: Exception) -> str:
    return denied(name, f"a safety check failed ({type(error).__name__}).")


def policy_failed(error: Exception) -> str:
    return f"the policy could not decide ({type(error).__name__})"


def policy_not_a_decision(value: object) -> str:
    return f"the policy returned {type(value).__name__}, not a decision"


def mode_denies(name: str, effects: SideEffects) -> str:
    return denied(
        name, f"the confirmation policy denies tools with side effects '{effects.value}'."
    )


def skipped_by_host(reason: str) -> str:
    return f"Skipped by the host: {reason}"


def unknown_sandbox(name: str, sandbox: str, available: Iterable[str]) -> str:
    have = ", ".join(sorted(available))
    return (
        f"Tool '{name}' cannot run: its grant names the sandbox '{sandbox}', which this "
        f"executor does not have (it has: {have})."
    )


def interrupted(name: str) -> str:
    return (
        f"Tool '{name}' was interrupted: the host stopped while it ran, and it may or may "
        "not have taken effect. It was not run again; check its effect before retrying."
    )


def finished_elsewhere(name: str) -> str:
    return f"Tool '{name}' already ran on another host; this is its result."


def denied_for_session(name: str) -> str:
    return f"The user denied tool '{name}' for the rest of this session."


def no_approver(name: str) -> str:
    return denied(name, "it needs approval and no approver is configured.")


def not_showable(name: str, error: Exception) -> str:
    return denied(name, f"its arguments cannot be shown for approval ({error}).")


def approver_failed(name: str, error: Exception) -> str:
    return denied(name, f"the approval could not be obtained ({type(error).__name__}).")


def approver_invalid(name: str) -> str:
    return denied(name, "the approver gave no valid answer.")


def approval_timeout(name: str, timeout: float) -> str:
    return (
        f"No answer to the approval request for tool '{name}' within {timeout:g}s; "
        "the call did not run."
    )


def user_denied(name: str, reason: str) -> str:
    why = f": {reason}" if reason else "."
    return f"The user denied this call of '{name}'{why}"


def timed_out(name: str, timeout: float) -> str:
    return f"Tool '{name}' timed out after {timeout:g}s and was cancelled."


# What trio throws into a task that yielded it something else (an asyncio future).
_FOREIGN_YIELD = "trio.run received unrecognized yield message "


def crashed(name: str, error: BaseException) -> str:
    words = str(error)
    if isinstance(error, TypeError) and words.startswith(_FOREIGN_YIELD):
        awaited = clip(words.removeprefix(_FOREIGN_YIELD).partition(". Are you")[0])
        return (
            f"Tool '{name}' failed: its body awaited an asyncio object ({awaited}) in trio. "
            "A body written for asyncio is marked @asyncio_tool (toolexec.aio), under "
            "@function_tool, and runs through toolexec.aio.open_executor "
            "(this is a bug in the tool)."
        )
    return f"Tool '{name}' failed: {type(error).__name__}: {words}"


def hook_not_a_decision(name: str, value: object) -> str:
    return denied(name, f"a safety check gave no valid decision ({type(value).__name__}).")


def bad_rewrite(name: str, value: object) -> str:
    return denied(
        name, f"the host rewrote the arguments to {type(value).__name__}, not a JSON object."
    )


def not_an_output(name: str, value: object) -> str:
    return (
        f"Tool '{name}' returned {type(value).__name__}, not a ToolOutput "
        "(this is a bug in the tool)."
    )


def truncated(cut: int) -> str:
    return f"\n[output truncated: {cut} more characters not shown]"
