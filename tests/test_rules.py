"""Built-in policies: rules by tool and arguments, capabilities, composition."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from conftest import Scripted, write
from toolexec import (
    ErrorClass,
    ToolCall,
    ToolDefinition,
    ToolExecutor,
    ToolRegistry,
    Workspace,
    register_builtin_tools,
)
from toolexec.events import CallbackSink, CallFailed, Event
from toolexec.policy import (
    Capabilities,
    CapabilityPolicy,
    CommandPrefix,
    ComposedPolicy,
    PathGlob,
    PathGrant,
    Rule,
    RulePolicy,
)

if TYPE_CHECKING:
    from pathlib import Path


def failures(events: list[Event]) -> list[tuple[str, ErrorClass]]:
    return [(e.call_id, e.error_class) for e in events if isinstance(e, CallFailed)]


async def test_denied_by_rule_policy_with_reason_and_event(
    registry: ToolRegistry, seen: list[dict[str, Any]]
) -> None:
    events: list[Event] = []
    policy = RulePolicy(
        [Rule("deny", "write_file", {"path": PathGlob(".git/**")}, "never touch .git")]
    )
    executor = ToolExecutor(registry, policy=policy, sinks=[CallbackSink(events.append)])
    outcome = await executor.execute_batch([write("w1", ".git/config"), write("w2")])
    assert outcome.results[0].error_class is ErrorClass.PERMISSION_DENIED
    assert outcome.results[0].text == ("Permission denied for tool 'write_file': never touch .git")
    assert not outcome.results[1].is_error
    assert seen == [{"path": "notes/a.md", "text": "x"}]
    assert failures(events) == [("w1", ErrorClass.PERMISSION_DENIED)]


def test_rule_policy_first_match_wins_and_file_errors_name_the_field(tmp_path: Path) -> None:
    policy = RulePolicy.from_dict(
        {
            "default": "deny",
            "rules": [
                {
                    "action": "allow",
                    "tool": "shell",
                    "args": {"command": {"command_prefix": "git status"}},
                },
                {"action": "ask", "tool": "shell"},
            ],
        }
    )
    shell = ToolDefinition(name="shell", description="d")
    other = ToolDefinition(name="other", description="d")
    assert type(policy.decide(shell, {"command": "git status -s"}, "root")).__name__ == "Allow"
    assert type(policy.decide(shell, {"command": "git status; rm -rf /"}, "root")).__name__ == "Ask"
    assert type(policy.decide(other, {}, "root")).__name__ == "Deny"
    bad = tmp_path / "policy.json"
    bad.write_text(json.dumps({"rules": [{"action": "allow", "args": {"p": {"fuzzy": 1}}}]}))
    with pytest.raises(ValueError, match=r"rules\[0\]\.args\.p"):
        RulePolicy.from_file(bad)
    with pytest.raises(ValueError, match="rule action must be one of"):
        RulePolicy.from_dict({"rules": [{"action": "maybe"}]})
    with pytest.raises(ValueError, match=r"unknown keys \['Rules', 'defualt'\]"):
        RulePolicy.from_dict({"defualt": "deny", "Rules": [{"action": "deny"}]})
    with pytest.raises(ValueError, match=r"rules\[0\]\.args: an object"):
        RulePolicy.from_dict({"rules": [{"action": "deny", "args": ["path"]}]})
    with pytest.raises(ValueError, match=r"rules\[0\]: tool pattern 'write_\[f\]ile'"):
        RulePolicy.from_dict({"rules": [{"action": "deny", "tool": "write_[f]ile"}]})


async def test_path_argument_outside_its_grant_is_refused(
    registry: ToolRegistry, seen: list[dict[str, Any]]
) -> None:
    policy = CapabilityPolicy(
        {
            "root": Capabilities(paths=[PathGrant(".", "r"), PathGrant("notes", "rw")]),
            "root/helper": Capabilities(tools=["read_file"], paths=[PathGrant("notes", "r")]),
        }
    )
    root = ToolExecutor(registry, policy=policy)
    outcome = await root.execute_batch(
        [
            write("ok", "notes/x.md"),
            write("w", "src/main.py"),
            write("esc", "notes/../../etc/x"),
            ToolCall("r", "read_file", {"path": "src/main.py"}),
        ]
    )
    assert [r.error_class for r in outcome.results] == [
        None,
        ErrorClass.PERMISSION_DENIED,
        ErrorClass.PERMISSION_DENIED,
        None,
    ]
    assert "may not write 'src/main.py' (it may write: notes)" in outcome.results[1].text
    assert "uses '..', which this policy cannot check without the workspace" in (
        outcome.results[2].text
    )
    child = root.fork_for_subagent("helper")
    outcome = await child.execute_batch(
        [write("cw", "notes/x.md"), ToolCall("cr", "read_file", {"path": "src/a.py"})]
    )
    assert "is not granted tool 'write_file'" in outcome.results[0].text
    assert "may not read 'src/a.py' (it may read: notes)" in outcome.results[1].text
    grandchild = child.fork_for_subagent("deeper")  # inherits its parent's grants
    outcome = await grandchild.execute_batch([write("g", "notes/x.md")])
    assert outcome.results[0].error_class is ErrorClass.PERMISSION_DENIED


async def test_composed_policy_deny_wins(registry: ToolRegistry) -> None:
    allow_all_rules = RulePolicy([Rule("allow", "*")])
    ask_writes = RulePolicy([Rule("ask", "write_file")])
    caps = CapabilityPolicy({"root": Capabilities(paths=[PathGrant("notes", "rw")])})
    executor = ToolExecutor(
        registry,
        policy=ComposedPolicy([allow_all_rules, ask_writes, caps]),
        approver=Scripted(True),
    )
    outcome = await executor.execute_batch([write("in", "notes/a"), write("out", "src/a")])
    assert outcome.results[0].error_class is None  # asked and approved
    assert outcome.results[1].error_class is ErrorClass.PERMISSION_DENIED


async def test_a_grant_is_judged_where_the_path_really_leads(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "private" / "inner").mkdir(parents=True)
    (root / "private" / "keys.txt").write_text("TOKEN=abc\n")
    (root / "src" / "ok.txt").write_text("fine\n")
    (root / "src" / "vendor").symlink_to("../private")
    (root / "src" / "lib").symlink_to("../private/inner")
    workspace = Workspace(root)
    registry = ToolRegistry()
    register_builtin_tools(registry, workspace)
    policy = CapabilityPolicy(
        {"root": Capabilities(paths=[PathGrant("src", "rw")])}, workspace=workspace
    )
    executor = ToolExecutor(registry, policy=policy)
    calls = {
        "read through a link": ("read_file", {"path": "src/vendor/keys.txt"}),
        "write through a link": ("write_file", {"path": "src/vendor/x.txt", "content": "x"}),
        "'..' after a link": ("write_file", {"path": "src/lib/../keys.txt", "content": "x"}),
        "new dirs under a link": ("write_file", {"path": "src/lib/new/x.txt", "content": "x"}),
        "'..' after a new dir": ("write_file", {"path": "src/new/../x.txt", "content": "x"}),
        "list, path left out": ("list_dir", {}),
        "search, path left out": ("search_files", {"pattern": "TOKEN"}),
        "absolute, outside": ("read_file", {"path": "/etc/passwd"}),
        "read inside": ("read_file", {"path": "src/ok.txt"}),
        "absolute, inside": ("read_file", {"path": str(root / "src" / "ok.txt")}),
        "new dirs inside": ("write_file", {"path": "src/a/b/c.txt", "content": "x"}),
        "'..' staying inside": ("read_file", {"path": "src/../src/ok.txt"}),
    }
    outcome = await executor.execute_batch(
        [ToolCall(why, name, arguments) for why, (name, arguments) in calls.items()]
    )
    verdicts = {r.call_id: r.error_class for r in outcome.results}
    denied = ErrorClass.PERMISSION_DENIED
    assert verdicts == {
        "read through a link": denied,
        "write through a link": denied,
        "'..' after a link": denied,
        "new dirs under a link": denied,
        "'..' after a new dir": denied,
        "list, path left out": denied,
        "search, path left out": denied,
        "absolute, outside": denied,
        "read inside": None,
        "absolute, inside": None,
        "new dirs inside": None,
        "'..' staying inside": None,
    }
    texts = {r.call_id: r.text for r in outcome.results}
    assert (
        "'src/vendor/keys.txt', which leads to 'private/keys.txt'" in texts["read through a link"]
    )
    assert "may not read '.'" in texts["list, path left out"]
    assert sorted(p.name for p in (root / "private").iterdir()) == ["inner", "keys.txt"]
    assert (root / "private" / "keys.txt").read_text() == "TOKEN=abc\n"


async def test_a_path_over_the_limits_is_denied_at_once(tmp_path: Path) -> None:
    workspace = Workspace(tmp_path)
    registry = ToolRegistry()
    register_builtin_tools(registry, workspace)
    policy = CapabilityPolicy(
        {"root": Capabilities(paths=[PathGrant(".", "r")])}, workspace=workspace
    )
    executor = ToolExecutor(registry, policy=policy)
    # Judged prefix by prefix, this took a second, and time grew with the square of its length.
    deep = "d/" * 3000 + "../" * 3000 + "ok.txt"
    outcome = await executor.execute_batch([ToolCall("c", "read_file", {"path": deep})])
    (result,) = outcome.results
    assert result.error_class is ErrorClass.PERMISSION_DENIED
    assert result.text.endswith(
        "is 15006 bytes long; a path may be at most 4096 bytes (the path length limit)"
    )


async def test_rules_see_a_path_where_it_really_leads(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / ".git").mkdir(parents=True)
    (root / ".git" / "config").write_text("[core]\n")
    (root / "notes").mkdir()
    (root / "notes" / "secret.txt").write_text("diary\n")
    (root / "public").symlink_to("notes")
    workspace = Workspace(root)
    registry = ToolRegistry()
    register_builtin_tools(registry, workspace)
    rules = [
        Rule("deny", "read_file", {"path": PathGlob("notes/**")}, "notes are private"),
        Rule("deny", "write_file", {"path": PathGlob(".git/**")}, "never write inside .git"),
    ]
    executor = ToolExecutor(registry, policy=RulePolicy(rules, workspace=workspace))
    outcome = await executor.execute_batch(
        [
            ToolCall("abs", "read_file", {"path": str(root / "notes" / "secret.txt")}),
            ToolCall("link", "read_file", {"path": "public/secret.txt"}),
            ToolCall("git", "write_file", {"path": f"{root}/.git/config", "content": "x"}),
            ToolCall("ok", "write_file", {"path": "public/new.txt", "content": "x"}),
        ]
    )
    assert [r.error_class for r in outcome.results] == [
        ErrorClass.PERMISSION_DENIED,
        ErrorClass.PERMISSION_DENIED,
        ErrorClass.PERMISSION_DENIED,
        None,
    ]
    assert (root / ".git" / "config").read_text() == "[core]\n"


async def test_the_file_tools_name_their_workspace_so_a_policy_without_one_follows_links(
    tmp_path: Path,
) -> None:
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "private").mkdir()
    (root / "private" / "keys.txt").write_text("TOKEN=abc\n")
    (root / "src" / "vendor").symlink_to("../private")
    (root / "src" / "ok.txt").write_text("fine\n")
    registry = ToolRegistry()
    register_builtin_tools(registry, Workspace(root))
    caps = CapabilityPolicy({"root": Capabilities(paths=[PathGrant("src", "rw")])})
    rules = RulePolicy([Rule("deny", "read_file", {"path": PathGlob("private/**")})])
    for policy in (caps, rules):  # neither was given the workspace
        outcome = await ToolExecutor(registry, policy=policy).execute_batch(
            [
                ToolCall("link", "read_file", {"path": "src/vendor/keys.txt"}),
                ToolCall("ok", "read_file", {"path": "src/ok.txt"}),
            ]
        )
        assert [r.error_class for r in outcome.results] == [ErrorClass.PERMISSION_DENIED, None]


def test_a_command_prefix_names_at_least_one_shell_word() -> None:
    # An empty prefix in an allow rule would have allowed every simple command.
    for words in ("", "   "):
        with pytest.raises(ValueError, match="CommandPrefix needs at least one word"):
            CommandPrefix(words)
    with pytest.raises(ValueError, match="are not shell words: No closing quotation"):
        CommandPrefix('git "sta')
    assert CommandPrefix("git status").matches("git status --short")
    with pytest.raises(
        ValueError, match=r"^rules\[0\]\.args\.command\.command_prefix: CommandPrefix"
    ):
        RulePolicy.from_dict(
            {
                "rules": [
                    {
                        "action": "allow",
                        "tool": "shell",
                        "args": {"command": {"command_prefix": ""}},
                    }
                ]
            }
        )
    with pytest.raises(ValueError, match=r"^rules\[0\]\.args\.command\.regex: missing \)"):
        RulePolicy.from_dict(
            {"rules": [{"action": "deny", "tool": "shell", "args": {"command": {"regex": "("}}}]}
        )


def test_capabilities_paths_hold_path_grants() -> None:
    with pytest.raises(
        TypeError, match=r"write PathGrant\('src'\) \(read\) or PathGrant\('src', 'rw'\)"
    ):
        Capabilities(paths=["src"])  # type: ignore[list-item]
    assert Capabilities(paths=PathGrant("src")).paths == (PathGrant("src"),)  # type: ignore[arg-type]
