"""The call journal's records and the protocol a store implements (docs/durable.md).

Theory of operation. With durability on, every call of a batch has one
*record* in a journal, keyed by ``CallKey`` (session, agent path, batch,
call id). The record moves forward only::

    PLANNED --> STARTED --> FINISHED

- *planned*: what the call is (tool, arguments, grant, its place in the
  batch) and whether it may run again after an interruption (``rerun``:
  its tool cannot change anything, declares itself idempotent, or runs a
  sub-agent whose own calls are journaled).
- *started*: a host claimed it, under a lease until ``lease_until`` (wall
  clock, seconds since the epoch) when several hosts share the journal;
  ``attempt`` counts the starts.
- *finished*: ``result`` holds the one result, as JSON (``result_to_json``).

A call that needs a human also carries its ``question`` (the request shown,
as JSON), its ``deadline`` (wall clock) and, once someone answered, its
``answer``. Any process with the journal may answer (``JournalStore.answer``);
the first answer wins, and nothing else ever overwrites it.

This module does no I/O: a store (``toolexec.durable``: SQLite, PostgreSQL)
does it, and the lifecycle (``_journaling``) only awaits the store's
methods. A store's writes are merges, never regressions: ``write`` keeps the
later of two states, the first result and the first answer, and never clears
a field, so records written late by a slow host cannot undo what another
wrote.
"""

from __future__ import annotations

import enum
import hashlib
import json
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import attrs

from ._types import ErrorClass, ImageContent, JsonContent, RoutingClass, TextContent, ToolResult

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "ANSWERS",
    "CHECKPOINTS",
    "RESERVED",
    "CallKey",
    "CallRecord",
    "JournalStore",
    "Phase",
    "claimable",
    "result_from_json",
    "result_to_json",
]


#: The batch key of agent loops' checkpoints (``_agents._checkpoint``): one record
#: per loop, whose ``result`` each save replaces, apart from every batch of calls.
CHECKPOINTS = "#checkpoints"
#: The batch key of a session's ``prompt_once`` answers: one record per tool (its
#: name the call id, agent path ``""``), whose ``result`` is the first answer given.
ANSWERS = "#answers"
#: The batches that hold no calls.
RESERVED = (CHECKPOINTS, ANSWERS)


class Phase(enum.IntEnum):
    """How far a journaled call got; a record's phase only ever grows."""

    PLANNED = 0
    STARTED = 1
    FINISHED = 2


@attrs.frozen(cache_hash=True)
class CallKey:
    """Where a call belongs: its session, agent, batch and id.

    ``batch`` is the batch's journal key: the one the host gave, or one
    derived from the batch's call ids (``ToolExecutor(journal=...)``), the
    same on every re-submission of the batch.
    """

    session: str
    agent_path: str
    batch: str
    call_id: str

    @property
    def question_id(self) -> str:
        """A short stable id for this call's question (``toolexec approve ID``)."""
        text = "\0".join((self.session, self.agent_path, self.batch, self.call_id))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


@attrs.frozen(kw_only=True)
class CallRecord:
    """One call's journal record (see the module docstring for its fields' meaning).

    Fields a record does not know yet are ``None``; a store's ``write``
    never replaces a known field with ``None``.
    """

    key: CallKey
    phase: Phase = Phase.PLANNED
    index: int = 0
    tool: str = ""
    arguments: str = "{}"  # the call's arguments as sent (JSON text)
    grant: str | None = None  # the execution grant, as JSON text
    rerun: bool = False
    attempt: int = 0
    lease_owner: str | None = None
    lease_until: float | None = None
    result: str | None = None  # result_to_json
    question: str | None = None  # the approval request shown, as JSON
    deadline: float | None = None  # when the question times out (wall clock)
    answer: str | None = None  # {"approved": bool, "by": str, "reason": str}

    @property
    def question_id(self) -> str:
        """The id ``toolexec approve`` and ``toolexec deny`` take."""
        return self.key.question_id


