"""OpenAPI documents as a tool source, against a real HTTP server on 127.0.0.1.

The API (``tests/openapi_server.py``) runs under uvicorn in a thread and
serves its own documents; every call crosses a real socket. No sleeps: the
slow endpoint waits on an event released at teardown, and the overlap of
read-only calls is recorded by the server itself.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import trio

pytest.importorskip("httpx2")

from openapi_server import BIG, KEY, SPEC_30, TOKEN, Api, serve, spec_31
from toolexec import (
    ErrorClass,
    RegistrationError,
    RoutingClass,
    SideEffects,
    ToolCall,
    ToolContext,
    ToolError,
    ToolExecutor,
    ToolRegistry,
    function_tool,
)
from toolexec.events import CallbackSink, Event, JsonlAuditSink
from toolexec.openapi import OpenAPIError, OpenAPISource, open_openapi_source

if TYPE_CHECKING:
    from collections.abc import Iterator

    from toolexec import ToolResult

# A body read only in part (an error body quoted up to its limit, a body
# over the cap) leaves httpcore2's pool iterator unexhausted: httpx2's
# response stream iterates it without closing it. trio reports it when it is
# garbage collected; toolexec closes every generator it opens itself.
# Slow (tests/README.md): a real HTTP server.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings(
        r"ignore:Async generator 'httpcore2\._async\.connection_pool\.PoolByteStream\.__aiter__'"
        ":ResourceWarning"
    ),
]

DOCS = Path(__file__).parents[1] / "docs" / "openapi.md"
SECRETS = {"bearer": TOKEN, "key": KEY, "qkey": KEY}


@pytest.fixture(scope="module")
def api() -> Iterator[Api]:
    with serve() as running:
        yield running


async def run(registry: ToolRegistry, *calls: tuple[str, dict[str, Any]], **kw: Any) -> list[Any]:
    """Execute calls named (tool, arguments) as one batch; return the results."""
    batch = [ToolCall(f"c{i}", name, args) for i, (name, args) in enumerate(calls)]
    with trio.fail_after(20):  # a hang is a failure, not a stuck test run
        outcome = await ToolExecutor(registry, **kw).execute_batch(batch)
    return list(outcome.results)


def echoed(result: ToolResult) -> dict[str, Any]:
    assert not result.is_error, result.text
    body: dict[str, Any] = json.loads(result.text)
    return body


def doc(paths: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A minimal 3.1 document with these paths."""
    return {"openapi": "3.1.0", "info": {"title": "T", "version": "1"}, "paths": paths, **extra}


def get(op_id: str, **operation: Any) -> dict[str, Any]:
    return {"get": {"operationId": op_id, **operation}}


async def load(document: dict[str, Any], **kw: Any) -> OpenAPISource:
    """Open a document with no server behind it; return the (closed) source."""
    async with open_openapi_source(
        ToolRegistry(), document, base_url="http://127.0.0.1:9", **kw
    ) as source:
        return source


# -- loading ------------------------------------------------------------------


async def test_a_31_document_loads_with_refs_resolved(api: Api) -> None:
    registry = ToolRegistry()
    async with open_openapi_source(registry, f"{api.url}/openapi.json", secrets=SECRETS) as source:
        assert (source.title, source.openapi_version) == ("Test API", "3.1")
        assert source.server == f"{api.url}/"  # the relative server, against the document's URL
        assert sorted(registry) == sorted(source.tools)
        item = registry.definition("getItem")
        assert item.description == "Get an item.\n\nBy its id."
        assert item.input_schema["properties"]["item_id"] == {"type": "string"}
        assert item.input_schema["required"] == ["item_id"]
        body = registry.definition("createItem").input_schema["properties"]["body"]
        assert body["properties"]["tags"]["items"] == {"type": "string", "minLength": 1}
        assert body["properties"]["note"] == {"type": ["string", "null"]}
        assert registry.definition("createItem").input_schema["required"] == ["body"]
        effects = {name: registry.definition(name).side_effects for name in registry}
        assert effects["getItem"] is SideEffects.READ
        assert effects["createItem"] is effects["empty"] is SideEffects.WRITE
        assert effects["lookup"] is SideEffects.READ  # x-toolexec-side-effects
        assert "get_search" in registry  # no operationId: method and path
        assert registry.definition("get_search").description == "GET /search"
        skipped = dict(source.skipped)
        assert set(skipped) == {"postTree", "upload", "either", "oauth"}
        assert "'#/components/schemas/Node' is cyclic" in skipped["postTree"]
        assert "['multipart/form-data'] are not supported" in skipped["upload"]
        assert "uses 'oneOf'" in skipped["either"]
        assert "'oauth' (type 'oauth2') is not supported" in skipped["oauth"]
    assert len(registry) == 0


