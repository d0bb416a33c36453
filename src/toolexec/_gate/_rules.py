"""Policies built in: rules by tool name and arguments, capabilities, composition.

``RulePolicy``: an ordered list of rules; the **first rule that matches**
decides (like a firewall), otherwise the default. A rule matches when its
tool pattern matches the tool name and every argument matcher matches the
named argument (a missing argument never matches).

``CapabilityPolicy``: per agent, which tools and which workspace paths in
which mode; a tool declares its path arguments (``ToolDefinition.
path_arguments``) and the policy checks them before the call runs. An agent
without its own entry gets its nearest ancestor's, so a child never has more
than its parent.

``ComposedPolicy``: every policy is asked; any deny wins, then any ask,
otherwise allow with the tightest limits of the grants.
"""

from __future__ import annotations

import functools
import json
import posixpath
import re
import shlex
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import attrs

from .._core._messages import bounded, clip
from .._core._types import strings
from .._core._workspace_errors import WorkspaceError, WorkspaceErrorKind
from ._policy import ALLOW, HOST, Allow, Ask, Decision, Deny, ExecutionGrant, ToolPolicy, tightest

if TYPE_CHECKING:
    from .._core._types import PathResolver, ToolDefinition

__all__ = [
    "Capabilities",
    "CapabilityPolicy",
    "CommandPrefix",
    "ComposedPolicy",
    "Equals",
    "Matcher",
    "PathGlob",
    "PathGrant",
    "Prefix",
    "Regex",
    "Rule",
    "RulePolicy",
    "tool_regex",
]


class Matcher(Protocol):
    """Matches one argument value."""

    def matches(self, value: Any) -> bool:
        """Whether the value matches."""
        ...


@functools.lru_cache(maxsize=1024)
def _glob_regex(pattern: str) -> re.Pattern[str]:
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out))


def tool_regex(pattern: str) -> re.Pattern[str]:
    """The regex of a tool-name pattern: ``*`` any characters, ``?`` one (cached)."""
    return _glob_regex(pattern.replace("*", "**"))


def normalize_path(value: str) -> str:
    """Normalize a workspace-relative path (``a/./b/../c`` -> ``a/c``).

    A path with no backslash, no empty, ``.`` or ``..`` part and no trailing
    slash is already normal; only one that might not goes through ``normpath``.
    """
    if not value:
        return "."
    if "\\" in value or "//" in value or "/." in value or value[0] == "." or value[-1] == "/":
        return posixpath.normpath(value.replace("\\", "/"))
    return value


@attrs.frozen
class PathGlob:
    """A workspace path matching a glob: ``*`` within a component, ``**`` across."""

    pattern: str
    _regex: re.Pattern[str] = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_regex", _glob_regex(self.pattern))

    def matches(self, value: Any) -> bool:
        """Whether the normalized path matches."""
        return isinstance(value, str) and bool(self._regex.fullmatch(normalize_path(value)))


@attrs.frozen
class Prefix:
    """A string starting with ``prefix`` (textual: see ``CommandPrefix`` for commands)."""

    prefix: str

    def matches(self, value: Any) -> bool:
        """Whether the value is a string with this prefix."""
        return isinstance(value, str) and value.startswith(self.prefix)


_SHELL_META = re.compile(r"[;&|`$<>(){}\n\\]")


def _command_words(words: str) -> str:
    """The words of a ``CommandPrefix``: at least one, and parseable as shell words."""
    if not isinstance(words, str):
        raise TypeError(f"CommandPrefix words must be a string, got {words!r}")
    try:
        parsed = shlex.split(words)
    except ValueError as exc:
        raise ValueError(f"CommandPrefix words {words!r} are not shell words: {exc}") from None
    if not parsed:
        raise ValueError(
            "CommandPrefix needs at least one word: an empty prefix would match every "
            "command without operators; to match any call of the tool, leave the argument "
            "matcher out of the rule"
        )
    return words


