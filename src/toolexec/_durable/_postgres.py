"""The PostgreSQL journal store: one database that several hosts share.

Theory of operation.

*Group commit.* A commit that must be on disk costs a flush of the
server's log, milliseconds, so the store never commits once per call. Every
method queues an operation; the first caller to find no flush in progress
becomes the flusher: it lets the tasks that are ready run first (so that
calls starting or finishing together queue theirs too), takes everything
queued and applies it in one transaction on a worker thread
(``trio.to_thread``; psycopg's own async side is asyncio-only), then wakes
the callers whose operations that flush carried. One caller alone pays one
commit, as it would anyway. The statements travel pipelined, BEGIN and
COMMIT with them: a flush costs the server one round trip, or two when it
carries claims.

*No deadlock between hosts.* A flush applies its records in rounds, a key
at most once a round (a second record for a key waits for the next round;
most flushes are one round). A round takes all its row locks in one
statement, in key order: a round of writes is one sorted upsert; a round
with claims first inserts a placeholder for any key it does not find and
returns the current row of each (``INSERT ... ON CONFLICT DO UPDATE ...
RETURNING``, sorted), and its later statement touches only rows it holds.
Two hosts that lock in the same order cannot wait on each other in a cycle.
Renewals and answers run in transactions of their own, in key order too.

*Claims.* ``claim`` decides with ``claimable`` (the one rule, in
``_core._journal``) on the locked row, so no other host can change it
between the check and the write.

*Whose clock.* A lease is measured by the server's clock by default
(``clock="server"``): a host's lease of ``lease_until - now`` seconds is
stored as the server's time plus that length, a claim finds a lease live
while the server's time is before its end, and every record a host reads
back has its lease end moved onto that host's clock. So hosts whose clocks
disagree still agree on whose lease is live, and each compares lease ends
with its own ``time.time()``. ``clock="host"`` stores and compares the
hosts' own times as they give them (as the SQLite store does).

*A failed flush.* If a flush's transaction fails (a value PostgreSQL cannot
hold, a lost connection), each of its operations is applied again in a
transaction of its own, so one bad record fails its own caller only. A lost
connection is reopened by the next flush.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import TYPE_CHECKING, Any, Literal

import attrs
import trio

from .._core._journal import CHECKPOINTS, CallKey, CallRecord, Phase, claimable
from ._rows import COLUMNS as _COLUMNS
from ._rows import key_of as _key
from ._rows import record_of as _record
from ._rows import row_of as _row

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    import psycopg

__all__ = ["PostgresStore"]

_KEY_COLUMNS = ("session", "agent_path", "batch", "call_id")

_SCHEMA = """
SELECT pg_advisory_xact_lock(hashtext('toolexec_calls'));
CREATE TABLE IF NOT EXISTS toolexec_calls (
    session text NOT NULL,
    agent_path text NOT NULL,
    batch text NOT NULL,
    call_id text NOT NULL,
    phase smallint NOT NULL DEFAULT 0,
    idx integer NOT NULL DEFAULT 0,
    tool text NOT NULL DEFAULT '',
    arguments text NOT NULL DEFAULT '{}',
    grant_json text,
    rerun boolean NOT NULL DEFAULT false,
    attempt integer NOT NULL DEFAULT 0,
    lease_owner text,
    lease_until double precision,
    result text,
    question text,
    deadline double precision,
    answer text,
    PRIMARY KEY (session, agent_path, batch, call_id)
) WITH (fillfactor = 50);
CREATE INDEX IF NOT EXISTS toolexec_calls_questions ON toolexec_calls (session)
    WHERE question IS NOT NULL;
"""

_SERVER_NOW = "extract(epoch FROM clock_timestamp())::float8"
_KEYS = (
    "unnest(%s::text[], %s::text[], %s::text[], %s::text[])"
    " AS u(session, agent_path, batch, call_id)"
)
_MATCH = " AND ".join(f"t.{c} = u.{c}" for c in _KEY_COLUMNS)

# Lock (creating a placeholder where none exists) and read every row a flush touches, in key order.
_LOCK = f"""
INSERT INTO toolexec_calls AS t (session, agent_path, batch, call_id)
SELECT * FROM {_KEYS} ORDER BY 1, 2, 3, 4
ON CONFLICT (session, agent_path, batch, call_id) DO UPDATE SET phase = t.phase
RETURNING {_COLUMNS}, {_SERVER_NOW}
"""

# The merge of JournalStore.write (``_set``): ``{s}`` is the row merged in, ``t`` the
# stored one.
_SET = """
    phase = GREATEST(t.phase, {s}.phase),
    idx = {s}.idx,
    tool = {s}.tool,
    arguments = {s}.arguments,
    grant_json = COALESCE({s}.grant_json, t.grant_json),
    rerun = {s}.rerun,
    attempt = GREATEST(t.attempt, {s}.attempt),
    lease_owner = COALESCE({s}.lease_owner, t.lease_owner),
    lease_until = COALESCE({s}.lease_until, t.lease_until),
    result = CASE WHEN t.batch = '{checkpoints}' THEN COALESCE({s}.result, t.result)
        ELSE COALESCE(t.result, {s}.result) END,
    question = COALESCE({s}.question, t.question),
    deadline = COALESCE({s}.deadline, t.deadline)
