"""Write docs/api.md from the public modules' docstrings: `python docs/gen_api.py`.

One section per public module, the root first. Each public name gets its
signature and docstring; a class also gets its public methods and
properties (signature and first docstring paragraph). `tests/test_public_api.py`
fails when the page differs from what this script writes, so run it after
adding, moving or re-documenting a public name.
"""

from __future__ import annotations

import enum
import functools
import importlib
import inspect
import re
from pathlib import Path
from typing import Any

import attrs

# Public modules, in page order, with what each holds.
MODULES = {
    "toolexec": "The everyday API",
    "toolexec.events": "Events and the sinks that receive them",
    "toolexec.policy": "Rules, matchers, capabilities and hooks",
    "toolexec.approval": "Human approval",
    "toolexec.backends": "Where calls run",
    "toolexec.tools": "Built-in tools",
    "toolexec.models": "Models and SDK adapters (extras `openai`, `anthropic`)",
    "toolexec.aio": "Calling toolexec from asyncio",
    "toolexec.formats": "Provider wire formats",
    "toolexec.mcp": "MCP tool sources (extra `mcp`)",
    "toolexec.openapi": "OpenAPI tool sources (extra `openapi`)",
    "toolexec.otel": "OpenTelemetry spans (extra `otel`)",
    "toolexec.testing": "Test helpers",
    "toolexec.langgraph": "LangGraph and LangChain (extra `langgraph`)",
    "toolexec.openai_agents": "OpenAI Agents SDK (extra `openai-agents`)",
    "toolexec.pydantic_ai": "pydantic-ai (extra `pydantic-ai`)",
    "toolexec.ipc": "Tools for agents in other processes (supervisor and runner)",
    "toolexec.streams": "Streaming admission from provider streams",
    "toolexec.durable": "Durable execution: the call journal, resume, questions across processes",
}

# Reading order within a module; a module without groups lists `__all__` in order,
# and names a module's groups miss come last, under "Other".
GROUPS: dict[str, dict[str, list[str]]] = {
    "toolexec": {
        "Calls and results": [
            "ToolCall",
            "ToolResult",
            "ToolOutput",
            "ErrorClass",
            "RoutingClass",
            "ContentBlock",
            "TextContent",
            "ImageContent",
            "JsonContent",
        ],
        "Tools": [
            "Tool",
            "ToolDefinition",
            "SideEffects",
            "Resource",
            "ToolContext",
            "ToolRegistry",
            "function_tool",
            "FunctionTool",
        ],
        "Executor": [
            "ToolExecutor",
            "Batch",
            "BatchOutcome",
            "BatchPlan",
            "RunPlan",
            "Steering",
            "ConcurrencyConfig",
            "ExecutorStatistics",
            "PoolStatistics",
            "ExecutionStrategy",
            "Parallel",
            "Sequential",
            "Batched",
        ],
        "Policy basics": ["ToolPolicy", "AllowAll", "Allow", "Deny", "Ask"],
        "Agents": [
            "AgentLoop",
            "AgentResult",
            "StopReason",
            "SubAgentTool",
            "TreeLimits",
            "AgentTree",
            "TreeStatistics",
        ],
        "Workspace": ["Workspace", "WorkspaceError"],
        "Errors": ["ToolexecError", "RegistrationError", "ToolError", "InternalError"],
    },
    "toolexec.events": {
        "Events": [
            "Event",
            "BatchPlanned",
            "RunStarted",
            "RunFinished",
            "CallStarted",
            "CallProgress",
            "CallUpdate",
            "CallCompleted",
            "CallFailed",
            "InputInvalid",
            "ApprovalRequested",
            "ApprovalResolved",
            "BatchFinished",
        ],
        "Sinks": ["EventSink", "CallbackSink", "ChannelSink", "JsonlAuditSink"],
    },
    "toolexec.policy": {
        "Decisions": [
            "ToolPolicy",
            "Decision",
            "Allow",
            "Deny",
            "Ask",
            "ExecutionGrant",
            "AllowAll",
        ],
        "Rules": [
            "RulePolicy",
            "Rule",
            "Matcher",
            "PathGlob",
            "CommandPrefix",
            "Prefix",
            "Regex",
            "Equals",
        ],
        "Capabilities and composition": [
            "CapabilityPolicy",
            "Capabilities",
            "PathGrant",
            "ComposedPolicy",
        ],
        "Hooks": ["CallHook", "HookDecision", "Skip", "Rewrite"],
    },
    "toolexec.testing": {
        "Scripted model": [
            "ScriptedModel",
            "ScriptedRequest",
            "Step",
            "ScriptExhaustedError",
            "tool_call",
        ],
        "Ordering checks (hypothesis)": [
            "check_ordering",
            "OrderingMachine",
            "check_batch",
            "OrderingError",
            "Expected",
            "tool_calls",
            "tool_arguments",
        ],
    },
}

