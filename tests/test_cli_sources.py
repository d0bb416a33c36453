"""Where ``toolexec exec`` finds tools beside the built-ins: ``--tools`` and ``--mcp-config``.

In process, so coverage measures the loading; ``test_cli.py`` runs the same
options in a child process, as a user does.
"""

from __future__ import annotations

import json
import re
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from mcp_servers.fixtures import sdk_server_entry
from toolexec._cli import _main as _cli
from toolexec._cli._sources import ToolSources, UsageError, load_mcp_config, load_tools

if TYPE_CHECKING:
    from collections.abc import Callable

USER_TOOLS = '''
from toolexec import SideEffects, TextContent, ToolDefinition, ToolOutput, ToolRegistry
from toolexec import function_tool


@function_tool(side_effects=SideEffects.READ)
def shout(text: str) -> str:
    """Say it louder."""
    return text.upper() + "!"


@function_tool(side_effects=SideEffects.READ)
def whisper(text: str) -> str:
    """Say it softer."""
    return text.lower()


@function_tool(name="read_file", side_effects=SideEffects.READ)
def my_read_file(path: str) -> str:
    """A second read_file."""
    return path


class Count:
    """A Tool class: the class is its own factory."""

    definition = ToolDefinition("count", "Count characters.", side_effects=SideEffects.NONE)

    async def execute(self, arguments, ctx):
        return ToolOutput((TextContent("0"),))


def plain(text: str) -> str:
    return text


TOOLS = [shout, whisper]
REGISTRY = ToolRegistry()
REGISTRY.register(shout)
REGISTRY.register(Count)
INSTANCE = Count()
NUMBER = 3
MIXED = (shout, 3)
CLASH = [my_read_file]
'''

ROOT = Path(__file__).parent.parent
RESPONSE = {
    "choices": [
        {
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"c{i}",
                        "type": "function",
                        "function": {"name": name, "arguments": json.dumps(args)},
                    }
                    for i, (name, args) in enumerate(
                        [
                            ("mcp__notes__echo", {"text": "from mcp"}),
                            ("shout", {"text": "from a module"}),
                            ("echo", {"text": "built in"}),
                        ]
                    )
                ],
            }
        }
    ]
}


