"""MCP servers as a tool source, against real servers started by the tests.

The SDK test server (``tests/mcp_servers/sdk_server.py``) runs over stdio and
over streamable HTTP; the reference filesystem server comes from npm. No
fakes: every call crosses a real process boundary.
"""

from __future__ import annotations

import collections
import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import pytest
import trio

from mcp_servers.fixtures import (
    filesystem_server,
    http_server_url,
    process_gone,
    raw_server_entry,
    sdk_server_entry,
)
from mcp_servers.raw_server import SCHEMAS
from toolexec import (
    Allow,
    ErrorClass,
    ImageContent,
    JsonContent,
    RegistrationError,
    RoutingClass,
    SideEffects,
    TextContent,
    ToolCall,
    ToolExecutor,
    ToolRegistry,
    function_tool,
)
from toolexec.events import CallbackSink, CallProgress, Event
from toolexec.policy import Decision, ExecutionGrant

if TYPE_CHECKING:
    from toolexec import ToolResult

__all__ = ["filesystem_server", "http_server_url"]  # fixtures used by name

# Over streamable HTTP the SDK drops some httpx2 response generators without
# closing them; trio reports each one when it is garbage collected.
# Slow (tests/README.md): real MCP servers, over stdio and HTTP.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings(r"ignore:Async generator '(httpx2|httpcore2)\.:ResourceWarning"),
]

DOCS = Path(__file__).parents[1] / "docs" / "mcp.md"


@pytest.fixture(autouse=True, scope="module")
def _mcp_installed() -> None:
    """Skip where the MCP SDK is missing.

    ``toolexec.mcp``, which imports the SDK, is imported by the tests that use
    it, not at import: collection stays free of the SDK, which takes about half
    a second to import.
    """
    pytest.importorskip("mcp")


async def run(executor: ToolExecutor, *calls: tuple[str, dict[str, Any]]) -> list[ToolResult]:
    """Execute calls named (tool, arguments) as one batch; return the results."""
    batch = [ToolCall(f"c{i}", name, args) for i, (name, args) in enumerate(calls)]
    with trio.fail_after(60):  # a hang is a failure, not a stuck test run
        outcome = await executor.execute_batch(batch)
    return list(outcome.results)


def progress_recorder() -> tuple[dict[str, list[str]], dict[str, trio.Event], CallbackSink]:
    """A sink recording progress messages by call id, with an event per call id."""
    messages: dict[str, list[str]] = {}
    arrived: dict[str, trio.Event] = collections.defaultdict(trio.Event)

    def record(event: Event) -> None:
        if isinstance(event, CallProgress):
            messages.setdefault(event.call_id, []).append(event.message)
            arrived[event.call_id].set()

    return messages, arrived, CallbackSink(record)


# -- configuration ------------------------------------------------------------


def test_parse_the_mcp_servers_format() -> None:
    from toolexec.mcp import parse_mcp_servers

    configs = parse_mcp_servers(
        {
            "mcpServers": {
                "files": {"command": "npx", "args": ["-y", "pkg", "."], "env": {"A": "1"}},
                "remote": {
                    "type": "http",
                    "url": "https://example.test/mcp",
                    "headers": {"X": "y"},
                },
                "off": {"command": "nothing", "disabled": True},
            }
        },
        timeout=5,
    )
    assert [c.name for c in configs] == ["files", "remote"]
    files, remote = configs
    assert (files.command, files.args, dict(files.env), files.url) == (
        "npx",
        ("-y", "pkg", "."),
        {"A": "1"},
        None,
    )
    assert (remote.url, dict(remote.headers), remote.command) == (
        "https://example.test/mcp",
        {"X": "y"},
        None,
    )
    assert files.timeout == remote.timeout == 5


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"url": "http://x/sse", "type": "sse"}, "SSE transport is deprecated"),
        ({"command": "x", "args": "not a list"}, "'args' must be a list of strings"),
        ({"command": "x", "url": "http://x"}, "exactly one of 'command'"),
        ({"args": []}, "exactly one of 'command'"),
        ({"command": "x", "env": {"A": 1}}, "'env' must map names to strings"),
    ],
)
def test_malformed_entries_are_refused_clearly(entry: dict[str, Any], message: str) -> None:
    from toolexec.mcp import MCPServerConfig

    with pytest.raises(ValueError, match=re.escape(message)):
        MCPServerConfig.from_entry("bad", entry)