async def test_a_30_yaml_document_loads_and_calls(api: Api) -> None:
    registry = ToolRegistry()
    async with open_openapi_source(registry, f"{api.url}/openapi.yaml") as source:
        assert source.openapi_version == "3.0"
        assert source.server == api.url  # the server variable's default
        assert source.skipped == []
        props = registry.definition("getItem30").input_schema["properties"]
        assert props["limit"] == {"type": "integer", "exclusiveMinimum": 0}
        assert props["color"] == {"type": ["string", "null"], "enum": ["red", "blue", None]}
        body = registry.definition("createItem30").input_schema["properties"]["body"]
        assert body["properties"]["note"] == {"type": ["string", "null"]}  # example dropped
        [result] = await run(registry, ("getItem30", {"item_id": "7", "limit": 3}))
        assert echoed(result)["raw_path"] == "/items/7"
        assert echoed(result)["query"] == [["limit", "3"]]
        [bad] = await run(registry, ("getItem30", {"item_id": "7", "limit": 0}))
        assert bad.error_class is ErrorClass.INVALID_ARGUMENTS


async def test_files_and_mappings_load(api: Api, tmp_path: Path) -> None:
    (tmp_path / "api.yaml").write_text(SPEC_30.replace("PORT", str(api.port)))
    (tmp_path / "api.json").write_text(json.dumps(spec_31()))
    (tmp_path / "api.txt").write_text(json.dumps(spec_31()))
    (tmp_path / "api.conf").write_text(SPEC_30.replace("PORT", str(api.port)))  # YAML, not JSON
    for document in ("api.yaml", "api.json", "api.txt", "api.conf"):
        async with open_openapi_source(
            ToolRegistry(), tmp_path / document, base_url=api.url
        ) as source:
            assert source.tools
            assert source.server == api.url
    registry = ToolRegistry()
    async with open_openapi_source(registry, spec_31(), base_url=api.url + "/") as source:
        [result] = await run(registry, ("getItem", {"item_id": "x", "verbose": False}))
        assert echoed(result)["query"] == [["verbose", "false"]]


# -- requests -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "raw_path"),
    [
        ("../x", "/items/..%2Fx"),
        ("a/b", "/items/a%2Fb"),
        ("..", "/items/%2E%2E"),
        (".", "/items/%2E"),
        ("a b?c#d%", "/items/a%20b%3Fc%23d%25"),
    ],
)
async def test_path_parameters_cannot_change_the_path(api: Api, value: str, raw_path: str) -> None:
    registry = ToolRegistry()
    async with open_openapi_source(registry, spec_31(), base_url=api.url):
        [result] = await run(registry, ("getItem", {"item_id": value}))
        assert echoed(result)["raw_path"] == raw_path


async def test_an_empty_path_parameter_is_refused(api: Api) -> None:
    registry = ToolRegistry()
    async with open_openapi_source(registry, spec_31(), base_url=api.url):
        [result] = await run(registry, ("getItem", {"item_id": ""}))
    assert result.error_class is ErrorClass.INVALID_ARGUMENTS
    assert "path parameter 'item_id' must not be empty" in result.text