@attrs.frozen
class CommandPrefix:
    """A simple shell command whose first words are ``words``.

    Safer than ``Prefix`` for allow rules: ``git status; rm -rf x`` does not
    match ``CommandPrefix("git status")``, because any command containing
    shell operators, substitutions or redirections never matches.
    """

    words: str = attrs.field(converter=_command_words)
    _want: list[str] = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_want", shlex.split(self.words))

    def matches(self, value: Any) -> bool:
        """Whether the value is an operator-free command starting with the words."""
        if not isinstance(value, str) or _SHELL_META.search(value):
            return False
        try:
            parts = shlex.split(value)
        except ValueError:
            return False
        want = self._want
        return parts[: len(want)] == want


@attrs.frozen
class Regex:
    """A string that fully matches a regular expression."""

    pattern: str
    _regex: re.Pattern[str] = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_regex", re.compile(self.pattern))

    def matches(self, value: Any) -> bool:
        """Whether the value is a string fully matching the pattern."""
        return isinstance(value, str) and bool(self._regex.fullmatch(value))


@attrs.frozen
class Equals:
    """An argument equal to ``value``."""

    value: Any

    def matches(self, value: Any) -> bool:
        """Whether the values are equal."""
        return bool(value == self.value)


Action = Literal["allow", "deny", "ask"]
_ACTIONS = ("allow", "deny", "ask")


def _action(_inst: object, _attr: object, value: str) -> None:
    if value not in _ACTIONS:
        raise ValueError(f"rule action must be one of {_ACTIONS}, got {value!r}")


def _tool_pattern(_inst: object, _attr: object, value: str) -> None:
    if not isinstance(value, str) or "[" in value or "]" in value:
        raise ValueError(
            f"tool pattern {value!r}: a tool name, with '*' for any characters and '?' for "
            "one ('[...]' classes are not supported)"
        )


def _sandbox_name(_inst: object, _attr: object, value: str | None) -> None:
    if value is not None and (not isinstance(value, str) or not value):
        raise ValueError(
            f"sandbox: the name of a backend ({HOST!r}, 'subprocess', ...), got {value!r}"
        )


def _limits(inst: Rule, _attr: object, value: Mapping[str, Any]) -> None:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise ValueError(f"limits: an object mapping limit names to values, got {value!r}")
    if (value or inst.sandbox is not None) and inst.action == "deny":
        raise ValueError("a 'deny' rule runs nothing: 'sandbox' and 'limits' go on allow or ask")


@attrs.frozen
class Rule:
    """``action`` for calls of tools matching ``tool`` whose arguments match ``args``.

    An ``allow`` or ``ask`` rule may say where the call runs: ``sandbox``
    names the backend (any name; the executor reports one it does not have
    when it plans the call) and ``limits`` are handed to it in the grant
    (``Rule("allow", "shell", sandbox="subprocess", limits={"network": False})``).
    """

    action: Action = attrs.field(validator=_action)
    tool: str = attrs.field(default="*", validator=_tool_pattern)
    args: Mapping[str, Matcher] = attrs.field(factory=dict)
    reason: str = ""
    sandbox: str | None = attrs.field(default=None, kw_only=True, validator=_sandbox_name)
    limits: Mapping[str, Any] = attrs.field(factory=dict, kw_only=True, validator=_limits)
    _exact: bool = attrs.field(init=False, repr=False, eq=False)
    _tool_regex: re.Pattern[str] = attrs.field(init=False, repr=False, eq=False)
    # The decision, made once (decisions are frozen), unless it hands out limits:
    # each call gets its own copy of those.
    _decision: Decision | None = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_exact", not any(c in self.tool for c in "*?"))
        object.__setattr__(self, "_tool_regex", tool_regex(self.tool))
        object.__setattr__(self, "_decision", None if self.limits else self._decide())

    def could_match(self, tool: str) -> bool:
        """Whether the tool pattern matches (the arguments aside)."""
        return tool == self.tool if self._exact else bool(self._tool_regex.fullmatch(tool))

    def matches(self, tool: str, arguments: Mapping[str, Any]) -> bool:
        """Whether this rule applies to the call."""
        if self._exact:
            if tool != self.tool:
                return False
        elif not self._tool_regex.fullmatch(tool):
            return False
        for name, matcher in self.args.items():
            if name not in arguments or not matcher.matches(arguments[name]):
                return False
        return True

    def decision(self) -> Decision:
        """The decision this rule gives."""
        return self._decision or self._decide()

    def _decide(self) -> Decision:
        if self.action == "deny":
            return _deny(self.reason or f"the rule for '{self.tool}' denies it")
        if self.sandbox is None and not self.limits:
            return Ask(self.reason) if self.action == "ask" else ALLOW
        grant = ExecutionGrant(sandbox=self.sandbox or HOST, limits=dict(self.limits))
        return Ask(self.reason, grant) if self.action == "ask" else Allow(grant)


