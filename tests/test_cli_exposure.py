"""What each command and server offers: the library's rule, and said at start.

``register_builtin_tools`` leaves the shell out unless asked (``shell=True``);
``toolexec exec``, ``toolexec tools``, ``toolexec serve --stdio`` and
``toolexec serve --http --workspace`` follow it (``--shell``). Each server
says on stderr, before it serves, which tools, under which policy, and that
nobody approves its calls. Every command here runs in a child process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import pytest
import trio

from toolexec import (
    Allow,
    SideEffects,
    ToolCall,
    ToolContext,
    ToolDefinition,
    ToolExecutor,
    ToolOutput,
    ToolRegistry,
)
from toolexec._proc._process import open_group_process, reap
from toolexec.backends import RemoteBackend
from toolexec.policy import ExecutionGrant

if TYPE_CHECKING:
    from collections.abc import Mapping

# Slow (tests/README.md): every command in a child process.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
RUNNER = str(ROOT / "examples" / "ipc_runner.py")
TOKEN = "test-token-0123456789abcdef"
#: A hang guard for real processes, never a timing claim.
GUARD = 60
BUILTINS = "echo, edit_file, list_dir, read_file, search_files, write_file"


def toolexec(*args: str, stdin: str = "", env: Mapping[str, str] | None = None) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "toolexec", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=GUARD,
        cwd=ROOT,
        env=env,
        check=False,
    )


def shell_response(tmp_path: Path) -> str:
    """An OpenAI chat response calling ``shell`` and ``echo``."""
    calls = [("c1", "shell", {"command": "echo ran"}), ("c2", "echo", {"text": "hi"})]
    response = {
        "choices": [
            {
                "message": {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": cid,
                            "type": "function",
                            "function": {"name": name, "arguments": json.dumps(args)},
                        }
                        for cid, name, args in calls
                    ],
                }
            }
        ]
    }
    path = tmp_path / "response.json"
    path.write_text(json.dumps(response))
    return str(path)


# -- toolexec tools and toolexec exec -----------------------------------------------


@pytest.mark.parametrize(
    ("flags", "has_shell"), [((), False), (("--no-shell",), False), (("--shell",), True)]
)
def test_tools_prints_the_shell_only_when_asked(flags: tuple[str, ...], has_shell: bool) -> None:
    done = toolexec("tools", *flags)
    assert done.returncode == 0, done.stderr
    names = {tool["function"]["name"] for tool in json.loads(done.stdout)}
    assert ("shell" in names) is has_shell
    assert "read_file" in names


def test_exec_offers_the_shell_only_when_asked(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    response = shell_response(tmp_path)
    done = toolexec("exec", response, "--workspace", str(tmp_path / "ws"), "--yes")
    assert done.returncode == 0, done.stderr
    shell, echo = json.loads(done.stdout)
    assert "Tool 'shell' not found. Available: read_file, " in shell["content"]
    assert echo["content"] == "hi"
    done = toolexec("exec", response, "--workspace", str(tmp_path / "ws"), "--yes", "--shell")
    assert done.returncode == 0, done.stderr
    shell, echo = json.loads(done.stdout)
    assert "ran" in shell["content"]


def test_shell_and_no_shell_are_exclusive() -> None:
    done = toolexec("tools", "--shell", "--no-shell")
    assert done.returncode == 2
    assert "not allowed with argument" in done.stderr


def test_the_readme_example_needs_no_shell(tmp_path: Path) -> None:
    response = ROOT / "examples" / "openai_chat_response.json"
    names = {
        call["function"]["name"]
        for call in json.loads(response.read_text())["choices"][0]["message"]["tool_calls"]
    }
    assert "shell" not in names


# -- toolexec serve --stdio ---------------------------------------------------------


@pytest.mark.parametrize("shell", [False, True])
def test_serve_stdio_serves_the_shell_only_when_asked_and_says_what_it_serves(
    tmp_path: Path, shell: bool
) -> None:
    (tmp_path / "notes").mkdir()
    out = tmp_path / "answers.jsonl"
    steps = [["shell", {"command": "echo ran"}], ["echo", {"text": "hi"}]]
    done = subprocess.run(
        [sys.executable, "-m", "toolexec", "serve", "--stdio", "-w", str(tmp_path),
         *(["--shell"] if shell else []), "--grant", "notes:rw",
         "--", sys.executable, RUNNER, json.dumps(steps), "--out", str(out)],
        capture_output=True, text=True, timeout=GUARD, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    first, second = (json.loads(line) for line in out.read_text().splitlines())
    assert second["ok"] is True
    head = done.stderr.splitlines()[:3]
    served = "echo, edit_file, list_dir, read_file, search_files, shell, write_file"
    if shell:
        assert first["ok"] is True, first
        assert "ran" in first["text"]
        assert head[0] == f"toolexec serve --stdio: serving 7 tool(s) to runner 'runner': {served}"
    else:
        assert first["error"] == "tool_not_found", first
        assert head[0] == (
            f"toolexec serve --stdio: serving 6 tool(s) to runner 'runner': {BUILTINS}; "
            "not the shell (--shell serves it)"
        )
    assert head[1].startswith(
        "toolexec serve --stdio: policy: the runner may call tools matching * (--allow) "
        "and use workspace paths: notes (rw); workspace "
    )
    assert head[2] == (
        "toolexec serve --stdio: approval: none: nobody is asked; every call the grants allow runs"
    )


# -- toolexec serve --http ----------------------------------------------------------


@attrs.frozen
class OnTheWorker:
    """A host-side stand-in for a tool only the worker runs."""

    name: str

    @property
    def definition(self) -> ToolDefinition:
        return ToolDefinition(
            self.name,
            "runs on the worker",
            input_schema={"type": "object", "properties": {"command": {"type": "string"}}},
            side_effects=SideEffects.READ,
        )

    async def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        raise AssertionError("runs on the worker only")


class ToRemote:
    def decide(
        self, definition: ToolDefinition, arguments: Mapping[str, Any], agent_path: str
    ) -> Allow:
        return Allow(ExecutionGrant(sandbox="remote"))


async def _serve_and_call(tmp_path: Path, *flags: str) -> tuple[str, list[str]]:
    """Start ``toolexec serve --http --workspace``, call its shell; the result and stderr."""
    log = tmp_path / "worker.log"
    env = {**os.environ, "TOOLEXEC_WORKER_TOKEN": TOKEN}
    argv = [sys.executable, "-m", "toolexec", "serve", "--http", "127.0.0.1:0"]
    with log.open("wb") as log_file:
        process = await open_group_process(
            [*argv, "--workspace", str(tmp_path), *flags],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log_file.fileno(),
            env=env,
        )
    try:
        assert process.stdout is not None
        line = b""
        with trio.fail_after(GUARD):
            while not line.endswith(b"\n"):
                chunk = await process.stdout.receive_some(1)
                assert chunk, log.read_text()
                line += chunk
        url = line.decode().split()[-1]
        registry = ToolRegistry()
        registry.register(partial(OnTheWorker, "shell"))
        async with RemoteBackend(url, token=TOKEN) as remote:
            executor = ToolExecutor(registry, policy=ToRemote(), backends={"remote": remote})
            with trio.fail_after(GUARD):
                outcome = await executor.execute_batch(
                    [ToolCall("c1", "shell", {"command": "echo ran"})]
                )
    finally:
        await reap(process, 5)
    return outcome.results[0].text, log.read_text().splitlines()


async def test_serve_http_serves_the_shell_only_when_asked(tmp_path: Path) -> None:
    text, log = await _serve_and_call(tmp_path)
    assert text.startswith("Tool 'shell' not found. Available: read_file, "), text
    assert log[0] == (
        f"toolexec worker: serving 6 tool(s): {BUILTINS}; built-in tools on {tmp_path.resolve()}, "
        "not the shell (--shell serves it)"
    )
    assert log[1] == (
        "toolexec worker: policy: none: every call of these tools is allowed "
        "(--policy FILE restricts them)"
    )
    assert log[2].startswith("toolexec worker: approval: none: the worker never asks")
    # serve_worker's own log line says it too, for workers started from Python
    [listening] = [line for line in log if "worker listening on" in line]
    assert listening.endswith("; policy: AllowAll; approval: none (the worker never asks)")
    text, log = await _serve_and_call(tmp_path, "--shell")
    assert "ran" in text
    assert log[0].endswith("the shell among them")


async def test_serve_http_says_which_policy(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('default = "deny"\n[[rules]]\naction = "allow"\ntool = "echo"\n')
    text, log = await _serve_and_call(tmp_path, "--policy", str(policy))
    assert text.startswith("Tool 'shell' not found"), text
    assert log[1] == f"toolexec worker: policy: the 1 rule(s) of {policy}, default deny"
