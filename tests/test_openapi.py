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
        assert "$defs" not in item.input_schema  # it refers to no shared schema
        # Shared schemas stay shared: $refs into the tool schema's own $defs.
        create = registry.definition("createItem").input_schema
        assert create["properties"]["body"] == {"$ref": "#/$defs/NewItem"}
        body = create["$defs"]["NewItem"]
        assert body["properties"]["tags"]["items"] == {"$ref": "#/$defs/Tag"}
        assert create["$defs"]["Tag"] == {"type": "string", "minLength": 1}
        assert body["properties"]["note"] == {"anyOf": [{"type": "string"}, {"type": "null"}]}
        assert create["required"] == ["body"]
        # A recursive schema needs no inline form.
        tree = registry.definition("postTree").input_schema
        assert tree["$defs"]["Node"]["properties"]["child"] == {"$ref": "#/$defs/Node"}
        nested = registry.lookup("postTree").schema  # type: ignore[union-attr]
        assert nested.is_valid({"body": {"child": {"child": {}}}})
        assert not nested.is_valid({"body": {"child": {"child": 3}}})
        # oneOf over a string and an integer is exactly anyOf.
        either = registry.definition("either").input_schema["properties"]["v"]
        assert either == {"anyOf": [{"type": "string"}, {"type": "integer"}]}
        effects = {name: registry.definition(name).side_effects for name in registry}
        assert effects["getItem"] is SideEffects.READ
        assert effects["createItem"] is effects["empty"] is SideEffects.WRITE
        assert effects["lookup"] is SideEffects.READ  # x-toolexec-side-effects
        assert "get_search" in registry  # no operationId: method and path
        assert registry.definition("get_search").description == "GET /search"
        skipped = dict(source.skipped)
        assert set(skipped) == {"upload", "oauth"}
        assert "['multipart/form-data'] are not supported" in skipped["upload"]
        assert "no secret was given for security scheme 'oauth'" in skipped["oauth"]
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
        body = registry.definition("createItem30").input_schema["$defs"]["NewItem"]
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
        "d": {"type": "http", "scheme": "digest"},
    }
    document = doc(
        {
            "/one": get("one", security=[{"a": []}, {"b": []}]),
            "/open": get("open", security=[]),
            "/basic": get("basic", security=[{"a": []}]),
            "/bad": get("bad", security=[{"c": []}]),
            "/digest": get("digest", security=[{"d": []}]),
            "/missing": get("missing", security=[{"zz": []}]),
        },
        components={"securitySchemes": schemes},
        security=[{"b": []}],
    )
    source = await load(document, secrets={"a": "user:pa ss", "b": "y", "c": "z", "d": "w"})
    assert sorted(source.tools) == ["basic", "one", "open"]
    basic = (("Authorization", "Basic dXNlcjpwYSBzcw=="),)  # base64 of user:pa ss
    assert source.tools["one"].operation.credentials.headers == basic
    assert source.tools["basic"].operation.credentials.headers == basic
    assert repr(source.tools["one"].operation.credentials) == "Credentials(<redacted>)"
    for form in ("user:pa ss", "dXNlcjpwYSBzcw==", "pa ss", "pa%20ss", "pa+ss"):
        assert source.redact(f"<{form}>") == "<[redacted]>", form
    skipped = dict(source.skipped)
    assert "'c' (type 'apiKey') is not supported" in skipped["bad"]
    assert "'d' (type 'http', scheme 'digest') is not supported" in skipped["digest"]
    assert "security scheme 'zz' is not defined" in skipped["missing"]
    empty = await load(document, secrets={"b": ""})
    assert empty.tools["one"].operation.credentials.cookies == (("sid", ""),)
    with pytest.raises(OpenAPIError, match=r"does not define: \['nope'\]"):
        await load(document, secrets={"nope": "x"})
    with pytest.raises(OpenAPIError, match="'a' must be a str"):
        await load(document, secrets={"a": 1})
    with pytest.raises(OpenAPIError, match="basic security scheme 'a' must be 'user:password'"):
        await load(document, secrets={"a": "no colon"})


