"""What the page shows, read from a journal: sessions, agent trees, batches, calls, questions.

Theory of operation. The page needs no hook into an executor: everything is
in the journal's records (``_core._journal``). A session is listed with one
grouped query per store (``list_sessions``: the store protocol has no
listing of its own); a session's records are read whole with the store's
``load`` and kept for a moment (``Snapshots``), so the page's polls and the
pages of a 10,000-call table share one read. Every text that came from a
model or a tool is escaped as the terminal display escapes it
(``_core._display``) before it leaves the server; the page then puts it in
the document as text, never as markup.

Times. A finished call's result in the journal carries its ``times``
(planned, started, finished: seconds since the epoch); a call still
running has none yet, so it has no place on the timeline until it ends,
and the page says how many calls are not drawn.
"""

from __future__ import annotations

import bisect
import json
import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import trio

from .._core._display import display_json, display_lines, display_text
from .._core._journal import CHECKPOINTS, RESERVED, CallKey, CallRecord, Phase

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .._core._journal import JournalStore

__all__ = [
    "Snapshots",
    "call_detail",
    "call_row",
    "decided_questions",
    "list_sessions",
    "timeline",
]

# Characters of an argument or result shown in a table cell; the whole text is in the details.
CELL = 160

_SESSIONS_SQL = f"""
SELECT session, agent_path, COUNT(*),
       SUM(CASE WHEN phase = 2 THEN 1 ELSE 0 END),
       SUM(CASE WHEN phase = 1 THEN 1 ELSE 0 END),
       SUM(CASE WHEN question IS NOT NULL AND answer IS NULL AND phase < 2 THEN 1 ELSE 0 END)
FROM toolexec_calls WHERE batch NOT IN ({", ".join(f"'{b}'" for b in RESERVED)})
GROUP BY session, agent_path ORDER BY session, agent_path
"""
# An agent loop's checkpoint (``_agents._checkpoint``): its turn, and why it stopped (or null).
_LOOPS_SQLITE = f"""
SELECT session, agent_path, json_extract(result, '$.turn'), json_extract(result, '$.stop')
FROM toolexec_calls WHERE batch = '{CHECKPOINTS}' AND result IS NOT NULL
"""
_LOOPS_POSTGRES = f"""
SELECT session, agent_path, (result::jsonb)->>'turn', (result::jsonb)->>'stop'
FROM toolexec_calls WHERE batch = '{CHECKPOINTS}' AND result IS NOT NULL
"""

_DECIDED_SQL = """
SELECT session, agent_path, call_id, tool, question, answer FROM toolexec_calls
WHERE question IS NOT NULL AND answer IS NOT NULL
"""

# What changes whenever a session's calls do (a plan, a start, a result, a question, an answer).
_CHANGES = """
SELECT COUNT(*), SUM(phase), COUNT(question), COUNT(answer), SUM(attempt)
FROM toolexec_calls WHERE session = {}
"""

_Rows = list[tuple[Any, ...]]


# -- sessions -------------------------------------------------------------------------


async def list_sessions(store: JournalStore) -> list[dict[str, Any]]:
    """Every session in the store with its agent tree and status (two grouped queries).

    An agent's status: waiting for approval (a question is open), its
    loop's stop reason once it stopped (``finished``, ``max_turns``...),
    running (its loop is between turns or its calls are not all finished),
    or done.
    """
    calls, loops = await trio.to_thread.run_sync(_session_rows, store)
    agents: dict[tuple[str, str], dict[str, Any]] = {}
    for session, agent, count, finished, running, pending in calls:
        agents[(session, agent)] = {
            "path": display_text(agent),
            "calls": int(count),
            "finished": int(finished),
            "running": int(running),
            "pending": int(pending),
            "turn": None,
            "stop": None,
        }
    for session, agent, turn, stop in loops:
        entry = agents.setdefault((session, agent), {**_NO_CALLS, "path": display_text(agent)})
        entry["turn"] = None if turn is None else int(turn)
        entry["stop"] = "running" if stop is None else display_text(str(stop))
    sessions: dict[str, dict[str, Any]] = {}
    for (session, _), entry in sorted(agents.items()):
        entry["status"] = _status(entry)
        tree = sessions.setdefault(session, {**_NO_CALLS, "session": display_text(session)})
        tree.setdefault("key", session)
        tree.setdefault("agents", []).append(entry)
        for name in ("calls", "finished", "running", "pending"):
            tree[name] += entry[name]
    for tree in sessions.values():
        tree["status"] = _session_status([a["status"] for a in tree["agents"]])
    return list(sessions.values())