@runtime_checkable
class JournalStore(Protocol):
    """Where journal records live: one file (SQLite), one database (PostgreSQL).

    Every method is a coroutine and may block only on the store's own I/O.
    ``write``, ``claim`` and ``answer`` are durable when they return: a
    record written is there after any crash of this process.
    """

    async def load(self, session: str) -> list[CallRecord]:
        """Every record of ``session``, in no particular order."""
        ...

    async def get(self, key: CallKey) -> CallRecord | None:
        """The record of one call, or ``None``."""
        ...

    async def write(self, records: Sequence[CallRecord]) -> None:
        """Merge ``records`` in, in one transaction (durable on return).

        Per record: the phase becomes the later of the stored one and the
        new one; ``result`` keeps the first one written (a finished call's
        result never changes), except in a record of batch ``CHECKPOINTS``
        (an agent loop's latest checkpoint), which each write replaces; each
        other field takes the new value unless it is ``None``; ``answer`` is
        never written here (``answer`` is its only writer).
        """
        ...

    async def claim(self, record: CallRecord, now: float) -> CallRecord | None:
        """Start a call for ``record.lease_owner``, atomically; ``None`` if claimed.

        The call may be started if there is no stored record, or
        ``claimable(stored, record.lease_owner, now)``: it is not finished,
        not started already unless it may run again (``rerun``), and no
        other owner holds a lease still live at ``now``. Then the record is
        merged in as ``write`` would, with phase ``STARTED`` and ``attempt``
        one more than stored, in the same transaction as the check.
        Otherwise nothing changes and the stored record is returned.
        """
        ...

    async def renew(self, keys: Sequence[CallKey], owner: str, until: float) -> None:
        """Extend the leases ``owner`` holds on ``keys`` to ``until``."""
        ...

    async def answer(self, key: CallKey, answer: str) -> bool:
        """Answer a call's question: ``True`` if this was its first answer.

        A call without a question, or already answered, is left unchanged
        and gets ``False``.
        """
        ...

    async def questions(self, session: str | None = None) -> list[CallRecord]:
        """The unanswered questions of unfinished calls (of one session, or all)."""
        ...

    async def aclose(self) -> None:
        """Close the store's connections; it is not used afterwards."""
        ...


def claimable(stored: CallRecord, owner: str | None, now: float) -> bool:
    """Whether a stored record may be started by ``owner`` at ``now`` (``JournalStore.claim``)."""
    if stored.phase is Phase.FINISHED:
        return False
    if stored.phase is Phase.STARTED and not stored.rerun:
        return False  # it may have taken effect: never again
    leased = stored.lease_until is not None and stored.lease_until > now
    return not (leased and stored.lease_owner != owner)


# -- results as JSON ------------------------------------------------------------


def result_to_json(result: ToolResult, **more: Any) -> str:
    """A result as JSON text, for ``result_from_json`` to give back unchanged.

    Details must be JSON values to come back identical (a tuple comes
    back a list; anything else JSON cannot hold, as its text). ``more``:
    keys kept beside the result for readers of the journal (the lifecycle
    adds ``times``: when the call was planned, started and finished, in
    seconds since the epoch); ``result_from_json`` ignores them.
    """
    return json.dumps(
        {
            **more,
            "call_id": result.call_id,
            "tool_name": result.tool_name,
            "content": [_block_to_json(b) for b in result.content],
            "is_error": result.is_error,
            "error_class": None if result.error_class is None else result.error_class.value,
            "details": dict(result.details),
            "duration": result.duration,
            "routing": result.routing.value,
        },
        ensure_ascii=False,
        default=str,
    )


def result_from_json(text: str, **more_details: Any) -> ToolResult:
    """The result ``result_to_json`` wrote, with ``more_details`` added to its details."""
    data = json.loads(text)
    error_class = data["error_class"]
    return ToolResult(
        data["call_id"],
        data["tool_name"],
        tuple(_block_from_json(b) for b in data["content"]),
        data["is_error"],
        None if error_class is None else ErrorClass(error_class),
        {**data["details"], **more_details},
        data["duration"],
        RoutingClass(data["routing"]),
    )


def _block_to_json(block: TextContent | ImageContent | JsonContent) -> dict[str, Any]:
    if isinstance(block, TextContent):
        return {"type": "text", "text": block.text}
    if isinstance(block, ImageContent):
        return {"type": "image", "data": block.data, "mime_type": block.mime_type}
    return {"type": "json", "value": block.value}


def _block_from_json(data: dict[str, Any]) -> TextContent | ImageContent | JsonContent:
    kind = data["type"]
    if kind == "text":
        return TextContent(data["text"])
    if kind == "image":
        return ImageContent(data["data"], data["mime_type"])
    return JsonContent(data["value"])