HEADER = """\
# API reference

Every public name, generated from the docstrings by `python docs/gen_api.py`.
Anything not listed here is private and may change without notice.

## API tiers

The root, `toolexec`, holds what an embedder uses every day: the executor
and registry, calls, results and content blocks, the tool protocol and
`function_tool`, concurrency and strategies, batches, the policy basics,
agent loops and sub-agents, the workspace and the errors. Everything else
lives in a public module named for its concern: `toolexec.events`,
`toolexec.policy`, `toolexec.approval`, `toolexec.backends`, `toolexec.tools`,
`toolexec.models`, `toolexec.formats`, `toolexec.mcp`, `toolexec.openapi`,
`toolexec.otel`, `toolexec.aio`, `toolexec.testing`, `toolexec.ipc`,
`toolexec.streams` and `toolexec.durable`, and the framework adapters `toolexec.langgraph`,
`toolexec.openai_agents` and `toolexec.pydantic_ai`.
Each name lives in exactly one module, the one shown in its `repr` and in
tracebacks; the one exception is `toolexec.policy`, which also lists the
root's policy basics (`ToolPolicy`, `AllowAll`, `Allow`, `Deny`, `Ask`) as
the same objects, so that a policy author finds everything in one place.

```
from toolexec import ToolExecutor, ToolRegistry, Workspace
from toolexec.tools import register_builtin_tools
from toolexec.policy import Rule, RulePolicy
```
"""

_ADDRESS = re.compile(r" at 0x[0-9a-f]+")


class _Text:
    """Shows an annotation as its source text (no quotes)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


class _Default:
    """Shows a default value as code, stable from run to run."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        if self.value is attrs.NOTHING:
            return "<factory>"
        if isinstance(self.value, enum.Enum):
            return f"{type(self.value).__name__}.{self.value.name}"
        if callable(self.value) and hasattr(self.value, "__qualname__"):
            return self.value.__qualname__
        return _ADDRESS.sub("", repr(self.value))


def _annotation(value: Any) -> Any:
    if value is inspect.Parameter.empty:
        return value
    if isinstance(value, str):
        return _Text(value)
    return _Text(inspect.formatannotation(value))


def _signature(obj: Any, hidden: frozenset[str] = frozenset()) -> str:
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return "(...)"
    params = [
        p.replace(
            annotation=_annotation(p.annotation),
            default=p.default if p.default is p.empty else _Default(p.default),
        )
        for p in sig.parameters.values()
        if p.name not in hidden and p.name != "self"
    ]
    returns = _annotation(sig.return_annotation)
    if isinstance(returns, _Text) and returns.text == "None" and inspect.isclass(obj):
        returns = inspect.Signature.empty
    return str(sig.replace(parameters=params, return_annotation=returns))


def _private_init_params(cls: type) -> frozenset[str]:
    """``__init__`` parameters that set private attrs fields (internal plumbing)."""
    if not attrs.has(cls):
        return frozenset()
    return frozenset(f.alias for f in attrs.fields(cls) if f.name.startswith("_") and f.init)


def _unwrap(member: Any) -> Any:
    if isinstance(member, staticmethod | classmethod):
        return member.__func__
    if isinstance(member, functools.cached_property):
        return member.func
    return member