_MATCHERS: dict[str, type] = {
    "glob": PathGlob,
    "prefix": Prefix,
    "command_prefix": CommandPrefix,
    "regex": Regex,
    "equals": Equals,
}


def _matcher_from(spec: Any, where: str) -> Matcher:
    if not isinstance(spec, Mapping) or len(spec) != 1 or next(iter(spec)) not in _MATCHERS:
        raise ValueError(
            f"{where}: an argument matcher is an object with exactly one of the keys "
            f"{sorted(_MATCHERS)}, got {spec!r}"
        )
    kind, value = next(iter(spec.items()))
    try:
        matcher: Matcher = _MATCHERS[kind](value)
    except (TypeError, ValueError, re.error) as exc:
        raise ValueError(f"{where}.{kind}: {exc}") from None
    return matcher


@attrs.frozen
class _ToolRules:
    """A ``RulePolicy``'s rules for one tool name, in their order.

    ``checks``: the rules that look at arguments, each with its argument
    names and compiled matchers, up to ``then``: the first rule that does
    not (it matches every call of the tool; ``None``: the default decides).
    A tool whose first rule looks at no argument has no checks: its decision
    is the same for every call.
    """

    checks: tuple[tuple[tuple[tuple[str, Callable[[Any], bool]], ...], Rule], ...]
    then: Rule | None

    @classmethod
    def of(cls, name: str, rules: Iterable[Rule]) -> _ToolRules:
        checks: list[tuple[tuple[tuple[str, Callable[[Any], bool]], ...], Rule]] = []
        for rule in rules:
            if not rule.could_match(name):
                continue
            if not rule.args:
                return cls(tuple(checks), rule)
            checks.append((tuple((k, m.matches) for k, m in rule.args.items()), rule))
        return cls(tuple(checks), None)


def _resolved(
    workspace: PathResolver, definition: ToolDefinition, arguments: Mapping[str, Any]
) -> dict[str, Any]:
    """The arguments with each path argument as the workspace-relative path it leads to."""
    arguments = dict(arguments)
    for arg in definition.path_arguments:
        value = arguments.get(arg)
        if isinstance(value, str):
            where = _where(workspace, value)
            if isinstance(where, str):  # else the workspace refuses it anyway
                arguments[arg] = where
    return arguments


def _rule_tuple(rules: Sequence[Rule]) -> tuple[Rule, ...]:
    return tuple(rules)


def _policy_tuple(policies: Sequence[ToolPolicy]) -> tuple[ToolPolicy, ...]:
    return tuple(policies)


