"""Durable execution: a call journal, resume after a crash, questions that outlive the process.

Give an executor a ``Journal`` and every call's plan, start and result are
recorded in a store (``SQLiteStore``: one file; ``PostgresStore``: one
database that several hosts share, with the ``postgres`` extra). Submit a
batch again after a crash, with the same session and call ids, and it
resumes: finished calls are answered from the journal, calls that never
started run, and a call that started and may have taken effect runs again
only if it cannot have changed anything or its tool declares itself
idempotent; any other is answered as interrupted. A question for a
human is a journal record any process can answer (``answer_question``,
``toolexec approve``). The whole story: docs/durable.md.

Example::

    from toolexec.durable import Journal, SQLiteStore

    journal = await Journal.open(SQLiteStore("journal.db"), "session-1")
    executor = ToolExecutor(registry, journal=journal)
    outcome = await executor.execute_batch(calls)
"""

from __future__ import annotations

from ._core._journal import CallKey, CallRecord, JournalStore, Phase
from ._core._journaling import Journal
from ._core._public import fixup_module_metadata as _fixup_module_metadata
from ._durable._postgres import PostgresStore
from ._durable._questions import Question, answer_question, open_store, pending_questions
from ._durable._sqlite import SQLiteStore

__all__ = [
    "CallKey",
    "CallRecord",
    "Journal",
    "JournalStore",
    "Phase",
    "PostgresStore",
    "Question",
    "SQLiteStore",
    "answer_question",
    "open_store",
    "pending_questions",
]

_fixup_module_metadata(__name__, globals())
