"""What crosses the subprocess sandbox's pipes: outputs, call contexts, tool names.

Used on both sides: by ``_sandbox`` in the host and by ``_sandbox_child``
in the sandboxed process, which imports it once the host's import path is
set, to run a function tool.
"""

from __future__ import annotations

import importlib
import json
from typing import TYPE_CHECKING, Any

from .._core._errors import ToolError
from .._core._tool_protocol import ToolContext
from .._core._types import ImageContent, JsonContent, TextContent, ToolOutput
from .._gate._policy import ExecutionGrant
from .._tools._function import FunctionTool, function_tool

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._core._tool_protocol import Tool

__all__ = ["call_context", "context_to_json", "locate", "output_from_json", "output_to_json"]


def output_to_json(output: ToolOutput) -> dict[str, Any]:
    """A ``ToolOutput`` as JSON; details JSON cannot hold are sent as their ``repr``."""
    blocks: list[dict[str, Any]] = []
    for block in output.content:
        if isinstance(block, TextContent):
            blocks.append({"type": "text", "text": block.text})
        elif isinstance(block, JsonContent):
            blocks.append({"type": "json", "value": block.value})
        else:
            blocks.append({"type": "image", "data": block.data, "mime_type": block.mime_type})
    details = json.loads(json.dumps(dict(output.details), default=repr))
    return {"content": blocks, "details": details, "is_error": output.is_error}


def output_from_json(data: Any) -> ToolOutput:
    """The ``ToolOutput`` that ``output_to_json`` sent.

    Raises:
        ValueError: the data is not such an output.
    """
    try:
        content = []
        for block in data["content"]:
            kind = block["type"]
            if kind == "text":
                content.append(TextContent(block["text"]))
            elif kind == "json":
                content.append(JsonContent(block["value"]))  # type: ignore[arg-type]
            elif kind == "image":
                content.append(ImageContent(block["data"], block["mime_type"]))  # type: ignore[arg-type]
            else:
                raise ValueError(f"unknown content type {kind!r}")
        return ToolOutput(tuple(content), dict(data.get("details", {})), bool(data["is_error"]))
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"not a tool output: {exc!r}") from None


def context_to_json(ctx: ToolContext) -> dict[str, Any]:
    """What the sandboxed function sees of its call's context, as plain values
    (JSON's types; the grant's limits made so), to go in the marshalled request."""
    grant = ctx.grant
    root = getattr(ctx.workspace, "root", None)
    return {
        "call_id": ctx.call_id,
        "tool_name": ctx.tool_name,
        "agent_path": ctx.agent_path,
        "session_id": ctx.session_id,
        "batch_id": ctx.batch_id,
        "grace_period": ctx.grace_period,
        "workspace": None if root is None else str(root),
        "grant": {
            "sandbox": grant.sandbox,
            "timeout": grant.timeout,
            "max_output_chars": grant.max_output_chars,
            "limits": json.loads(json.dumps(dict(grant.limits), default=repr)),
        },
    }


def call_context(data: dict[str, Any], emit: Callable[[str, Any], None]) -> ToolContext:
    """The ``ToolContext`` a sandboxed function runs with (no services, no executor)."""
    workspace = None
    if data["workspace"] is not None:
        from .._tools._workspace import Workspace

        workspace = Workspace(data["workspace"])
    grant = data["grant"]
    return ToolContext(
        data["call_id"],
        data["tool_name"],
        data["agent_path"],
        data["session_id"],
        workspace,
        ExecutionGrant(
            grant["sandbox"], grant["timeout"], grant["max_output_chars"], grant["limits"]
        ),
        data["grace_period"],
        emit=emit,
        batch_id=data["batch_id"],
    )


def _lookup(module: str, qualname: str) -> object:
    obj: object = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def resolve(module: str, qualname: str, name: str) -> Tool:
    """In the sandbox: the function tool ``module:qualname`` names."""
    obj = _lookup(module, qualname)
    if isinstance(obj, FunctionTool):
        return obj
    if not callable(obj):
        raise TypeError(f"'{module}:{qualname}' is not a function")
    return function_tool(name=name)(obj)  # a plain function, registered wrapped


def locate(tool: Tool) -> tuple[str, str]:
    """In the host: the ``(module, qualname)`` the sandbox imports ``tool`` by.

    Raises:
        ToolError: the tool is not a function tool, or its function cannot
            be imported by name (the message says why and what to do).
    """
    name = tool.definition.name
    if not isinstance(tool, FunctionTool):
        raise ToolError(
            f"Tool '{name}' cannot run in the subprocess sandbox: it runs the 'shell' tool and "
            f"function tools importable by name, and this is a {type(tool).__name__}."
        )
    fn = tool.fn
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    why = None
    if not isinstance(module, str) or not isinstance(qualname, str):
        why = "its function has no module and qualified name"
    elif module == "__main__":
        why = "its function is defined in the __main__ script, which the sandbox cannot import"
    elif "<" in qualname:
        why = f"its function {qualname!r} is defined inside another function or is a lambda"
    else:
        try:
            found = _lookup(module, qualname)
        except Exception as exc:
            why = f"'{module}:{qualname}' does not import: {type(exc).__name__}: {exc}"
        else:
            if not (found is fn or (isinstance(found, FunctionTool) and found.fn is fn)):
                why = f"'{module}:{qualname}' names another object"
    if why is not None:
        raise ToolError(
            f"Tool '{name}' cannot run in the subprocess sandbox: {why}; define it at a module's "
            "top level so the sandbox can import it by name."
        )
    assert isinstance(module, str)
    assert isinstance(qualname, str)
    return module, qualname