def test_malformed_entries_name_the_entry_the_fault_and_what_is_allowed() -> None:
    from toolexec.mcp import MCPServerConfig, parse_mcp_servers

    with pytest.raises(ValueError, match="unknown transport type 'ws'; allowed: 'stdio', 'http'"):
        MCPServerConfig.from_entry("bad", {"type": "ws", "url": "ws://x"})
    with pytest.raises(ValueError, match=r"'required' must be true or false, got 'no'"):
        MCPServerConfig.from_entry("bad", {"command": "x", "required": "no"})
    with pytest.raises(ValueError, match=r"'command' must be a string, got \['x'\]"):
        MCPServerConfig.from_entry("bad", {"command": ["x"]})
    with pytest.raises(ValueError, match=r"'bad': expected an object with 'command' \(stdio\)"):
        MCPServerConfig.from_entry("bad", "npx server")  # type: ignore[arg-type]
    # every malformed entry of a document is named, in one message, before anything starts
    with pytest.raises(ValueError, match="malformed") as caught:
        parse_mcp_servers(
            {
                "mcpServers": {
                    "good": {"command": "x"},
                    "one": {"command": "x", "args": "-v"},
                    "two": {"url": "http://x", "headers": {"N": 1}},
                }
            }
        )
    message = str(caught.value)
    assert message.startswith("2 MCP server entries are malformed:")
    assert "MCP server 'one': 'args' must be a list of strings, got '-v'" in message
    assert "MCP server 'two': 'headers' must map names to strings" in message
    assert "'good'" not in message


def test_the_vs_code_layout_is_read_as_such() -> None:
    from toolexec.mcp import parse_mcp_servers

    document = {
        "inputs": [{"type": "promptString", "id": "token", "password": True}],
        "servers": {
            "files": {"type": "stdio", "command": "npx", "args": ["-y", "pkg"], "env": {"A": "1"}},
            "remote": {"type": "http", "url": "https://example.test/mcp", "headers": {"X": "y"}},
        },
    }
    files, remote = parse_mcp_servers(document)
    assert (files.name, files.command, files.args, dict(files.env)) == (
        "files",
        "npx",
        ("-y", "pkg"),
        {"A": "1"},
    )
    assert (remote.name, remote.url, dict(remote.headers)) == (
        "remote",
        "https://example.test/mcp",
        {"X": "y"},
    )


def test_a_servers_document_is_not_one_server_named_servers() -> None:
    from toolexec.mcp import parse_mcp_servers

    # Read as the inner mapping, this was one server called "servers" whose
    # entry had no 'command' or 'url'.
    (config,) = parse_mcp_servers({"servers": {"notes": {"command": "notes-mcp"}}})
    assert config.name == "notes"


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"notes": {"command": "x"}}, "has no server list (keys: 'notes')"),
        ({}, "has no server list (keys: none)"),
        ({"mcpServers": {}, "servers": {}}, "has both 'mcpServers' and 'servers'"),
        ({"servers": ["notes"]}, "'servers' must map server names to server entries, got list"),
        ([], "an MCP configuration must be an object, got list"),
    ],
)
def test_a_document_without_exactly_one_layout_is_refused(document: Any, message: str) -> None:
    from toolexec.mcp import parse_mcp_servers

    with pytest.raises(ValueError, match=re.escape(message)) as caught:
        parse_mcp_servers(document)
    if "server list" in message or "both" in message:
        assert '{"mcpServers": {name: entry}}' in str(caught.value)
        assert '{"servers": {name: entry}}' in str(caught.value)


def test_the_failure_policy_is_read_from_the_entry_and_wins_over_options() -> None:
    from toolexec.mcp import MCPServerConfig, parse_mcp_servers

    strict, lenient = parse_mcp_servers(
        {"mcpServers": {"a": {"command": "x"}, "b": {"command": "x", "required": False}}},
        required=True,
    )
    assert (strict.required, lenient.required) == (True, False)
    (relaxed,) = parse_mcp_servers({"servers": {"a": {"command": "x"}}}, required=False)
    assert relaxed.required is False
    with pytest.raises(TypeError):
        MCPServerConfig("a", command="x", required="no")  # type: ignore[arg-type]


# -- schemas ------------------------------------------------------------------


def obj(**properties: Any) -> dict[str, Any]:
    """An object schema with these properties."""
    return {"type": "object", "properties": properties}


