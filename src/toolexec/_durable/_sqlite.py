"""The SQLite journal store: one file, WAL, the standard library's ``sqlite3``.

Theory of operation. One connection per store, opened on first use and
used only under a lock, from worker threads (``trio.to_thread``), so the
trio loop never waits on the disk. Each method is one transaction:
``write`` merges a whole flush of records at once (the lifecycle batches
its records per run), ``claim`` reads and starts a call under
``BEGIN IMMEDIATE`` so two processes sharing the file cannot both claim it.
In WAL mode with ``synchronous="NORMAL"`` (the default) a commit survives
any crash of the process (a SIGKILL, an abort) but not a power loss or a
crash of the operating system, which may take the last commits back; with
``"FULL"`` every commit waits for the disk (an fsync) and survives those
too, at a few milliseconds per commit on an ordinary disk
(docs/durable.md, "Costs"). Several processes may share the file (a lock timeout of
``busy_timeout`` seconds covers their transactions).
"""

from __future__ import annotations

import sqlite3
import threading
from typing import TYPE_CHECKING, Any, TypeVar

import trio

from .._core._journal import CHECKPOINTS, CallKey, CallRecord, Phase, claimable
from ._rows import COLUMNS as _COLUMNS
from ._rows import key_of as _key
from ._rows import record_of as _record
from ._rows import row_of as _row

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from os import PathLike

__all__ = ["SQLiteStore"]

T = TypeVar("T")


_SCHEMA = """
CREATE TABLE IF NOT EXISTS toolexec_calls (
    session TEXT NOT NULL,
    agent_path TEXT NOT NULL,
    batch TEXT NOT NULL,
    call_id TEXT NOT NULL,
    phase INTEGER NOT NULL,
    idx INTEGER NOT NULL,
    tool TEXT NOT NULL,
    arguments TEXT NOT NULL,
    grant_json TEXT,
    rerun INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    lease_owner TEXT,
    lease_until REAL,
    result TEXT,
    question TEXT,
    deadline REAL,
    answer TEXT,
    PRIMARY KEY (session, agent_path, batch, call_id)
)
"""

_MERGE = f"""
INSERT INTO toolexec_calls ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,NULL)
ON CONFLICT (session, agent_path, batch, call_id) DO UPDATE SET
    phase = MAX(phase, excluded.phase),
    idx = excluded.idx,
    tool = excluded.tool,
    arguments = excluded.arguments,
    grant_json = COALESCE(excluded.grant_json, grant_json),
    rerun = excluded.rerun,
    attempt = MAX(attempt, excluded.attempt),
    lease_owner = COALESCE(excluded.lease_owner, lease_owner),
    lease_until = COALESCE(excluded.lease_until, lease_until),
    result = CASE WHEN batch = '{CHECKPOINTS}' THEN COALESCE(excluded.result, result)
        ELSE COALESCE(result, excluded.result) END,
    question = COALESCE(excluded.question, question),
    deadline = COALESCE(excluded.deadline, deadline)
"""

_KEY = "session = ? AND agent_path = ? AND batch = ? AND call_id = ?"