_NO_CALLS = {"calls": 0, "finished": 0, "running": 0, "pending": 0, "turn": None, "stop": None}


def _status(agent: dict[str, Any]) -> str:
    if agent["pending"]:
        return "waiting for approval"
    if agent["stop"] not in (None, "running"):
        return str(agent["stop"])
    if agent["stop"] == "running" or agent["finished"] < agent["calls"]:
        return "running"
    return "done"


def _session_status(statuses: list[str]) -> str:
    for status in ("waiting for approval", "running"):
        if status in statuses:
            return status
    return "done"


def _session_rows(store: JournalStore) -> list[_Rows]:
    shared = _SESSIONS_SQL
    return _select(store, (shared, _LOOPS_SQLITE), (shared, _LOOPS_POSTGRES))


def _select(
    store: JournalStore, sqlite: Sequence[str], postgres: Sequence[str], *params: Any
) -> list[_Rows]:
    """The rows of each statement (with ``params``) on the store's SQLite or PostgreSQL database."""
    path = getattr(store, "path", None)
    if isinstance(path, str):
        file = Path(path).resolve()
        if not file.exists():  # no executor has written to it yet
            return [[] for _ in sqlite]
        db = sqlite3.connect(f"{file.as_uri()}?mode=ro", uri=True, check_same_thread=False)
        try:
            db.execute("PRAGMA busy_timeout = 10000")
            return _query(db, sqlite, params)
        finally:
            db.close()
    conninfo = getattr(store, "conninfo", None)
    if isinstance(conninfo, str):
        import psycopg

        with psycopg.connect(conninfo, autocommit=True) as conn:
            return [list(conn.execute(sql, params)) for sql in postgres]
    raise TypeError(f"cannot read the sessions of {store!r}: a SQLite or PostgreSQL store only")


def _query(db: sqlite3.Connection, statements: Sequence[str], params: Any) -> list[_Rows]:
    try:
        return [list(db.execute(sql, params)) for sql in statements]
    except sqlite3.OperationalError as exc:  # a journal no executor has written to yet
        if "no such table" in str(exc):
            return [[] for _ in statements]
        raise


async def decided_questions(store: JournalStore, last: int = 10) -> list[dict[str, Any]]:
    """The ``last`` questions answered, the latest first: what, who, approved or not, when."""
    statements = (_DECIDED_SQL,)
    (rows,) = await trio.to_thread.run_sync(_select, store, statements, statements)
    decided = []
    for session, agent, call_id, tool, question, answer in rows:
        summary = json.loads(question).get("summary", tool)
        record = CallRecord(key=CallKey(session, agent, "", call_id), tool=tool, answer=answer)
        decided.append(
            {
                "session": display_text(session),
                "agent": display_text(agent),
                "call_id": display_text(call_id),
                "summary": display_text(str(summary)),
                **(_answer(record) or {}),
            }
        )
    decided.sort(key=lambda d: d.get("at") or 0.0, reverse=True)
    return decided[:last]


# -- one session ----------------------------------------------------------------------


@attrs.define(eq=False)
class _Snapshot:
    records: list[CallRecord]
    batches: list[dict[str, Any]]
    changes: tuple[Any, ...]
    taken: float
    starts: list[int] = attrs.field(init=False)  # each batch's first row, ascending

    def __attrs_post_init__(self) -> None:
        self.starts = [b["first_row"] for b in self.batches]

    def batch_of(self, row: int) -> dict[str, Any]:
        """The batch that row ``row`` of ``records`` belongs to (its rows are contiguous)."""
        return self.batches[bisect.bisect_right(self.starts, row) - 1]

    def batch_at(self, first_row: int) -> dict[str, Any] | None:
        """The batch whose first row is ``first_row``, if one is."""
        at = bisect.bisect_left(self.starts, first_row)
        return self.batches[at] if at < len(self.starts) and self.starts[at] == first_row else None


