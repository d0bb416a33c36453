"""Write docs/api.md from the public names' docstrings: `python docs/gen_api.py`."""

from __future__ import annotations

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
        "ToolError",
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
}


def _summary(obj: object) -> str:
    doc = inspect.getdoc(obj) or ""
    return doc.strip()


def render() -> str:
    names = list(toolexec.__all__)
    placed = {n for group in SECTIONS.values() for n in group}
    groups = dict(SECTIONS)
    groups["Everything else"] = [n for n in names if n not in placed]
    out = [
        "# API reference",
        "",
        "Every public name of `toolexec`, generated from the docstrings by "
        "`python docs/gen_api.py`. Anything not listed here is private.",
        "",
    ]
    for title, group in groups.items():
        out += [f"## {title}", ""]
        for name in group:
            if name not in names:
                continue
            obj = getattr(toolexec, name)
            out += [f"### `{name}`", ""]
            doc = _summary(obj)
            if inspect.isclass(obj) or inspect.isfunction(obj):
                out += [doc or "(no docstring)", ""]
            else:
                out += [f"Type alias: `{obj!r}`".replace("toolexec._", "toolexec."), ""]
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    path = Path(__file__).parent / "api.md"
    path.write_text(render())
    print(f"wrote {path}")
