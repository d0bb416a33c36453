"""A realistic batch through the executor: reads, a write, reads.

Run it with `python examples/quickstart.py`. It registers three small file
tools over a temporary directory, hands the executor the batch a model might
send, and prints the plan of runs and the results in call order.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import trio

from toolexec import SideEffects, ToolCall, ToolExecutor, ToolRegistry, function_tool


def build_registry(root: Path) -> ToolRegistry:
    @function_tool(side_effects=SideEffects.READ)
    def read_note(name: str) -> str:
        """Read a note."""
        path = root / name
        return path.read_text() if path.exists() else f"(no note named {name})"

    @function_tool(side_effects=SideEffects.READ)
    def list_notes() -> str:
        """List the notes."""
        return ", ".join(sorted(p.name for p in root.iterdir()))

    @function_tool(side_effects=SideEffects.WRITE)
    def write_note(name: str, text: str) -> str:
        """Create or replace a note."""
        (root / name).write_text(text)
        return f"wrote {len(text)} characters to {name}"

    registry = ToolRegistry()
    for tool in (read_note, list_notes, write_note):
        registry.register(tool)
    return registry


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "todo.md").write_text("- ship the executor\n")
        executor = ToolExecutor(build_registry(root))
        calls = [
            ToolCall("call_1", "read_note", {"name": "todo.md"}),
            ToolCall("call_2", "list_notes", "{}"),
            ToolCall("call_3", "write_note", '{"name": "todo.md", "text": "- done\\n"}'),
            ToolCall("call_4", "read_note", {"name": "todo.md"}),
            ToolCall("call_5", "delete_note", {"name": "todo.md"}),
            ToolCall("call_6", "list_notes", "{}"),
        ]
        batch = executor.prepare(calls)
        print("plan:")
        print("  " + batch.plan.describe().replace("\n", "\n  "))
        outcome = await batch.run()
        print("results (in call order):")
        for result in outcome.results:
            status = result.error_class.value if result.error_class else "ok"
            text = result.text if result.content and result.text else str(result.content)
            print(f"  {result.call_id} {result.tool_name} [{status}]: {text.strip()}")


if __name__ == "__main__":
    trio.run(main)
