"""The ``toolexec`` command, run for real in a subprocess against a copied workspace."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from mcp_servers.fixtures import filesystem_server, sdk_server_entry
from toolexec import formats

# Slow (tests/README.md): the command line, mostly in child processes.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).parent.parent
EXAMPLES = ROOT / "examples"
__all__ = ["filesystem_server"]  # a fixture used by name

RESPONSES = {
    "openai-chat": EXAMPLES / "openai_chat_response.json",
    "openai-responses": EXAMPLES / "openai_responses_response.json",
    "anthropic": EXAMPLES / "anthropic_response.json",
}


def toolexec(
    *args: str | Path, stdin: str = "", cwd: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toolexec", *map(str, args)],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,  # a hang guard: a run that starts MCP servers takes seconds, more loaded
        cwd=cwd,
    )


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    target = tmp_path / "workspace"
    # Leave out what a run of the examples wrote there (out/ is git-ignored).
    shutil.copytree(EXAMPLES / "workspace", target, ignore=shutil.ignore_patterns("out"))
    return target


def results_by_id(fmt: str, output: list[dict[str, Any]]) -> list[tuple[str, bool | None, str]]:
    """(call id, is_error or None where the format has no flag, text) per result."""
    if fmt == "openai-chat":
        return [(m["tool_call_id"], None, m["content"]) for m in output]
    if fmt == "openai-responses":
        return [(i["call_id"], None, i["output"]) for i in output]
    (message,) = output
    return [
        (b["tool_use_id"], b["is_error"], "".join(c["text"] for c in b.get("content", [])))
        for b in message["content"]
    ]


@pytest.mark.parametrize("fmt", list(RESPONSES))
def test_exec_runs_each_example_format(workspace: Path, fmt: str) -> None:
    response = RESPONSES[fmt]
    done = toolexec("exec", response, "--workspace", workspace, "--yes")
    assert done.returncode == 0, done.stderr

    output = json.loads(done.stdout)
    calls = formats.parse_calls(json.loads(response.read_text()))
    results = results_by_id(fmt, output)
    assert [r[0] for r in results] == [c.id for c in calls]
    assert all(is_error in (None, False) for _, is_error, _ in results)
    assert not any(text.startswith("Error:") for _, _, text in results)
    summary = (workspace / "out" / "summary.md").read_text()
    assert results[-1][2] == summary  # the last read sees the write before it
    assert "add a --shout flag" in results[1][2]
    assert f"{fmt}: 5 tool call(s)" in done.stderr
    assert "run 1 serial_mut:" in done.stderr
    assert "5 call(s): 5 ok, 0 error(s)" in done.stderr


def test_default_approval_asks_and_a_no_denies_the_write(workspace: Path) -> None:
    done = toolexec(
        "exec", RESPONSES["anthropic"], "--workspace", workspace, stdin="n\n"
    )  # reads run unasked; only the write prompts
    assert done.returncode == 0, done.stderr
    results = results_by_id("anthropic", json.loads(done.stdout))
    assert [r[1] for r in results] == [False, False, False, True, True]
    assert "The user denied this call of 'write_file'" in results[3][2]
    assert not (workspace / "out").exists()
    assert "approve root: write_file [write]" in done.stderr
    assert done.stderr.count("? [y/N]") == 1
    assert "user_denied" in done.stderr


def test_closed_stdin_means_no(workspace: Path) -> None:
    done = toolexec("exec", RESPONSES["openai-chat"], "--workspace", workspace)
    assert done.returncode == 0, done.stderr
    write = json.loads(done.stdout)[3]
    assert write["content"].startswith("Error: The user denied")
    assert not (workspace / "out").exists()


def test_a_yes_on_stdin_approves(workspace: Path) -> None:
    done = toolexec("exec", RESPONSES["openai-responses"], "-w", workspace, stdin="y\n")
    assert done.returncode == 0, done.stderr
    assert (workspace / "out" / "summary.md").exists()
    assert "approved call_gF1dS5aP9oI3uY7t write_file (by terminal)" in done.stderr


def test_trace_has_one_slice_per_call(workspace: Path, tmp_path: Path) -> None:
    trace_file = tmp_path / "trace.json"
    done = toolexec(
        "exec", RESPONSES["anthropic"], "-w", workspace, "--trace", trace_file, stdin="n\n"
    )
    assert done.returncode == 0, done.stderr
    trace = json.loads(trace_file.read_text())
    events = trace["traceEvents"]
    for event in events:
        assert event["ph"] in ("X", "M")
        assert isinstance(event["pid"], int)
        assert isinstance(event["tid"], int)
        if event["ph"] == "X":
            assert event["ts"] >= 0
            assert event["dur"] >= 0
            assert isinstance(event["name"], str)
    calls = [e for e in events if e["ph"] == "X" and e["cat"] == "call"]
    ids = [c.id for c in formats.parse_calls(json.loads(RESPONSES["anthropic"].read_text()))]
    assert sorted(e["args"]["call_id"] for e in calls) == sorted(ids)
    assert len({e["tid"] for e in calls}) == len(ids)  # one lane per call
    runs = [e for e in events if e["ph"] == "X" and e["cat"] == "run"]
    assert [r["name"] for r in sorted(runs, key=lambda r: r["ts"])] == [
        "run 0 read_only",
        "run 1 serial_mut",
        "run 2 read_only",
    ]
    write_lane = next(e["tid"] for e in calls if e["args"]["tool"] == "write_file")
    approval = [e for e in events if e.get("cat") == "approval" and e["tid"] == write_lane]
    assert len(approval) == 1
    assert approval[0]["args"]["approved"] is False
    executed = {e["tid"] for e in events if e.get("cat") == "execute"}
    assert write_lane not in executed
    assert len(executed) == 4
    for call in calls:  # every phase slice nests inside its call's slice
        for part in (e for e in events if e["ph"] == "X" and e["tid"] == call["tid"]):
            assert call["ts"] <= part["ts"]
            assert part["ts"] + part["dur"] <= call["ts"] + call["dur"] + 0.01


def test_policy_file_rules_and_approval_modes(workspace: Path, tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(
        'default = "allow"\n'
        "[[rules]]\n"
        'action = "deny"\n'
        'tool = "read_file"\n'
        'args = { path = { glob = "notes/**" } }\n'
        'reason = "notes are private"\n'
        "[approval]\n"
        'write = "auto"\n'
    )
    done = toolexec("exec", RESPONSES["openai-chat"], "-w", workspace, "--policy", policy)
    assert done.returncode == 0, done.stderr
    texts = [m["content"] for m in json.loads(done.stdout)]
    assert texts[1] == "Error: Permission denied for tool 'read_file': notes are private"
    assert texts[3].startswith("Created 'out/summary.md'")  # writes are auto in this policy
    assert "? [y/N]" not in done.stderr


def test_malformed_json_is_a_usage_error(tmp_path: Path, workspace: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"choices": [')
    done = toolexec("exec", bad, "--workspace", workspace)
    assert done.returncode == 2
    assert "is not valid JSON (line 1, column 14" in done.stderr
    assert done.stdout == ""


def test_malformed_response_names_the_field(tmp_path: Path, workspace: Path) -> None:
    data = json.loads(RESPONSES["openai-chat"].read_text())
    del data["choices"][0]["message"]["tool_calls"][2]["function"]["name"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    done = toolexec("exec", bad, "--workspace", workspace)
    assert done.returncode == 2
    assert "field choices[0].message.tool_calls[2].function.name: missing" in done.stderr
    unknown = tmp_path / "unknown.json"
    unknown.write_text('{"candidates": []}')
    done = toolexec("exec", unknown, "--workspace", workspace)
    assert done.returncode == 2
    assert "cannot tell the provider format" in done.stderr
    # One piece of advice, once: name the format with --format (or fix the file).
    assert done.stderr.count("--format") == 1, done.stderr
    assert "format explicitly" not in done.stderr
    assert "detection was wrong" not in done.stderr
    assert done.stderr.rstrip().endswith("fix the file, or name its format with --format")


def test_missing_workspace_and_missing_file(tmp_path: Path) -> None:
    done = toolexec("exec", RESPONSES["anthropic"], "--workspace", tmp_path / "nope")
    assert done.returncode == 2
    assert "is not an existing directory; create it or pass another with --workspace" in (
        done.stderr
    )
    done = toolexec("exec", tmp_path / "missing.json", "--workspace", tmp_path)
    assert done.returncode == 2
    assert "cannot read" in done.stderr
    done = toolexec("exec", RESPONSES["anthropic"])
    assert done.returncode == 2
    assert "--workspace" in done.stderr
    done = toolexec(
        "exec", RESPONSES["anthropic"], "-w", tmp_path, "--trace", tmp_path / "no" / "t.json"
    )
    assert done.returncode == 2
    assert "its directory does not exist" in done.stderr


@pytest.mark.parametrize("args", [("--help",), ("exec", "--help"), ("tools", "--help")])
def test_every_command_has_help(args: tuple[str, ...]) -> None:
    done = toolexec(*args)
    assert done.returncode == 0
    assert "usage: toolexec" in done.stdout


def test_tools_prints_provider_tool_schemas() -> None:
    done = toolexec("tools", "--format", "anthropic", "--no-shell")
    assert done.returncode == 0, done.stderr
    names = [t["name"] for t in json.loads(done.stdout)]
    assert names == ["read_file", "write_file", "edit_file", "list_dir", "search_files", "echo"]
    done = toolexec("tools", "--format", "gemini")
    assert done.returncode == 2
    assert "invalid choice" in done.stderr


def test_cli_doc_commands_run(workspace: Path, tmp_path: Path) -> None:
    page = (ROOT / "docs" / "cli.md").read_text()
    (tmp_path / "policy.toml").write_text(re.findall(r"```toml\n(.*?)```", page, re.DOTALL)[0])
    commands = [
        line
        for block in re.findall(r"```sh\n(.*?)```", page, re.DOTALL)
        for line in block.splitlines()
        if "toolexec exec" in line and "--mcp-config" not in line  # that one: below
    ]
    assert len(commands) == 4
    for line in commands:
        stdin, _, command = line.rpartition("| ")
        args = shlex.split(command)[2:]
        args = [str(workspace) if a == "examples/workspace" else a for a in args]
        args = [str(tmp_path / a) if a in ("policy.toml", "trace.json") else a for a in args]
        done = toolexec("exec", *args, stdin="n\n" if stdin else "")
        assert done.returncode == 0, (line, done.stderr)
        assert json.loads(done.stdout)
    assert json.loads((tmp_path / "trace.json").read_text())["traceEvents"]


# -- tools from a module and from MCP servers ----------------------------------------

MY_TOOLS = """
from toolexec import SideEffects, function_tool


