"""``toolexec ui``'s server: one small ASGI application over a journal (docs/ui.md).

Theory of operation. The page (``static/``: one HTML file, one script, one
style sheet, shipped in the package) polls JSON endpoints for what the
journal holds and draws it. Reads and writes go through the store: a
session's records with ``load`` (``_read.Snapshots``), the open questions
with ``questions``, and an answer with ``answer_question``, as ``toolexec
approve`` writes it (who answered, why, and when).

Every ``/api/`` request must carry the token the server printed at start
(header ``X-Toolexec-Token``), or it gets 403: another page the browser has
open cannot read the journal or approve a call, since it cannot learn the
token (the page reads it from its URL's fragment, which is never sent).
Every request must also name a loopback host (``Host``: no DNS rebinding)
and a write must come from the page's own origin (``Origin``), or it gets
403 as well.
"""

from __future__ import annotations

import hmac
import json
import time
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

import attrs

from .._backends._asgi import lifespan
from .._core._display import display_text
from .._durable._questions import Question, answer_question
from ._read import (
    Snapshots,
    call_detail,
    call_row,
    decided_questions,
    list_sessions,
    timeline,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, MutableMapping

    from .._core._journal import JournalStore

    Message = MutableMapping[str, Any]
    Receive = Callable[[], Awaitable[Message]]
    Send = Callable[[Message], Awaitable[None]]

__all__ = ["TOKEN_HEADER", "UIApp"]

TOKEN_HEADER = "X-Toolexec-Token"
PAGE = 200  # calls per page of the table, at most
BATCHES = 200  # a session's batches listed, at most (the latest)
MAX_BODY = 64 * 1024
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})

_ASSETS = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/app.css": ("app.css", "text/css; charset=utf-8"),
}
_SECURITY = [
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        b"img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
]


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _asset(name: str) -> bytes:
    return resources.files(__package__).joinpath("static", name).read_bytes()


