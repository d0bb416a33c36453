"""An agent loop's checkpoints in the call journal (docs/durable.md, "Agent loops").

Theory of operation. An ``AgentLoop`` whose executor has a journal writes
its state to the journal twice a turn: once the model has answered (so a
loop resumed after a crash submits *those* calls again, and the journal's
resume rules decide what runs), and once the turn's results are in. A
checkpoint is one record of the journal's own kind: the loop's key in the
executor's scope, batch ``CHECKPOINTS``, its ``result`` the transcript and
counters as JSON. Each write replaces the last (a store keeps the latest
result of a checkpoint record, where a call's first result stays), so
resuming costs one read and the journal holds one checkpoint per loop.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import attrs

from .._core._journal import (
    CHECKPOINTS,
    CallKey,
    CallRecord,
    Phase,
    result_from_json,
    result_to_json,
)
from .._core._types import ToolCall
from ._model import Message, ProviderBlock, Usage

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .._core._journaling import Journal

__all__ = ["CHECKPOINTS", "Checkpoint", "load_checkpoint", "save_checkpoint"]


@attrs.frozen
class Checkpoint:
    """Where a loop was: its transcript, how many turns and calls, its usage, whether done."""

    messages: tuple[Message, ...]
    turn: int
    calls: int
    usage: Usage
    stop: str | None = None  # the StopReason value, once the loop has stopped


def _key(journal: Journal, loop_key: str) -> CallKey:
    return CallKey(journal.session, journal.scope, CHECKPOINTS, loop_key)


async def save_checkpoint(journal: Journal, loop_key: str, checkpoint: Checkpoint) -> None:
    """Write ``checkpoint`` as the loop's latest (durable on return)."""
    record = CallRecord(
        key=_key(journal, loop_key),
        phase=Phase.FINISHED,
        tool="#agent-loop",
        result=json.dumps(_to_json(checkpoint), ensure_ascii=False, default=str),
    )
    await journal.store.write([record])
    journal.keep(record)


async def load_checkpoint(journal: Journal, loop_key: str) -> Checkpoint | None:
    """The loop's latest checkpoint, or ``None``."""
    record = await journal.store.get(_key(journal, loop_key))
    if record is None or record.result is None:
        return None
    return _from_json(json.loads(record.result))


def _to_json(c: Checkpoint) -> dict[str, Any]:
    return {
        "messages": [_message_to_json(m) for m in c.messages],
        "turn": c.turn,
        "calls": c.calls,
        "usage": [c.usage.input_tokens, c.usage.output_tokens],
        "stop": c.stop,
    }


def _from_json(data: dict[str, Any]) -> Checkpoint:
    return Checkpoint(
        tuple(_message_from_json(m) for m in data["messages"]),
        data["turn"],
        data["calls"],
        Usage(*data["usage"]),
        data["stop"],
    )


def _message_to_json(m: Message) -> dict[str, Any]:
    return {
        "role": m.role,
        "text": m.text,
        "tool_calls": [_call_to_json(c) for c in m.tool_calls],
        "tool_results": [result_to_json(r) for r in m.tool_results],
        "provider_blocks": [[b.format, dict(b.data), b.position] for b in m.provider_blocks],
    }


def _message_from_json(data: dict[str, Any]) -> Message:
    return Message(
        data["role"],
        data["text"],
        tuple(ToolCall(c["id"], c["name"], c["arguments"]) for c in data["tool_calls"]),
        tuple(result_from_json(r) for r in data["tool_results"]),
        tuple(ProviderBlock(f, d, p) for f, d, p in data["provider_blocks"]),
    )


def _call_to_json(call: ToolCall) -> dict[str, Any]:
    arguments = call.arguments
    return {
        "id": call.id,
        "name": call.name,
        "arguments": arguments if isinstance(arguments, str) else dict(arguments),
    }


def transcript_calls(messages: Sequence[Message]) -> tuple[ToolCall, ...]:
    """The calls of a transcript's last message, if it asked for tools not yet answered."""
    last = messages[-1] if messages else None
    if last is not None and last.role == "assistant" and last.tool_calls:
        return last.tool_calls
    return ()