async def test_oauth2_and_openid_connect_send_the_token_as_a_bearer(api: Api) -> None:
    schemes = {
        "oauth": {
            "type": "oauth2",
            "flows": {"clientCredentials": {"tokenUrl": "/t", "scopes": {}}},
        },
        "oidc": {"type": "openIdConnect", "openIdConnectUrl": "/.well-known/openid-configuration"},
        "basic": {"type": "http", "scheme": "Basic"},
    }
    document = doc(
        {
            "/items/a": get("viaOAuth", security=[{"oauth": ["items:read"]}]),
            "/items/b": get("viaOidc", security=[{"oidc": []}]),
            "/items/c": get("viaBasic", security=[{"basic": []}]),
        },
        components={"securitySchemes": schemes},
    )
    secrets = {"oauth": "oauth-token-1", "oidc": "oidc-token-2", "basic": "me:secret-3"}
    registry = ToolRegistry()
    async with open_openapi_source(registry, document, base_url=api.url, secrets=secrets) as source:
        assert source.skipped == []
        results = await run(registry, ("viaOAuth", {}), ("viaOidc", {}), ("viaBasic", {}))
        sent = [dict(t.operation.credentials.headers) for t in source.tools.values()]
    assert sent == [
        {"Authorization": "Bearer oauth-token-1"},
        {"Authorization": "Bearer oidc-token-2"},
        {"Authorization": "Basic bWU6c2VjcmV0LTM="},
    ]
    # The server echoes the header back; what the model reads is redacted.
    shown = [echoed(r)["headers"]["authorization"] for r in results]
    assert shown == ["Bearer [redacted]", "Bearer [redacted]", "Basic [redacted]"]


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
    assert sorted(source.tools) == ["allofany", "anyEnum", "bodyParam", "merged", "vnd"]
    assert source.tools["allofany"].definition.input_schema["properties"]["body"] == {}
    any_enum = {"anyOf": [{"enum": [1]}, {"type": "null"}]}
    assert source.tools["anyEnum"].definition.input_schema["properties"]["q"] == any_enum
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
        "loop": "$ref '#/components/schemas/Loop' is cyclic: it only refers to itself",
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
    }


def body_op(op_id: str, schema: Any) -> dict[str, Any]:
    """A POST operation whose JSON body has ``schema``."""
    content = {"application/json": {"schema": schema}}
    return {"post": {"operationId": op_id, "requestBody": {"content": content}}}


async def test_refs_are_rfc_6901_pointers() -> None:
    schemas = {
        "A": {"allOf": [{"type": "object", "properties": {"n": {"type": "integer"}}}]},
        "a/b~c d": {"type": "string", "maxLength": 2},
        "a_b_c_d": {"type": "integer"},  # the same $defs key, once made safe
    }
    paths = {
        "/index": body_op("index", {"$ref": "#/components/schemas/A/allOf/0"}),
        "/escaped": body_op("escaped", {"$ref": "#/components/schemas/a~1b~0c%20d"}),
        "/past": body_op("past", {"$ref": "#/components/schemas/A/allOf/1"}),
        "/dash": body_op("dash", {"$ref": "#/components/schemas/A/allOf/-"}),
        "/lead": body_op("lead", {"$ref": "#/components/schemas/A/allOf/00"}),
        "/deep": body_op("deep", {"$ref": "#/components/schemas/A/allOf/0/properties/n"}),
        "/both": body_op(
            "both",
            {
                "properties": {
                    "s": {"$ref": "#/components/schemas/a~1b~0c%20d"},
                    "i": {"$ref": "#/components/schemas/a_b_c_d"},
                }
            },
        ),
    }
    source = await load(doc(paths, components={"schemas": schemas}))
    assert sorted(source.tools) == ["both", "deep", "escaped", "index"]
    both = source.tools["both"].definition.input_schema
    assert both["$defs"] == {
        "a_b_c_d": {"type": "string", "maxLength": 2},
        "a_b_c_d_2": {"type": "integer"},
    }
    index = source.tools["index"].compiled_schema
    assert index is not None
    assert index.is_valid({"body": {"n": 1}})
    assert not index.is_valid({"body": {"n": "1"}})
    escaped = source.tools["escaped"].definition.input_schema
    assert escaped["$defs"][escaped["properties"]["body"]["$ref"].split("/")[-1]] == {
        "type": "string",
        "maxLength": 2,
    }
    assert not source.tools["escaped"].compiled_schema.is_valid({"body": "abc"})  # type: ignore[union-attr]
    assert source.tools["deep"].compiled_schema.is_valid({"body": 3})  # type: ignore[union-attr]
    reasons = dict(source.skipped)
    for name in ("past", "dash", "lead"):
        assert reasons[name].endswith("points to nothing in the document"), reasons[name]


