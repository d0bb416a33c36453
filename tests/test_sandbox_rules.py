"""Policy files that route calls to a sandbox: a rule's ``sandbox`` and ``limits``."""

from __future__ import annotations

import re
import socket
import sys
from typing import TYPE_CHECKING

import pytest

from toolexec import ErrorClass, ToolCall, ToolDefinition, ToolExecutor, ToolRegistry
from toolexec._tools._shell import ShellTool
from toolexec._tools._workspace import Workspace
from toolexec.backends import SubprocessBackend
from toolexec.policy import Allow, Ask, Deny, ExecutionGrant, Rule, RulePolicy

if TYPE_CHECKING:
    from pathlib import Path

SHELL = ToolDefinition("shell", "runs commands")

POLICY_TOML = """
default = "deny"

[[rules]]
action = "allow"
tool = "shell"
args = { command = { command_prefix = "echo" } }
sandbox = "subprocess"
limits = { network = false, memory_bytes = 1073741824, workspace = "rw" }

[[rules]]
action = "ask"
tool = "shell"
sandbox = "subprocess"
"""


def test_a_rule_names_the_sandbox_and_its_limits(tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(POLICY_TOML)
    policy = RulePolicy.from_file(path)
    allowed = policy.decide(SHELL, {"command": "echo hi"}, "root")
    assert allowed == Allow(
        ExecutionGrant(
            sandbox="subprocess",
            limits={"network": False, "memory_bytes": 1 << 30, "workspace": "rw"},
        )
    )
    asked = policy.decide(SHELL, {"command": "rm -rf x"}, "root")
    assert asked == Ask("", ExecutionGrant(sandbox="subprocess"))
    assert isinstance(policy.decide(ToolDefinition("other", "x"), {}, "root"), Deny)
    # Without either, a rule allows on the host as before.
    assert RulePolicy([Rule("allow", "shell")]).decide(SHELL, {}, "root") == Allow()


def test_any_sandbox_name_is_accepted() -> None:
    for name in ("remote", "ray", "my-box"):
        policy = RulePolicy.from_dict({"rules": [{"action": "allow", "sandbox": name}]})
        decision = policy.decide(SHELL, {}, "root")
        assert isinstance(decision, Allow)
        assert decision.grant.sandbox == name


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ({"action": "deny", "sandbox": "subprocess"}, "rules[0]: a 'deny' rule runs nothing"),
        ({"action": "deny", "limits": {"network": True}}, "a 'deny' rule runs nothing"),
        ({"action": "allow", "sandbox": ""}, "rules[0]: sandbox: the name of a backend"),
        ({"action": "allow", "sandbox": 3}, "sandbox: the name of a backend"),
        ({"action": "allow", "limits": ["network"]}, "rules[0]: limits: an object mapping"),
        ({"action": "allow", "where": "subprocess"}, "unknown keys ['where']"),
    ],
)
def test_bad_sandbox_rules_are_reported_with_where(rule: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        RulePolicy.from_dict({"rules": [rule]})


async def test_an_unknown_sandbox_is_reported_when_the_call_is_planned(tmp_path: Path) -> None:
    registry = ToolRegistry()
    registry.register(ShellTool(Workspace(tmp_path)))
    policy = RulePolicy.from_dict({"rules": [{"action": "allow", "sandbox": "remote"}]})
    executor = ToolExecutor(registry, policy=policy)
    outcome = await executor.execute_batch([ToolCall("1", "shell", {"command": "true"})])
    assert outcome.results[0].error_class is ErrorClass.EXECUTION_ERROR
    assert "sandbox 'remote'" in outcome.results[0].text


@pytest.mark.skipif(sys.platform != "linux", reason="namespaces are Linux's")
async def test_a_policy_file_routes_the_shell_to_the_sandbox_without_network(
    tmp_path: Path,
) -> None:
    backend = SubprocessBackend(levels=("bwrap", "unshare"))
    found = await backend.detect()
    if found.level is None:
        pytest.skip(f"this machine has no namespace sandbox: {found.why_not()}")
    path = tmp_path / "policy.toml"
    path.write_text(
        '[[rules]]\naction = "allow"\ntool = "shell"\nsandbox = "subprocess"\n'
        "limits = { network = false, memory_bytes = 1073741824 }\n"
    )
    registry = ToolRegistry()
    registry.register(ShellTool(Workspace(tmp_path)))
    executor = ToolExecutor(
        registry, policy=RulePolicy.from_file(path), backends={"subprocess": backend}
    )
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        command = f"echo start; exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected"
        outcome = await executor.execute_batch([ToolCall("1", "shell", {"command": command})])
    result = outcome.results[0]
    assert result.is_error
    assert "start" in result.text
    assert "connected" not in result.text
    assert result.details["sandbox"]["isolation"] == found.level
    assert result.details["sandbox"]["network"] is False
    assert result.details["sandbox"]["limits"] == {"memory_bytes": 1 << 30}