async def test_query_header_cookie_and_body(api: Api) -> None:
    registry = ToolRegistry()
    async with open_openapi_source(registry, spec_31(), base_url=api.url, secrets=SECRETS):
        # Accept is ignored, as OpenAPI says: not an argument.
        assert set(registry.definition("get_search").input_schema["properties"]) == {
            "q",
            "tags",
            "X-Trace",
            "session",
        }
        search, create, thing = await run(
            registry,
            ("get_search", {"q": "a&b", "tags": ["x", "y"], "X-Trace": "t-1", "session": "s1"}),
            ("createItem", {"dry_run": True, "body": {"name": "pen", "tags": ["blue"]}}),
            ("getThing", {"path_id": "p", "query_id": 4}),
        )
    seen = echoed(search)
    assert seen["query"] == [["q", "a&b"], ["tags", "x"], ["tags", "y"]]
    assert seen["headers"]["x-trace"] == "t-1"
    assert seen["headers"]["cookie"] == "session=s1"
    made = echoed(create)
    assert made["method"] == "POST"
    assert made["query"] == [["dry_run", "true"]]
    assert made["body"] == {"name": "pen", "tags": ["blue"]}
    # `id` in the path and in the query: each gets its location as a prefix.
    assert echoed(thing)["raw_path"] == "/things/p"
    assert echoed(thing)["query"] == [["id", "4"]]


async def test_arrays_in_the_path_query_and_headers(api: Api) -> None:
    strings = {"type": "array", "items": {"type": "string"}}
    operation = get(
        "arrays",
        parameters=[
            {"name": "ids", "in": "path", "required": True, "schema": strings},
            {"name": "sort", "in": "query", "explode": False, "schema": strings},
            {"name": "X-Tags", "in": "header", "schema": strings, "description": "Tags."},
        ],
    )
    registry = ToolRegistry()
    async with open_openapi_source(registry, doc({"/items/{ids}": operation}), base_url=api.url):
        assert registry.definition("arrays").input_schema["properties"]["X-Tags"] == {
            "description": "Tags.",
            **strings,
        }
        [result] = await run(
            registry, ("arrays", {"ids": ["a/b", "c"], "sort": ["x", "y"], "X-Tags": ["t", "u"]})
        )
    seen = echoed(result)
    assert seen["raw_path"] == "/items/a%2Fb,c"
    assert seen["query"] == [["sort", "x,y"]]
    assert seen["headers"]["x-tags"] == "t,u"


async def test_a_header_value_cannot_add_a_header(api: Api) -> None:
    registry = ToolRegistry()
    async with open_openapi_source(registry, spec_31(), base_url=api.url):
        [result] = await run(registry, ("get_search", {"q": "x", "X-Trace": "a\r\nX-Evil: 1"}))
    assert result.is_error
    assert result.text.startswith(
        f"operation 'GET /search' on server {api.url} failed: LocalProtocolError: "
    )


# -- authentication -----------------------------------------------------------


async def test_bearer_and_api_keys_come_from_the_host(api: Api) -> None:
    registry = ToolRegistry()
    async with open_openapi_source(registry, spec_31(), base_url=api.url, secrets=SECRETS):
        # The API key's header parameter is not an argument: the host supplies it.
        assert registry.definition("keyed").input_schema["properties"] == {}
        create, keyed, qkeyed = await run(
            registry, ("createItem", {"body": {"name": "n"}}), ("keyed", {}), ("qkeyed", {})
        )
    assert echoed(create)["headers"]["authorization"] == "Bearer [redacted]"
    assert echoed(keyed)["headers"]["x-api-key"] == "[redacted]"
    assert echoed(qkeyed)["query"] == [["api_key", "[redacted]"]]
    wrong = ToolRegistry()
    async with open_openapi_source(
        wrong, spec_31(), base_url=api.url, secrets={"bearer": "nope", "key": "nope"}
    ) as source:
        create, keyed = await run(wrong, ("createItem", {"body": {"name": "n"}}), ("keyed", {}))
        assert "qkeyed" not in wrong
        assert dict(source.skipped)["qkeyed"] == (
            "no security requirement can be met: no secret was given for security scheme 'qkey'"
        )
    for result in (create, keyed):
        assert result.is_error
        assert "answered HTTP 401 Unauthorized" in result.text
        assert result.details["http_status"] == 401