def doubling(levels: int) -> dict[str, Any]:
    """Schema ``L<i>`` refers to ``L<i+1>`` twice: inlined, level 0 has 2**levels copies."""
    schemas: dict[str, Any] = {}
    for i in range(levels):
        nxt = {"$ref": f"#/components/schemas/L{i + 1}"}
        schemas[f"L{i}"] = {
            "type": "object",
            "properties": {"left": nxt, "right": nxt, "name": {"type": "string"}},
        }
    schemas[f"L{levels}"] = {"type": "string", "maxLength": 8}
    return doc(
        {"/top": body_op("top", {"$ref": "#/components/schemas/L0"})},
        components={"schemas": schemas},
    )


async def test_a_doubling_document_stays_the_size_of_the_document() -> None:
    document = doubling(20)  # about 2 kB; inlined, its tool schema would be 2**20 copies deep
    with trio.fail_after(120):  # a guard against the exponential expansion, not a timing
        source = await load(document)
    schema = source.tools["top"].definition.input_schema
    assert sorted(schema["$defs"]) == sorted(f"L{i}" for i in range(21))
    assert len(json.dumps(schema)) < 2 * len(json.dumps(document))
    compiled = source.tools["top"].compiled_schema
    assert compiled is not None
    deep: Any = "ok"
    for _ in range(20):
        deep = {"left": deep, "right": deep}
    assert compiled.is_valid({"body": deep})
    deep["left"]["left"] = {"name": 3}
    assert not compiled.is_valid({"body": deep})


async def test_heavy_reuse_is_converted_once_and_shared() -> None:
    # 300 operations over one family of schemas that refer to each other.
    schemas: dict[str, Any] = {"Id": {"type": "string", "pattern": "^[a-z0-9-]+$"}}
    for i in range(30):
        props = {"id": {"$ref": "#/components/schemas/Id"}}
        props |= {f"p{j}": {"$ref": f"#/components/schemas/S{j}"} for j in range(i)}
        schemas[f"S{i}"] = {"type": "object", "properties": props}
    paths = {
        f"/r{n}": body_op(f"op{n}", {"$ref": f"#/components/schemas/S{n % 30}"}) for n in range(300)
    }
    document = doc(paths, components={"schemas": schemas})
    with trio.fail_after(120):
        source = await load(document)
    assert len(source.tools) == 300
    last = source.tools["op29"].definition.input_schema
    assert len(last["$defs"]) == 31
    assert last["$defs"]["S5"] is source.tools["op5"].definition.input_schema["$defs"]["S5"]
    assert not source.tools["op29"].compiled_schema.is_valid(  # type: ignore[union-attr]
        {"body": {"p3": {"p1": {"id": "NOT VALID"}}}}
    )