NULLABLE = {"anyOf": [{"type": "string", "maxLength": 3}, {"type": "null"}], "default": None}
COLOR = {"anyOf": [{"enum": ["r", "g"], "type": "string"}, {"type": "null"}]}
P = obj(x={"type": "integer"})
RECURSIVE = {"$ref": "#/$defs/N", "$defs": {"N": obj(n={"$ref": "#/$defs/N"})}}
INT_OR_NUMBER = {"oneOf": [{"type": "integer"}, {"type": "number"}]}
SAME_TYPE = {"oneOf": [{"type": "string"}, {"type": "string", "description": "again"}]}
SPECIAL = {"oneOf": [{"type": "number"}, {"type": "string"}, {"enum": ["INF", "NaN"]}]}
SHORT_OR_ANY = {"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 3}]}
CAT = {**obj(kind={"const": "cat"}, meow={"type": "boolean"}), "required": ["kind"]}
DOG = {**obj(kind={"enum": ["dog", "wolf"]}, bark={"type": "integer"}), "required": ["kind"]}


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        # anyOf, $defs and local $refs (recursive ones too) are kept as given
        (obj(a=NULLABLE, c=COLOR), obj(a=NULLABLE, c=COLOR)),
        ({**obj(p={"$ref": "#/$defs/P", "title": "P"}), "$defs": {"P": P}}, None),
        ({"type": "object", **RECURSIVE}, None),
        # oneOf over alternatives no value matches twice is anyOf
        (
            obj(a={"oneOf": [{"type": "string"}, {"type": "null"}], "description": "d"}),
            obj(a={"anyOf": [{"type": "string"}, {"type": "null"}], "description": "d"}),
        ),
        (
            {**obj(pet={"oneOf": [{"$ref": "#/$defs/Cat"}, DOG]}), "$defs": {"Cat": CAT}},
            {**obj(pet={"anyOf": [{"$ref": "#/$defs/Cat"}, DOG]}), "$defs": {"Cat": CAT}},
        ),
        # ... and where branches overlap only by redundancy, the union was meant
        (obj(a=INT_OR_NUMBER), obj(a={"anyOf": INT_OR_NUMBER["oneOf"]})),
        (obj(a=SAME_TYPE), obj(a={"anyOf": SAME_TYPE["oneOf"]})),
        (obj(a=SPECIAL), obj(a={"anyOf": SPECIAL["oneOf"]})),
        # allOf whose parts agree is merged; annotations may differ
        (
            obj(a={"allOf": [{"$ref": "#/$defs/P"}, {"required": ["x"], "title": "Q"}]})
            | {"$defs": {"P": {**P, "title": "P"}}},
            obj(a={**P, "title": "P", "required": ["x"]}) | {"$defs": {"P": {**P, "title": "P"}}},
        ),
        # definitions nothing refers to are dropped, however unportable
        (
            {
                **obj(p={"$ref": "#/$defs/P"}),
                "$defs": {"P": {"$ref": "#/$defs/Q"}, "Q": P, "Unused": SHORT_OR_ANY},
            },
            {**obj(p={"$ref": "#/$defs/P"}), "$defs": {"P": {"$ref": "#/$defs/Q"}, "Q": P}},
        ),
        ({**obj(), "definitions": {"Unused": SHORT_OR_ANY}}, obj()),
        # exact rewrites deep inside anyOf branches and items; other refs left alone
        (
            {
                **obj(
                    a={"anyOf": [{"oneOf": [{"type": "string"}, {"type": "integer"}]}, True]},
                    b={"type": "array", "items": {"allOf": [P, {"required": ["x"]}]}},
                    c={"$ref": "https://example.test/c.json"},
                    d={"$ref": "#/properties/a"},
                ),
                "$defs": {"Unused": P},
            },
            obj(
                a={"anyOf": [{"anyOf": [{"type": "string"}, {"type": "integer"}]}, True]},
                b={"type": "array", "items": {**P, "required": ["x"]}},
                c={"$ref": "https://example.test/c.json"},
                d={"$ref": "#/properties/a"},
            ),
        ),
        # a top-level $ref whose target cannot be merged with what is beside it stays
        (
            {
                "$ref": "#/$defs/A",
                "required": ["x"],
                "$defs": {"A": {**P, "additionalProperties": False}},
            },
            None,
        ),
        # a top-level $ref is what it points to
        (
            {"$ref": "#/definitions/Args", "definitions": {"Args": P}},
            {**P, "definitions": {"Args": P}},
        ),
    ],
)
def test_schemas_are_kept_or_rewritten_exactly(
    schema: dict[str, Any], expected: dict[str, Any] | None
) -> None:
    from toolexec.mcp._schemas import portable_schema

    rewritten = portable_schema(schema)
    if expected is None:
        assert rewritten is schema  # nothing to rewrite: not even copied
    else:
        assert rewritten == expected


@pytest.mark.parametrize(
    ("schema", "reason"),
    [
        (obj(a=SHORT_OR_ANY), "uses 'oneOf', which OpenAI refuses in function parameters, over"),
        (obj(a={"oneOf": [CAT, P]}), "alternatives a value may match together"),
        (
            obj(a={"allOf": [{"type": "string"}, {"type": "integer"}]}),
            "parts cannot be merged exactly: allOf parts conflict on 'type'",
        ),
    ],
)
def test_schemas_without_an_exact_rewrite_are_refused(schema: dict[str, Any], reason: str) -> None:
    from toolexec.mcp._schemas import UnportableSchema, portable_schema

    with pytest.raises(UnportableSchema, match=re.escape(reason)):
        portable_schema(schema)


# -- listing and registration ---------------------------------------------------


async def test_tools_are_registered_namespaced_with_side_effects() -> None:
    from toolexec.mcp import open_mcp_server

    registry = ToolRegistry()

    async def inspect_then_raise() -> None:
        async with open_mcp_server(registry, "t", sdk_server_entry()) as server:
            names = set(registry.names())
            assert {"mcp__t__echo", "mcp__t__write_note", "mcp__t__fail"} <= names
            assert names == set(server.tools)
            assert registry.definition("mcp__t__echo").side_effects is SideEffects.READ
            # destructiveHint, and no hint at all, are mutating
            assert registry.definition("mcp__t__write_note").side_effects is SideEffects.EXECUTE
            assert registry.definition("mcp__t__fail").side_effects is SideEffects.EXECUTE
            assert registry.definition("mcp__t__echo").description == "Return the text unchanged."
            # `name: str | None` arrives as anyOf, and is kept as the server gave it
            greet = registry.definition("mcp__t__greet").input_schema
            assert greet["properties"]["name"]["anyOf"] == [{"type": "string"}, {"type": "null"}]
            # a recursive schema is kept with its $defs and $refs
            nodes = registry.definition("mcp__t__count_nodes").input_schema
            assert "$ref" in json.dumps(nodes["properties"])
            assert "$defs" in nodes
            assert server.skipped == {}
            raise KeyError("mine")

    # the caller's own exception comes out as itself, not in an exception group
    with pytest.raises(KeyError, match="mine"):
        await inspect_then_raise()
    assert len(registry) == 0  # unregistered on exit


