"""The gate decides exactly as its plain definition says, however it caches.

``RulePolicy`` keeps per tool what its rules decide when they cannot look
at the arguments, and its matchers are compiled once; ``CapabilityPolicy``
keeps per agent and tool whether the tool is granted; ``ComposedPolicy``
keeps its last combination per agent and tool (checked against policies
made afresh for every call); the planner skips
the approval mode when every mode is ``auto``. These properties compare
every such decision with a reference written from the documented rules
alone (first matching rule wins; a missing argument never matches; the
approval mode is the tool's, else the trusted workspace's, else the
side-effect class's), over drawn rules, tools, arguments and configs, each
policy asked many times so that what it remembered is used.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from typing import TYPE_CHECKING, Any

from hypothesis import given
from hypothesis import strategies as st

from toolexec import SideEffects, ToolCall, ToolDefinition, ToolExecutor, ToolRegistry
from toolexec._gate._rules import _glob_regex, _where, normalize_path
from toolexec.approval import ApprovalConfig, ApprovalMode, AutoApprover
from toolexec.policy import (
    Allow,
    Ask,
    Capabilities,
    CapabilityPolicy,
    CommandPrefix,
    ComposedPolicy,
    Deny,
    Equals,
    ExecutionGrant,
    PathGlob,
    PathGrant,
    Prefix,
    Regex,
    Rule,
    RulePolicy,
)

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from toolexec.policy import Matcher

TOOLS = ("read", "read_file", "shell", "write")
PATTERNS = (*TOOLS, "*", "read*", "?ead", "sh*ll", "w*", "*_file", "nothing")
ARGS = ("path", "command")

# -- the reference: the rules as documented, nothing remembered or compiled ----------


def ref_normalize(value: str) -> str:
    return posixpath.normpath(value.replace("\\", "/")) if value else "."


def ref_matches(matcher: Matcher, value: Any) -> bool:
    if isinstance(matcher, PathGlob):
        return isinstance(value, str) and bool(
            re.fullmatch(_glob_regex(matcher.pattern).pattern, ref_normalize(value))
        )
    if isinstance(matcher, Prefix):
        return isinstance(value, str) and value.startswith(matcher.prefix)
    if isinstance(matcher, CommandPrefix):
        if not isinstance(value, str) or re.search(r"[;&|`$<>(){}\n\\]", value):
            return False
        try:
            parts = shlex.split(value)
        except ValueError:
            return False
        want = shlex.split(matcher.words)
        return parts[: len(want)] == want
    if isinstance(matcher, Regex):
        return isinstance(value, str) and bool(re.fullmatch(matcher.pattern, value))
    assert isinstance(matcher, Equals)
    return bool(value == matcher.value)


def ref_tool_matches(pattern: str, tool: str) -> bool:
    return bool(re.fullmatch(_glob_regex(pattern.replace("*", "**")).pattern, tool))


def ref_decision(rule: Rule) -> Allow | Ask | Deny:
    if rule.action == "deny":
        return Deny(rule.reason or f"the rule for '{rule.tool}' denies it")
    grant = ExecutionGrant(sandbox=rule.sandbox or "host", limits=dict(rule.limits))
    return Ask(rule.reason, grant) if rule.action == "ask" else Allow(grant)


def ref_decide(
    rules: list[Rule], default: str, tool: str, arguments: Mapping[str, Any]
) -> Allow | Ask | Deny:
    for rule in rules:
        if not ref_tool_matches(rule.tool, tool):
            continue
        if all(k in arguments and ref_matches(m, arguments[k]) for k, m in rule.args.items()):
            return ref_decision(rule)
    if default == "allow":
        return Allow()
    return Deny("no rule allows it") if default == "deny" else Ask("no rule matched")


# -- what is drawn ----------------------------------------------------------------------

PATHS = ["src/a.py", "src/./a.py", "src//a.py", "/src/a.py", "src/", ".", "", "..", "a/../x"]
PATHS += [".git/config", "src/.env", "./src/a.py", "src\\a.py", "a/b/x", "a/c/b", "x.py", "//a"]
paths = st.one_of(
    st.sampled_from(PATHS),
    st.text(alphabet="ab./\\x", max_size=10),
)
commands = st.one_of(
    st.sampled_from(["git status", "git status -s", "git", "ls -la", "ls; rm x", "echo 'a b'"]),
    st.text(alphabet="gitls ';$|\"", max_size=10),
)
values = st.one_of(paths, commands, st.integers(-2, 2), st.none(), st.booleans())

matchers = st.one_of(
    st.builds(PathGlob, st.sampled_from(["src/**", "*.py", "src/*", ".git/**", "**", "a/?/b"])),
    st.builds(Prefix, st.sampled_from(["", "src", "git ", "/"])),
    st.builds(CommandPrefix, st.sampled_from(["git status", "ls", "git", "echo 'a b'"])),
    st.builds(Regex, st.sampled_from(["a.*", "src/.*", "[a-z]+", ""])),
    st.builds(Equals, values),
)


@st.composite
def rules(draw: st.DrawFn) -> Rule:
    action: Any = draw(st.sampled_from(["allow", "deny", "ask"]))
    runs_somewhere = action != "deny" and draw(st.booleans())
    return Rule(
        action,
        draw(st.sampled_from(PATTERNS)),
        draw(st.dictionaries(st.sampled_from(ARGS), matchers, max_size=2)),
        draw(st.sampled_from(["", "because"])),
        sandbox="subprocess" if runs_somewhere else None,
        limits={"network": False} if runs_somewhere and draw(st.booleans()) else {},
    )


calls = st.lists(
    st.tuples(
        st.sampled_from(TOOLS),
        st.dictionaries(st.sampled_from(ARGS), values, max_size=2),
    ),
    min_size=1,
    max_size=12,
)


@given(
    st.lists(rules(), max_size=8), st.sampled_from(["allow", "deny", "ask"]), calls, st.booleans()
)
def test_a_rule_policy_decides_as_its_rules_say_call_after_call(
    drawn: list[Rule], default: Any, asked: list[tuple[str, dict[str, Any]]], paths_declared: bool
) -> None:
    policy = RulePolicy(drawn, default)
    declared = {"path": "r"} if paths_declared else {}
    for tool, arguments in asked:
        definition = ToolDefinition(tool, "", path_arguments=declared)
        want = ref_decide(drawn, default, tool, arguments)
        assert policy.decide(definition, arguments, "root") == want, (tool, arguments)


capabilities = st.builds(
    Capabilities,
    tools=st.lists(st.sampled_from(PATTERNS), max_size=3),
    paths=st.lists(
        st.builds(
            PathGrant, st.sampled_from([".", "src", "a/b", ".git"]), st.sampled_from(["r", "rw"])
        ),
        max_size=2,
    ),
)
agents = st.dictionaries(st.sampled_from(["root", "root/a", "root/a/b"]), capabilities, max_size=3)
agent_paths = st.sampled_from(["root", "root/a", "root/a#2", "root/a/b", "root/c", "other"])
asked_by = st.lists(st.tuples(agent_paths, calls), min_size=1, max_size=3)


@given(agents, asked_by, st.booleans())
def test_a_capability_policy_decides_call_after_call_as_a_fresh_one_does(
    granted: dict[str, Capabilities],
    asked: list[tuple[str, list[tuple[str, dict[str, Any]]]]],
    paths_declared: bool,
) -> None:
    """What it remembers per agent and tool never changes a decision: a policy made
    afresh for each call (nothing remembered) decides the same."""
    policy = CapabilityPolicy(granted)
    declared = {"path": "rw"} if paths_declared else {}
    for agent_path, agent_calls in asked:
        for tool, arguments in agent_calls:
            definition = ToolDefinition(tool, "", path_arguments=declared)
            want = CapabilityPolicy(granted).decide(definition, arguments, agent_path)
            assert policy.decide(definition, arguments, agent_path) == want


@given(st.lists(rules(), max_size=6), agents, asked_by, st.booleans())
def test_a_composed_policy_decides_call_after_call_as_a_fresh_one_does(
    drawn: list[Rule],
    granted: dict[str, Capabilities],
    asked: list[tuple[str, list[tuple[str, dict[str, Any]]]]],
    paths_declared: bool,
) -> None:
    """Its parts hand back the same decisions where arguments cannot matter, and it
    then hands back the same combination; the result is what combining afresh gives,
    and a grant's limits are never shared between two calls."""

    def fresh() -> ComposedPolicy:
        return ComposedPolicy(
            [RulePolicy(drawn, "ask"), CapabilityPolicy(granted), RulePolicy(drawn)]
        )

    policy = fresh()
    declared = {"path": "r"} if paths_declared else {}
    limits_seen: list[object] = []
    for agent_path, agent_calls in asked:
        for tool, arguments in agent_calls:
            definition = ToolDefinition(tool, "", path_arguments=declared)
            decision = policy.decide(definition, arguments, agent_path)
            assert decision == fresh().decide(definition, arguments, agent_path)
            if not isinstance(decision, Deny) and decision.grant.limits:
                assert all(decision.grant.limits is not seen for seen in limits_seen)
                limits_seen.append(decision.grant.limits)