async def test_a_tool_schema_over_the_bound_is_skipped_with_its_size() -> None:
    source = await load(doubling(6), max_schema_bytes=300)
    assert source.tools == {}
    [(name, reason)] = source.skipped
    assert name == "top"
    assert re.fullmatch(
        r"its input schema is over the bound of 300 bytes of JSON \(at least [\d,]+ with the "
        r"schemas it refers to\); raise max_schema_bytes= to register it",
        reason,
    )
    assert (await load(doubling(6))).tools
    with pytest.raises(ValueError, match="must be positive"):
        await load(doubling(1), max_schema_bytes=0)


async def test_every_skip_reason_is_one_line_and_each_schema_compiles_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import jsonschema_rs

    compiled: list[object] = []
    real = jsonschema_rs.Draft202012Validator

    def counting(schema: Any, *args: Any, **kwargs: Any) -> Any:
        compiled.append(schema)
        return real(schema, *args, **kwargs)

    monkeypatch.setattr(jsonschema_rs, "Draft202012Validator", counting)
    paths = {
        "/regex": get(
            "regex",
            **{
                "parameters": [
                    {
                        "name": "q",
                        "in": "query",
                        "schema": {"type": "string", "pattern": "(?<=a)b\\"},
                    }
                ]
            },
        ),
        "/fine": get("fine"),
        "/also": body_op("also", {"type": "object"}),
    }
    registry = ToolRegistry()
    async with open_openapi_source(registry, doc(paths), base_url="http://127.0.0.1:9") as source:
        assert sorted(registry) == ["also", "fine"]
        [(name, reason)] = source.skipped
    assert name == "regex"
    assert reason.startswith("tool 'regex': input_schema cannot be compiled: ")
    assert "\n" not in reason
    assert len(compiled) == 3  # one per operation, none again at registration


async def test_tls_is_set_up_only_for_https(monkeypatch: pytest.MonkeyPatch) -> None:
    import httpcore2

    contexts: list[object] = []
    real = httpcore2.default_ssl_context

    def counting(*args: Any, **kwargs: Any) -> Any:
        contexts.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(httpcore2, "default_ssl_context", counting)
    await load(doc({"/x": get("x")}))
    assert contexts == []
    async with open_openapi_source(
        ToolRegistry(), doc({"/x": get("x")}), base_url="https://127.0.0.1:9"
    ) as source:
        assert source.tools
    assert len(contexts) == 1


async def test_refs_beside_validating_keywords_and_refs_in_a_cycle() -> None:
    schemas = {
        "Tag": {"type": "string", "minLength": 1},
        "Never": False,
        "Selfish": {"$ref": "#/components/schemas/Selfish", "minLength": 1},
        "Ping": {"$ref": "#/components/schemas/Pong"},
        "Pong": {"$ref": "#/components/schemas/Ping"},
    }

    def ref(name: str, **beside: Any) -> dict[str, Any]:
        return {"$ref": f"#/components/schemas/{name}", **beside}

    paths = {
        "/short": body_op("short", ref("Tag", maxLength=3, description="a tag")),
        "/never": body_op("never", ref("Never", minLength=1)),
        "/selfish": body_op("selfish", ref("Selfish")),
        "/ping": body_op("ping", ref("Ping")),
        "/overlap": body_op(
            "overlap", {"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 3}]}
        ),
    }
    source = await load(doc(paths, components={"schemas": schemas}))
    assert sorted(source.tools) == ["never", "short"]
    body = source.tools["short"].definition.input_schema["properties"]["body"]
    assert body == {"type": "string", "minLength": 1, "maxLength": 3, "description": "a tag"}
    assert source.tools["never"].definition.input_schema["properties"]["body"] is False
    reasons = dict(source.skipped)
    assert reasons == {
        "selfish": "$ref '#/components/schemas/Selfish' is cyclic: it stands for itself",
        "ping": "$ref '#/components/schemas/Ping' is cyclic: it only refers to itself",
        "overlap": "oneOf over alternatives a value may match together: OpenAI refuses "
        "oneOf, and anyOf would accept such a value",
    }


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
    assert "skipped: upload:" in out
    assert "getItem False" in out
    assert '"raw_path":"/items/a%2Fb"' in out
    assert "createItem False" in out
