"""Function tools the Wasm sandbox tests run in the guest (tests/test_wasm.py).

Pure Python: the standard library and ``toolexec``'s tool-writing names only,
which is what the guest has.
"""

from __future__ import annotations

import os

from toolexec import ErrorClass, SideEffects, ToolContext, ToolError, function_tool


@function_tool(side_effects=SideEffects.READ)
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@function_tool(side_effects=SideEffects.READ)
def look(ctx: ToolContext) -> dict[str, object]:
    """Say where it runs, reporting progress on the way."""
    ctx.report_progress("looking around")
    root = ctx.workspace.root if ctx.workspace is not None else None
    return {"cwd": os.getcwd(), "root": str(root), "files": sorted(os.listdir("."))}


@function_tool(side_effects=SideEffects.READ)
def refuse(reason: str) -> str:
    """Fail the way a tool fails for the model."""
    raise ToolError(f"refused: {reason}", error_class=ErrorClass.PERMISSION_DENIED)


@function_tool(side_effects=SideEffects.READ)
def crash() -> str:
    """Raise an unexpected exception."""
    raise RuntimeError("broken on purpose")


@function_tool(side_effects=SideEffects.READ)
def big(size: int) -> str:
    """Return ``size`` characters."""
    return "x" * size


@function_tool(side_effects=SideEffects.READ)
async def later() -> str:
    """An async function: the guest has no event loop to run it."""
    return "never"
