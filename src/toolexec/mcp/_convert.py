"""What an MCP server says, as toolexec sees it: side effects, progress, results."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._core._types import (
    ContentBlock,
    ImageContent,
    JsonContent,
    SideEffects,
    TextContent,
    ToolOutput,
)

if TYPE_CHECKING:
    import mcp_types

__all__ = ["convert_result", "progress_text", "side_effects"]


def side_effects(tool: mcp_types.Tool) -> SideEffects:
    hints = tool.annotations
    if hints is not None and hints.read_only_hint is True:
        return SideEffects.READ
    return SideEffects.EXECUTE


def progress_text(progress: float, total: float | None, message: str | None) -> str:
    numbers = f"{progress:g}/{total:g}" if total else f"{progress:g}"
    return f"{message} ({numbers})" if message else numbers


def _convert_block(block: Any) -> ContentBlock:
    kind = getattr(block, "type", None)
    if kind == "text":
        return TextContent(block.text)
    if kind == "image":
        return ImageContent(block.data, block.mime_type)
    if kind == "audio":
        return TextContent(f"[audio content ({block.mime_type}) omitted]")
    if kind == "resource_link":
        return TextContent(f"[resource {block.uri}: {block.name}]")
    if kind == "resource":
        resource = block.resource
        text = getattr(resource, "text", None)
        if text is not None:
            return TextContent(text)
        return TextContent(f"[binary resource {resource.uri} ({resource.mime_type}) omitted]")
    return JsonContent(block.model_dump(mode="json") if hasattr(block, "model_dump") else block)


def convert_result(result: mcp_types.CallToolResult, server: str, tool: str) -> ToolOutput:
    content = tuple(_convert_block(b) for b in result.content)
    details: dict[str, Any] = {"mcp_server": server, "mcp_tool": tool}
    if result.structured_content is not None:
        details["structured_content"] = result.structured_content
        if not content:
            content = (JsonContent(result.structured_content),)
    if result.is_error and not content:
        content = (TextContent(f"MCP tool '{tool}' reported an error without a message."),)
    return ToolOutput(content, details, bool(result.is_error))
