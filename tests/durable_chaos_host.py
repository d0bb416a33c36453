"""A host process for the crash tests: runs a seeded session of batches on a journal.

Run as ``python durable_chaos_host.py JOURNAL MARKERS SEED``. The seed picks
a few batches of reads, appended lines (a write that must never repeat),
idempotent upserts, sub-agents that append, and appends that wait for an
approval. The host submits them in order, each under its own batch key, so
a host started again after a kill resumes the same session. It prints one
line per event the killer may aim at (``plan``, ``run ID``, ``wrote ID``,
``ask ID``, ``child ID``), then ``done K JSON`` with the results of batch K
as the host received them, and ``finished`` at the end. An answerer task
approves the session's open questions through the store, as a person in
another process would. Every append writes ``ID`` as one line to
``MARKERS/appends`` (``O_APPEND``), every upsert ``KEY IDEMPOTENCY-KEY`` to
``MARKERS/upserts``: append-only records of what really happened.

``JOURNAL`` is a store ``toolexec.durable.open_store`` opens.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from toolexec import (
    SideEffects,
    SubAgentTool,
    ToolCall,
    ToolContext,
    ToolExecutor,
    ToolRegistry,
    function_tool,
)
from toolexec.approval import ApprovalConfig, ApprovalMode
from toolexec.durable import Journal, answer_question, open_store, pending_questions
from toolexec.events import ApprovalRequested, CallbackSink, Event
from toolexec.models import Message, ModelResponse

if TYPE_CHECKING:
    from collections.abc import Sequence

SESSION = "chaos"
KINDS = ("read", "append", "upsert", "helper", "guarded")


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def append_line(path: Path, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def batches(seed: int) -> list[list[ToolCall]]:
    """The session's batches: the same for every host started with ``seed``."""
    rng = random.Random(seed)
    out = []
    for k in range(rng.randint(2, 3)):
        calls = []
        for i in range(rng.randint(3, 6)):
            kind = rng.choice(KINDS)
            cid = f"b{k}c{i}"
            arguments = {"task": cid} if kind == "helper" else {"key": cid}
            calls.append(ToolCall(cid, kind, arguments))
        out.append(calls)
    return out


def registry(markers: Path) -> ToolRegistry:
    @function_tool(side_effects=SideEffects.READ)
    async def read(ctx: ToolContext, key: str) -> str:
        """Read a key."""
        say(f"run {key}")
        await trio.sleep(0.002)
        return f"value of {key}"

    async def write(ctx: ToolContext, key: str) -> str:
        say(f"run {ctx.call_id}")
        await trio.sleep(0.002)
        append_line(markers / "appends", ctx.call_id)
        say(f"wrote {ctx.call_id}")
        await trio.sleep(0.002)
        return f"appended {key}"

    @function_tool(side_effects=SideEffects.WRITE)
    async def append(ctx: ToolContext, key: str) -> str:
        """Append a line."""
        return await write(ctx, key)

    @function_tool(side_effects=SideEffects.WRITE)
    async def guarded(ctx: ToolContext, key: str) -> str:
        """Append a line, once a person approves."""
        return await write(ctx, key)

    @function_tool(side_effects=SideEffects.WRITE, idempotent=True)
    async def upsert(ctx: ToolContext, key: str) -> str:
        """Set a key (idempotent: the key it was given tells attempts apart)."""
        say(f"run {ctx.call_id}")
        await trio.sleep(0.002)
        append_line(markers / "upserts", f"{key} {ctx.idempotency_key}")
        say(f"wrote {ctx.call_id}")
        return f"set {key}"

    def child() -> ChildModel:
        return ChildModel()

    reg = ToolRegistry()
    for tool in (read, append, guarded, upsert):
        reg.register(tool)
    reg.register(SubAgentTool("helper", "Appends twice.", "You append.", child))
    return reg


class ChildModel:
    """A sub-agent's model: a function of the conversation, as an LLM is.

    It appends ``TASK-a``, then ``TASK-b``, then answers ``done``; where it
    is in that script, it reads from the results it was shown.
    """

    async def respond(self, messages: Sequence[Message], tools: Any) -> ModelResponse:
        task = str(messages[1].text)  # the parent's task: its call id
        answered = sum(1 for m in messages if m.role == "tool")
        if answered >= 2:
            return ModelResponse(text="done")
        suffix = "ab"[answered]
        say(f"child {task}-{suffix}")
        call = ToolCall(f"{task}-{suffix}", "append", {"key": f"{task}-{suffix}"})
        return ModelResponse(tool_calls=(call,))


async def answerer(store: Any) -> None:
    """Approve every open question of the session, as a person elsewhere would."""
    while True:
        for question in await pending_questions(store, SESSION):
            with contextlib.suppress(LookupError):  # answered meanwhile
                await answer_question(store, question.id, True, by="chaos")
        await trio.sleep(0.01)


def _result(result: Any) -> dict[str, Any]:
    return {
        "id": result.call_id,
        "text": result.text,
        "error_class": None if result.error_class is None else result.error_class.value,
        "interrupted": bool(result.details.get("interrupted")),
        "replayed": bool(result.details.get("replayed")),
    }


async def main(journal_at: str, markers: Path, seed: int) -> None:
    store = open_store(journal_at)

    def on_event(event: Event) -> None:
        if isinstance(event, ApprovalRequested):
            say(f"ask {event.call_id}")

    journal = await Journal.open(store, SESSION, poll_interval=0.01)
    executor = ToolExecutor(
        registry(markers),
        journal=journal,
        approval=ApprovalConfig(
            modes=dict.fromkeys(SideEffects, ApprovalMode.AUTO),
            per_tool={"guarded": ApprovalMode.PROMPT},
        ),
        sinks=[CallbackSink(on_event)],
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(answerer, store)
        for k, calls in enumerate(batches(seed)):
            say("plan")
            outcome = await executor.execute_batch(calls, batch_key=f"batch-{k}")
            say(f"done {k} " + json.dumps([_result(r) for r in outcome.results]))
        nursery.cancel_scope.cancel()
    await store.aclose()
    say("finished")


if __name__ == "__main__":
    trio.run(main, sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]))