async def test_security_alternatives_and_overrides() -> None:
    schemes = {
        "a": {"type": "http", "scheme": "basic"},
        "b": {"type": "apiKey", "in": "cookie", "name": "sid"},
        "c": {"type": "apiKey", "in": "header"},
    }
    document = doc(
        {
            "/one": get("one", security=[{"a": []}, {"b": []}]),
            "/open": get("open", security=[]),
            "/none": get("none", security=[{"a": []}]),
            "/bad": get("bad", security=[{"c": []}]),
            "/missing": get("missing", security=[{"zz": []}]),
        },
        components={"securitySchemes": schemes},
        security=[{"b": []}],
    )
    source = await load(document, secrets={"a": "x", "b": "y", "c": "z"})
    assert sorted(source.tools) == ["one", "open"]
    assert source.tools["one"].operation.credentials.cookies == (("sid", "y"),)
    assert repr(source.tools["one"].operation.credentials) == "Credentials(<redacted>)"
    skipped = dict(source.skipped)
    assert "'a' (type 'http', scheme 'basic') is not supported" in skipped["none"]
    assert "'c' (type 'apiKey') is not supported" in skipped["bad"]
    assert "security scheme 'zz' is not defined" in skipped["missing"]
    empty = await load(document, secrets={"b": ""})
    assert empty.tools["one"].operation.credentials.cookies == (("sid", ""),)
    with pytest.raises(OpenAPIError, match=r"does not define: \['nope'\]"):
        await load(document, secrets={"nope": "x"})
    with pytest.raises(OpenAPIError, match="'a' must be a str"):
        await load(document, secrets={"a": 1})


# -- failures become results --------------------------------------------------


async def test_http_errors_carry_status_and_a_bounded_body(api: Api) -> None:
    registry = ToolRegistry()
    async with open_openapi_source(registry, spec_31(), base_url=api.url, secrets=SECRETS):
        [result] = await run(registry, ("boom", {}))
    assert result.is_error
    assert result.error_class is ErrorClass.EXECUTION_ERROR
    assert result.text.startswith(f"operation 'boom' on server {api.url} answered HTTP 500")
    assert "crash:" in result.text
    assert len(result.text) < 2200  # the 10 kB body is cut to 2000 bytes
    assert result.details == {"http_status": 500, "content_type": "text/plain"}


async def test_a_slow_call_times_out_naming_operation_and_server(api: Api) -> None:
    registry = ToolRegistry()
    async with open_openapi_source(
        registry, spec_31(), base_url=api.url, secrets=SECRETS, timeout=0.2
    ):
        [result] = await run(registry, ("slow", {}))
    assert result.error_class is ErrorClass.TIMEOUT
    assert result.text == f"operation 'slow' on server {api.url} timed out after 0.2s"


async def test_a_connect_timeout_names_operation_and_server(api: Api) -> None:
    registry = ToolRegistry()
    async with open_openapi_source(registry, spec_31(), base_url=api.url, connect_timeout=1e-9):
        [result] = await run(registry, ("big", {}))
    assert result.error_class is ErrorClass.TIMEOUT
    assert (
        result.text
        == f"operation 'big' on server {api.url} failed: could not connect within 1e-09s"
    )


async def test_cancellation_from_outside_is_not_swallowed(api: Api) -> None:
    registry = ToolRegistry()
    async with open_openapi_source(
        registry, spec_31(), base_url=api.url, secrets=SECRETS
    ) as source:
        tool = source.tools["slow"]
        with trio.move_on_after(0.2) as scope:
            await tool.execute({}, ToolContext("c1", "slow"))
        assert scope.cancelled_caught