@attrs.define(eq=False)
class UIApp:
    """The page's ASGI application.

    Args:
        store: the journal read and answered.
        token: what every ``/api/`` request must carry (``X-Toolexec-Token``).
        user: who an answer is from when the page names nobody.
        hosts: the host names a request may be addressed to (the loopback
            names, and the address the server listens on).
    """

    store: JournalStore
    token: str
    user: str = ""
    hosts: frozenset[str] = LOOPBACK
    snapshots: Snapshots = attrs.field(init=False)
    _assets: dict[str, tuple[bytes, str]] = attrs.field(init=False, factory=dict)

    def __attrs_post_init__(self) -> None:
        self.snapshots = Snapshots(self.store)
        for path, (name, kind) in _ASSETS.items():
            self._assets[path] = (_asset(name), kind)

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        """Serve one ASGI connection scope."""
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        try:
            self._check_host(scope)
            asset = self._assets.get(scope["path"])
            if asset is not None and scope["method"] == "GET":
                await _respond(send, 200, asset[0], asset[1])
                return
            body = await self._api(scope, receive)
        except _Refused as exc:
            await _send_json(send, exc.status, {"error": str(exc)})
            return
        await _send_json(send, 200, body)

    # -- checks ---------------------------------------------------------------------

    def _check_host(self, scope: Message) -> None:
        host = _header(scope, b"host")
        name = urlsplit(f"//{host}").hostname or ""
        if name not in self.hosts:
            raise _Refused(403, f"this server answers requests to {sorted(self.hosts)} only")

    def _check_write(self, scope: Message) -> None:
        origin = _header(scope, b"origin")
        if origin and (urlsplit(origin).hostname or "") not in self.hosts:
            raise _Refused(403, "a write must come from the page's own origin")

    def _check_token(self, scope: Message) -> None:
        given = _header(scope, TOKEN_HEADER.lower().encode())
        if not hmac.compare_digest(given.encode(), self.token.encode()):
            raise _Refused(403, f"missing or wrong {TOKEN_HEADER} header")

    # -- the endpoints ------------------------------------------------------------------

    async def _api(self, scope: Message, receive: Receive) -> dict[str, Any]:
        path, method = scope["path"], scope["method"]
        if not path.startswith("/api/"):
            raise _Refused(404, f"no such page {display_text(path)!r}")
        self._check_token(scope)
        query = {k: v[-1] for k, v in parse_qs(scope["query_string"].decode()).items()}
        if path == "/api/answer":
            if method != "POST":
                raise _Refused(405, "/api/answer takes POST")
            self._check_write(scope)
            return await self._answer(await _read_json(receive))
        handler = self._readers().get(path)
        if handler is None or method != "GET":
            raise _Refused(404, f"no such endpoint {display_text(path)!r}")
        return await handler(query)

    def _readers(self) -> dict[str, Callable[[dict[str, str]], Awaitable[dict[str, Any]]]]:
        return {
            "/api/sessions": self._sessions,
            "/api/session": self._session,
            "/api/calls": self._calls,
            "/api/call": self._call,
            "/api/timeline": self._timeline,
            "/api/questions": self._questions,
        }

    async def _sessions(self, query: dict[str, str]) -> dict[str, Any]:
        return {"sessions": await list_sessions(self.store), "now": time.time()}

    async def _session(self, query: dict[str, str]) -> dict[str, Any]:
        snap = await self.snapshots.get(_arg(query, "session"))
        return {
            "total": len(snap.records),
            "batch_count": len(snap.batches),
            "batches": snap.batches[-BATCHES:],  # the latest: a page never holds them all
            "now": time.time(),
        }

    async def _calls(self, query: dict[str, str]) -> dict[str, Any]:
        snap = await self.snapshots.get(_arg(query, "session"))
        offset = max(0, _int(query, "offset", 0))
        limit = min(PAGE, max(0, _int(query, "limit", PAGE)))
        rows = snap.records[offset : offset + limit]
        return {
            "total": len(snap.records),
            "offset": offset,
            "rows": [call_row(offset + i, r) for i, r in enumerate(rows)],
        }

    async def _call(self, query: dict[str, str]) -> dict[str, Any]:
        snap = await self.snapshots.get(_arg(query, "session"))
        row = _int(query, "row", -1)
        if not 0 <= row < len(snap.records):
            raise _Refused(404, "no such call")
        return {
            **call_detail(row, snap.records[row]),
            "batch_first": snap.batch_of(row)["first_row"],
        }

    async def _timeline(self, query: dict[str, str]) -> dict[str, Any]:
        snap = await self.snapshots.get(_arg(query, "session"))
        first = _int(query, "first", -1)
        batch = snap.batch_at(first)
        if batch is None:
            raise _Refused(404, "no such batch")
        return {"batch": batch, **timeline(snap.records, first, batch["calls"])}

    async def _questions(self, query: dict[str, str]) -> dict[str, Any]:
        records = await self.store.questions(query.get("session") or None)
        records.sort(key=lambda r: (r.key.session, r.key.agent_path, r.index))
        questions = []
        for r in records:
            q = Question.of(r)
            questions.append(
                {
                    "id": q.id,
                    "session": display_text(r.key.session),
                    "agent": display_text(r.key.agent_path),
                    "call_id": display_text(r.key.call_id),
                    "tool": display_text(q.tool_name),
                    "summary": display_text(q.summary),
                    "arguments": display_text(q.arguments),
                    "deadline": q.deadline,
                }
            )
        decided = await decided_questions(self.store)
        return {"questions": questions, "decided": decided, "now": time.time()}

    async def _answer(self, body: dict[str, Any]) -> dict[str, Any]:
        question, approved = body.get("question"), body.get("approved")
        if not isinstance(question, str) or not isinstance(approved, bool):
            raise _Refused(400, 'expected {"question": ID, "approved": true|false}')
        by = str(body.get("by") or self.user)
        reason = str(body.get("reason") or "")
        try:  # exactly as `toolexec approve` and `toolexec deny` answer
            took = await answer_question(self.store, question, approved, by=by, reason=reason)
        except LookupError:
            raise _Refused(404, f"no open question has the id {display_text(question)!r}") from None
        self.snapshots.forget()
        return {"took": took}


def _arg(query: dict[str, str], name: str) -> str:
    value = query.get(name)
    if value is None:
        raise _Refused(400, f"the query needs {name}=")
    return value


def _int(query: dict[str, str], name: str, default: int) -> int:
    try:
        return int(query.get(name, default))
    except ValueError:
        raise _Refused(400, f"{name}= takes a whole number") from None


def _header(scope: Message, name: bytes) -> str:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value).decode("latin-1")
    return ""


async def _read_json(receive: Receive) -> dict[str, Any]:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Refused(400, "the request ended early")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size <= MAX_BODY:
            chunks.append(chunk)
        if not message.get("more_body", False):
            break
    if size > MAX_BODY:  # read whole, so that the client is not cut off mid-send
        raise _Refused(413, "the request body is too large")
    try:
        data = json.loads(b"".join(chunks))
    except ValueError:
        raise _Refused(400, "the request body is not JSON") from None
    if not isinstance(data, dict):
        raise _Refused(400, "the request body must be a JSON object")
    return data


async def _send_json(send: Send, status: int, body: dict[str, Any]) -> None:
    data = json.dumps(body, ensure_ascii=False).encode()
    await _respond(send, status, data, "application/json; charset=utf-8")


async def _respond(send: Send, status: int, body: bytes, kind: str) -> None:
    headers = [(b"content-type", kind.encode()), *_SECURITY]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
