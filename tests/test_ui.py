"""``toolexec ui``'s server: what it reads from a real journal, who may answer (docs/ui.md).

The journal is written by a real executor running an agent tree
(``ui_tree.py``); the page's requests go to the ASGI application through
httpx2's ASGI transport, and once through a real hypercorn on a loopback
port. The browser: ``test_ui_browser.py``.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

import pytest
import trio

from toolexec import RoutingClass, TextContent, ToolResult
from toolexec._core._journal import result_to_json
from toolexec.durable import CallKey, CallRecord, Phase, SQLiteStore
from ui_tree import received, run_tree, write_calls

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    import httpx2

    from toolexec._ui._app import UIApp
    from toolexec._ui._read import Snapshots

TOKEN = "t" * 32
HEADERS = {"X-Toolexec-Token": TOKEN, "Host": "127.0.0.1:8765"}


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[tuple[httpx2.AsyncClient, UIApp]]:
    import httpx2

    from toolexec._ui._app import UIApp

    store = SQLiteStore(tmp_path / "j.db")
    app = UIApp(store, TOKEN, user="tester")
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1:8765") as c:
        yield c, app
    await store.aclose()


async def get(c: httpx2.AsyncClient, path: str, **params: Any) -> Any:
    response = await c.get(path, params=params, headers=HEADERS)
    assert response.status_code == 200, response.text
    return response.json()


async def wait_for_question(c: httpx2.AsyncClient) -> dict[str, Any]:
    with trio.fail_after(60):  # a hang guard
        while not (questions := (await get(c, "/api/questions"))["questions"]):
            await trio.sleep(0.02)
    (question,) = questions
    assert isinstance(question, dict)
    return question


async def test_the_page_shows_a_tree_and_approves_its_write(
    client: tuple[httpx2.AsyncClient, UIApp], tmp_path: Path
) -> None:
    c, _ = client
    page = await c.get("/", headers={"Host": "127.0.0.1:8765"})
    assert page.status_code == 200
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert (await c.get("/app.js", headers={"Host": "localhost:1"})).status_code == 200
    async with trio.open_nursery() as nursery:
        models = []

        async def host() -> None:
            models.append(await run_tree(tmp_path / "j.db", "s1", tmp_path))

        nursery.start_soon(host)
        question = await wait_for_question(c)
        assert question["tool"] == "append"
        assert question["agent"] == "root"
        assert "append" in question["summary"]
        assert "<b>hello</b>" in question["arguments"]  # text: the page shows it as text
        sessions = (await get(c, "/api/sessions"))["sessions"]
        assert [s["status"] for s in sessions] == ["waiting for approval"]
        assert sessions[0]["agents"][0]["turn"] == 1  # the root's first turn is running
        body = {"question": question["id"], "approved": True}
        response = await c.post("/api/answer", json=body, headers=HEADERS)
        assert response.json()["took"] is True
        again = await c.post("/api/answer", json=body, headers=HEADERS)
        assert again.status_code == 404  # the first answer stands
    assert (tmp_path / "written").read_text() == "<b>hello</b>\n"
    assert [r["error_class"] for r in received(models[0])] == [None, None, None]

    (session,) = (await get(c, "/api/sessions"))["sessions"]
    assert session["status"] == "done"
    paths = [a["path"] for a in session["agents"]]
    assert paths[0] == "root"
    assert paths[1].startswith("root/helper@")  # the sub-agent, below its parent
    assert [(a["status"], a["turn"]) for a in session["agents"]] == [
        ("finished", 3),
        ("finished", 2),
    ]
    detail = await get(c, "/api/session", session="s1")
    assert detail["total"] == 5
    rows = (await get(c, "/api/calls", session="s1", offset=0, limit=50))["rows"]
    by_id = {r["call_id"]: r for r in rows}
    assert by_id["r2"]["arguments"] == '{"key": "b\\u202egnp.exe"}'  # escaped as displayed
    assert by_id["r1"]["routing"] == "read_only"
    assert by_id["w1"]["state"] == "ok"
    (recent,) = (await get(c, "/api/questions"))["decided"]
    assert (recent["call_id"], recent["approved"], recent["by"]) == ("w1", True, "tester")
    assert recent["summary"] == question["summary"]
    decided = await get(c, "/api/call", session="s1", row=by_id["w1"]["row"])
    assert decided["answer"]["approved"] is True
    timeline = await get(c, "/api/timeline", session="s1", first=decided["batch_first"])
    assert [call["call_id"] for call in timeline["calls"]] == ["r1", "r2", "w1"]
    assert [call["lane"] for call in timeline["calls"]] == [0, 1, 2]  # side by side
    assert [call["run"] for call in timeline["calls"]] == [1, 1, 2]  # the reads, then the write
    assert [run["run"] for run in timeline["runs"]] == [1, 2]
    assert decided["answer"]["by"] == "tester"
    assert decided["answer"]["at"] == pytest.approx(time.time(), abs=120)


async def test_a_denial_reaches_the_model(
    client: tuple[httpx2.AsyncClient, UIApp], tmp_path: Path
) -> None:
    c, _ = client
    async with trio.open_nursery() as nursery:
        models = []

        async def host() -> None:
            models.append(await run_tree(tmp_path / "j.db", "s1", tmp_path))

        nursery.start_soon(host)
        question = await wait_for_question(c)
        body = {"question": question["id"], "approved": False, "by": "ops", "reason": "no"}
        assert (await c.post("/api/answer", json=body, headers=HEADERS)).json()["took"]
    assert not (tmp_path / "written").exists()
    results = {r["call_id"]: r for r in received(models[0])}
    assert results["w1"]["error_class"] == "user_denied"


async def test_requests_without_the_token_or_from_elsewhere_are_refused(
    client: tuple[httpx2.AsyncClient, UIApp], tmp_path: Path
) -> None:
    c, app = client
    key = CallKey("s1", "root", "b1", "w1")
    question = json.dumps({"summary": "append x", "tool_name": "append", "arguments": "{}"})
    await app.store.write([CallRecord(key=key, tool="append", question=question)])
    body = {"question": key.question_id, "approved": True}
    host = {"Host": "127.0.0.1:8765"}
    for headers in (host, {**host, "X-Toolexec-Token": "wrong"}):
        response = await c.post("/api/answer", json=body, headers=headers)
        assert response.status_code == 403
        assert (await c.get("/api/questions", headers=headers)).status_code == 403
    rebound = {**HEADERS, "Host": "evil.example:8765"}  # DNS rebinding
    assert (await c.post("/api/answer", json=body, headers=rebound)).status_code == 403
    assert (await c.get("/", headers=rebound)).status_code == 403
    foreign = {**HEADERS, "Origin": "http://evil.example"}
    assert (await c.post("/api/answer", json=body, headers=foreign)).status_code == 403
    stored = await app.store.get(key)
    assert stored is not None
    assert stored.answer is None  # nobody answered
    same = {**HEADERS, "Origin": "http://127.0.0.1:8765"}
    assert (await c.post("/api/answer", json=body, headers=same)).json()["took"] is True


async def test_bad_requests_are_answered_with_their_reason(
    client: tuple[httpx2.AsyncClient, UIApp],
) -> None:
    c, _ = client
    assert (await get(c, "/api/sessions"))["sessions"] == []  # no table yet
    cases = [
        ("GET", "/api/nothing", None, 404),
        ("GET", "/nothing", None, 404),
        ("GET", "/api/answer", None, 405),
        ("GET", "/api/calls", None, 400),
        ("GET", "/api/calls?session=s&offset=x", None, 400),
        ("GET", "/api/call?session=s&row=3", None, 404),
        ("GET", "/api/timeline?session=s&first=0", None, 404),
        ("POST", "/api/answer", b"[1]", 400),
        ("POST", "/api/answer", b"{", 400),
        ("POST", "/api/answer", b'{"question": 1}', 400),
        ("POST", "/api/answer", b"x" * 70000, 413),
    ]
    for method, path, content, status in cases:
        response = await c.request(method, path, content=content, headers=HEADERS)
        assert response.status_code == status, (path, response.text)
        assert response.json()["error"]


async def test_a_timeline_puts_overlapping_calls_on_separate_lanes() -> None:
    from toolexec._ui._read import timeline

    def record(call_id: str, index: int, times: tuple[float, float] | None) -> CallRecord:
        key = CallKey("s", "root", "b", call_id)
        if times is None:
            return CallRecord(key=key, index=index, tool="read", phase=Phase.STARTED)
        result = ToolResult(call_id, "read", (TextContent("x"),), routing=RoutingClass.READ_ONLY)
        started, finished = times
        stamps = {"planned": started - 0.5, "started": started, "finished": finished}
        text = result_to_json(result, times=stamps)
        return CallRecord(key=key, index=index, tool="read", phase=Phase.FINISHED, result=text)

    records = [record("a", 0, (1.0, 3.0)), record("b", 1, (1.5, 2.5)), record("c", 2, (3.0, 4.0))]
    records.append(record("d", 3, None))  # still running: no times yet
    calls = timeline(records, 0, 4)["calls"]
    assert [(c["call_id"], c["lane"]) for c in calls] == [("a", 0), ("b", 1), ("c", 1), ("d", None)]
    assert [c["run"] for c in calls] == [1, 1, 2, None]
    assert [c["state"] for c in calls] == ["ok", "ok", "ok", "running"]


async def test_a_ten_thousand_call_session_opens_at_once(
    client: tuple[httpx2.AsyncClient, UIApp], tmp_path: Path
) -> None:
    c, app = client
    await write_calls(app.store, "big", 10_000)
    started = time.perf_counter()
    detail = await get(c, "/api/session", session="big")
    rows = (await get(c, "/api/calls", session="big", offset=9_900, limit=500))["rows"]
    took = time.perf_counter() - started
    assert detail["total"] == 10_000
    assert detail["batch_count"] == 100
    assert len(detail["batches"]) == 100
    assert [r["row"] for r in rows] == list(range(9_900, 10_000))  # one page, never all
    print(f"10,000-call session: summary and last page in {took * 1000:.0f} ms")
    assert took < 60  # a hang guard; the figure is printed (docs/ui.md)


async def test_the_server_listens_on_loopback(tmp_path: Path) -> None:
    import httpx2

    from toolexec._ui._serve import listen, serve_ui

    store = SQLiteStore(tmp_path / "j.db")
    async with trio.open_nursery() as nursery:
        url = await nursery.start(serve_ui, store, TOKEN, listen("127.0.0.1", 0))
        assert url.startswith("http://127.0.0.1:")
        async with httpx2.AsyncClient() as c:
            response = await c.get(f"{url}/api/sessions", headers={"X-Toolexec-Token": TOKEN})
            assert response.json()["sessions"] == []
            assert (await c.get(f"{url}/api/sessions")).status_code == 403
        nursery.cancel_scope.cancel()
    await store.aclose()


def records_of_every_kind(session: str) -> tuple[list[CallRecord], str]:
    """A running call, a waiting question, a decided one, results in JSON and image blocks."""
    question = json.dumps({"summary": "root: append [write]", "tool_name": "append"})
    blocks = [
        {"type": "json", "value": {"n": 1}},
        {"type": "image", "data": "", "mime_type": "x/y"},
    ]
    result = json.dumps(
        {"content": blocks, "is_error": True, "error_class": None, "details": {"k": "\x1b"}}
    )
    answer = json.dumps({"approved": False, "by": "ops\u202e", "reason": "no", "at": 5.0})

    def key(call_id: str) -> CallKey:
        return CallKey(session, "root", "b1", call_id)

    return [
        CallRecord(key=key("run"), phase=Phase.STARTED, index=0, tool="append"),
        CallRecord(key=key("ask"), index=1, tool="append", question=question),
        CallRecord(key=key("told"), index=2, tool="append", question=question),
        CallRecord(key=key("done"), phase=Phase.FINISHED, index=3, tool="t", result=result),
    ], answer


async def test_every_kind_of_record_is_shown(client: tuple[httpx2.AsyncClient, UIApp]) -> None:
    c, app = client
    records, answer = records_of_every_kind("s1")
    await app.store.write(records)
    assert await app.store.answer(records[2].key, answer)
    (session,) = (await get(c, "/api/sessions"))["sessions"]
    assert (session["calls"], session["running"], session["pending"]) == (4, 1, 1)
    assert session["status"] == "waiting for approval"
    rows = (await get(c, "/api/calls", session="s1"))["rows"]
    assert [r["state"] for r in rows] == ["running", "asking", "waiting", "error"]
    told = await get(c, "/api/call", session="s1", row=2)
    assert told["answer"] == {"approved": False, "by": "ops\\u202e", "at": 5.0, "reason": "no"}
    done = await get(c, "/api/call", session="s1", row=3)
    assert done["result"] == '{"n": 1}\n[image x/y]'
    assert done["details"] == '{"k": "\\u001b"}'  # escaped as the terminal shows it
    assert done["times"] == {"planned": None, "started": None, "finished": None}
    for other in range(6):  # a few sessions looked at: only the last few are kept
        await get(c, "/api/session", session=f"other{other}")
    assert len(app.snapshots._kept) == app.snapshots.keep
    timeline = await get(c, "/api/timeline", session="s1", first=0)
    assert timeline["timed"] == 0
    assert [q["call_id"] for q in (await get(c, "/api/questions"))["questions"]] == ["ask"]


async def test_a_postgresql_journal_is_read_and_answered_the_same_way(pg_dsn: str) -> None:
    import httpx2

    from toolexec._ui._app import UIApp
    from toolexec._ui._read import Snapshots
    from toolexec.durable import PostgresStore

    store = PostgresStore(pg_dsn)
    try:
        records, answer = records_of_every_kind("pg")
        await store.write(records)
        assert await store.answer(records[2].key, answer)
        transport = httpx2.ASGITransport(app=UIApp(store, TOKEN, user="pg-tester"))
        async with httpx2.AsyncClient(transport=transport, base_url="http://localhost") as c:
            (session,) = (await get(c, "/api/sessions"))["sessions"]
            assert (session["session"], session["calls"], session["pending"]) == ("pg", 4, 1)
            (question,) = (await get(c, "/api/questions"))["questions"]
            body = {"question": question["id"], "approved": True}
            assert (await c.post("/api/answer", json=body, headers=HEADERS)).json()["took"]
            decided = (await get(c, "/api/questions"))["decided"]
            assert [(d["call_id"], d["by"]) for d in decided] == [
                ("ask", "pg-tester"),
                ("told", "ops\\u202e"),
            ]
        await changes_are_noticed(Snapshots(store, ttl=0.0), store, "pg")
    finally:
        await store.aclose()


def test_the_command_says_what_is_wrong(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    from toolexec._cli._main import main

    with pytest.raises(SystemExit, match="2"):
        main(["ui", "--journal", str(tmp_path / "none.db")])
    assert "no journal at" in capsys.readouterr().err
    (tmp_path / "j.db").touch()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        with pytest.raises(SystemExit, match="2"):
            main(["ui", "--journal", str(tmp_path / "j.db"), "--port", port])
    assert "cannot listen on 127.0.0.1:" in capsys.readouterr().err


async def test_the_app_speaks_lifespan_and_ignores_other_scopes(tmp_path: Path) -> None:
    from toolexec._ui._app import UIApp
    from toolexec._ui._read import list_sessions

    (tmp_path / "empty.db").touch()  # a journal file no executor has written to yet
    store = SQLiteStore(tmp_path / "empty.db")
    assert await list_sessions(store) == []
    app = UIApp(store, TOKEN)
    incoming = iter([{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}])
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return next(incoming)

    async def send(message: Any) -> None:
        sent.append(message)

    await app({"type": "lifespan"}, receive, send)
    await app({"type": "websocket"}, receive, send)
    assert [m["type"] for m in sent] == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    with pytest.raises(TypeError, match="SQLite or PostgreSQL"):
        await list_sessions(object())  # type: ignore[arg-type]


def test_the_command_prints_the_address_with_its_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from toolexec._cli._main import main
    from toolexec._ui import _serve

    async def served_once(*args: Any, task_status: Any, **kw: Any) -> None:
        task_status.started("http://127.0.0.1:1")  # the real server: test_ui_browser.py

    monkeypatch.setattr(_serve, "serve_ui", served_once)
    (tmp_path / "j.db").touch()
    assert main(["ui", "--journal", str(tmp_path / "j.db"), "--port", "0"]) == 0
    assert capsys.readouterr().out.startswith("toolexec ui: open http://127.0.0.1:1/#token=")


async def changes_are_noticed(snapshots: Snapshots, store: Any, session: str) -> None:
    """A session is read again once it changed, not before."""
    first = await snapshots.get(session)
    assert await snapshots.get(session) is first  # nothing changed: the same records
    key = CallKey(session, "root", "b2", "new")
    await store.write([CallRecord(key=key, tool="read")])
    again = await snapshots.get(session)
    assert len(again.records) == len(first.records) + 1


async def test_a_session_is_read_again_only_once_it_changed(tmp_path: Path) -> None:
    from toolexec._ui._read import Snapshots

    store = SQLiteStore(tmp_path / "j.db")
    records, _ = records_of_every_kind("s1")
    await store.write(records)
    await changes_are_noticed(Snapshots(store, ttl=0.0), store, "s1")
    await store.aclose()