@function_tool(side_effects=SideEffects.READ)
def shout(text: str) -> str:
    \"\"\"Say it louder.\"\"\"
    return text.upper() + "!"


TOOLS = [shout]
"""


def openai_chat_response(*calls: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    """An OpenAI Chat Completions response asking for these calls, ids c0, c1, ..."""
    tool_calls = [
        {"id": f"c{i}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
        for i, (n, a) in enumerate(calls)
    ]
    return {"choices": [{"message": {"role": "assistant", "tool_calls": tool_calls}}]}


def test_exec_with_mcp_servers_and_tools_from_a_module(tmp_path: Path) -> None:
    (tmp_path / "my_tools.py").write_text(MY_TOOLS)
    config = tmp_path / "mcp.json"  # VS Code's layout, with an optional server that fails
    config.write_text(
        json.dumps(
            {
                "servers": {
                    "notes": {"type": "stdio", **sdk_server_entry()},
                    "down": {"type": "stdio", "command": "/nonexistent", "required": False},
                }
            }
        )
    )
    response = tmp_path / "response.json"
    response.write_text(
        json.dumps(
            openai_chat_response(
                ("shout", {"text": "first"}),
                ("mcp__notes__echo", {"text": "second"}),
                ("mcp__notes__greet", {"name": "third"}),
                ("shout", {"text": "fourth"}),
            )
        )
    )
    args = ("exec", "response.json", "-w", ".", "--yes", "--mcp-config", "mcp.json")
    done = toolexec(*args, "--tools", "my_tools:TOOLS", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    output = json.loads(done.stdout)
    assert [(m["tool_call_id"], m["content"]) for m in output] == [
        ("c0", "FIRST!"),
        ("c1", "second"),
        ("c2", "hello third"),
        ("c3", "FOURTH!"),
    ]
    assert "toolexec: warning: skipped optional MCP server 'down'" in done.stderr
    assert "4 call(s): 4 ok, 0 error(s)" in done.stderr


def test_exec_tools_and_mcp_config_errors_are_usage_errors(tmp_path: Path) -> None:
    (tmp_path / "my_tools.py").write_text(MY_TOOLS)
    response = tmp_path / "response.json"
    response.write_text(json.dumps(openai_chat_response(("shout", {"text": "x"}))))
    base = ("exec", "response.json", "-w", ".", "--yes")
    cases = [
        (("--tools", "their_tools:TOOLS"), "no module named 'their_tools' in the current"),
        (("--tools", "my_tools:TOLS"), "module 'my_tools' has no attribute 'TOLS'; it has: TOOLS"),
        (("--tools", "my_tools:function_tool"), "is a plain function, not a tool"),
        (("--mcp-config", "response.json"), "has no server list (keys: 'choices')"),
    ]
    for extra, message in cases:
        done = toolexec(*base, *extra, cwd=tmp_path)
        assert done.returncode == 2, (extra, done.stderr)
        assert message in done.stderr
        assert done.stdout == ""


def test_cli_doc_tools_and_mcp_config_run(
    filesystem_server: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = (ROOT / "docs" / "cli.md").read_text()
    section = page[page.index("## Your own tools and MCP servers") : page.index("## Options")]
    [module] = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    config, response = re.findall(r"```json\n(.*?)```", section, re.DOTALL)
    [command] = [
        line for b in re.findall(r"```sh\n(.*?)```", section, re.DOTALL) for line in b.splitlines()
    ]
    warning, clash = re.findall(r"```text\n(.*?)```", section, re.DOTALL)
    project = tmp_path / "project"
    shutil.copytree(
        EXAMPLES / "workspace",
        project / "examples" / "workspace",
        ignore=shutil.ignore_patterns("out"),
    )
    (project / "my_tools.py").write_text(module)
    (project / "mcp.json").write_text(config)
    (project / "response.json").write_text(response)
    # `npx -y <package> DIR` runs the cached install of the package instead.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "npx").write_text(f'#!/bin/sh\nshift 2\nexec "{filesystem_server}" "$@"\n')
    (bin_dir / "npx").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")

    done = toolexec(*shlex.split(command)[1:], cwd=project)
    assert done.returncode == 0, done.stderr
    texts = [m["content"] for m in json.loads(done.stdout)]
    assert texts == ["3", (EXAMPLES / "workspace" / "notes" / "todo.txt").read_text()]
    assert warning in done.stderr

    (project / "my_tools.py").write_text(
        module.replace("def word_count", "def read_file").replace("[word_count]", "[read_file]")
    )
    done = toolexec(*shlex.split(command)[1:], cwd=project)
    assert done.returncode == 2
    assert done.stderr == clash


# -- the timeline, in process, on a mock clock ---------------------------------------


async def test_trace_phases_follow_the_executor_on_a_mock_clock(autojump_clock: object) -> None:
    from toolexec import SideEffects, ToolCall, ToolExecutor, ToolRegistry, function_tool
    from toolexec._core._trace import TraceRecorder
    from toolexec.approval import ApprovalAnswer, ApprovalRequest

    @function_tool(side_effects=SideEffects.READ)
    async def look(seconds: int) -> str:
        """Take a while to read."""
        await trio.sleep(seconds)
        return "seen"

    @function_tool(side_effects=SideEffects.WRITE)
    async def put(seconds: int) -> str:
        """Take a while to write."""
        await trio.sleep(seconds)
        return "put"

    class SlowHuman:
        async def request(self, request: ApprovalRequest) -> ApprovalAnswer:
            await trio.sleep(5)
            return ApprovalAnswer(request.arguments == '{"seconds":1}', "human")

    registry = ToolRegistry()
    registry.register(look)
    registry.register(put)
    recorder = TraceRecorder()
    executor = ToolExecutor(registry, sinks=[recorder], approver=SlowHuman())
    calls = [
        ToolCall("r1", "look", {"seconds": 1}),
        ToolCall("r2", "look", {"seconds": 2}),
        ToolCall("w1", "put", {"seconds": 1}),
        ToolCall("w2", "put", {"seconds": 3}),  # the human says no
        ToolCall("x", "nope", {}),
    ]
    await executor.execute_batch(calls)

    slices = [e for e in recorder.chrome_trace()["traceEvents"] if e["ph"] == "X"]
    by_lane: dict[str, list[tuple[str, float, float]]] = {}
    lanes = {e["tid"]: e["args"]["call_id"] for e in slices if e["cat"] == "call"}
    assert sorted(lanes.values()) == ["r1", "r2", "w1", "w2", "x"]
    for e in slices:
        if e["tid"] in lanes:
            by_lane.setdefault(lanes[e["tid"]], []).append(
                (e["name"], e["ts"] / 1e6, (e["ts"] + e["dur"]) / 1e6)
            )
    assert by_lane["r1"] == [("look r1", 0, 1), ("execute", 0, 1)]
    assert by_lane["r2"] == [("look r2", 0, 2), ("execute", 0, 2)]
    assert by_lane["w1"] == [("put w1", 2, 8), ("approval", 2, 7), ("execute", 7, 8)]
    # w2 waited its turn behind w1 in the serial run, then for the human.
    assert by_lane["w2"] == [("put w2", 2, 13), ("queued", 2, 8), ("approval", 8, 13)]
    assert by_lane["x"] == [("nope x", 0, 0)]
    runs = sorted((e["name"], e["ts"] / 1e6) for e in slices if e["cat"] == "run")
    assert runs == [("run 0 read_only", 0), ("run 1 serial_mut", 2)]


async def test_a_call_answered_at_plan_time_has_a_zero_length_slice() -> None:
    """On the real clock: the slice does not span the time other calls took to plan."""
    from toolexec import SideEffects, ToolCall, ToolExecutor, ToolRegistry, function_tool
    from toolexec._core._trace import TraceRecorder

    @function_tool(side_effects=SideEffects.READ)
    async def look(n: int) -> str:
        """Read."""
        await trio.lowlevel.checkpoint()
        return "seen"

    registry = ToolRegistry()
    registry.register(look)
    recorder = TraceRecorder()
    calls = [ToolCall(f"ok{i}", "look", {"n": i}) for i in range(50)]
    calls += [ToolCall("unknown", "nope", {}), ToolCall("bad", "look", {"n": "x"})]
    await ToolExecutor(registry, sinks=[recorder]).execute_batch(calls)

    slices = [e for e in recorder.chrome_trace()["traceEvents"] if e["ph"] == "X"]
    short = {e["args"]["call_id"]: e for e in slices if e["cat"] == "call"}
    assert short["unknown"]["dur"] == short["bad"]["dur"] == 0
    lanes = {short["unknown"]["tid"], short["bad"]["tid"]}
    assert [e["name"] for e in slices if e["tid"] in lanes and e["cat"] != "call"] == []
    # The calls that ran have phases; a wait before one started is "queued / permit".
    ran = {e["name"] for e in slices if e["tid"] not in lanes | {0} and e["cat"] != "call"}
    assert "execute" in ran
    assert ran <= {"execute", "queued / permit"}


def test_an_unexpected_failure_exits_1_and_asks_for_a_report(
    workspace: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from toolexec._cli import _commands
    from toolexec._cli import _main as _cli

    async def broken(*_args: object) -> list[dict[str, Any]]:
        raise RuntimeError("boom")

    monkeypatch.setattr(_commands, "_exec", broken)
    with pytest.raises(SystemExit) as info:
        _cli.main(["exec", str(RESPONSES["anthropic"]), "--workspace", str(workspace)])
    assert info.value.code == 1
    err = capsys.readouterr().err
    assert "RuntimeError: boom" in err
    assert "this is a bug in toolexec; please report it" in err


HOSTILE_TEXT = [
    "\x1b]0;owned\x07",  # OSC: retitle the terminal
    "\x1b[2K\x1b[1A",  # CSI: clear the line, move up
    "\x9b31m",  # C1 CSI
    "a\nrun 9 read_only: forged",
    "\u202eevil",  # bidi override
    "x\u2028y",  # line separator
]


@pytest.mark.parametrize("hostile", HOSTILE_TEXT)
def test_nothing_the_model_supplies_reaches_the_terminal_raw(
    workspace: Path, tmp_path: Path, hostile: str
) -> None:
    response = {
        "choices": [
            {
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": f"call{hostile}1",
                            "type": "function",
                            "function": {"name": "echo", "arguments": '{"text": "hi"}'},
                        },
                        {
                            "id": f"call{hostile}2",
                            "type": "function",
                            "function": {"name": f"tool{hostile}", "arguments": "{}"},
                        },
                        {
                            "id": "call3",
                            "type": "function",
                            "function": {
                                "name": "echo",
                                "arguments": json.dumps({"text": f"say {hostile}"}),
                            },
                        },
                    ],
                }
            }
        ]
    }
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(response))
    done = toolexec("exec", path, "--workspace", workspace, "--yes", "--format", "openai-chat")
    assert done.returncode == 0, done.stderr
    for stream in (done.stderr, done.stdout):
        for line in stream.split("\n"):
            assert line.isprintable(), repr(line)
    assert not any(line.startswith("run 9") for line in done.stderr.split("\n"))
    # stdout is still the same JSON, with every call id and text intact.
    output = json.loads(done.stdout)
    assert [m["tool_call_id"] for m in output] == [f"call{hostile}1", f"call{hostile}2", "call3"]
    assert output[2]["content"] == f"say {hostile}"