@pytest.fixture
def user_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Callable[[str], str]:
    """Write a module into the (new) current directory; return its name."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))

    def write(source: str) -> str:
        name = f"user_tools_{uuid.uuid4().hex[:8]}"
        (tmp_path / f"{name}.py").write_text(source)
        request.addfinalizer(lambda: sys.modules.pop(name, None))
        return name

    return write


def names(factories: list[Any]) -> list[str]:
    return [f().definition.name for f in factories]


def test_a_list_a_registry_a_tool_a_class_and_an_instance_load(
    user_module: Callable[[str], str], tmp_path: Path
) -> None:
    module = user_module(USER_TOOLS)
    assert names(load_tools(f"{module}:TOOLS")) == ["shout", "whisper"]
    assert sys.path[0] == str(tmp_path)  # the current directory, as `python -m` has it
    assert names(load_tools(f"{module}:REGISTRY")) == ["shout", "count"]
    assert names(load_tools(f"{module}:shout")) == ["shout"]
    assert names(load_tools(f"{module}:Count")) == ["count"]
    assert names(load_tools(f"{module}:INSTANCE")) == ["count"]
    assert names(load_tools(f"{module}:REGISTRY.definitions.__self__")) == ["shout", "count"]


@pytest.mark.parametrize(
    ("attribute", "message"),
    [
        (
            "NOPE",
            "has no attribute 'NOPE'; it has: CLASH, Count, INSTANCE, REGISTRY, TOOLS, "
            "my_read_file, shout, whisper",
        ),
        ("NUMBER", "expected a ToolRegistry, a list or tuple of tools, or a tool"),
        ("plain", "plain is a plain function, not a tool; decorate it with @function_tool"),
        ("MIXED", ":MIXED[1]: expected a ToolRegistry"),
    ],
)
def test_a_missing_attribute_or_a_wrong_type_is_named(
    user_module: Callable[[str], str], attribute: str, message: str
) -> None:
    module = user_module(USER_TOOLS)
    with pytest.raises(UsageError, match=re.escape(message)):
        load_tools(f"{module}:{attribute}")


def test_a_spec_or_a_module_that_does_not_load_is_named(
    user_module: Callable[[str], str], tmp_path: Path
) -> None:
    with pytest.raises(
        UsageError, match=r"expected MODULE:ATTRIBUTE, e\.g\. --tools mytools:TOOLS"
    ):
        load_tools("mytools")
    with pytest.raises(UsageError, match="no module named 'no_such_tools' in the current dir"):
        load_tools("no_such_tools:TOOLS")
    broken = user_module("import no_such_dependency\n")
    with pytest.raises(UsageError, match=r"importing .* failed: No module named 'no_such_dep"):
        load_tools(f"{broken}:TOOLS")
    raising = user_module("\n\nraise RuntimeError('no API key')\n")
    with pytest.raises(UsageError) as caught:
        load_tools(f"{raising}:TOOLS")
    assert "raised RuntimeError: no API key" in str(caught.value)
    assert f"{tmp_path / raising}.py, line 3" in str(caught.value)


def test_a_clash_names_both_sources(user_module: Callable[[str], str]) -> None:
    module = user_module(USER_TOOLS)
    sources = ToolSources()
    sources.add(load_tools(f"{module}:shout")[0], "--tools a:shout")
    with pytest.raises(UsageError) as caught:
        sources.add(load_tools(f"{module}:TOOLS")[0], "--tools b:TOOLS")
    assert str(caught.value) == (
        "tool 'shout' from --tools b:TOOLS clashes with tool 'shout' from --tools a:shout; "
        "rename one of them"
    )

    def broken() -> Any:
        raise RuntimeError("cannot build")

    with pytest.raises(UsageError, match=r"--tools c:broken: tool factory .* raised RuntimeError"):
        sources.add(broken, "--tools c:broken")


def run_main(*args: str) -> tuple[int, str, str]:
    """Run the command in process; return (exit code, stdout, stderr) via capsys."""
    try:
        code = _cli.main(list(args))
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    return code, "", ""


def write_config(path: Path, document: dict[str, Any]) -> Path:
    path.write_text(json.dumps(document))
    return path


def test_exec_runs_mcp_and_module_tools_in_order(
    user_module: Callable[[str], str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module = user_module(USER_TOOLS)
    response = tmp_path / "response.json"
    response.write_text(json.dumps(RESPONSE))
    config = write_config(
        tmp_path / "mcp.json",
        {
            "mcpServers": {
                "notes": sdk_server_entry(),
                "down": {"command": "/nonexistent/mcp-server", "required": False},
            }
        },
    )
    argv = [str(response), "-w", str(tmp_path), "--yes", "--mcp-config", str(config)]
    code, _, _ = run_main("exec", *argv, "--tools", f"{module}:TOOLS")
    out, err = capsys.readouterr()
    assert code == 0, err
    texts = [m["content"] for m in json.loads(out)]
    assert texts == ["from mcp", "FROM A MODULE!", "built in"]
    assert "toolexec: warning: skipped optional MCP server 'down'" in err
    assert "3 call(s): 3 ok, 0 error(s)" in err


def test_exec_usage_errors_from_tools_and_mcp_config(
    user_module: Callable[[str], str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    module = user_module(USER_TOOLS)
    response = tmp_path / "response.json"
    response.write_text(json.dumps(RESPONSE))
    base = ["exec", str(response), "-w", str(tmp_path), "--yes"]

    def fails(*extra: str) -> str:
        code, _, _ = run_main(*base, *extra)
        out, err = capsys.readouterr()
        assert (code, out) == (2, ""), err
        return err

    assert (
        f"tool 'read_file' from --tools {module}:CLASH clashes with tool 'read_file' "
        "from the built-in tools"
    ) in fails("--tools", f"{module}:CLASH")
    gone = write_config(tmp_path / "gone.json", {"servers": {"gone": {"command": "/nonexistent"}}})
    err = fails("--mcp-config", str(gone))
    assert f"MCP config {gone}: could not connect to MCP server 'gone'" in err
    assert 'mark it optional with "required": false' in err
    both = write_config(tmp_path / "both.json", {"servers": {}, "mcpServers": {}})
    assert "has both 'mcpServers' and 'servers'" in fails("--mcp-config", str(both))
    (tmp_path / "bad.json").write_text("{")
    assert "is not JSON" in fails("--mcp-config", str(tmp_path / "bad.json"))
    assert "cannot read MCP config" in fails("--mcp-config", str(tmp_path / "missing.json"))
    # an MCP tool whose name a --tools tool already took
    taken = user_module(
        "from toolexec import SideEffects, function_tool\n"
        "@function_tool(name='mcp__notes__echo', side_effects=SideEffects.READ)\n"
        "def echo(text: str) -> str:\n"
        "    '''Mine.'''\n"
        "    return text\n"
    )
    notes = write_config(tmp_path / "notes.json", {"mcpServers": {"notes": sdk_server_entry()}})
    err = fails("--tools", f"{taken}:echo", "--mcp-config", str(notes))
    assert (
        f"tool 'mcp__notes__echo' from MCP server 'notes' ({notes}) clashes with tool "
        f"'mcp__notes__echo' from --tools {taken}:echo"
    ) in err
    monkeypatch.setitem(sys.modules, "toolexec.mcp", None)
    with pytest.raises(UsageError, match=r"pip install 'toolexec\[mcp\]'"):
        load_mcp_config(str(notes))
