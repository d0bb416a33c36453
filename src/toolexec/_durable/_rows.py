"""A journal record as a table row: the one layout both SQL stores use (SQLite, PostgreSQL).

The table ``toolexec_calls`` has one row per call, its columns in
``COLUMNS`` order; ``row_of`` gives every column but ``answer`` (which only
``JournalStore.answer`` writes), ``record_of`` reads all of them back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._core._journal import CallKey, CallRecord, Phase

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["COLUMNS", "key_of", "record_of", "row_of"]

COLUMNS = (
    "session, agent_path, batch, call_id, phase, idx, tool, arguments, grant_json, rerun,"
    " attempt, lease_owner, lease_until, result, question, deadline, answer"
)


def key_of(key: CallKey) -> tuple[str, str, str, str]:
    """A call's key as the table's four key columns."""
    return (key.session, key.agent_path, key.batch, key.call_id)


def row_of(r: CallRecord, lease_from: float = 0.0) -> tuple[Any, ...]:
    """A record's columns but ``answer``; its lease end less ``lease_from`` (0: as it is)."""
    return (
        *key_of(r.key),
        int(r.phase),
        r.index,
        r.tool,
        r.arguments,
        r.grant,
        r.rerun,
        r.attempt,
        r.lease_owner,
        None if r.lease_until is None else r.lease_until - lease_from,
        r.result,
        r.question,
        r.deadline,
    )


def record_of(row: Sequence[Any]) -> CallRecord:
    """The record a row of ``COLUMNS`` holds."""
    return CallRecord(
        key=CallKey(*row[:4]),
        phase=Phase(row[4]),
        index=row[5],
        tool=row[6],
        arguments=row[7],
        grant=row[8],
        rerun=bool(row[9]),
        attempt=row[10],
        lease_owner=row[11],
        lease_until=row[12],
        result=row[13],
        question=row[14],
        deadline=row[15],
        answer=row[16],
    )