def public_members(cls: type) -> dict[str, Any]:
    """The public methods and properties of a class, its own first, then inherited.

    Inherited members count when toolexec defines them (private bases too).
    """
    found: dict[str, Any] = {}
    for klass in cls.__mro__:
        if not klass.__module__.startswith("toolexec"):
            continue
        for name, member in vars(klass).items():
            if name in found or (name.startswith("_") and name != "__call__"):
                continue
            if isinstance(member, property | functools.cached_property) or inspect.isfunction(
                _unwrap(member)
            ):
                found[name] = member
    return found


def first_paragraph(obj: Any) -> str:
    doc = inspect.getdoc(obj) or ""
    return " ".join(doc.split("\n\n")[0].split())


def _member_line(cls: type, name: str, member: Any) -> str:
    if isinstance(member, property | functools.cached_property):
        getter = member.fget if isinstance(member, property) else member.func
        returns = inspect.signature(getter).return_annotation
        kind = "" if returns is inspect.Signature.empty else f": {_annotation(returns)!r}"
        return f"- `{name}{kind}` (property): {first_paragraph(getter)}"
    function = _unwrap(member)
    bound = getattr(cls, name)  # drops `cls` from a classmethod's signature
    prefix = "async " if inspect.iscoroutinefunction(function) else ""
    if isinstance(member, classmethod):
        prefix = "classmethod " + prefix
    elif isinstance(member, staticmethod):
        prefix = "staticmethod " + prefix
    return f"- `{prefix}{name}{_signature(bound)}`: {first_paragraph(function)}"


def _own_init(cls: type) -> bool:
    """Whether toolexec wrote (or attrs generated) the ``__init__`` a class uses."""
    for klass in cls.__mro__:
        init = vars(klass).get("__init__")
        if init is not None:
            return str(getattr(init, "__module__", "")).startswith("toolexec")
    return False


def _class_lines(qualified: str, cls: type) -> list[str]:
    out: list[str] = []
    if issubclass(cls, enum.Enum):
        members = ", ".join(f"`{m.name}`" for m in cls)
        out += [f"`enum {qualified}`", "", inspect.getdoc(cls) or "", "", f"Members: {members}."]
    else:
        kind = "protocol" if getattr(cls, "_is_protocol", False) else "class"
        signature = _signature(cls, _private_init_params(cls)) if _own_init(cls) else ""
        out += [f"`{kind} {qualified}{signature}`", "", inspect.getdoc(cls) or ""]
    members = public_members(cls)
    if members:
        out += ["", "Methods and properties:", ""]
        out += [_member_line(cls, name, member) for name, member in members.items()]
    return out


def entry(module_name: str, name: str, obj: Any, level: str) -> list[str]:
    """The page entry of one public name."""
    qualified = f"{module_name}.{name}"
    out = [f"{level} `{qualified}`", ""]
    home = getattr(obj, "__module__", module_name)
    if inspect.isclass(obj) and home != module_name:
        out += [f"The same object as `{home}.{name}`, listed here too.", ""]
    elif inspect.isclass(obj):
        out += [*_class_lines(qualified, obj), ""]
    elif inspect.isfunction(obj):
        prefix = "async " if inspect.iscoroutinefunction(obj) else ""
        out += [f"`{prefix}{qualified}{_signature(obj)}`", "", inspect.getdoc(obj) or "", ""]
    else:
        out += [f"`{qualified}` = `{_ADDRESS.sub('', repr(obj))}`", ""]
    return out


def _grouped(module_name: str, names: list[str]) -> dict[str, list[str]]:
    groups = GROUPS.get(module_name)
    if not groups:
        return {"": names}
    placed = {n for group in groups.values() for n in group}
    rest = [n for n in names if n not in placed]
    return {**groups, **({"Other": rest} if rest else {})}


def render() -> str:
    out = [HEADER]
    for module_name, title in MODULES.items():
        module = importlib.import_module(module_name)
        names = list(module.__all__)
        out += [f"## `{module_name}`: {title}", "", first_paragraph(module), ""]
        for group, members in _grouped(module_name, names).items():
            level = "###"
            if group:
                out += [f"### {group}", ""]
                level = "####"
            for name in members:
                if name in names:
                    out += entry(module_name, name, getattr(module, name), level)
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    path = Path(__file__).parent / "api.md"
    path.write_text(render())
    print(f"wrote {path}")