"""


def _set(merged: str) -> str:
    return _SET.format(s=merged, checkpoints=CHECKPOINTS)


_FIELDS = (
    "session, agent_path, batch, call_id, phase, idx, tool, arguments, grant_json, rerun,"
    " attempt, lease_owner, lease_until, result, question, deadline"
)
# The records merged in, one array per column. A lease end arrives as the
# lease's length when the server's clock keeps leases (the first parameter
# says so), and becomes the server's time plus that length here.
_ROWS = f"""(
    SELECT u.session, u.agent_path, u.batch, u.call_id, u.phase, u.idx, u.tool, u.arguments,
        u.grant_json, u.rerun, u.attempt, u.lease_owner,
        u.lease_until + CASE WHEN %s::bool THEN {_SERVER_NOW} ELSE 0 END AS lease_until,
        u.result, u.question, u.deadline
    FROM unnest(
        %s::text[], %s::text[], %s::text[], %s::text[], %s::int2[], %s::int4[], %s::text[],
        %s::text[], %s::text[], %s::bool[], %s::int4[], %s::text[], %s::float8[], %s::text[],
        %s::text[], %s::float8[]
    ) AS u({_FIELDS})
) AS u"""

# Merge into rows the flush already holds (after _LOCK).
_MERGE = f"UPDATE toolexec_calls AS t SET {_set('u')} FROM {_ROWS} WHERE {_MATCH}"

# Lock in key order and merge in one statement (a round of writes only).
_UPSERT = f"""
INSERT INTO toolexec_calls AS t ({_FIELDS}) SELECT * FROM {_ROWS} ORDER BY 1, 2, 3, 4
ON CONFLICT (session, agent_path, batch, call_id) DO UPDATE SET {_set("EXCLUDED")}
"""

_RENEW = f"""
WITH held AS (
    SELECT t.session, t.agent_path, t.batch, t.call_id FROM toolexec_calls AS t JOIN {_KEYS}
    ON {_MATCH} WHERE t.lease_owner = %s ORDER BY 1, 2, 3, 4 FOR UPDATE OF t
)
UPDATE toolexec_calls AS t SET lease_until = COALESCE(%s::float8, {_SERVER_NOW} + %s::float8)
FROM held AS u WHERE {_MATCH}
"""

_ANSWER = f"""
UPDATE toolexec_calls SET answer = %s
WHERE {" AND ".join(f"{c} = %s" for c in _KEY_COLUMNS)}
    AND question IS NOT NULL AND answer IS NULL AND phase < 2
RETURNING 1
"""

_SELECT = f"SELECT {_COLUMNS}, {_SERVER_NOW} FROM toolexec_calls"
_OPEN_QUESTIONS = "question IS NOT NULL AND answer IS NULL AND phase < 2"
_READS = {
    "load": f"{_SELECT} WHERE session = %s",
    "get": f"{_SELECT} WHERE {' AND '.join(f'{c} = %s' for c in _KEY_COLUMNS)}",
    "questions": f"{_SELECT} WHERE {_OPEN_QUESTIONS}",
    "session_questions": f"{_SELECT} WHERE {_OPEN_QUESTIONS} AND session = %s",
}


_Item = tuple["_Op", CallRecord]


@attrs.define(eq=False)
class _Op:
    """One queued operation and, once a flush applied it, its outcome."""

    kind: Literal["write", "claim", "read", "renew", "answer"]
    args: tuple[Any, ...]
    value: Any = None
    error: Exception | None = None
    done: bool = False

    def outcome(self) -> Any:
        """The operation's value, or the error that failed it."""
        if self.error is not None:
            raise self.error
        return self.value


