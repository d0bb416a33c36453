"""A small HTTP API for the OpenAPI tests, served by uvicorn on 127.0.0.1.

``serve()`` starts it in a thread of its own (its own asyncio loop) on a
port the OS picked and yields the running ``Api``; on exit the slow
endpoint is released and the server stopped and joined, so no thread or
socket outlives it. The socket is listening before the thread starts, so
clients may connect at once. The API serves its own documents:
``/openapi.json`` (3.1) and ``/openapi.yaml`` (3.0). Endpoints that check
credentials answer 401 otherwise; ``/reject`` and ``/boom`` echo every
header and query parameter they got, as a careless server might.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import sys
import threading
from typing import TYPE_CHECKING, Any

import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

if TYPE_CHECKING:
    from collections.abc import Iterator

    from starlette.requests import Request

TOKEN = "tok-3xq/Secret+Bearer"
KEY = "key-9z/Api Key&="
BIG = 5000


def spec_31() -> dict[str, Any]:
    """The 3.1 document (JSON); its server is relative to where it is fetched from."""
    text = {"type": "string"}
    return {
        "openapi": "3.1.0",
        "info": {"title": "Test API", "version": "1"},
        "servers": [{"url": "/"}],
        "components": {
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "key": {"type": "apiKey", "in": "header", "name": "X-API-Key"},
                "qkey": {"type": "apiKey", "in": "query", "name": "api_key"},
                "oauth": {"type": "oauth2", "flows": {}},
            },
            "parameters": {
                "ItemId": {"name": "item_id", "in": "path", "required": True, "schema": text}
            },
            "schemas": {
                "Tag": {"type": "string", "minLength": 1},
                "NewItem": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string"},
                        "tags": {"type": "array", "items": {"$ref": "#/components/schemas/Tag"}},
                        "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                    },
                    "required": ["name"],
                },
                "Node": {
                    "type": "object",
                    "properties": {"child": {"$ref": "#/components/schemas/Node"}},
                },
            },
            "requestBodies": {
                "NewItem": {
                    "required": True,
                    "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/NewItem"}}
                    },
                }
            },
        },
        "paths": {
            "/items/{item_id}": {
                "get": {
                    "operationId": "getItem",
                    "summary": "Get an item.",
                    "description": "By its id.",
                    "parameters": [
                        {"$ref": "#/components/parameters/ItemId"},
                        {"name": "verbose", "in": "query", "schema": {"type": "boolean"}},
                    ],
                }
            },
            "/items": {
                "post": {
                    "operationId": "createItem",
                    "security": [{"bearer": []}],
                    "parameters": [
                        {"name": "dry_run", "in": "query", "schema": {"type": "boolean"}}
                    ],
                    "requestBody": {"$ref": "#/components/requestBodies/NewItem"},
                }
            },
            "/search": {
                "get": {
                    "parameters": [
                        {"name": "q", "in": "query", "required": True, "schema": text},
                        {
                            "name": "tags",
                            "in": "query",
                            "schema": {"type": "array", "items": text},
                        },
                        {"name": "X-Trace", "in": "header", "schema": text},
                        {"name": "Accept", "in": "header", "schema": text},
                        {"name": "session", "in": "cookie", "schema": text},
                    ]
                }
            },
            "/things/{id}": {
                "get": {
                    "operationId": "getThing",
                    "parameters": [
                        {"name": "id", "in": "path", "required": True, "schema": text},
                        {"name": "id", "in": "query", "schema": {"type": "integer"}},
                    ],
                }
            },
            "/keyed": {
                "get": {
                    "operationId": "keyed",
                    "security": [{"key": []}],
                    "parameters": [{"name": "X-API-Key", "in": "header", "schema": text}],
                }
            },
            "/qkeyed": {"get": {"operationId": "qkeyed", "security": [{"qkey": []}]}},
            "/reject": {"get": {"operationId": "reject", "security": [{"bearer": []}]}},
            "/boom": {"get": {"operationId": "boom", "security": [{"bearer": []}]}},
            "/slow": {"get": {"operationId": "slow", "security": [{"bearer": []}]}},
            "/big": {"get": {"operationId": "big"}},
            "/image": {"get": {"operationId": "image"}},
            "/empty": {"delete": {"operationId": "empty"}},
            "/wait/{tag}": {
                "get": {
                    "operationId": "wait",
                    "parameters": [{"name": "tag", "in": "path", "required": True, "schema": text}],
                }
            },
            "/lookup": {"post": {"operationId": "lookup", "x-toolexec-side-effects": "read"}},
            "/tree": {
                "post": {
                    "operationId": "postTree",
                    "requestBody": {
                        "content": {
                            "application/json": {"schema": {"$ref": "#/components/schemas/Node"}}
                        }
                    },
                }
            },
            "/upload": {
                "post": {
                    "operationId": "upload",
                    "requestBody": {"content": {"multipart/form-data": {"schema": {}}}},
                }
            },
            "/either": {
                "get": {
                    "operationId": "either",
                    "parameters": [
                        {
                            "name": "v",
                            "in": "query",
                            "schema": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
                        }
                    ],
                }
            },
            "/oauth": {"get": {"operationId": "oauth", "security": [{"oauth": ["read"]}]}},
        },
    }


SPEC_30 = """\
openapi: 3.0.3
info: {title: Test API 3.0, version: "1"}
servers:
  - url: "http://127.0.0.1:{port}"
    variables:
      port: {default: "PORT"}
components:
  parameters:
    ItemId: {name: item_id, in: path, required: true, schema: {type: string}}
  schemas:
    NewItem:
      type: object
      required: [name]
      properties:
        name: {type: string}
        note: {type: string, nullable: true, example: hello}