@attrs.define(eq=False)
class Snapshots:
    """A session's records, read whole, and read again only once they changed.

    Within ``ttl`` seconds of the last look a snapshot is used as it is;
    after that one small query (counts over the session's records) says
    whether anything changed, and only then is the session read again, so
    a page watching a large session that is done costs the server little.
    At most ``keep`` sessions are kept, so a page that visits many holds few.
    """

    store: JournalStore
    ttl: float = 0.3
    keep: int = 4  # sessions kept at most
    _kept: dict[str, _Snapshot] = attrs.field(factory=dict, init=False)
    _lock: trio.Lock = attrs.field(factory=trio.Lock, init=False)

    async def get(self, session: str) -> _Snapshot:
        """The session's records, sorted by agent, batch and place in the batch."""
        async with self._lock:
            kept = self._kept.get(session)
            if kept is not None and time.monotonic() - kept.taken < self.ttl:
                return kept
            changes = await self._changes(session)
            if kept is not None and changes == kept.changes:
                kept.taken = time.monotonic()
                return kept
            records = _in_order(await self.store.load(session))
            kept = _Snapshot(records, _batches(records), changes, time.monotonic())
            self._kept.pop(session, None)
            self._kept[session] = kept
            while len(self._kept) > self.keep:  # the sessions read longest ago go first
                del self._kept[next(iter(self._kept))]
            return kept

    async def _changes(self, session: str) -> tuple[Any, ...]:
        sqlite, postgres = (_CHANGES.format("?"),), (_CHANGES.format("%s"),)
        rows = await trio.to_thread.run_sync(_select, self.store, sqlite, postgres, session)
        return tuple(rows[0][0]) if rows[0] else ()

    def forget(self) -> None:
        """Read every session afresh next time (an answer was just written)."""
        self._kept.clear()


def _in_order(records: list[CallRecord]) -> list[CallRecord]:
    """Batches in the order they were planned (unfinished ones last), calls by index."""
    groups: dict[tuple[str, str], list[CallRecord]] = {}
    for r in records:
        if r.key.batch in RESERVED:  # a loop's checkpoint or an answer, not a call
            continue
        groups.setdefault((r.key.agent_path, r.key.batch), []).append(r)

    def first(item: tuple[tuple[str, str], list[CallRecord]]) -> tuple[float, str, str]:
        planned = next((t for r in item[1] if (t := _planned(r)) is not None), None)
        return (float("inf") if planned is None else planned, *item[0])

    ordered: list[CallRecord] = []
    for _, group in sorted(groups.items(), key=first):
        ordered += sorted(group, key=lambda r: r.index)
    return ordered


def _planned(r: CallRecord) -> float | None:
    """When the call's batch was planned (one stamp per batch), if it finished."""
    planned = _times(_result(r))["planned"]
    return None if planned is None else float(planned)


def _batches(records: list[CallRecord]) -> list[dict[str, Any]]:
    batches: dict[tuple[str, str], dict[str, Any]] = {}
    for row, r in enumerate(records):
        entry = batches.get((r.key.agent_path, r.key.batch))
        if entry is None:
            entry = batches[(r.key.agent_path, r.key.batch)] = {
                "agent": display_text(r.key.agent_path),
                "agent_key": r.key.agent_path,
                "batch": display_text(r.key.batch),
                "batch_key": r.key.batch,
                "first_row": row,
                "calls": 0,
                "finished": 0,
                "pending": 0,
            }
        entry["calls"] += 1
        entry["finished"] += r.phase is Phase.FINISHED
        entry["pending"] += _pending(r)
    return list(batches.values())


def _pending(r: CallRecord) -> bool:
    return r.question is not None and r.answer is None and r.phase is not Phase.FINISHED


def _result(r: CallRecord) -> dict[str, Any] | None:
    if r.result is None:
        return None
    data: dict[str, Any] = json.loads(r.result)
    return data


def _result_text(data: dict[str, Any]) -> str:
    parts = []
    for block in data.get("content", []):
        if block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        elif block.get("type") == "json":
            parts.append(json.dumps(block.get("value"), ensure_ascii=False))
        else:
            parts.append(f"[image {block.get('mime_type', '')}]")
    return "\n".join(parts)


def _state(r: CallRecord, result: dict[str, Any] | None) -> str:
    if result is not None:
        return str(result.get("error_class") or "error") if result.get("is_error") else "ok"
    if _pending(r):
        return "asking"
    return "running" if r.phase is Phase.STARTED else "waiting"


def _answer(r: CallRecord) -> dict[str, Any] | None:
    if r.answer is None:
        return None
    data = json.loads(r.answer)
    return {
        "approved": bool(data.get("approved")),
        "by": display_text(str(data.get("by", ""))),
        "at": data.get("at"),
        "reason": display_text(str(data.get("reason", ""))),
    }