class SQLiteStore:
    """A journal in one SQLite file (``toolexec.durable``; docs/durable.md).

    Example::

        store = SQLiteStore("journal.db")
        journal = await Journal.open(store, "session-1")

    Args:
        path: the database file (created if missing).
        synchronous: ``"NORMAL"`` (a commit survives any crash of the
            process) or ``"FULL"`` (it survives a power loss too, at an
            fsync per commit).
        busy_timeout: seconds to wait for another process's transaction.
    """

    def __init__(
        self, path: str | PathLike[str], *, synchronous: str = "NORMAL", busy_timeout: float = 60.0
    ) -> None:
        if synchronous not in ("FULL", "NORMAL"):
            raise ValueError(f"synchronous must be 'FULL' or 'NORMAL', got {synchronous!r}")
        self.path = str(path)
        self._synchronous = synchronous
        self._busy_ms = int(busy_timeout * 1000)
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"

    # -- the protocol ------------------------------------------------------------

    async def load(self, session: str) -> list[CallRecord]:
        """Every record of ``session``."""
        return await self._run(
            self._select, f"SELECT {_COLUMNS} FROM toolexec_calls WHERE session = ?", (session,)
        )

    async def get(self, key: CallKey) -> CallRecord | None:
        """The record of one call, or ``None``."""
        rows = await self._run(
            self._select, f"SELECT {_COLUMNS} FROM toolexec_calls WHERE {_KEY}", _key(key)
        )
        return rows[0] if rows else None

    async def write(self, records: Sequence[CallRecord]) -> None:
        """Merge ``records`` in one transaction."""
        if records:
            await self._run(self._write, [_row(r) for r in records])

    async def claim(self, record: CallRecord, now: float) -> CallRecord | None:
        """Start the call for ``record.lease_owner`` unless it is finished or leased elsewhere."""
        return await self._run(self._claim, record, now)

    async def renew(self, keys: Sequence[CallKey], owner: str, until: float) -> None:
        """Extend ``owner``'s leases on ``keys`` to ``until``."""
        sql = f"UPDATE toolexec_calls SET lease_until = ? WHERE {_KEY} AND lease_owner = ?"
        rows = [(until, *_key(k), owner) for k in keys]
        await self._run(self._many, sql, rows)

    async def answer(self, key: CallKey, answer: str) -> bool:
        """Answer the call's open question; whether this was its first answer."""
        sql = (
            f"UPDATE toolexec_calls SET answer = ? WHERE {_KEY}"
            " AND question IS NOT NULL AND answer IS NULL AND phase < 2"
        )
        return bool(await self._run(self._many, sql, [(answer, *_key(key))]))

    async def questions(self, session: str | None = None) -> list[CallRecord]:
        """Unanswered questions of unfinished calls."""
        where = "question IS NOT NULL AND answer IS NULL AND phase < 2"
        if session is None:
            return await self._run(
                self._select, f"SELECT {_COLUMNS} FROM toolexec_calls WHERE {where}", ()
            )
        sql = f"SELECT {_COLUMNS} FROM toolexec_calls WHERE {where} AND session = ?"
        return await self._run(self._select, sql, (session,))

    async def aclose(self) -> None:
        """Close the connection."""
        await self._run(self._close)

    # -- in the worker thread --------------------------------------------------------

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await trio.to_thread.run_sync(self._locked, fn, *args)

    def _locked(self, fn: Callable[..., T], *args: Any) -> T:
        with self._lock:
            return fn(*args)

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            db.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
            db.execute("PRAGMA journal_mode = WAL")
            db.execute(f"PRAGMA synchronous = {self._synchronous}")
            db.execute(_SCHEMA)
            self._db = db
        return self._db

    def _select(self, sql: str, params: tuple[Any, ...]) -> list[CallRecord]:
        return [_record(row) for row in self._connection().execute(sql, params)]

    def _write(self, rows: list[tuple[Any, ...]]) -> None:
        db = self._connection()
        db.execute("BEGIN IMMEDIATE")
        try:
            db.executemany(_MERGE, rows)
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def _many(self, sql: str, rows: list[tuple[Any, ...]]) -> int:
        db = self._connection()
        db.execute("BEGIN IMMEDIATE")
        try:
            changed = sum(db.execute(sql, row).rowcount for row in rows)
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        return changed

    def _claim(self, record: CallRecord, now: float) -> CallRecord | None:
        db = self._connection()
        db.execute("BEGIN IMMEDIATE")
        try:
            sql = f"SELECT {_COLUMNS} FROM toolexec_calls WHERE {_KEY}"
            found = [_record(r) for r in db.execute(sql, _key(record.key))]
            stored = found[0] if found else None
            if stored is not None and not claimable(stored, record.lease_owner, now):
                db.execute("ROLLBACK")
                return stored
            attempt = (stored.attempt if stored is not None else 0) + 1
            row = _row(record)
            db.execute(_MERGE, (*row[:4], int(Phase.STARTED), *row[5:10], attempt, *row[11:]))
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        return None

    def _close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