paths:
  /items/{item_id}:
    get:
      operationId: getItem30
      parameters:
        - $ref: "#/components/parameters/ItemId"
        - {name: limit, in: query, schema: {type: integer, minimum: 0, exclusiveMinimum: true}}
        - {name: color, in: query, schema: {type: string, enum: [red, blue], nullable: true}}
  /items:
    post:
      operationId: createItem30
      requestBody:
        required: true
        content:
          application/json:
            schema: {$ref: "#/components/schemas/NewItem"}
"""


class Api:
    """The API's state: the barrier of ``/wait`` and the gate of ``/slow``."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.loop: asyncio.AbstractEventLoop | None = None
        self.release: asyncio.Event | None = None
        self.waiting = 0
        self.most_waiting = 0
        self.expected = 0
        self.arrived: asyncio.Condition | None = None

    def expect_together(self, count: int) -> None:
        """Make ``/wait`` answer once ``count`` requests are inside it at once."""
        self.waiting = self.most_waiting = 0
        self.expected = count

    def app(self) -> Starlette:
        """The Starlette application."""
        return Starlette(
            routes=[
                Route("/openapi.json", self.spec_json),
                Route("/openapi.yaml", self.spec_yaml),
                Route("/items", self.create_item, methods=["POST"]),
                Route("/keyed", self.keyed),
                Route("/qkeyed", self.qkeyed),
                Route("/reject", self.reject),
                Route("/boom", self.boom),
                Route("/slow", self.slow),
                Route("/big", self.big),
                Route("/image", self.image),
                Route("/empty", self.empty, methods=["DELETE"]),
                Route("/wait/{tag}", self.wait),
                Route("/items/{rest:path}", echo),
                Route("/things/{rest:path}", echo),
                Route("/search", echo),
                Route("/lookup", echo, methods=["POST"]),
            ]
        )

    async def spec_json(self, request: Request) -> Response:
        return JSONResponse(spec_31())

    async def spec_yaml(self, request: Request) -> Response:
        text = SPEC_30.replace("PORT", str(self.port))
        return PlainTextResponse(text, media_type="application/yaml")

    async def create_item(self, request: Request) -> Response:
        if request.headers.get("authorization") != f"Bearer {TOKEN}":
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        return await echo(request)

    async def keyed(self, request: Request) -> Response:
        if request.headers.get("x-api-key") != KEY:
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        return await echo(request)

    async def qkeyed(self, request: Request) -> Response:
        if request.query_params.get("api_key") != KEY:
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        return await echo(request)

    async def reject(self, request: Request) -> Response:
        return PlainTextResponse(f"denied: {_seen(request)}", status_code=401)

    async def boom(self, request: Request) -> Response:
        return PlainTextResponse(f"crash: {_seen(request)} " + "x" * 10_000, status_code=500)

    async def slow(self, request: Request) -> Response:
        assert self.release is not None
        await self.release.wait()
        return PlainTextResponse("late")

    async def big(self, request: Request) -> Response:
        return PlainTextResponse("b" * BIG)

    async def image(self, request: Request) -> Response:
        return Response(b"\x89PNG" + bytes(96), media_type="image/png")

    async def empty(self, request: Request) -> Response:
        return Response(status_code=204)

    async def wait(self, request: Request) -> Response:
        assert self.arrived is not None
        async with self.arrived:
            self.waiting += 1
            self.most_waiting = max(self.most_waiting, self.waiting)
            self.arrived.notify_all()
            await self.arrived.wait_for(lambda: self.most_waiting >= self.expected)
            self.waiting -= 1
        return JSONResponse({"tag": request.path_params["tag"], "together": self.most_waiting})


def _seen(request: Request) -> str:
    return json.dumps({"headers": dict(request.headers), "query": str(request.query_params)})


async def echo(request: Request) -> Response:
    """Say what arrived: method, raw path, query pairs, headers and JSON body."""
    body = await request.body()
    return JSONResponse(
        {
            "method": request.method,
            "raw_path": request.scope["raw_path"].decode(),
            "query": [list(pair) for pair in request.query_params.multi_items()],
            "headers": dict(request.headers),
            "body": json.loads(body) if body else None,
        }
    )


@contextlib.contextmanager
def serve() -> Iterator[Api]:
    """Run the API in a thread on an ephemeral port; stop and join it on exit."""
    # IPPROTO_TCP named, so that asyncio sets TCP_NODELAY on accepted sockets
    # (it checks the protocol); without it every response waits ~40 ms on
    # Nagle's algorithm and delayed ACKs.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    api = Api(sock.getsockname()[1])
    server = uvicorn.Server(
        uvicorn.Config(api.app(), log_level="warning", lifespan="off", timeout_graceful_shutdown=5)
    )
    ready = threading.Event()

    async def main() -> None:
        api.loop = asyncio.get_running_loop()
        api.release = asyncio.Event()
        api.arrived = asyncio.Condition()
        ready.set()
        await server.serve(sockets=[sock])

    thread = threading.Thread(target=asyncio.run, args=(main(),), name="openapi-test-server")
    thread.start()
    try:
        ready.wait(60)  # the server's loop is up in milliseconds, a loaded machine's in seconds
        yield api
    finally:
        if api.loop is not None and api.release is not None:
            api.loop.call_soon_threadsafe(api.release.set)
        server.should_exit = True
        thread.join(30)
        sock.close()
        assert not thread.is_alive(), "the OpenAPI test server did not stop"


def main() -> None:
    """Serve until stdin closes, after printing ``PORT <port>`` (for the benchmark)."""
    with serve() as api:
        print(f"PORT {api.port}", flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main()
