"""Write docs/api.md from the public names' docstrings: `python docs/gen_api.py`.

`tests/test_public_api.py` fails when a public name is missing from the page,
so run this after adding or renaming one.
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import toolexec

SECTIONS = {
    "Calls and results": [
        "ToolCall",
        "ToolResult",
        "ToolOutput",
        "ErrorClass",
        "ContentBlock",
        "TextContent",
        "ImageContent",
        "JsonContent",
        "RoutingClass",
    ],
    "Tools": [
        "Tool",
        "ToolFactory",
        "ToolDefinition",
        "SideEffects",
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
        "ConcurrencyConfig",
        "ExecutorStatistics",
        "PoolStatistics",
        "ExecutionStrategy",
        "Parallel",
        "Sequential",
        "Batched",
        "Steering",
    ],
    "Events and sinks": [
        "Event",
        "EventSink",
        "CallbackSink",
        "ChannelSink",
        "JsonlAuditSink",
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
    "Policies": [
        "ToolPolicy",
        "Decision",
        "Allow",
        "Deny",
        "Ask",
        "ExecutionGrant",
        "AllowAll",
        "RulePolicy",
        "Rule",
        "Matcher",
        "PathGlob",
        "CommandPrefix",
        "Prefix",
        "Regex",
        "Equals",
        "CapabilityPolicy",
        "Capabilities",
        "PathGrant",
        "ComposedPolicy",
    ],
    "Approval and hooks": [
        "Approver",
        "ApprovalConfig",
        "ApprovalMode",
        "ApprovalRequest",
        "ApprovalAnswer",
        "AutoApprover",
        "FirstAnswer",
        "TerminalApprover",
        "CallHook",
        "HookDecision",
        "Skip",
        "Rewrite",
    ],
    "Agents": [
        "AgentLoop",
        "AgentResult",
        "StopReason",
        "Model",
        "Message",
        "ModelResponse",
        "Usage",
        "SubAgentTool",
        "AgentTree",
        "TreeLimits",
        "TreeStatistics",
    ],
    "Workspace and built-in tools": [
        "Workspace",
        "WorkspaceError",
        "DirEntry",
        "register_builtin_tools",
        "ReadFileTool",
        "WriteFileTool",
        "EditFileTool",
        "ListDirTool",
        "SearchFilesTool",
        "ShellTool",
        "classify_shell_command",
        "EchoTool",
    ],
    "Errors": ["ToolexecError", "RegistrationError", "InternalError", "ToolError"],
}
SUBMODULES = {
    "toolexec.events": "Events and sinks",
    "toolexec.policy": "Rules, capabilities and hooks",
    "toolexec.approval": "Approval",
    "toolexec.tools": "Built-in tools",
    "toolexec.formats": "Provider formats",
    "toolexec.models": "Model adapters (extras `openai`, `anthropic`)",
    "toolexec.mcp": "MCP tool sources (extra `mcp`)",
    "toolexec.testing": "Test helpers",
}


def _entry(name: str, obj: object) -> list[str]:
    out = [f"### `{name}`", ""]
    if inspect.isclass(obj) or inspect.isfunction(obj):
        out += [inspect.getdoc(obj) or "(no docstring)", ""]
    else:
        out += [f"`{name}` = `{obj!r}`".replace("toolexec._", "toolexec."), ""]
    return out


def render() -> str:
    names = list(toolexec.__all__)
    placed = {n for group in SECTIONS.values() for n in group}
    groups = {**SECTIONS, "Everything else": [n for n in names if n not in placed]}
    out = [
        "# API reference",
        "",
        "Every public name, generated from the docstrings by `python docs/gen_api.py`.",
        "Anything not listed here is private and may change without notice.",
        "",
    ]
    for title, group in groups.items():
        present = [n for n in group if n in names]
        if not present:
            continue
        out += [f"## {title}", ""]
        for name in present:
            out += _entry(name, getattr(toolexec, name))
    for module_name, title in SUBMODULES.items():
        module = importlib.import_module(module_name)
        out += [f"## `{module_name}`: {title}", ""]
        for name in module.__all__:
            out += _entry(f"{module_name}.{name}", getattr(module, name))
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    path = Path(__file__).parent / "api.md"
    path.write_text(render())
    print(f"wrote {path}")
