"""Cancellation of blocking workspace work: the caller returns, the walk stops, its thread is freed.

A gate (``os.open`` of a directory named ``gate`` blocks until released)
holds a walk in its worker thread while the caller is cancelled or its
deadline passes; the cancel token the walk was given records when the
walk looks at it, and trio's thread limiter says when the thread is free.
"""

from __future__ import annotations

import os
import threading
import types
from typing import TYPE_CHECKING, Any, ClassVar

import attrs
import pytest
import trio

from conftest import open_fds
from toolexec import (
    ErrorClass,
    ToolCall,
    ToolExecutor,
    ToolRegistry,
    Workspace,
    WorkspaceError,
    WorkspaceErrorKind,
)
from toolexec._tools import _worker
from toolexec._tools._search import _SearchState, _take
from toolexec._tools._tree import walk_tree
from toolexec.tools import EditFileTool, ListDirTool, ReadFileTool, SearchFilesTool

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

WAIT = 10.0  # seconds a test waits for a thread before it fails (never reached when passing)


class Token(threading.Event):
    """A cancel token that records every one made, and when a walk saw it set."""

    made: ClassVar[list[Token]] = []

    def __init__(self) -> None:
        super().__init__()
        self.observed = threading.Event()
        Token.made.append(self)

    def is_set(self) -> bool:
        seen = super().is_set()
        if seen:
            self.observed.set()
        return seen


@attrs.define
class Gate:
    """Holds the first ``os.open`` of a directory named ``gate`` until released."""

    reached: threading.Event = attrs.Factory(threading.Event)
    release: threading.Event = attrs.Factory(threading.Event)
    after: list[str] = attrs.Factory(list)  # names opened after the release

    def wrap(self, real: Callable[..., int]) -> Callable[..., int]:
        def gated_open(
            path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None
        ) -> int:
            if self.release.is_set():
                self.after.append(os.fsdecode(path))
            elif path == "gate":
                self.reached.set()
                self.release.wait(WAIT)
            return real(path, flags, mode, dir_fd=dir_fd)

        return gated_open


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Gate:
    Token.made.clear()
    monkeypatch.setattr(_worker, "threading", types.SimpleNamespace(Event=Token))
    gate = Gate()
    monkeypatch.setattr(os, "open", gate.wrap(os.open))
    return gate


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "a" / "gate" / "b" / "c").mkdir(parents=True)
    (tmp_path / "a" / "gate" / "b" / "f.txt").write_text("behind the gate\n")
    return tmp_path


async def _thread_freed() -> None:
    """Wait (a few seconds at most, real time) until no worker thread is borrowed."""
    limiter = trio.to_thread.current_default_thread_limiter()
    with trio.fail_after(WAIT):
        while limiter.borrowed_tokens:
            await trio.sleep(0.005)


async def _stopped_after_release(gate: Gate) -> None:
    """Open the gate; the walk must see its token set, stop, and give its thread back."""
    gate.release.set()
    (token,) = Token.made
    assert await trio.to_thread.run_sync(token.observed.wait, WAIT)
    await _thread_freed()
    assert [name for name in gate.after if name in ("b", "c", "f.txt")] == []


async def test_the_work_gets_a_token_that_is_not_set_while_its_caller_waits() -> None:
    seen: list[bool] = []

    def work(cancel: threading.Event) -> str:
        seen.append(cancel.is_set())
        return "done"

    assert await _worker.run_abandonable(work) == "done"
    assert seen == [False]


async def test_a_cancelled_read_returns_at_once_and_its_walk_stops(root: Path, gate: Gate) -> None:
    ws = Workspace(root)
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ws.read_bytes, "a/gate/b/f.txt")
            assert await trio.to_thread.run_sync(gate.reached.wait, WAIT)
            scope.cancel()
    assert scope.cancelled_caught
    assert not gate.release.is_set()  # the caller is back while its walk is still held
    await _stopped_after_release(gate)


async def test_a_cancelled_write_writes_nothing(root: Path, gate: Gate) -> None:
    ws = Workspace(root)
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ws.write_bytes, "a/gate/b/new.txt", b"late")
            assert await trio.to_thread.run_sync(gate.reached.wait, WAIT)
            scope.cancel()
    await _stopped_after_release(gate)
    assert not (root / "a" / "gate" / "b" / "new.txt").exists()


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        (ReadFileTool, {"path": "a/gate/b/f.txt"}),
        (ListDirTool, {"path": "a", "depth": 3}),
        (EditFileTool, {"path": "a/gate/b/f.txt", "old_string": "gate", "new_string": "door"}),
    ],
)
async def test_a_file_tool_past_its_deadline_times_out_and_its_walk_stops(
    root: Path, gate: Gate, tool: Callable[[Workspace], Any], arguments: dict[str, Any]
) -> None:
    instance = tool(Workspace(root))
    instance.definition = attrs.evolve(instance.definition, timeout=0.2)
    registry = ToolRegistry()
    registry.register(instance)
    call = ToolCall("c", instance.definition.name, arguments)
    outcome = await ToolExecutor(registry).execute_batch([call])
    (result,) = outcome.results
    assert result.error_class is ErrorClass.TIMEOUT, result.text
    assert gate.reached.is_set()
    assert not gate.release.is_set()
    await _stopped_after_release(gate)
    assert (root / "a" / "gate" / "b" / "f.txt").read_text() == "behind the gate\n"


@pytest.mark.parametrize(
    "operation",
    [
        lambda ws, cancel: ws.resolve_sync("a/gate", cancel=cancel),
        lambda ws, cancel: ws.read_bytes_sync("a/gate/b/f.txt", cancel=cancel),
        lambda ws, cancel: ws.write_bytes_sync("new.txt", b"x", cancel=cancel),
        lambda ws, cancel: ws.edit_bytes_sync("a/gate/b/f.txt", bytes.upper, cancel=cancel),
        lambda ws, cancel: ws.list_dir_sync(".", cancel=cancel),
    ],
)
def test_blocking_operations_stop_once_their_token_is_set(
    root: Path, operation: Callable[[Workspace, threading.Event], object]
) -> None:
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(WorkspaceError) as info:
        operation(Workspace(root), cancel)
    assert info.value.kind is WorkspaceErrorKind.CANCELLED
    assert info.value.error_class is ErrorClass.CANCELLED
    assert info.value.reason == "was not finished: the operation was cancelled."
    assert sorted(p.name for p in root.iterdir()) == ["a"]
    assert (root / "a" / "gate" / "b" / "f.txt").read_text() == "behind the gate\n"


def test_a_tree_walk_stops_at_the_next_entry_and_closes_what_it_opened(root: Path) -> None:
    top = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    before = open_fds()
    cancel = threading.Event()
    walk = walk_tree(top, "", 10, [], cancel=cancel)
    try:
        assert [next(walk)[0] for _ in range(3)] == ["a", "a/gate", "a/gate/b"]
        cancel.set()
        with pytest.raises(WorkspaceError) as info:
            next(walk)
        assert info.value.kind is WorkspaceErrorKind.CANCELLED
        assert open_fds() - before == set()
    finally:
        os.close(top)


def test_a_search_hop_ends_when_the_search_does(root: Path) -> None:
    search = SearchFilesTool(Workspace(root))
    start = search._start(".")
    assert isinstance(start, int)
    stop = threading.Event()
    stop.set()
    try:
        files = search._files(".", start, None, _SearchState(), stop)
        assert _take(files, 1 << 20, 60.0) == ([], True)
    finally:
        os.close(start)
