"""Function tools the subprocess sandbox tests import by name (tests/test_sandbox.py)."""

from __future__ import annotations

import os

from toolexec import SideEffects, ToolContext, ToolError, function_tool
from toolexec._core._types import ErrorClass


@function_tool(side_effects=SideEffects.READ)
def where(ctx: ToolContext) -> dict[str, object]:
    """Say where it runs, reporting progress on the way."""
    ctx.report_progress("looking around")
    return {"pid": os.getpid(), "cwd": os.getcwd(), "tool": ctx.tool_name}


@function_tool(side_effects=SideEffects.READ)
def refuse(reason: str) -> str:
    """Fail the way a tool fails for the model."""
    raise ToolError(f"refused: {reason}", error_class=ErrorClass.PERMISSION_DENIED)


@function_tool(side_effects=SideEffects.READ)
def crash() -> str:
    """Raise an unexpected exception."""
    raise RuntimeError("broken on purpose")


@function_tool
def hog(megabytes: int) -> int:
    """Allocate ``megabytes`` of memory."""
    return len(bytearray(megabytes * 1024 * 1024))


def plain(text: str) -> str:
    """A plain function, registered wrapped by the test."""
    return text.upper()


@function_tool(side_effects=SideEffects.READ)
def big(size: int) -> str:
    """Return ``size`` characters."""
    return "x" * size


@function_tool(side_effects=SideEffects.READ)
def run(command: str) -> str:
    """Run a shell command from the function's own process; return its output."""
    import subprocess

    done = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, check=False)
    return f"exit {done.returncode}\n{done.stdout}"
