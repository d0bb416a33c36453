"""The PostgreSQL journal: a real server started by the tests (``_pg``), several hosts on it.

Every test here gets a fresh database in a throwaway cluster that this test
process starts (as ``nobody`` when it runs as root, which PostgreSQL
refuses) and stops; where the machine has no server binaries or no psycopg,
the tests skip and say what is missing.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import trio
from trio.testing import wait_all_tasks_blocked

import _pg
from toolexec._core._journal import CallKey, CallRecord

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from toolexec._durable._postgres import PostgresStore


def test_the_cluster_serves_a_fresh_database_per_test(pg_cluster: _pg.Cluster, pg_dsn: str) -> None:
    import psycopg

    with psycopg.connect(pg_dsn) as conn:
        row = conn.execute(
            "SELECT current_database(), current_setting('listen_addresses')"
        ).fetchone()
    assert row is not None
    assert row[0] != "postgres"
    assert row[1] == ""  # a unix socket in the cluster's folder, no TCP port
    assert pg_cluster.create_database() != pg_dsn
    server_uid = (pg_cluster.folder / "data").stat().st_uid
    assert server_uid != 0 or os.geteuid() != 0  # never root, which PostgreSQL refuses


def test_a_machine_without_server_binaries_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_pg, "server_bin", lambda: None)
    reason = _pg.missing()
    assert reason is not None
    assert "initdb" in reason
    assert "apt-get install postgresql" in reason


# -- the store, beyond the conformance suite (test_durable_store.py) ----------------


def _key(call_id: str, session: str = "s1") -> CallKey:
    return CallKey(session, "root", "b1", call_id)


def _planned(call_id: str, **kw: Any) -> CallRecord:
    return CallRecord(key=_key(call_id), **{"tool": "write", "arguments": "{}", **kw})


@pytest.fixture
async def store(pg_dsn: str) -> AsyncIterator[PostgresStore]:
    from toolexec._durable._postgres import PostgresStore

    made = PostgresStore(pg_dsn)
    yield made
    await made.aclose()


async def test_leases_are_measured_by_the_servers_clock(pg_dsn: str) -> None:
    from toolexec._durable._postgres import PostgresStore

    server, skewed = PostgresStore(pg_dsn), PostgresStore(pg_dsn)
    now = time.time()
    assert (
        await server.claim(_planned("c1", rerun=True, lease_owner="A", lease_until=now + 60), now)
        is None
    )
    got = await server.get(_key("c1"))
    assert got is not None
    assert got.lease_until is not None
    # Read back on this host's clock (within the moments the calls took; 30 s
    # is only a bound far above them).
    assert abs(got.lease_until - (now + 60)) < 30
    # A host whose clock runs an hour ahead still sees A's lease live: the
    # server's clock judges it, and the lease lasts its 60 seconds there.
    ahead = now + 3600
    refused = await skewed.claim(
        _planned("c1", rerun=True, lease_owner="B", lease_until=ahead + 60), ahead
    )
    assert refused is not None
    assert refused.lease_owner == "A"
    assert refused.lease_until is not None
    assert abs(refused.lease_until - (ahead + 60)) < 30  # on that host's clock: live
    # The same host under clock="host" trusts its own clock, and takes the lease.
    host = PostgresStore(pg_dsn, clock="host")
    assert (
        await host.claim(_planned("c1", rerun=True, lease_owner="B", lease_until=ahead + 60), ahead)
        is None
    )
    for s in (server, skewed, host):
        await s.aclose()


async def test_a_renewed_lease_lasts_its_length_on_the_servers_clock(store: PostgresStore) -> None:
    now = time.time()
    assert (
        await store.claim(_planned("c1", rerun=True, lease_owner="A", lease_until=now + 1), now)
        is None
    )
    first = await store.get(_key("c1"))
    await store.renew([_key("c1")], "A", time.time() + 600)
    renewed = await store.get(_key("c1"))
    assert first is not None
    assert renewed is not None
    assert renewed.lease_until is not None
    assert first.lease_until is not None
    assert renewed.lease_until - first.lease_until > 500


async def test_concurrent_writers_share_commits(store: PostgresStore) -> None:
    flushes: list[int] = []
    flush = store._flush

    def counted(ops: list[Any]) -> None:
        flushes.append(len(ops))
        flush(ops)

    store._flush = counted  # type: ignore[method-assign]
    async with trio.open_nursery() as nursery:
        for i in range(100):
            nursery.start_soon(store.write, [_planned(f"c{i}", index=i)])
    assert sum(flushes) == 100
    assert len(flushes) < 10, flushes  # the first caller's flush, then everyone queued meanwhile
    assert len(await store.load("s1")) == 100


async def test_a_record_the_server_refuses_fails_its_own_writer_only(store: PostgresStore) -> None:
    import psycopg

    errors: list[BaseException] = []

    async def write(record: CallRecord) -> None:
        try:
            await store.write([record])
        except psycopg.Error as exc:
            errors.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(write, _planned("good1"))
        nursery.start_soon(write, _planned("bad", arguments='{"x": "\x00"}'))  # text holds no NUL
        nursery.start_soon(write, _planned("good2"))
    assert len(errors) == 1
    assert sorted(r.key.call_id for r in await store.load("s1")) == ["good1", "good2"]


async def test_hosts_locking_the_same_rows_in_opposite_orders_never_deadlock(pg_dsn: str) -> None:
    from toolexec._durable._postgres import PostgresStore

    stores = [PostgresStore(pg_dsn) for _ in range(3)]
    ids = [f"c{i:02}" for i in range(40)]

    async def churn(s: PostgresStore, order: list[str]) -> None:
        for round_ in range(15):
            await s.write([_planned(c, attempt=round_) for c in order])

    async with trio.open_nursery() as nursery:
        nursery.start_soon(churn, stores[0], ids)
        nursery.start_soon(churn, stores[1], ids[::-1])
        nursery.start_soon(churn, stores[2], ids[::3] + ids[1::3] + ids[2::3])
    records = await stores[0].load("s1")
    assert {r.attempt for r in records} == {14}
    for s in stores:
        await s.aclose()


async def test_a_lost_connection_fails_one_flush_and_the_next_connects_again(
    store: PostgresStore, pg_dsn: str
) -> None:
    import psycopg

    await store.write([_planned("c1")])
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    with pytest.raises(psycopg.OperationalError):
        await store.write([_planned("c2")])
    await store.write([_planned("c3")])
    assert sorted(r.key.call_id for r in await store.load("s1")) == ["c1", "c3"]


async def test_an_operation_cancelled_before_its_flush_never_happens(store: PostgresStore) -> None:
    await store.write([_planned("c0")])  # connected
    entered, release = threading.Event(), threading.Event()
    flush = store._flush

    def slow(ops: list[Any]) -> None:
        entered.set()
        release.wait()
        flush(ops)

    store._flush = slow  # type: ignore[method-assign]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(store.write, [_planned("c1")])  # the flusher, held in its thread
        await trio.to_thread.run_sync(entered.wait)
        with trio.CancelScope() as scope:
            scope.cancel()
            await store.write([_planned("queued")])  # queued behind the flush, then cancelled
        release.set()
    store._flush = flush  # type: ignore[method-assign]
    assert sorted(r.key.call_id for r in await store.load("s1")) == ["c0", "c1"]


def test_the_clock_is_the_servers_or_the_hosts() -> None:
    from toolexec._durable._postgres import PostgresStore

    with pytest.raises(ValueError, match="clock"):
        PostgresStore("dbname=x", clock="mine")  # type: ignore[arg-type]
    assert "server" in repr(PostgresStore("dbname=x"))


# -- several hosts on one journal: real processes --------------------------------

HOST = Path(__file__).with_name("durable_host.py")
HANG_GUARD = 120  # seconds: far above what these runs take on a loaded machine


class Host:
    """A host process (``durable_host.py``) on the shared journal, driven over its pipes."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self._buffer = b""

    @classmethod
    async def start(cls, conninfo: str, markers: Path, lease: float) -> Host:
        process = await trio.lowlevel.open_process(
            [sys.executable, str(HOST), conninfo, str(markers), str(lease)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        return cls(process)

    async def send(self, session: str, calls: list[tuple[str, str, str]]) -> None:
        assert self.process.stdin is not None
        line = json.dumps({"session": session, "calls": calls}) + "\n"
        await self.process.stdin.send_all(line.encode())

    async def line(self) -> str:
        assert self.process.stdout is not None
        while b"\n" not in self._buffer:
            chunk = await self.process.stdout.receive_some()
            assert chunk, f"host {self.process.pid} exited: {self.process.returncode}"
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode()

    async def results(self) -> list[dict[str, Any]]:
        line = await self.line()
        while line.startswith("started "):
            line = await self.line()
        parsed: list[dict[str, Any]] = json.loads(line)
        return parsed

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)

    async def close(self) -> None:
        self.kill()
        await self.process.wait()


@contextlib.asynccontextmanager
async def hosts(conninfo: str, markers: Path, n: int, lease: float) -> AsyncIterator[list[Host]]:
    started: list[Host] = []
    try:
        for _ in range(n):
            started.append(await Host.start(conninfo, markers, lease))
        yield started
    finally:
        with trio.CancelScope(shield=True):
            for host in started:
                await host.close()


def _marks(markers: Path, marker: str) -> list[str]:
    return (markers / marker).read_text().splitlines()


@pytest.mark.slow  # two host processes
async def test_two_hosts_racing_on_one_session_run_each_call_exactly_once(
    pg_dsn: str, tmp_path: Path
) -> None:
    # Reads run together within a run, so each host may hold one of them while
    # it waits for another the other host holds; writes run one at a time.
    kinds = ["look", "look", "look", "append", "append", "look", "look", "append", "append"]
    with trio.fail_after(HANG_GUARD):
        async with hosts(pg_dsn, tmp_path, 2, lease=30.0) as (a, b):
            ran_by: set[str] = set()
            for round_ in range(8):
                session = f"race-{round_}"
                calls = [(f"c{i}", kind, f"{session}-c{i}") for i, kind in enumerate(kinds)]
                await a.send(session, calls)
                await b.send(session, calls)
                first, second = await a.results(), await b.results()
                for i, (x, y) in enumerate(zip(first, second, strict=True)):
                    lines = _marks(tmp_path, f"{session}-c{i}")
                    assert len(lines) == 1, (session, i, lines)  # ran exactly once
                    ran_by.update(lines)
                    assert not x["error"], x
                    assert not y["error"], y
                    assert x["text"] == y["text"]  # the other host's result, replayed
                    assert [x["replayed"], y["replayed"]].count(False) == 1
    # Not asserted (it depends on scheduling): whether both hosts won some calls.
    print("hosts that ran calls:", len(ran_by))


@pytest.mark.slow  # host processes killed mid-call
async def test_after_a_dead_hosts_lease_expires_its_calls_are_treated_as_interrupted(
    pg_dsn: str, tmp_path: Path
) -> None:
    with trio.fail_after(HANG_GUARD):
        async with hosts(pg_dsn, tmp_path, 3, lease=1.0) as (writer, reader, survivor):
            await writer.send("w", [("c1", "hang", "w-c1")])
            await reader.send("r", [("c1", "hang_read", "r-c1")])
            assert await writer.line() == "started w-c1"
            assert await reader.line() == "started r-c1"
            writer.kill()
            reader.kill()
            # The survivor waits out each dead host's lease (it was renewed
            # while they lived), then applies the resume rules.
            await survivor.send("w", [("c1", "hang", "w-c1")])
            [write] = await survivor.results()
            await survivor.send("r", [("c1", "hang_read", "r-c1")])
            [read] = await survivor.results()
    assert write["error"]
    assert write["interrupted"]
    assert "may or may not have taken effect" in write["text"]
    assert len(_marks(tmp_path, "w-c1")) == 1  # the write was not run again
    assert not read["error"]
    assert read["text"] == "ran again r-c1"  # a read may run again
    assert len(_marks(tmp_path, "r-c1")) == 2


async def test_a_command_line_names_a_postgresql_journal_by_url_or_conninfo(
    pg_cluster: _pg.Cluster, pg_dsn: str
) -> None:
    from toolexec._durable._postgres import PostgresStore
    from toolexec.durable import SQLiteStore, answer_question, open_store, pending_questions

    dbname = pg_dsn.rsplit("dbname=", 1)[1]
    url = f"postgresql://postgres@/{dbname}?host={pg_cluster.folder}"
    assert isinstance(open_store("journal.db"), SQLiteStore)
    by_conninfo, by_url = open_store(pg_dsn), open_store(url)
    assert isinstance(by_conninfo, PostgresStore)
    assert isinstance(by_url, PostgresStore)
    asked = _planned("c1", question='{"summary": "write x"}', deadline=time.time() + 600)
    await by_conninfo.write([asked])
    [question] = await pending_questions(by_url)
    assert question.summary == "write x"
    assert await answer_question(by_url, question.id, True, by="ann")
    got = await by_conninfo.get(_key("c1"))
    assert got is not None
    assert got.answer is not None
    assert json.loads(got.answer)["by"] == "ann"
    for store in (by_conninfo, by_url):
        await store.aclose()


def test_the_docs_example_of_two_hosts_prints_what_the_page_shows(
    pg_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/durable.md's "Several hosts" example, run against the test cluster."""
    page = (Path(__file__).parent.parent / "docs" / "durable.md").read_text()
    section = page.split("## Several hosts", 1)[1].split("\n## ", 1)[0]
    program = re.search(r"```python\n(.*?)```", section, flags=re.DOTALL)
    shown = re.search(r"```text\n(.*?)```", section, flags=re.DOTALL)
    assert program is not None
    assert shown is not None
    exec(compile(program[1], "durable.md", "exec"), {"conninfo": pg_dsn})
    assert capsys.readouterr().out == shown[1]


async def test_closing_waits_for_the_flush_in_progress(store: PostgresStore) -> None:
    entered, release = threading.Event(), threading.Event()
    apply = store._apply_group

    def held(conn: Any, ops: list[Any]) -> None:
        apply(conn, ops)
        entered.set()  # inside the flush's transaction, before its commit
        release.wait()

    store._apply_group = held  # type: ignore[method-assign]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(store.write, [_planned("c1")])
        await trio.to_thread.run_sync(entered.wait)
        nursery.start_soon(store.aclose)
        await wait_all_tasks_blocked()
        release.set()  # the write commits, and only then is the connection closed
    store._apply_group = apply  # type: ignore[method-assign]
    assert store._conn is None
    assert [r.key.call_id for r in await store.load("s1")] == ["c1"]  # connects again