def _cut(text: str) -> str:
    return text if len(text) <= CELL else text[:CELL] + "\u2026"


def call_row(row: int, r: CallRecord) -> dict[str, Any]:
    """One line of the calls table: short, escaped texts."""
    result = _result(r)
    return {
        "row": row,
        "agent": display_text(r.key.agent_path),
        "batch": display_text(r.key.batch),
        "call_id": display_text(r.key.call_id),
        "index": r.index,
        "tool": display_text(r.tool),
        "arguments": _cut(display_json(r.arguments)),
        "state": _state(r, result),
        "routing": None if result is None else result.get("routing"),
        "result": None if result is None else _cut(display_text(_result_text(result))),
        "attempt": r.attempt,
        "question": r.question_id if r.question is not None else None,
        "answer": _answer(r),
    }


def call_detail(row: int, r: CallRecord) -> dict[str, Any]:
    """Everything about one call: whole arguments and result, escaped."""
    result = _result(r)
    detail = call_row(row, r)
    detail["arguments"] = display_json(r.arguments)
    if result is not None:
        detail["result"] = display_lines(_result_text(result))  # its lines kept, as printed
        detail["duration"] = result.get("duration")
        detail["details"] = display_json(
            json.dumps(result.get("details", {}), ensure_ascii=False, default=str)
        )
    detail["grant"] = None if r.grant is None else display_json(r.grant)
    detail["times"] = _times(result)
    return detail


def _times(result: dict[str, Any] | None) -> dict[str, float | None]:
    """When the call was planned, started and finished, where the journal says."""
    times = result.get("times") if result is not None else None
    if not isinstance(times, dict):
        times = {}
    return {
        "planned": times.get("planned"),
        "started": times.get("started"),
        "finished": times.get("finished"),
    }


def timeline(records: list[CallRecord], first: int, count: int) -> dict[str, Any]:
    """One batch's calls with their times, each on a lane: calls that overlapped side by side."""
    calls = []
    for row in range(first, first + count):
        r = records[row]
        result = _result(r)
        calls.append(
            {
                "row": row,
                "call_id": display_text(r.key.call_id),
                "index": r.index,
                "tool": display_text(r.tool),
                "state": _state(r, result),
                "routing": None if result is None else result.get("routing"),
                **_times(result),
            }
        )
    _lanes(calls)
    runs = _runs(calls)
    timed = [c for c in calls if c["started"] is not None]
    return {"calls": calls, "timed": len(timed), "runs": runs, "now": time.time()}


def _runs(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Number the runs as the times show them: calls that ran together, one run after another.

    The journal does not record which run of its batch's plan a call was
    in; a run is read from the times instead, as a stretch in which some
    call was running: a call that starts after every earlier one ended
    starts the next run. For runs that follow one another, as a plan's do,
    that is the plan's split.
    """
    now = time.time()
    runs: list[dict[str, Any]] = []
    for call in sorted((c for c in calls if c["started"] is not None), key=lambda c: c["started"]):
        end = call["finished"] if call["finished"] is not None else now
        if not runs or call["started"] >= runs[-1]["end"]:
            runs.append({"run": len(runs) + 1, "start": call["started"], "end": end})
        runs[-1]["end"] = max(runs[-1]["end"], end)
        call["run"] = len(runs)
    for call in calls:
        call.setdefault("run", None)
    return runs


def _lanes(calls: list[dict[str, Any]]) -> None:
    """Give each timed call the first lane free from when it began waiting (interval colouring).

    A call occupies its lane from the moment its batch planned it (its wait
    for a permit or a person) to its end, so calls that waited or ran at
    the same time are on separate lanes, side by side, and a lane is reused
    only by a call that began after the lane's last call ended.
    """
    ends: list[float] = []
    now = time.time()
    timed = sorted((c for c in calls if c["started"] is not None), key=_began)
    for call in timed:
        end = call["finished"] if call["finished"] is not None else now
        for lane, busy_until in enumerate(ends):
            if busy_until <= _began(call):
                ends[lane] = end
                call["lane"] = lane
                break
        else:
            call["lane"] = len(ends)
            ends.append(end)
    for call in calls:
        call.setdefault("lane", None)


def _began(call: dict[str, Any]) -> float:
    began = call["planned"] if call["planned"] is not None else call["started"]
    return float(began)
