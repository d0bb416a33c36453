"""Questions that outlive the process: list them and answer them from anywhere.

A call waiting for a human under a journal has its question in the journal
(``_core._journaling``). Any process that opens the same store can list the
open questions and answer one; the waiting executor, in whatever process,
sees the answer at its next look (``Journal.poll_interval``), and an
executor resumed after a crash finds it there and never asks again.
"""

from __future__ import annotations

import json
import re
import time
from typing import TYPE_CHECKING, Any

import attrs

from .._core._display import display_text
from ._postgres import PostgresStore
from ._sqlite import SQLiteStore

if TYPE_CHECKING:
    from .._core._journal import CallKey, CallRecord, JournalStore

__all__ = ["Question", "answer_question", "open_store", "pending_questions"]

# A libpq connection string: keyword=value pairs, a value bare or single-quoted.
_CONNINFO = re.compile(r"\s*(\w+\s*=\s*('(\\.|[^'\\])*'|[^\s']+)\s*)+")


@attrs.frozen
class Question:
    """An open question: which call asks, what it would do, until when.

    Attributes:
        id: the short id ``answer_question`` and ``toolexec approve`` take.
        key: the call's journal key (session, agent path, batch, call id).
        summary: one line for a person (escaped; safe to print).
        tool_name: the tool the call would run.
        arguments: exactly the arguments it would run with (canonical JSON).
        deadline: when the question times out (seconds since the epoch).
    """

    id: str
    key: CallKey
    summary: str
    tool_name: str
    arguments: str
    deadline: float | None

    @classmethod
    def of(cls, record: CallRecord) -> Question:
        """The question a journal record holds."""
        data: dict[str, Any] = json.loads(record.question or "{}")
        return cls(
            record.question_id,
            record.key,
            str(data.get("summary", display_text(record.tool))),
            str(data.get("tool_name", record.tool)),
            str(data.get("arguments", record.arguments)),
            record.deadline,
        )


async def pending_questions(store: JournalStore, session: str | None = None) -> list[Question]:
    """The questions nobody has answered yet, of one session or of all.

    Example::

        for q in await pending_questions(SQLiteStore("journal.db")):
            print(q.id, q.summary)
    """
    records = await store.questions(session)
    return [Question.of(r) for r in sorted(records, key=lambda r: (r.key.session, r.index))]


async def answer_question(
    store: JournalStore, question_id: str, approved: bool, *, by: str = "", reason: str = ""
) -> bool:
    """Answer an open question; ``True`` if this answer is the one that counts.

    The first answer wins: ``False`` if another one landed between finding
    the question and answering it.

    Raises:
        LookupError: no open question has this id (it was answered, its
            call finished, or it was never asked).
    """
    for record in await store.questions():
        if record.question_id == question_id:
            answer = {"approved": bool(approved), "by": by, "reason": reason, "at": time.time()}
            text = json.dumps(answer)
            return await store.answer(record.key, text)
    raise LookupError(f"no open question has the id {question_id!r} in {store!r}")


def open_store(where: str) -> JournalStore:
    """The journal store a command line names: a PostgreSQL database or a SQLite file.

    A PostgreSQL database is named by its URL (``postgresql://host/db``) or
    a libpq connection string (``"host=db.internal dbname=agents"``); it
    needs the ``postgres`` extra. Anything else is a SQLite file's path.

    Example::

        store = open_store("postgresql://toolexec@db.internal/agents")

    Raises:
        ValueError: ``where`` is empty.
    """
    if not where:
        raise ValueError(
            "name a journal: the path of its SQLite file, or a PostgreSQL database's URL"
        )
    if where.startswith(("postgresql://", "postgres://")) or _CONNINFO.fullmatch(where):
        return PostgresStore(where)
    return SQLiteStore(where)
