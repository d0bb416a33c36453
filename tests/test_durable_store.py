"""Every journal store keeps the same promises (``toolexec._core._journal.JournalStore``).

The tests run once per store in ``STORES``: a store added there (PostgreSQL
from its own test module's fixture) is held to the same contract. Each
factory takes the pytest request and a temporary directory and returns a
fresh, empty store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
import trio

from toolexec._core._journal import (
    CallKey,
    CallRecord,
    JournalStore,
    Phase,
    claimable,
    result_from_json,
    result_to_json,
)
from toolexec._core._types import (
    ErrorClass,
    ImageContent,
    JsonContent,
    RoutingClass,
    TextContent,
    ToolResult,
)
from toolexec._durable._sqlite import SQLiteStore

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path


def _sqlite(request: pytest.FixtureRequest, tmp_path: Path) -> JournalStore:
    return SQLiteStore(tmp_path / "journal.db")


def _postgres(request: pytest.FixtureRequest, tmp_path: Path) -> JournalStore:
    from toolexec._durable._postgres import PostgresStore

    # The hosts' clock, as the tests here state times; the server's clock is
    # tested in test_durable_postgres.py.
    return PostgresStore(request.getfixturevalue("pg_dsn"), clock="host")


#: Store kind -> factory. Another store's tests add theirs here.
STORES: dict[str, Callable[[pytest.FixtureRequest, Path], JournalStore]] = {
    "sqlite": _sqlite,
    "postgres": _postgres,
}


@pytest.fixture(params=sorted(STORES))
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    made = STORES[request.param](request, tmp_path)
    yield made
    await made.aclose()


def key(call_id: str = "c1", session: str = "s1", batch: str = "b1") -> CallKey:
    return CallKey(session, "root", batch, call_id)


def planned(call_id: str = "c1", **kw: Any) -> CallRecord:
    where = kw.pop("_key", {})
    fields: dict[str, Any] = {"index": 0, "tool": "write", "arguments": '{"x": 1}'}
    fields.update(kw)
    return CallRecord(key=key(call_id, **where), **fields)


def test_a_store_meets_the_protocol(tmp_path: Path) -> None:
    assert isinstance(SQLiteStore(tmp_path / "j.db"), JournalStore)


async def test_write_then_load_and_get(store: JournalStore) -> None:
    await store.write([planned("c1"), planned("c2", index=1, grant='{"sandbox": "host"}')])
    await store.write([CallRecord(key=key("other", session="s2"), tool="t")])
    loaded = sorted(await store.load("s1"), key=lambda r: r.index)
    assert [r.key.call_id for r in loaded] == ["c1", "c2"]
    assert loaded[1].grant == '{"sandbox": "host"}'
    assert loaded[0] == planned("c1")
    assert await store.get(key("c2")) == loaded[1]
    assert await store.get(key("missing")) is None
    assert await store.load("nobody") == []


async def test_write_merges_and_never_goes_back(store: JournalStore) -> None:
    await store.write([planned(grant='{"g": 1}')])
    done = planned(phase=Phase.FINISHED, result='{"r": 1}', attempt=1)
    await store.write([done])
    # A late record of an earlier phase with fields unknown: nothing is lost.
    await store.write([planned(phase=Phase.STARTED, lease_owner="h")])
    got = await store.get(key())
    assert got is not None
    assert got.phase is Phase.FINISHED
    assert got.result == '{"r": 1}'
    assert got.grant == '{"g": 1}'
    assert got.attempt == 1
    assert got.lease_owner == "h"


async def test_the_first_result_written_is_the_one_kept(store: JournalStore) -> None:
    """A host cut off past its lease may finish a call another host has finished (a
    read, run again) or answered as interrupted: its later result changes nothing."""
    await store.write([planned(phase=Phase.FINISHED, result='{"r": "first"}')])
    await store.write([planned(phase=Phase.FINISHED, result='{"r": "late"}', attempt=2)])
    got = await store.get(key())
    assert got is not None
    assert (got.result, got.attempt) == ('{"r": "first"}', 2)


async def test_claim_starts_once_and_refuses_after(store: JournalStore) -> None:
    mine = planned(lease_owner="A")
    assert await store.claim(mine, now=100.0) is None
    got = await store.get(key())
    assert got is not None
    assert (got.phase, got.attempt, got.lease_owner) == (Phase.STARTED, 1, "A")
    # Not rerunnable: started once, never claimable again, by anyone.
    again = await store.claim(planned(lease_owner="B"), now=200.0)
    assert again is not None
    assert again.phase is Phase.STARTED
    assert again.lease_owner == "A"


async def test_claim_respects_a_live_lease_and_takes_an_expired_one(store: JournalStore) -> None:
    await store.write([planned(rerun=True)])
    assert await store.claim(planned(rerun=True, lease_owner="A", lease_until=150.0), 100.0) is None
    refused = await store.claim(planned(rerun=True, lease_owner="B", lease_until=250.0), 120.0)
    assert refused is not None
    assert refused.lease_owner == "A"
    await store.renew([key()], "A", 300.0)
    await store.renew([key()], "B", 999.0)  # not B's lease: unchanged
    still = await store.claim(planned(rerun=True, lease_owner="B", lease_until=450.0), 200.0)
    assert still is not None
    assert still.lease_until == 300.0
    assert await store.claim(planned(rerun=True, lease_owner="B", lease_until=450.0), 301.0) is None
    got = await store.get(key())
    assert got is not None
    assert (got.lease_owner, got.lease_until, got.attempt) == ("B", 450.0, 2)


async def test_a_finished_call_is_never_claimed(store: JournalStore) -> None:
    await store.write([planned(rerun=True, phase=Phase.FINISHED, result="{}")])
    refused = await store.claim(planned(rerun=True, lease_owner="A"), 1.0)
    assert refused is not None
    assert refused.phase is Phase.FINISHED


async def test_questions_answer_once(store: JournalStore) -> None:
    asked = planned(question='{"summary": "write x"}', deadline=1e12)
    await store.write([asked, planned("c2"), planned("c3", _key={"session": "s2"})])
    await store.write([CallRecord(key=key("q2", session="s2"), question="{}", deadline=5.0)])
    assert [r.key.call_id for r in await store.questions("s1")] == ["c1"]
    assert sorted(r.key.call_id for r in await store.questions()) == ["c1", "q2"]
    assert await store.answer(key(), '{"approved": true}')
    assert not await store.answer(key(), '{"approved": false}')  # the first answer wins
    assert not await store.answer(key("c2"), '{"approved": true}')  # nothing was asked
    got = await store.get(key())
    assert got is not None
    assert got.answer == '{"approved": true}'
    assert await store.questions("s1") == []
    # A write never clears or changes an answer.
    await store.write([planned(question='{"summary": "write x"}', phase=Phase.STARTED)])
    again = await store.get(key())
    assert again is not None
    assert again.answer == '{"approved": true}'


async def test_concurrent_claims_let_one_win(store: JournalStore) -> None:
    await store.write([planned()])
    winners: list[str] = []

    async def claim(owner: str) -> None:
        if await store.claim(planned(lease_owner=owner, lease_until=1e12), 1.0) is None:
            winners.append(owner)

    async with trio.open_nursery() as nursery:
        for owner in "ABCDEFGH":
            nursery.start_soon(claim, owner)
    assert len(winners) == 1


def test_claimable_rules() -> None:
    assert claimable(planned(), "B", 0.0)  # planned, not started
    assert not claimable(planned(lease_owner="A", lease_until=10.0), "B", 0.0)
    started = planned(phase=Phase.STARTED, lease_owner="A", lease_until=10.0)
    assert not claimable(started, "A", 20.0)
    rerun = planned(phase=Phase.STARTED, rerun=True, lease_owner="A", lease_until=10.0)
    assert not claimable(rerun, "B", 5.0)
    assert claimable(rerun, "A", 5.0)
    assert claimable(rerun, "B", 10.5)


def test_results_round_trip_exactly() -> None:
    result = ToolResult(
        "c1",
        "t",
        (TextContent("hi"), JsonContent({"a": [1, 2.5, None]}), ImageContent("AAAA", "image/png")),
        True,
        ErrorClass.TIMEOUT,
        {"n": 1, "nested": {"x": "y"}},
        0.125,
        RoutingClass.SERIAL_MUT,
    )
    assert result_from_json(result_to_json(result)) == result
    replayed = result_from_json(result_to_json(result), replayed=True)
    assert replayed.details == {"n": 1, "nested": {"x": "y"}, "replayed": True}
    plain = ToolResult("c2", "t", (), details={})
    assert result_from_json(result_to_json(plain)) == plain


def test_question_ids_are_short_and_stable() -> None:
    assert key().question_id == key().question_id
    assert len(key().question_id) == 16
    assert key("c2").question_id != key().question_id