@attrs.frozen
class RulePolicy:
    """Allow, deny or ask by tool name pattern and argument matchers; first match wins.

    Example::

        RulePolicy([
            Rule("deny", "write_file", {"path": PathGlob(".git/**")}, "never touch .git"),
            Rule("allow", "shell", {"command": CommandPrefix("git status")}),
            Rule("ask", "shell"),
        ])

    Given the ``workspace`` (or for a tool that names its own in
    ``ToolDefinition.workspace``), the rules see each of a tool's path arguments
    (``ToolDefinition.path_arguments``) as the workspace-relative path it
    leads to, links and ``..`` followed and an absolute path under the root
    made relative, so ``PathGlob(".git/**")`` also catches ``/srv/ws/.git/x``
    and a link into ``.git``. Without it, rules see the path as written.
    """

    rules: Sequence[Rule] = attrs.field(converter=_rule_tuple)
    default: Action = attrs.field(default="allow", validator=_action)
    workspace: PathResolver | None = attrs.field(default=None, kw_only=True)
    _by_tool: dict[str, _ToolRules] = attrs.field(factory=dict, init=False, repr=False, eq=False)
    _otherwise: Decision = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        if self.default == "allow":
            otherwise: Decision = ALLOW
        elif self.default == "deny":
            otherwise = _deny("no rule allows it")
        else:
            otherwise = Ask("no rule matched")
        object.__setattr__(self, "_otherwise", otherwise)

    def decide(
        self, definition: ToolDefinition, arguments: Mapping[str, Any], agent_path: str
    ) -> Decision:
        """The decision of the first matching rule, else the default."""
        name = definition.name
        rules = self._by_tool.get(name)
        if rules is None:  # first call of this tool
            rules = self._by_tool[name] = _ToolRules.of(name, self.rules)
        if rules.checks:
            workspace = self.workspace or definition.workspace
            if workspace is not None and definition.path_arguments:
                arguments = _resolved(workspace, definition, arguments)
            for checks, rule in rules.checks:
                for arg, matches in checks:
                    if arg not in arguments or not matches(arguments[arg]):
                        break
                else:
                    return rule.decision()
        return self._otherwise if rules.then is None else rules.then.decision()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RulePolicy:
        """Build from ``{"default": ..., "rules": [{"action", "tool", "args", "reason"}]}``.

        An allow or ask rule may also have ``"sandbox"`` (where its calls
        run) and ``"limits"`` (handed to that backend in the grant).

        Raises:
            ValueError: naming the rule and field that is wrong.
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"a policy is an object with 'default' and 'rules', got {data!r}")
        unknown = set(data) - {"default", "rules"}
        if unknown:  # a misspelt 'default' must not silently leave the default 'allow'
            raise ValueError(f"unknown keys {sorted(unknown)}; a policy has 'default' and 'rules'")
        raw_rules = data.get("rules", [])
        if not isinstance(raw_rules, Sequence) or isinstance(raw_rules, str):
            raise ValueError(f"rules: a list of rules, got {raw_rules!r}")
        rules = []
        for i, raw in enumerate(raw_rules):
            where = f"rules[{i}]"
            if not isinstance(raw, Mapping) or "action" not in raw:
                raise ValueError(f"{where}: a rule is an object with at least an 'action'")
            unknown = set(raw) - {"action", "tool", "args", "reason", "sandbox", "limits"}
            if unknown:
                raise ValueError(f"{where}: unknown keys {sorted(unknown)}")
            raw_args = raw.get("args", {})
            if not isinstance(raw_args, Mapping):
                raise ValueError(
                    f"{where}.args: an object mapping argument names to matchers, got {raw_args!r}"
                )
            args = {k: _matcher_from(v, f"{where}.args.{k}") for k, v in raw_args.items()}
            try:
                rule = Rule(
                    raw["action"],
                    raw.get("tool", "*"),
                    args,
                    raw.get("reason", ""),
                    sandbox=raw.get("sandbox"),
                    limits=raw.get("limits", {}),
                )
            except ValueError as exc:
                raise ValueError(f"{where}: {exc}") from None
            rules.append(rule)
        return cls(rules, data.get("default", "allow"))

    @classmethod
    def from_file(cls, path: str | Path) -> RulePolicy:
        """Load a policy from a ``.json`` or ``.toml`` file."""
        path = Path(path)
        text = path.read_text(encoding="utf-8")
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
        return cls.from_dict(data)


def _mode(_inst: object, _attr: object, value: str) -> None:
    if value not in ("r", "rw"):
        raise ValueError(f"path grant mode must be 'r' or 'rw', got {value!r}")


@attrs.frozen
class PathGrant:
    """Access to a workspace directory or file (and everything below it)."""

    path: str = attrs.field(converter=normalize_path)
    mode: Literal["r", "rw"] = attrs.field(default="r", validator=_mode)

    def covers(self, path: str, mode: str) -> bool:
        """Whether this grant allows ``mode`` ("r" or "w") on ``path``."""
        if mode != "r" and self.mode != "rw":
            return False
        return self.path == "." or path == self.path or path.startswith(self.path + "/")


def _pattern_tuple(patterns: Iterable[str]) -> tuple[str, ...]:
    return strings(patterns, "Capabilities.tools")


def _grant_tuple(grants: Iterable[PathGrant]) -> tuple[PathGrant, ...]:
    if isinstance(grants, PathGrant):
        grants = (grants,)
    found = tuple(grants)
    for grant in found:
        if not isinstance(grant, PathGrant):
            raise TypeError(
                f"Capabilities.paths must hold PathGrant objects, got {grant!r}; "
                f"write PathGrant({grant!r}) (read) or PathGrant({grant!r}, 'rw')"
            )
    return found


@attrs.frozen
class Capabilities:
    """What one agent may use: tool name patterns and path grants."""

    tools: Sequence[str] = attrs.field(default=("*",), converter=_pattern_tuple)
    paths: Sequence[PathGrant] = attrs.field(default=(), converter=_grant_tuple)


_INSTANCE = re.compile(r"#\d+(?=/|$)")


def _agents_dict(agents: Mapping[str, Capabilities]) -> Mapping[str, Capabilities]:
    """A copy: what an agent may use is fixed when the policy is made (it is remembered)."""
    if not isinstance(agents, Mapping):
        raise TypeError(f"CapabilityPolicy.agents maps agent paths to Capabilities, got {agents!r}")
    return dict(agents)


@attrs.frozen
class CapabilityPolicy:
    """Per-agent tool and filesystem grants, checked before a call runs.

    ``agents`` maps agent paths (``root``, ``root/researcher``) to their
    capabilities; instance suffixes (``#2``) are ignored when looking up, and
    an agent without an entry gets its nearest ancestor's. No entry at all
    means nothing is granted. ``agents`` is copied when the policy is made:
    whether an agent may use a tool is worked out on its first call of that
    tool and remembered, so grants change by making a new policy.

    A path argument is judged where it really leads. Given the
    ``workspace`` (or for a tool that names its own in
    ``ToolDefinition.workspace``), the policy follows links and ``..`` the
    way the workspace's tools do (a link inside a granted directory that leads
    elsewhere is judged by its target); without it the check is textual,
    ``..`` is refused, and a link cannot be seen, so pass the workspace
    whenever one exists. A path argument left out counts as the whole
    workspace (``.``), which is what the built-in tools default to.
    """

    agents: Mapping[str, Capabilities] = attrs.field(converter=_agents_dict)
    workspace: PathResolver | None = attrs.field(default=None, kw_only=True)
    # Per (agent path, tool name): the agent's capabilities if the tool is
    # granted, else the denial. Neither depends on a call's arguments.
    _by_tool: dict[tuple[str, str], Capabilities | Deny] = attrs.field(
        factory=dict, init=False, repr=False, eq=False
    )

    def capabilities(self, agent_path: str) -> Capabilities | None:
        """The capabilities that apply to an agent path."""
        path = _INSTANCE.sub("", agent_path)
        while True:
            if path in self.agents:
                return self.agents[path]
            if "/" not in path:
                return None
            path = path.rsplit("/", 1)[0]

    def decide(
        self, definition: ToolDefinition, arguments: Mapping[str, Any], agent_path: str
    ) -> Decision:
        """Deny unless the tool and every declared path argument are granted."""
        key = (agent_path, definition.name)
        caps = self._by_tool.get(key)
        if caps is None:  # the first call of this tool by this agent
            caps = self._by_tool[key] = self._tool_grant(agent_path, definition.name)
        if isinstance(caps, Deny):
            return caps
        for arg, mode in definition.path_arguments.items():
            value = arguments.get(arg, ".")  # left out: the tool's default, the whole workspace
            if not isinstance(value, str):
                return _deny(f"path argument '{arg}' is not a string")
            path = _where(self.workspace or definition.workspace, value)
            if isinstance(path, Deny):
                return path
            need = "r" if mode == "r" else "w"
            if not any(g.covers(path, need) for g in caps.paths):
                return _not_granted(agent_path, caps, need, value, path)
        return ALLOW

    def _tool_grant(self, agent_path: str, name: str) -> Capabilities | Deny:
        """The agent's capabilities if they grant the tool; else why not."""
        caps = self.capabilities(agent_path)
        if caps is None:
            return _deny(f"agent '{agent_path}' has no capabilities granted")
        if not any(tool_regex(p).fullmatch(name) for p in caps.tools):
            granted = ", ".join(caps.tools) or "none"
            return _deny(f"agent '{agent_path}' is not granted tool '{name}' (granted: {granted})")
        return caps