async def test_a_body_over_the_cap_is_an_error(api: Api) -> None:
    registry = ToolRegistry()
    async with open_openapi_source(registry, spec_31(), base_url=api.url, max_response_bytes=1000):
        [over] = await run(registry, ("big", {}))
    assert over.is_error
    assert "larger than the cap of 1000 bytes (text/plain); nothing returned" in over.text
    async with open_openapi_source(registry, spec_31(), base_url=api.url):
        [fits] = await run(registry, ("big", {}))
    assert fits.text == "b" * BIG


async def test_other_content_is_described(api: Api) -> None:
    registry = ToolRegistry()
    async with open_openapi_source(registry, spec_31(), base_url=api.url):
        image, empty = await run(registry, ("image", {}), ("empty", {}))
    assert image.text == "[image/png response, 100 bytes, not shown]"
    assert image.details["content_type"] == "image/png"
    assert empty.text == "HTTP 204 No Content, no content"


async def test_refused_connections_and_malformed_responses_name_the_server() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"

    async def garbage(stream: trio.SocketStream) -> None:
        await stream.receive_some()
        await stream.send_all(b"NOT HTTP AT ALL\r\n\r\n")
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, host="127.0.0.1"), garbage, 0
        )
        bad = f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}"
        for base, expected in ((closed, "could not connect"), (bad, "malformed response")):
            registry = ToolRegistry()
            async with open_openapi_source(registry, spec_31(), base_url=base):
                [result] = await run(registry, ("big", {}))
            assert result.is_error
            assert result.text.startswith(f"operation 'big' on server {base} failed: {expected}")
        nursery.cancel_scope.cancel()


# -- executor -----------------------------------------------------------------


async def test_read_calls_overlap_in_one_batch(api: Api) -> None:
    registry = ToolRegistry()
    api.expect_together(3)
    async with open_openapi_source(registry, spec_31(), base_url=api.url):
        # Each /wait answers only once all three are inside the server at once.
        results = await run(registry, *[("wait", {"tag": t}) for t in "abc"])
    assert [echoed(r)["tag"] for r in results] == ["a", "b", "c"]
    assert api.most_waiting == 3
    assert {r.routing for r in results} == {RoutingClass.READ_ONLY}


async def test_secrets_appear_nowhere(
    api: Api, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    events: list[Event] = []
    audit = JsonlAuditSink.open(tmp_path / "audit.jsonl")
    registry = ToolRegistry()
    try:
        async with open_openapi_source(
            registry, f"{api.url}/openapi.json", secrets=SECRETS, timeout=0.5
        ) as source:
            results = await run(
                registry,
                ("createItem", {"body": {"name": "n"}}),
                ("keyed", {}),
                ("qkeyed", {}),
                ("reject", {}),
                ("boom", {}),
                ("slow", {}),
                sinks=[CallbackSink(events.append), audit],
            )
            shown = [repr(source), repr(source.tools), repr(registry.definitions())]
    finally:
        audit.close()
    assert [r.is_error for r in results] == [False, False, False, True, True, True]
    assert "[redacted]" in results[3].text  # the 401 echoed the header back
    recorded = [
        *map(repr, results),
        *(r.text for r in results),
        *map(repr, events),
        (tmp_path / "audit.jsonl").read_text(),
        caplog.text,
        *shown,
    ]
    for secret in {TOKEN, KEY, *(s.split("/")[1] for s in (TOKEN, KEY))}:
        assert not [text for text in recorded if secret in text], secret


# -- documents the source refuses or skips ------------------------------------


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"swagger": "2.0"}, "Swagger 2.0 documents are not supported"),
        ({"openapi": "4.0"}, "its 'openapi' field is '4.0'"),
        (
            doc({"/x": get("x", **{"x-toolexec-side-effects": "sometimes"})}),
            "operation 'x': x-toolexec-side-effects must be one of 'none', 'read', ",
        ),
    ],
)
async def test_unusable_documents_raise(document: dict[str, Any], message: str) -> None:
    with pytest.raises(OpenAPIError, match=re.escape(message)):
        await load(document)