async def test_a_raw_servers_schemas_register_as_given_and_validate() -> None:
    from toolexec.mcp import open_mcp_server

    registry = ToolRegistry()
    async with open_mcp_server(registry, "raw", raw_server_entry()) as server:
        assert server.skipped == {
            "overlap": "its input schema cannot be sent as it is: schema at #/properties/v "
            "uses 'oneOf', which OpenAI refuses in function parameters, over alternatives "
            "a value may match together (anyOf would accept it)"
        }
        assert set(server.tools) == {f"mcp__raw__{name}" for name in SCHEMAS}
        for name in ("toggle", "repeat", "area"):  # anyOf as the server gave it
            assert registry.definition(f"mcp__raw__{name}").input_schema == SCHEMAS[name]
        # oneOf of objects told apart by a const is exactly anyOf
        tagged = registry.definition("mcp__raw__tagged").input_schema["properties"]["shape"]
        assert tagged == {"anyOf": SCHEMAS["tagged"]["properties"]["shape"]["oneOf"]}
        circle = {"kind": "circle", "radius": 1.5}
        square = {"kind": "square", "side": 2}
        good: list[tuple[str, dict[str, Any]]] = [
            ("toggle", {"mode": True}),
            ("toggle", {"mode": "eco"}),
            ("toggle", {}),
            ("repeat", {"value": "again"}),
            ("repeat", {"value": 3}),
            ("area", {"shape": circle}),
            ("area", {"shape": square}),
            ("tagged", {"shape": square}),
        ]
        bad: list[tuple[str, dict[str, Any]]] = [
            ("toggle", {"mode": 3}),
            ("repeat", {"value": 1.5}),
            ("area", {"shape": {"kind": "circle", "side": 1}}),
            ("area", {"shape": {"kind": "square", "side": -1}}),
            ("tagged", {"shape": {"kind": "triangle"}}),
            ("tagged", {"shape": circle, "extra": 1}),
        ]
        calls = [(f"mcp__raw__{name}", args) for name, args in good + bad]
        results = await run(ToolExecutor(registry), *calls)
    for (_, args), result in zip(good, results[: len(good)], strict=True):
        assert not result.is_error, result.text
        assert json.loads(result.text) == args
    for (name, args), result in zip(bad, results[len(good) :], strict=True):
        assert result.error_class is ErrorClass.INVALID_ARGUMENTS, (name, args, result.text)


async def test_failures_inside_a_server_are_worded_plainly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from toolexec.mcp import open_mcp_server

    registry = ToolRegistry()
    async with open_mcp_server(registry, "raw", raw_server_entry()) as server:
        executor = ToolExecutor(registry)
        broken, picky, chatty = await run(
            executor, ("mcp__raw__broken", {}), ("mcp__raw__picky", {}), ("mcp__raw__chatty", {})
        )
        [died] = await run(executor, ("mcp__raw__die", {}))
        [after] = await run(executor, ("mcp__raw__toggle", {}))
        assert not server.connected
    assert broken.error_class is ErrorClass.EXECUTION_ERROR
    assert broken.text == "MCP tool 'broken' failed inside server 'raw': the disk is full"
    assert picky.text == "MCP server 'raw' rejected the call to 'picky': no calls on Sundays"
    assert (chatty.is_error, chatty.text) == (False, "{}")
    stray = [r.getMessage() for r in caplog.records if "JSON-RPC message" in r.getMessage()]
    assert stray == [
        "MCP server 'raw': the server wrote a line that is not a JSON-RPC message to its "
        "stdout, which was ignored: 'hello from a stray print'"
    ]
    assert died.error_class is ErrorClass.EXECUTION_ERROR
    assert "closed the connection during the call to 'die'" in died.text
    assert "the server process was killed by SIGKILL" in died.text
    assert "is not connected (the server process was killed by SIGKILL" in after.text


@pytest.mark.parametrize(
    ("returncode", "text"),
    [
        (3, "the server process exited with code 3"),
        (-9, "the server process was killed by SIGKILL"),
        (-15, "the server process was killed by SIGTERM"),
        (-200, "the server process was killed by signal 200"),
    ],
)
def test_how_a_server_process_ended_is_said_plainly(returncode: int, text: str) -> None:
    from toolexec.mcp._stdio import exit_text

    assert exit_text(returncode) == text