def _deny(reason: str) -> Deny:
    """A denial whose reason is ``bounded``: it may quote what the model sent."""
    return Deny(bounded(reason))


def _not_granted(agent_path: str, caps: Capabilities, need: str, value: str, path: str) -> Deny:
    verb = "read" if need == "r" else "write"
    allowed = ", ".join(g.path for g in caps.paths if need == "r" or g.mode == "rw")
    leads = "" if path == normalize_path(value) else f", which leads to '{clip(path)}'"
    return _deny(
        f"agent '{agent_path}' may not {verb} '{clip(value)}'{leads} "
        f"(it may {verb}: {allowed or 'nothing'})"
    )


#: Where a path leads somewhere refused, or is a path no tool takes (over the
#: workspace's limits, or no file name at all): a shorter prefix would not change that.
_REFUSALS = frozenset(
    {
        WorkspaceErrorKind.OUTSIDE,
        WorkspaceErrorKind.SPECIAL_FILE,
        WorkspaceErrorKind.PERMISSION,
        WorkspaceErrorKind.INVALID_PATH,
    }
)


def _where(workspace: PathResolver | None, value: str) -> str | Deny:
    """The workspace-relative path ``value`` leads to, or why it is refused.

    With the workspace, links and ``..`` are followed as its tools follow
    them: the longest existing prefix is resolved and the rest, which does
    not exist yet and so holds no links, is appended as written (a ``..``
    there cannot be judged and is refused). Without it, the path is taken
    as written and absolute paths and ``..`` are refused.
    """
    parts = [p for p in value.split("/") if p not in ("", ".")]
    if workspace is None:
        if value.startswith("/") or ".." in parts:
            return _deny(
                f"path '{clip(value)}' is absolute or uses '..', which this policy cannot "
                "check without the workspace; name it from the workspace root"
            )
        return "/".join(parts) or "."
    lead = "/" if value.startswith("/") else ""
    prefix, rest = list(parts), list[str]()
    while True:
        try:
            where = workspace.resolve_sync(lead + "/".join(prefix))
            break
        except WorkspaceError as exc:
            if exc.kind in _REFUSALS or not prefix:
                return _deny(f"path '{clip(value)}' {exc.reason.rstrip('.')}")
            rest.insert(0, prefix.pop())
    if ".." in rest:
        return _deny(f"path '{clip(value)}' uses '..' after a part that does not exist")
    return "/".join(p for p in (where, *rest) if p != ".") or "."