async def test_document_sources_that_fail(
    api: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = ToolRegistry()
    (tmp_path / "bad.json").write_text("{nope")
    (tmp_path / "list.yaml").write_text("- 1\n")
    (tmp_path / "broken.yaml").write_text("a: [\n")
    cases: list[tuple[Any, str]] = [
        (tmp_path / "missing.json", "cannot read the OpenAPI document"),
        (tmp_path / "bad.json", "is not valid JSON"),
        (tmp_path / "list.yaml", "must be a mapping, got list"),
        (tmp_path / "broken.yaml", "is neither JSON nor YAML"),
        (f"{api.url}/nothing-here.json", "HTTP 404"),
        (doc({}, servers=[{"url": "/v1"}]), "is relative and the document was not fetched"),
        (doc({}, servers=[{}]), "first server has no 'url'"),
        (doc({}, servers=[{"url": "http://h:{p}"}]), "server variable 'p' has no default"),
        (doc({}, servers=[{"url": "ftp://h/"}]), "only go to http:// or https:// URLs"),
    ]
    for document, message in cases:
        with pytest.raises(OpenAPIError, match=re.escape(message)):
            async with open_openapi_source(registry, document):
                pass
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}/openapi.json"
    with pytest.raises(OpenAPIError, match=r"cannot fetch the OpenAPI document .*ConnectError"):
        async with open_openapi_source(registry, closed):
            pass
    monkeypatch.setitem(sys.modules, "yaml", None)
    with pytest.raises(OpenAPIError, match=re.escape("is YAML, which needs PyYAML")):
        async with open_openapi_source(registry, f"{api.url}/openapi.yaml"):
            pass
    with pytest.raises(ValueError, match="must be positive"):
        async with open_openapi_source(registry, doc({}), timeout=0):
            pass


async def test_no_usable_operation_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    source = await load(doc({"/x": {"post": {"requestBody": {"content": {"text/csv": {}}}}}}))
    assert source.tools == {}
    assert source.skipped == [
        ("POST /x", "request body media types ['text/csv'] are not supported (JSON is)")
    ]
    assert "operation 'POST /x' not registered" in caplog.text
    assert "OpenAPI 'T': no operation could be registered" in caplog.text