async def test_a_name_collision_is_refused_and_nothing_is_shadowed() -> None:
    from toolexec.mcp import open_mcp_server

    registry = ToolRegistry()

    @function_tool(name="mcp__t__echo", side_effects=SideEffects.READ)
    def native_echo(text: str) -> str:
        """The host's own tool."""
        return f"native {text}"

    registry.register(native_echo)
    with pytest.raises(RegistrationError, match="already registered"):
        async with open_mcp_server(registry, "t", sdk_server_entry()):
            pytest.fail("the block must not run")
    assert registry.names() == ["mcp__t__echo"]
    [result] = await run(ToolExecutor(registry), ("mcp__t__echo", {"text": "x"}))
    assert result.text == "native x"


async def test_connection_failures_say_what_happened() -> None:
    from toolexec.mcp import MCPConnectionError, open_mcp_server, open_mcp_servers

    registry = ToolRegistry()
    with pytest.raises(MCPConnectionError, match="No such file"):
        async with open_mcp_server(registry, "gone", {"command": "/nonexistent/mcp-server"}):
            pass
    script = "import sys; sys.stderr.write('missing API key\\n'); sys.exit(2)"
    with pytest.raises(MCPConnectionError) as caught:
        async with open_mcp_servers(
            registry, {"mcpServers": {"bad": {"command": "python3", "args": ["-c", script]}}}
        ):
            pass
    message = str(caught.value)
    assert "'bad'" in message
    assert "exited with code 2" in message
    assert "missing API key" in message
    assert len(registry) == 0


async def test_optional_servers_that_fail_are_skipped_with_the_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from toolexec.mcp import MCPServerSet, open_mcp_servers

    registry = ToolRegistry()

    @function_tool(name="mcp__clash__echo", side_effects=SideEffects.READ)
    def taken(text: str) -> str:
        """The host's own tool, whose name the 'clash' server would take."""
        return text

    registry.register(taken)
    script = "import sys; sys.stderr.write('missing API key\\n'); sys.exit(2)"
    config = {
        "mcpServers": {
            "down": {"command": "python3", "args": ["-c", script], "required": False},
            "t": sdk_server_entry(),
            "clash": {**sdk_server_entry(), "required": False},
            "gone": {"command": "/nonexistent/mcp-server", "required": False},
        }
    }
    with trio.fail_after(60):
        async with open_mcp_servers(registry, config) as servers:
            assert isinstance(servers, MCPServerSet)
            assert list(servers) == ["t"]
            assert len(servers) == 1
            assert list(servers.skipped) == ["down", "clash", "gone"]
            assert "exited with code 2" in servers.skipped["down"]
            assert "missing API key" in servers.skipped["down"]
            assert "cannot register 'mcp__clash__echo'" in servers.skipped["clash"]
            assert "No such file" in servers.skipped["gone"]
            [result] = await run(ToolExecutor(registry), ("mcp__t__echo", {"text": "up"}))
            assert result.text == "up"
            assert not any(
                name.startswith("mcp__clash__") and name != "mcp__clash__echo"
                for name in registry.names()
            )
    assert registry.names() == ["mcp__clash__echo"]
    warnings = [r.getMessage() for r in caplog.records if r.name == "toolexec.mcp"]
    assert any(w.startswith("skipped optional MCP server 'down'") for w in warnings)


async def test_a_required_server_that_fails_closes_the_others() -> None:
    from toolexec.mcp import MCPConnectionError, MCPServerConfig, open_mcp_servers

    registry = ToolRegistry()
    config = [
        MCPServerConfig("t", **sdk_server_entry()),
        MCPServerConfig("gone", command="/nonexistent/mcp-server"),
    ]
    with trio.fail_after(60), pytest.raises(MCPConnectionError, match="'gone'"):
        async with open_mcp_servers(registry, config):
            pytest.fail("the block must not run")
    assert len(registry) == 0
    # required=False in the options makes every server optional, unless its own config says
    async with open_mcp_servers(registry, config, required=False) as servers:
        assert list(servers) == ["t"]
        assert list(servers.skipped) == ["gone"]


# -- calls ----------------------------------------------------------------------


async def test_calls_errors_unknown_tools_invalid_arguments_and_progress() -> None:
    from toolexec.mcp import open_mcp_server

    registry = ToolRegistry()
    messages, _, sink = progress_recorder()
    async with open_mcp_server(registry, "t", sdk_server_entry()):
        executor = ToolExecutor(registry, sinks=[sink])
        ok, error, unknown, invalid, optional, progress, dotted, big = await run(
            executor,
            ("mcp__t__echo", {"text": "hello"}),
            ("mcp__t__fail", {"message": "disk full"}),
            ("mcp__t__nope", {}),
            ("mcp__t__echo", {"text": 3}),
            ("mcp__t__greet", {}),
            ("mcp__t__progress", {"steps": 3}),
            ("mcp__t__notes_count", {"text": "four"}),  # the server calls it notes.count
            ("mcp__t__big", {"size": 3_000_000}),
        )
    assert (ok.is_error, ok.text) == (False, "hello")
    assert ok.details["mcp_server"] == "t"
    assert ok.details["structured_content"] == {"result": "hello"}
    assert ok.routing is RoutingClass.READ_ONLY
    assert error.error_class is ErrorClass.EXECUTION_ERROR
    assert "disk full" in error.text
    assert unknown.error_class is ErrorClass.NOT_FOUND
    assert "mcp__t__echo" in unknown.text
    assert invalid.error_class is ErrorClass.INVALID_ARGUMENTS
    assert "$.text" in invalid.text
    assert optional.text == "hello everyone"
    assert progress.text == "done"
    assert messages == {"c5": ["step 1 of 3 (1/3)", "step 2 of 3 (2/3)", "step 3 of 3 (3/3)"]}
    assert dotted.text == "4"
    assert big.text == "x" * 3_000_000