@given(st.lists(rules(), max_size=6), calls)
def test_with_a_workspace_rules_see_where_paths_lead(
    tmp_path_factory: Any, drawn: list[Rule], asked: list[tuple[str, dict[str, Any]]]
) -> None:
    from toolexec import Workspace

    root: Path = tmp_path_factory.mktemp("ws")
    (root / "src").mkdir(exist_ok=True)
    (root / ".git").mkdir(exist_ok=True)
    (root / "link").symlink_to(root / ".git")
    workspace = Workspace(root)
    policy = RulePolicy(drawn, "deny", workspace=workspace)
    for tool, arguments in asked:
        definition = ToolDefinition(tool, "", path_arguments={"path": "r"})
        seen = dict(arguments)
        if isinstance(seen.get("path"), str):
            where = _where(workspace, seen["path"])
            if isinstance(where, str):
                seen["path"] = where
        want = ref_decide(drawn, "deny", tool, seen)
        assert policy.decide(definition, arguments, "root") == want, (tool, arguments)


@given(st.one_of(paths, st.text(alphabet="a./\\", max_size=12)))
def test_a_path_is_normalized_as_normpath_does(value: str) -> None:
    """The planner skips ``normpath`` for a path that is normal already: never wrongly."""
    assert normalize_path(value) == ref_normalize(value)