async def test_schemas_the_subset_cannot_express_are_skipped_with_reasons() -> None:
    schemas = {
        "A": {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
        "B": {"properties": {"b": {"type": "integer"}}, "required": ["b"], "description": "B"},
        "Open": {"type": "object", "additionalProperties": False},
        "Loop": {"$ref": "#/components/schemas/Loop"},
    }
    params = {"P": {"$ref": "#/components/parameters/P"}}

    def body(schema: Any, media: str = "application/json") -> dict[str, Any]:
        return {"requestBody": {"content": {media: {"schema": schema}}}}

    def query(schema: Any, **extra: Any) -> dict[str, Any]:
        return {"parameters": [{"name": "q", "in": "query", "schema": schema, **extra}]}

    all_of = {"allOf": [{"$ref": "#/components/schemas/A"}, {"$ref": "#/components/schemas/B"}]}
    ref = {"$ref": "#/components/schemas/A", "description": "an A"}
    paths = {
        "/merged": {"post": {"operationId": "merged", **body(all_of)}},
        "/vnd": {"post": {"operationId": "vnd", **body(ref, "application/vnd.x+json")}},
        "/clash": {
            "post": {
                "operationId": "clash",
                **body({"allOf": [{"type": "string"}, {"type": "integer"}]}),
            }
        },
        "/props": {
            "post": {
                "operationId": "props",
                **body(
                    {
                        "allOf": [
                            {"properties": {"a": {"type": "string"}}},
                            {"properties": {"a": {"type": "integer"}}},
                        ]
                    }
                ),
            }
        },
        "/strict": {
            "post": {
                "operationId": "strict",
                **body(
                    {
                        "allOf": [
                            {"$ref": "#/components/schemas/Open"},
                            {"$ref": "#/components/schemas/A"},
                        ]
                    }
                ),
            }
        },
        "/allofany": {"post": {"operationId": "allofany", **body({"allOf": [True]})}},
        "/loop": get("loop", **query({"$ref": "#/components/schemas/Loop"})),
        "/far": get("far", **query({"$ref": "other.yaml#/X"})),
        "/gone": get("gone", **query({"$ref": "#/components/schemas/Gone"})),
        "/num": get("num", **query(3)),
        "/obj": get("obj", **query({"type": "object"})),
        "/deep": get("deep", **query({"type": "string"}, style="deepObject")),
        "/content": get("content", parameters=[{"name": "q", "in": "query", "content": {}}]),
        "/where": get("where", parameters=[{"name": "q", "in": "body", "schema": {}}]),
        "/noname": get("noname", parameters=[{"in": "query", "schema": {}}]),
        "/pref": get("pref", parameters=[{"$ref": "#/components/parameters/P"}]),
        "/nobody": {"post": {"operationId": "nobody", "requestBody": {}}},
        "/t/{x}": get("undeclared"),
        "/body": {"post": {"operationId": "bodyParam", **body({}), **query({}, name="body")}},
        "/id/{id}": get(
            "idClash",
            parameters=[
                {"name": "id", "in": "path", "schema": {}},
                {"name": "id", "in": "query", "schema": {}},
                {"name": "query_id", "in": "query", "schema": {}},
            ],
        ),
        "/anyenum": get("anyEnum", **query({"anyOf": [{"enum": [1]}, {"type": "null"}]})),
    }
    paths["/body"]["post"]["parameters"][0]["name"] = "body"
    source = await load(doc(paths, components={"schemas": schemas, "parameters": params}))
    assert sorted(source.tools) == ["bodyParam", "merged", "vnd"]
    merged = source.tools["merged"].definition.input_schema["properties"]["body"]
    assert merged == {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
        "description": "B",
    }
    vnd = source.tools["vnd"].definition.input_schema["properties"]["body"]
    assert vnd["description"] == "an A"
    assert set(source.tools["bodyParam"].definition.input_schema["properties"]) == {
        "query_body",
        "body",
    }
    reasons = dict(source.skipped)
    assert reasons == {
        "clash": "allOf parts conflict on 'type'",
        "props": "allOf parts define property 'a' differently",
        "strict": "allOf with additionalProperties cannot be merged exactly",
        "allofany": "allOf part is not an object schema",
        "loop": (
            "$ref '#/components/schemas/Loop' is cyclic (a recursive schema has no inline form)"
        ),
        "far": "$ref 'other.yaml#/X' is not local to the document",
        "gone": "$ref '#/components/schemas/Gone' points to nothing in the document",
        "num": "a schema must be an object, got int",
        "obj": "parameter 'q' is an object; only scalars and arrays are",
        "deep": "parameter 'q' uses style 'deepObject', which is not supported",
        "content": "parameter 'q' has no schema ('content' is not supported)",
        "where": "parameter 'q' is in 'body', not path/query/header/cookie",
        "noname": "a parameter has no name",
        "pref": "$ref '#/components/parameters/P' is cyclic",
        "nobody": "the request body has no content",
        "undeclared": "path parameter 'x' is not declared",
        "idClash": "argument names collide even with location prefixes: ['query_id']",
        "anyEnum": reasons["anyEnum"],
    }
    assert "uses 'anyOf', which is outside the portable subset" in reasons["anyEnum"]


async def test_openapi_30_keywords_become_2020_12() -> None:
    def param(schema: dict[str, Any]) -> dict[str, Any]:
        return {"name": "v", "in": "query", "schema": schema}

    document = {
        "openapi": "3.0.1",
        "info": {"title": "T", "version": "1"},
        "paths": {
            "/a": get(
                "a", parameters=[param({"type": "number", "maximum": 5, "exclusiveMaximum": False})]
            ),
            "/b": get("b", parameters=[param({"nullable": True})]),
            "/c": get("c", parameters=[param({"type": ["string", "null"], "nullable": True})]),
            "/d": get(
                "d", parameters=[param({"type": ["string"], "nullable": True, "description": "d"})]
            ),
        },
    }
    source = await load(document)
    schema = {n: t.definition.input_schema["properties"]["v"] for n, t in source.tools.items()}
    assert schema == {
        "a": {"type": "number", "maximum": 5},
        "b": {},
        "c": {"type": ["string", "null"]},
        "d": {"type": ["string", "null"], "description": "d"},
    }


async def test_tool_names_fit_the_registry() -> None:
    long = "x" * 70
    paths = {
        "/a": get("list.items"),
        "/b": get("list_items"),
        "/c": get(long),
        "/d/{id}": {"put": {"parameters": [{"name": "id", "in": "path", "schema": {}}]}},
        "/e": get("..."),
        "/f": {
            "get": {
                "operationId": "path-level",
                "parameters": [{"name": "q", "in": "query", "schema": {"type": "integer"}}],
            },
            "parameters": [
                {"name": "q", "in": "query", "schema": {"type": "string"}},
                {"name": "r", "in": "query", "schema": {"type": "string"}},
            ],
        },
    }
    source = await load(doc(paths), prefix="api__")
    names = sorted(source.tools)
    assert names[:2] == ["api__get_e", "api__list_items"]
    hashed = [n for n in names if n.startswith("api__xxx")]
    assert len(hashed) == 1
    assert len(hashed[0]) == 64
    assert "api__put_d_id" in names
    assert source.skipped == [
        ("list_items", "its tool name 'api__list_items' is already taken by 'list.items'")
    ]
    level = source.tools["api__path-level"].definition.input_schema["properties"]
    assert level == {"q": {"type": "integer"}, "r": {"type": "string"}}  # the operation's wins


async def test_a_taken_name_is_refused_and_nothing_stays_registered(api: Api) -> None:
    registry = ToolRegistry()

    @function_tool(name="keyed", side_effects=SideEffects.READ)
    def keyed() -> str:
        """A tool in the way."""
        return "mine"

    registry.register(keyed)
    with pytest.raises(RegistrationError, match=r"cannot register 'keyed'.*pass another prefix="):
        async with open_openapi_source(registry, spec_31(), base_url=api.url, secrets=SECRETS):
            pass
    assert list(registry) == ["keyed"]
    async with open_openapi_source(registry, spec_31(), base_url=api.url, prefix="t_") as source:
        assert "t_getItem" in registry
    with pytest.raises(ToolError, match="is closed; the call was not sent"):
        await source.tools["t_getItem"].execute({"item_id": "1"}, ToolContext("c", "t_getItem"))
    with pytest.raises(RuntimeError, match="is closed"):
        source.client  # noqa: B018
    assert list(registry) == ["keyed"]


# -- docs ---------------------------------------------------------------------


def _code_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOCS.read_text(), re.S)


async def test_docs_examples_run(api: Api, capsys: pytest.CaptureFixture[str]) -> None:
    namespace: dict[str, Any] = {"__name__": "docs_openapi"}
    exec(compile("\n".join(_code_blocks()), str(DOCS), "exec"), namespace)
    with trio.fail_after(20):
        await namespace["main"](f"{api.url}/openapi.json", {"bearer": TOKEN})
    out = capsys.readouterr().out
    assert "skipped: postTree:" in out
    assert "getItem False" in out
    assert '"raw_path":"/items/a%2Fb"' in out
    assert "createItem False" in out