@attrs.frozen
class ComposedPolicy:
    """Several policies at once: any deny wins, then any ask, else allow.

    The grant of an allowed call takes the tightest timeout and output cap
    of the grants, and the first non-host backend.
    """

    policies: Sequence[ToolPolicy] = attrs.field(converter=_policy_tuple)
    # Per tool name: the decisions last combined, and the result. Decisions are
    # frozen values and the combination depends on them alone: when the policies
    # decide as they did last time (as they do where arguments cannot matter),
    # the combination is the same. One that hands out limits is made afresh, so
    # no two calls share them.
    _last: dict[str, tuple[list[Decision], Decision]] = attrs.field(
        factory=dict, init=False, repr=False, eq=False
    )

    def decide(
        self, definition: ToolDefinition, arguments: Mapping[str, Any], agent_path: str
    ) -> Decision:
        """Ask every policy; combine as described."""
        decisions = [p.decide(definition, arguments, agent_path) for p in self.policies]
        last = self._last.get(definition.name)
        if last is not None and last[0] == decisions:
            return last[1]
        combined = _combined(decisions)
        if isinstance(combined, Deny) or not combined.grant.limits:  # limits: a copy per call
            self._last[definition.name] = (decisions, combined)
        return combined


def _combined(decisions: Sequence[Decision]) -> Decision:
    """Any deny; else any ask, with the tightest grant; else allow under it."""
    for d in decisions:
        if isinstance(d, Deny):
            return d
    grant = tightest(d.grant for d in decisions if not isinstance(d, Deny))
    asks = [d for d in decisions if isinstance(d, Ask)]
    if asks:
        return Ask("; ".join(a.reason for a in asks if a.reason), grant)
    return Allow(grant)
