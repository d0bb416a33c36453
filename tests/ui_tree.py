"""An agent tree on a SQLite journal, for the ``toolexec ui`` tests (in-process and as a host).

The root agent's model asks for two reads and a write in one turn (the
reads overlap for certain: each waits until both have started), then for a
sub-agent whose model reads once; the write needs a person's approval,
asked through the journal. As a host process::

    python ui_tree.py JOURNAL SESSION MARKERS

it runs the tree, appends to ``MARKERS/written`` when the write runs, and
prints one JSON line: the results the root model received after its first
turn (call id, error class, text).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import trio

from toolexec import (
    AgentLoop,
    SideEffects,
    SubAgentTool,
    ToolCall,
    ToolExecutor,
    ToolRegistry,
    function_tool,
)
from toolexec._core._journal import result_to_json
from toolexec.approval import ApprovalConfig, ApprovalMode
from toolexec.durable import CallKey, CallRecord, Journal, JournalStore, Phase, SQLiteStore
from toolexec.testing import ScriptedModel


def tree(markers: Path) -> tuple[ToolRegistry, ScriptedModel]:
    """The tools and the root model of the tree."""
    entered = {"reads": 0}
    both = trio.Event()

    @function_tool(side_effects=SideEffects.READ)
    async def read(key: str) -> str:
        """Read a key (both reads of a turn are running before either ends)."""
        entered["reads"] += 1
        if entered["reads"] >= 2:
            both.set()
        with trio.move_on_after(30):  # a hang guard: the other read starts at once
            await both.wait()
        await trio.sleep(0.05)  # long enough to be seen side by side on the timeline
        return f"value of {key}"

    @function_tool(side_effects=SideEffects.WRITE)
    async def append(line: str) -> str:
        """Append a line to the notes."""
        with (markers / "written").open("a") as f:
            f.write(line + "\n")
        return f"appended {line}"

    def child() -> ScriptedModel:
        return ScriptedModel([[ToolCall("k1", "read", {"key": "c"})], "child done"])

    registry = ToolRegistry()
    registry.register(read)
    registry.register(append)
    registry.register(SubAgentTool("helper", "Helps.", "You help.", child))
    model = ScriptedModel(
        [
            [
                ToolCall("r1", "read", {"key": "a"}),
                ToolCall("r2", "read", {"key": "b\u202egnp.exe"}),  # shown escaped
                ToolCall("w1", "append", {"line": "<b>hello</b>"}),  # shown as text
            ],
            [ToolCall("h1", "helper", {"task": "look at c"})],
            "all done",
        ]
    )
    return registry, model


async def run_tree(journal_path: Path, session: str, markers: Path) -> ScriptedModel:
    """Run the tree to its end on the journal; the root model, to look at what it received."""
    registry, model = tree(markers)
    store = SQLiteStore(journal_path)
    try:
        journal = await Journal.open(store, session, poll_interval=0.05)
        executor = ToolExecutor(
            registry,
            approval=ApprovalConfig(
                modes=dict.fromkeys(SideEffects, ApprovalMode.AUTO),
                per_tool={"append": ApprovalMode.PROMPT},
                timeout=600,
            ),
            journal=journal,
        )
        await AgentLoop(model, executor, max_turns=5).run("take notes")
    finally:
        await store.aclose()
    return model


def received(model: ScriptedModel) -> list[dict[str, str | None]]:
    """The results the root model received after its first turn."""
    results = model.requests[1].messages[-1].tool_results
    return [
        {
            "call_id": r.call_id,
            "error_class": None if r.error_class is None else r.error_class.value,
            "text": r.text,
        }
        for r in results
    ]


async def write_calls(store: JournalStore, session: str, count: int) -> None:
    """``count`` finished calls of a real executor, in batches of 100, recorded in ``store``."""

    @function_tool(side_effects=SideEffects.READ)
    async def look(n: int) -> str:
        """Look at a number."""
        return f"looked at {n}"

    registry = ToolRegistry()
    registry.register(look)
    executor = ToolExecutor(registry)
    calls = [ToolCall(f"c{i}", "look", {"n": i}) for i in range(100)]
    outcome = await executor.execute_batch(calls)
    results = [result_to_json(r) for r in outcome.results]
    records = [
        CallRecord(
            key=CallKey(session, "root", f"batch-{b:03d}", f"c{i}"),
            phase=Phase.FINISHED,
            index=i,
            tool="look",
            arguments=json.dumps({"n": b * 100 + i}),
            rerun=True,
            result=results[i],
        )
        for b in range(count // 100)
        for i in range(100)
    ]
    await store.write(records)


async def _main(journal_path: str, session: str, markers: str) -> None:
    model = await run_tree(Path(journal_path), session, Path(markers))
    print(json.dumps(received(model)), flush=True)


if __name__ == "__main__":
    trio.run(_main, sys.argv[1], sys.argv[2], sys.argv[3])