async def test_every_kind_of_content_block_reaches_the_model_in_order() -> None:
    from toolexec.mcp import open_mcp_server

    registry = ToolRegistry()
    async with open_mcp_server(registry, "t", sdk_server_entry()):
        media, structured, silent = await run(
            ToolExecutor(registry),
            ("mcp__t__media", {}),
            ("mcp__t__structured_only", {}),
            ("mcp__t__silent_error", {}),
        )
    assert not media.is_error
    image, audio, link, text, blob = media.content
    # images pass through; what the model cannot take is named, not dropped
    assert image == ImageContent("iVBORw0K", "image/png")
    assert audio == TextContent("[audio content (audio/wav) omitted]")
    assert link == TextContent("[resource file:///notes/a.md: a.md]")
    assert text == TextContent("note b")
    assert blob == TextContent(
        "[binary resource file:///notes/c.bin (application/octet-stream) omitted]"
    )
    # structured content alone becomes the content, and stays in the details
    assert structured.content == (JsonContent({"count": 2, "names": ["a", "b"]}),)
    assert structured.details["structured_content"] == {"count": 2, "names": ["a", "b"]}
    # an error without a message still tells the model which tool failed
    assert silent.is_error
    assert silent.error_class is ErrorClass.EXECUTION_ERROR
    assert silent.text == "MCP tool 'silent_error' reported an error without a message."


@attrs.frozen
class ShortDeadline:
    """A policy giving the `block` call with key "t1" a 0.5 s deadline."""

    def decide(self, definition: Any, arguments: Any, agent_path: str) -> Decision:
        if arguments.get("key") == "t1":
            return Allow(ExecutionGrant(timeout=0.5))
        return Allow()


async def test_timeouts_and_cancels_cancel_the_request_on_the_server() -> None:
    from toolexec.mcp import open_mcp_server

    registry = ToolRegistry()
    _, arrived, sink = progress_recorder()
    async with open_mcp_server(registry, "t", sdk_server_entry()):
        executor = ToolExecutor(registry, policy=ShortDeadline(), sinks=[sink])
        # `block` never answers, so the deadline always expires: no timing is asserted.
        [timed_out] = await run(executor, ("mcp__t__block", {"key": "t1"}))
        batch = executor.prepare([ToolCall("b", "mcp__t__block", {"key": "c1"})])
        outcomes = []
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:

                async def run_batch() -> None:
                    outcomes.append(await batch.run())

                nursery.start_soon(run_batch)
                await arrived["b"].wait()  # the server is inside the call
                batch.cancel()
        seen = await run(
            executor,
            ("mcp__t__was_cancelled", {"key": "t1"}),
            ("mcp__t__was_cancelled", {"key": "c1"}),
        )
    [cancelled] = outcomes[0].results
    assert timed_out.error_class is ErrorClass.TIMEOUT
    assert cancelled.error_class is ErrorClass.CANCELLED
    assert [r.text for r in seen] == ["cancelled", "cancelled"]


async def test_a_server_crash_mid_call_is_an_error_not_a_hang() -> None:
    from toolexec.mcp import open_mcp_server

    registry = ToolRegistry()
    async with open_mcp_server(registry, "t", sdk_server_entry()) as server:
        executor = ToolExecutor(registry)
        [crashed] = await run(executor, ("mcp__t__crash", {}))
        [after] = await run(executor, ("mcp__t__echo", {"text": "still there?"}))
        pid = server.pid
    assert crashed.error_class is ErrorClass.EXECUTION_ERROR
    assert "closed the connection during the call to 'crash'" in crashed.text
    assert "exited with code 3" in crashed.text
    assert after.error_class is ErrorClass.EXECUTION_ERROR
    # The later call never reached the server, and says so.
    assert after.text.startswith("MCP server 't' is not connected (the server process exited")
    assert after.text.endswith("the call was not sent.")
    assert pid is not None
    assert process_gone(pid)


async def test_a_crashed_server_hands_out_no_client_and_leaves_no_child() -> None:
    from toolexec.mcp import open_mcp_server

    registry = ToolRegistry()
    async with open_mcp_server(registry, "t", sdk_server_entry()) as server:
        executor = ToolExecutor(registry)
        [child] = await run(executor, ("mcp__t__spawn_child", {}))
        child_pid = int(child.text)
        assert server.connected
        assert server.client is not None
        await run(executor, ("mcp__t__crash", {}))
        assert not server.connected
        with pytest.raises(RuntimeError, match="'t' is not connected"):
            _ = server.client
        # The child is ended when the server dies, not when the block is left.
        with trio.fail_after(10):
            while not process_gone(child_pid):
                await trio.sleep(0.01)