@given(st.lists(st.sampled_from(["src/**", "*.py", "**/x", "a/?/b", ".git/**", "**"])), paths)
def test_a_path_glob_matches_the_normalized_path(patterns: list[str], value: str) -> None:
    for pattern in patterns:
        assert PathGlob(pattern).matches(value) == ref_matches(PathGlob(pattern), value)


@given(st.sampled_from(["git status", "ls", "git", "echo 'a b'", "a  b"]), values)
def test_a_command_prefix_matches_whole_words_of_a_plain_command(words: str, value: Any) -> None:
    matcher = CommandPrefix(words)
    assert matcher.matches(value) == ref_matches(matcher, value)


# -- approval modes -----------------------------------------------------------------------

modes = st.sampled_from(list(ApprovalMode))
effects = st.sampled_from(list(SideEffects))


def ref_needs(
    config: ApprovalConfig, definition: ToolDefinition, asked: bool
) -> ApprovalMode | str | None:
    """What the planner leaves on the call: a mode to ask with, None, or "denied"."""
    mode = config.per_tool.get(definition.name, config.modes[definition.side_effects])
    if mode is ApprovalMode.DENY:
        return "denied"
    if asked and mode in (ApprovalMode.AUTO, ApprovalMode.PROMPT_ONCE):
        mode = ApprovalMode.PROMPT
    return None if mode is ApprovalMode.AUTO else mode


@given(
    st.dictionaries(effects, modes),
    st.dictionaries(st.sampled_from(TOOLS), modes, max_size=2),
    st.lists(st.tuples(st.sampled_from(TOOLS), effects, st.booleans()), min_size=1, max_size=8),
    st.booleans(),
)
def test_the_planner_settles_the_approval_mode_as_configured(
    by_class: dict[SideEffects, ApprovalMode],
    per_tool: dict[str, ApprovalMode],
    asked: list[tuple[str, SideEffects, bool]],
    everything_auto: bool,
) -> None:
    config = (
        ApprovalConfig.auto() if everything_auto else ApprovalConfig(by_class, per_tool=per_tool)
    )
    for tool, effect, ask in asked:
        definition = ToolDefinition(tool, "", side_effects=effect)
        registry = ToolRegistry()
        registry.register(_Noop(definition))
        policy = RulePolicy([Rule("ask" if ask else "allow")])
        executor = ToolExecutor(registry, policy=policy, approver=AutoApprover(), approval=config)
        slot = executor.prepare([ToolCall("1", tool, {})])._slots[0]
        want = ref_needs(config, definition, ask)
        got = "denied" if slot.result is not None else slot.needs_approval
        assert got == want, (tool, effect, ask)


class _Noop:
    def __init__(self, definition: ToolDefinition) -> None:
        self.definition = definition

    def __call__(self) -> _Noop:
        return self

    async def execute(self, arguments: Any, ctx: Any) -> Any:
        raise AssertionError("never run")