class PostgresStore:
    """A journal in a PostgreSQL database, shared by several hosts (docs/durable.md).

    Needs the ``postgres`` extra (psycopg 3). The table ``toolexec_calls``
    is created on first use. Hosts that share the database take turns on a
    call through its lease: one host runs it, the others wait for its
    result, and a call whose host stopped renewing its lease is treated as
    interrupted.

    Example::

        store = PostgresStore("host=db.internal dbname=agents user=toolexec")

    Args:
        conninfo: a libpq connection string or URL.
        clock: ``"server"`` (the default) measures leases by the database
            server's clock, so hosts need not agree on the time;
            ``"host"`` compares the hosts' own times.
    """

    def __init__(self, conninfo: str, *, clock: Literal["server", "host"] = "server") -> None:
        if clock not in ("server", "host"):
            raise ValueError(f"clock must be 'server' or 'host', got {clock!r}")
        self.conninfo = conninfo
        self.clock = clock
        self._conn: psycopg.Connection[Any] | None = None
        self._queue: list[_Op] = []
        self._flushing = False
        self._idle = trio.Event()

    def __repr__(self) -> str:
        return f"PostgresStore(clock={self.clock!r})"

    # -- the protocol ------------------------------------------------------------

    async def load(self, session: str) -> list[CallRecord]:
        """Every record of ``session``."""
        result: list[CallRecord] = await self._submit(_read("load", session))
        return result

    async def get(self, key: CallKey) -> CallRecord | None:
        """The record of one call, or ``None``."""
        rows: list[CallRecord] = await self._submit(_read("get", *_key(key)))
        return rows[0] if rows else None

    async def write(self, records: Sequence[CallRecord]) -> None:
        """Merge ``records`` in, in one transaction shared with concurrent writers."""
        if records:
            await self._submit(_Op("write", (list(records), time.time())))

    async def claim(self, record: CallRecord, now: float) -> CallRecord | None:
        """Start the call for ``record.lease_owner`` unless it is finished or leased elsewhere."""
        result: CallRecord | None = await self._submit(_Op("claim", (record, now)))
        return result

    async def renew(self, keys: Sequence[CallKey], owner: str, until: float) -> None:
        """Extend ``owner``'s leases on ``keys`` to ``until``."""
        if keys:
            await self._submit(_Op("renew", (list(keys), owner, until, time.time())))

    async def answer(self, key: CallKey, answer: str) -> bool:
        """Answer the call's open question; whether this was its first answer."""
        first: bool = await self._submit(_Op("answer", (key, answer)))
        return first

    async def questions(self, session: str | None = None) -> list[CallRecord]:
        """Unanswered questions of unfinished calls."""
        read = _read("questions") if session is None else _read("session_questions", session)
        result: list[CallRecord] = await self._submit(read)
        return result

    async def aclose(self) -> None:
        """Close the connection, once a flush in progress is done with it."""
        while self._flushing:
            await self._idle.wait()
        await trio.to_thread.run_sync(self._close)

    # -- the queue (trio side) ------------------------------------------------------

    async def _submit(self, op: _Op) -> Any:
        self._queue.append(op)
        try:
            while not op.done:
                if self._flushing:
                    await self._idle.wait()
                else:
                    await self._flush_queue()
        except trio.Cancelled:
            if op in self._queue:  # not taken yet: it never happens
                self._queue.remove(op)
            raise
        return op.outcome()

    async def _flush_queue(self) -> None:
        self._flushing = True
        try:
            # Let the tasks that are ready, and those they wake, queue their
            # operations first: calls that start or finish together share this
            # commit. (One pass misses the calls a worker starts next; three
            # caught all of a run of 100 in bench_durable.py.)
            for _ in range(3):
                await trio.lowlevel.cancel_shielded_checkpoint()
            ops, self._queue = self._queue, []
            await trio.to_thread.run_sync(self._flush, ops)
        finally:
            self._flushing = False
            idle, self._idle = self._idle, trio.Event()
            idle.set()

    # -- in the worker thread -------------------------------------------------------

    def _flush(self, ops: list[_Op]) -> None:
        grouped = [op for op in ops if op.kind in ("write", "claim", "read")]
        if grouped and not self._transact(self._apply_group, grouped) and len(grouped) > 1:
            for op in grouped:  # one bad operation fails its own caller only
                self._transact(self._apply_group, [op])
        for op in ops:
            if op.kind == "renew":
                self._transact(self._renew, [op])
            elif op.kind == "answer":
                self._transact(self._answer, [op])
        for op in ops:
            op.done = True

    def _transact(
        self, apply: Callable[[psycopg.Connection[Any], list[_Op]], None], ops: list[_Op]
    ) -> bool:
        """Apply ``ops`` in one transaction; on failure give each its error and say False."""
        import psycopg

        for op in ops:
            op.value, op.error = None, None
        try:
            conn = self._connection()
            # Pipelined: BEGIN travels with the first statement and COMMIT with
            # the last, so a flush costs the server one or two round trips.
            with conn.pipeline(), conn.transaction():
                apply(conn, ops)
        except Exception as exc:
            if isinstance(exc, psycopg.OperationalError):
                self._close()  # the next flush connects again
            for op in ops:
                op.value, op.error = None, exc
            return False
        return True

    def _connection(self) -> psycopg.Connection[Any]:
        import psycopg

        if self._conn is None or self._conn.closed:
            conn = psycopg.connect(self.conninfo)
            with conn.transaction():
                conn.execute(_SCHEMA)
            self._conn = conn
        return self._conn

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _apply_group(self, conn: psycopg.Connection[Any], ops: list[_Op]) -> None:
        for round_ in _rounds(ops):
            self._apply_round(conn, round_)
        for op in ops:
            if op.kind == "read":
                name, params, host_now = op.args
                rows = conn.execute(_READS[name], params).fetchall()
                op.value = [self._lease_out(_record(r[:-1]), r[-1], host_now) for r in rows]

    def _apply_round(self, conn: psycopg.Connection[Any], items: list[_Item]) -> None:
        """Lock the round's keys in key order, decide its claims, merge its records."""
        if all(op.kind == "write" for op, _ in items):
            conn.execute(_UPSERT, self._rows([(op.args[-1], record) for op, record in items]))
            return
        keys = sorted(_key(record.key) for _, record in items)
        rows = conn.execute(_LOCK, _columns(keys, 4)).fetchall()
        stored = {tuple(row[:4]): _record(row[:-1]) for row in rows}
        server_now = max(row[-1] for row in rows)
        merged: list[tuple[float, CallRecord]] = []
        for op, record in items:
            host_now = op.args[-1]
            if op.kind == "claim":
                now = server_now if self.clock == "server" else host_now
                found = stored[_key(record.key)]
                if not claimable(found, record.lease_owner, now):
                    op.value = self._lease_out(found, server_now, host_now)
                    continue
                record = attrs.evolve(record, phase=Phase.STARTED, attempt=found.attempt + 1)
            merged.append((host_now, record))
        if merged:
            conn.execute(_MERGE, self._rows(merged))

    def _rows(self, records: list[tuple[float, CallRecord]]) -> list[Any]:
        """The parameters of ``_ROWS``: records, each with the host's time when it was sent."""
        server = self.clock == "server"
        return [server, *_columns([_row(r, now if server else 0.0) for now, r in records], 16)]

    def _lease_out(self, record: CallRecord, server_now: float, host_now: float) -> CallRecord:
        """A stored record as a host sees it: its lease end on the host's clock."""
        if self.clock == "host" or record.lease_until is None:
            return record
        return attrs.evolve(record, lease_until=host_now + (record.lease_until - server_now))

    def _renew(self, conn: psycopg.Connection[Any], ops: list[_Op]) -> None:
        for op in ops:
            keys, owner, until, host_now = op.args
            columns = _columns(sorted(_key(k) for k in keys), 4)
            if self.clock == "host":
                conn.execute(_RENEW, (*columns, owner, until, None))
            else:
                conn.execute(_RENEW, (*columns, owner, None, until - host_now))

    def _answer(self, conn: psycopg.Connection[Any], ops: list[_Op]) -> None:
        for op in ops:
            key, answer = op.args
            op.value = bool(conn.execute(_ANSWER, (answer, *_key(key))).fetchall())


def _rounds(ops: list[_Op]) -> list[list[_Item]]:
    """The records of a flush's writes and claims, in rounds where no key appears twice.

    Each key's records keep their order: the n-th record of a key goes to
    round n.
    """
    rounds: list[list[_Item]] = []
    seen: dict[CallKey, int] = defaultdict(int)
    for op in ops:
        if op.kind == "write":
            records: list[CallRecord] = op.args[0]
        elif op.kind == "claim":
            records = [op.args[0]]
        else:
            continue
        for record in records:
            at = seen[record.key]
            seen[record.key] = at + 1
            if at == len(rounds):
                rounds.append([])
            rounds[at].append((op, record))
    return rounds


def _read(name: str, *params: str) -> _Op:
    return _Op("read", (name, params, time.time()))


def _columns(rows: Sequence[Sequence[Any]], width: int) -> list[list[Any]]:
    """Rows as columns, one array parameter per column (for ``unnest``)."""
    return [[row[i] for row in rows] for i in range(width)]