@pytest.mark.parametrize(
    ("name", "says"),
    [
        (
            "my.server",
            "cannot be part of a tool name (mcp__<server>__<tool>): use letters, "
            "digits, '_' and '-', e.g. 'my_server'",
        ),
        ("a b", "e.g. 'a_b'"),
        ("", "cannot be part of a tool name"),
        ("n" * 50, "is 50 characters; at most 49"),
    ],
)
def test_a_server_name_that_cannot_name_tools_is_refused(name: str, says: str) -> None:
    from toolexec.mcp import MCPServerConfig, parse_mcp_servers

    with pytest.raises(ValueError, match=re.escape(says)):
        MCPServerConfig(name, command="server")
    with pytest.raises(ValueError, match=re.escape(says)):
        parse_mcp_servers({"mcpServers": {name: {"command": "server"}}})


async def test_no_process_is_left_after_exit_or_cancellation() -> None:
    from toolexec.mcp import open_mcp_server

    registry = ToolRegistry()
    pids: list[int] = []
    with trio.CancelScope() as scope:
        async with open_mcp_server(registry, "t", sdk_server_entry()) as server:
            [child] = await run(ToolExecutor(registry), ("mcp__t__spawn_child", {}))
            assert server.pid is not None
            pids += [server.pid, int(child.text)]
            assert not any(process_gone(p) for p in pids)
            scope.cancel()  # the enclosing scope is cancelled while connected
            await trio.lowlevel.checkpoint()
            pytest.fail("cancellation was not delivered")
    assert scope.cancelled_caught
    assert [p for p in pids if not process_gone(p)] == [], "the server or its child survived"
    assert len(registry) == 0


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_tool_list_changes_refresh_the_registry(mode: str) -> None:
    from toolexec.mcp import open_mcp_server

    # "auto" negotiates 2026-07-28 (a listen subscription); "legacy" gets notifications.
    registry = ToolRegistry()
    async with open_mcp_server(registry, "t", sdk_server_entry(), mode=mode) as server:
        executor = ToolExecutor(registry)
        revision = server.revision
        await run(executor, ("mcp__t__add_tool", {"name": "shout"}))
        with trio.fail_after(30):
            await server.wait_revision(revision)
        assert "mcp__t__shout" in registry
        [added] = await run(executor, ("mcp__t__shout", {"text": "hi"}))
        assert added.text == "extra: hi"
        revision = server.revision
        await run(executor, ("mcp__t__remove_tool", {"name": "shout"}))
        with trio.fail_after(30):
            await server.wait_revision(revision)
        assert "mcp__t__shout" not in registry


async def test_mixed_batch_keeps_the_read_write_read_order(tmp_path: Path) -> None:
    from toolexec.mcp import open_mcp_server

    note = tmp_path / "note.txt"
    note.write_text("v0")

    @function_tool(side_effects=SideEffects.READ)
    def native_read() -> str:
        """Read the note."""
        return note.read_text()

    @function_tool(side_effects=SideEffects.WRITE)
    def native_write(text: str) -> str:
        """Overwrite the note."""
        note.write_text(text)
        return "ok"

    registry = ToolRegistry()
    registry.register(native_read)
    registry.register(native_write)
    path = {"path": str(note)}
    async with open_mcp_server(registry, "t", sdk_server_entry()):
        executor = ToolExecutor(registry)
        batch = executor.prepare(
            [
                ToolCall("r1", "mcp__t__read_note", path),
                ToolCall("r2", "native_read", {}),
                ToolCall("w1", "native_write", {"text": "v1"}),
                ToolCall("r3", "mcp__t__read_note", path),
                ToolCall("w2", "mcp__t__write_note", {**path, "text": "v2"}),
                ToolCall("w3", "native_write", {"text": "v3"}),
                ToolCall("r4", "native_read", {}),
                ToolCall("r5", "mcp__t__read_note", path),
            ]
        )
        assert [run.routing for run in batch.plan.runs] == [
            RoutingClass.READ_ONLY,
            RoutingClass.SERIAL_MUT,
            RoutingClass.READ_ONLY,
            RoutingClass.SERIAL_MUT,
            RoutingClass.READ_ONLY,
        ]
        with trio.fail_after(60):
            outcome = await batch.run()
    texts = {r.call_id: r.text for r in outcome.results}
    assert not any(r.is_error for r in outcome.results)
    assert (texts["r1"], texts["r2"], texts["r3"], texts["r4"], texts["r5"]) == (
        "v0",
        "v0",
        "v1",
        "v3",
        "v3",
    )


# -- streamable HTTP ------------------------------------------------------------


async def test_streamable_http_server(http_server_url: str) -> None:
    from toolexec.mcp import open_mcp_servers

    registry = ToolRegistry()
    messages, _, sink = progress_recorder()
    config = {"mcpServers": {"web": {"url": http_server_url}}}
    async with open_mcp_servers(registry, config, timeout=0.5) as servers:
        assert servers["web"].pid is None
        executor = ToolExecutor(registry, sinks=[sink])
        ok, error, progress, timed_out = await run(
            executor,
            ("mcp__web__echo", {"text": "over http"}),
            ("mcp__web__fail", {"message": "nope"}),
            ("mcp__web__progress", {"steps": 2}),
            ("mcp__web__block", {"key": "h1"}),
        )
        [seen] = await run(executor, ("mcp__web__was_cancelled", {"key": "h1"}))
        [crashed] = await run(executor, ("mcp__web__crash", {}))
        [after] = await run(executor, ("mcp__web__echo", {"text": "x"}))
    assert ok.text == "over http"
    assert error.error_class is ErrorClass.EXECUTION_ERROR
    assert "nope" in error.text
    assert progress.text == "done"
    assert messages["c2"] == ["step 1 of 2 (1/2)", "step 2 of 2 (2/2)"]
    assert timed_out.error_class is ErrorClass.TIMEOUT
    assert seen.text == "cancelled"
    assert crashed.error_class is ErrorClass.EXECUTION_ERROR
    assert after.error_class is ErrorClass.EXECUTION_ERROR
    assert len(registry) == 0


# -- the reference filesystem server from npm -----------------------------------


async def test_reference_filesystem_server(filesystem_server: Path, tmp_path: Path) -> None:
    from toolexec.mcp import open_mcp_server

    root = tmp_path / "root"
    root.mkdir()
    (root / "a.txt").write_text("first")
    registry = ToolRegistry()
    entry = {"command": str(filesystem_server), "args": [str(root)]}
    async with open_mcp_server(registry, "fs", entry) as server:
        assert registry.definition("mcp__fs__read_text_file").side_effects is SideEffects.READ
        assert registry.definition("mcp__fs__write_file").side_effects is SideEffects.EXECUTE
        assert not server.skipped
        path = str(root / "a.txt")
        executor = ToolExecutor(registry)
        before, write, after, outside, invalid = await run(
            executor,
            ("mcp__fs__read_text_file", {"path": path}),
            ("mcp__fs__write_file", {"path": path, "content": "second"}),
            ("mcp__fs__read_text_file", {"path": path}),
            ("mcp__fs__read_text_file", {"path": "/etc/hostname"}),
            ("mcp__fs__write_file", {"path": path}),
        )
        pid = server.pid
    assert (before.text, after.text) == ("first", "second")
    assert not write.is_error
    assert outside.error_class is ErrorClass.EXECUTION_ERROR
    assert "outside allowed directories" in outside.text
    assert invalid.error_class is ErrorClass.INVALID_ARGUMENTS
    assert "content" in invalid.text
    assert pid is not None
    assert process_gone(pid)


# -- the documentation example ----------------------------------------------------


def _code_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOCS.read_text(), re.S)


@pytest.fixture
def npx_runs_the_filesystem_server(
    filesystem_server: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Put an ``npx`` first on PATH that runs the cached install; chdir to a new project."""
    # The examples start the filesystem server with `npx -y <package> .`; this
    # runs the cached install instead of downloading it.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    npx = bin_dir / "npx"
    npx.write_text(f'#!/bin/sh\nshift 2\nexec "{filesystem_server}" "$@"\n')
    npx.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    workdir = tmp_path / "project"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    return workdir


def _run_example(block: str) -> Any:
    namespace: dict[str, Any] = {}
    exec(compile(block, str(DOCS), "exec"), namespace)
    return namespace["main"]


async def test_docs_example_runs(
    npx_runs_the_filesystem_server: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from toolexec.mcp import parse_mcp_servers

    workdir = npx_runs_the_filesystem_server
    [example] = [block for block in _code_blocks("python") if "mcp__files__write_file" in block]
    with trio.fail_after(60):
        await _run_example(example)()
    out = capsys.readouterr().out
    assert "mcp__files__write_file False" in out
    assert "mcp__files__read_text_file False hello from toolexec" in out
    assert (workdir / "notes.txt").read_text() == "hello from toolexec"

    layouts = [parse_mcp_servers(json.loads(block)) for block in _code_blocks("json")]
    assert [[c.name for c in configs] for configs in layouts] == [["files", "search"]] * 2
    assert layouts[0] == layouts[1]  # the same servers, in either layout
    assert layouts[0][1].required is False


async def test_docs_failure_policy_example_prints_what_it_shows(
    npx_runs_the_filesystem_server: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    [example] = [block for block in _code_blocks("python") if "servers.skipped" in block]
    [shown] = _code_blocks("output")
    with trio.fail_after(60):
        await _run_example(example)()
    assert capsys.readouterr().out == shown


def test_docs_malformed_entries_message_is_what_parse_raises() -> None:
    from toolexec.mcp import parse_mcp_servers

    [shown] = [b for b in _code_blocks("text") if "malformed" in b]
    document = {
        "mcpServers": {
            "one": {"command": "x", "args": "-v"},
            "two": {"type": "ws", "url": "ws://x"},
        }
    }
    with pytest.raises(ValueError, match="malformed") as caught:
        parse_mcp_servers(document)
    assert str(caught.value) == shown.replace("\n  ", "\n").strip()
