"""Shared test helpers: instrumented tools that record what overlapped.

The gate's tests (approval, rules, hooks, audit, the executor's gate path)
share ``FileTool``, the ``registry`` of two of them, ``write`` and ``Scripted``.
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import coverage
import pytest
import trio
from hypothesis import HealthCheck, settings

import _pg
from toolexec import (
    Batch,
    SideEffects,
    ToolCall,
    ToolContext,
    ToolDefinition,
    ToolOutput,
    ToolRegistry,
    function_tool,
)
from toolexec._proc._reaper import _PROGRAM, _REAPER
from toolexec._proc._supervisor import processes
from toolexec.approval import ApprovalAnswer, ApprovalRequest

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

# Hypothesis, for every property test here: an example runs real code (a trio
# run, a schema compiled and checked) whose wall time grows with the machine's
# load, so no per-example deadline, and no health check failing the run because
# drawing the data was slow. A test's own @settings overrides the rest; stress/
# applies its profiles per test (stress/conftest.py).
settings.register_profile(
    "toolexec-tests", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("toolexec-tests")


@pytest.fixture(scope="session", autouse=True)
def _measured_supervisor() -> Iterator[None]:
    """When the run measures coverage, measure the reaper's supervisor process too.

    It runs in a child process, which pytest-cov does not follow; see
    ``cover_supervisor.py``. At the end the supervisor and its workers are
    let go and waited for, so that their data is written before pytest-cov
    combines it.
    """
    measuring = coverage.Coverage.current()
    if measuring is None or _REAPER.pid is not None:
        yield
        return
    script = str(Path(__file__).with_name("cover_supervisor.py"))
    data_file = os.path.abspath(measuring.config.data_file)
    saved = _REAPER.command
    _REAPER.command = [sys.executable, script, data_file, _PROGRAM]
    try:
        yield
    finally:
        _REAPER.command = saved
        supervisor = _REAPER.pid
        workers = [p for p, stat in processes().items() if stat[1] == supervisor]
        _REAPER.close()
        if supervisor is not None:
            os.waitpid(supervisor, 0)
        deadline = time.monotonic() + 30
        while any(pid in processes() for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.01)


@attrs.define
class Recorder:
    """Records starts/ends of calls and the high-water mark of concurrency."""

    log: list[tuple[str, str]] = attrs.field(factory=list)
    running: dict[str, int] = attrs.field(factory=dict)
    peak: dict[str, int] = attrs.field(factory=dict)
    total_running: int = 0
    total_peak: int = 0
    store: dict[str, Any] = attrs.field(factory=dict)

    def enter(self, call_id: str, tool: str) -> None:
        self.log.append(("start", call_id))
        self.running[tool] = self.running.get(tool, 0) + 1
        self.peak[tool] = max(self.peak.get(tool, 0), self.running[tool])
        self.total_running += 1
        self.total_peak = max(self.total_peak, self.total_running)

    def exit(self, call_id: str, tool: str) -> None:
        self.log.append(("end", call_id))
        self.running[tool] -= 1
        self.total_running -= 1

    def order(self, kind: str) -> list[str]:
        return [cid for k, cid in self.log if k == kind]


@attrs.define
class KVTool:
    """A key-value tool over the recorder's store: read, write or fail; optional delay."""

    recorder: Recorder
    name: str
    effects: SideEffects
    delay: float = 0.0
    timeout: float | None = None

    @property
    def definition(self) -> ToolDefinition:
        return ToolDefinition(
            name=self.name,
            description=f"{self.name} a key",
            input_schema={
                "type": "object",
                "properties": {
                    "key": {"type": "string"},
                    "value": {"type": "string"},
                    "delay": {"type": "number"},
                    "fail": {"type": "boolean"},
                },
                "required": ["key"],
                "additionalProperties": False,
            },
            side_effects=self.effects,
            timeout=self.timeout,
        )

    async def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        self.recorder.enter(ctx.call_id, self.name)
        try:
            await trio.sleep(arguments.get("delay", self.delay))
            if arguments.get("fail"):
                raise RuntimeError(f"asked to fail on {arguments['key']}")
            if self.effects.is_read_only:
                return ToolOutput.text(str(self.recorder.store.get(arguments["key"], "")))
            self.recorder.store[arguments["key"]] = arguments.get("value", "")
            return ToolOutput.text("ok")
        finally:
            self.recorder.exit(ctx.call_id, self.name)


def live_tasks() -> set[trio.lowlevel.Task]:
    """Every task in the run right now, found by walking the task tree."""
    found: set[trio.lowlevel.Task] = set()
    stack = [trio.lowlevel.current_root_task()]
    while stack:
        task = stack.pop()
        if task is None:
            continue
        found.add(task)
        for nursery in task.child_nurseries:
            stack.extend(nursery.child_tasks)
    return found


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


def process_alive(pid: int) -> bool:
    """Whether ``pid`` is a running (non-zombie) process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def group_members(pgid: int) -> list[int]:
    """The live (non-zombie) processes in process group ``pgid``, read from /proc."""
    members = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != b"Z":
            members.append(int(name))
    return members


#: A bash script leaving five background jobs, each out of reach of a
#: process-group kill in its own way (a session, a group of its own, or an
#: orphan init would adopt); it writes its own pid and theirs to ``pids``.
ESCAPES = """
echo $$ > pids
setsid sleep 1000 & echo $! >> pids
nohup sleep 1000 > /dev/null 2>&1 & echo $! >> pids
sleep 1000 & echo $! >> pids; disown $!
( (sleep 1000 & echo $! >> pids) & )
set -m; sleep 1000 & echo $! >> pids; set +m
while [ "$(wc -l < pids)" -lt 6 ]; do :; done
"""


def open_fds() -> set[int]:
    """The descriptors this process has open.

    Collects garbage first, so that objects other tests dropped close their
    descriptors now rather than in the middle of a comparison. Compare with
    ``open_fds() - before`` (what was opened and left open): a descriptor
    closed meanwhile by someone else is no leak.
    """
    gc.collect()
    return {int(fd) for fd in os.listdir("/proc/self/fd")}


# -- the gate: tools that declare a path argument, and a scripted approver ----------------


class FileTool:
    """A tool declaring a path argument (nothing is touched on disk)."""

    def __init__(self, name: str, mode: str, seen: list[dict[str, Any]]) -> None:
        self.seen = seen
        self.definition = ToolDefinition(
            name=name,
            description="touch a path",
            input_schema={
                "type": "object",
                "properties": {"path": {"type": "string"}, "text": {"type": "string"}},
                "required": ["path"],
            },
            side_effects=SideEffects.READ if mode == "r" else SideEffects.WRITE,
            path_arguments={"path": mode},
        )

    async def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        self.seen.append(dict(arguments))
        return ToolOutput.text(f"done {arguments['path']}")


@pytest.fixture
def seen() -> list[dict[str, Any]]:
    return []


@pytest.fixture
def registry(seen: list[dict[str, Any]]) -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(lambda: FileTool("read_file", "r", seen))
    registry.register(lambda: FileTool("write_file", "w", seen))
    return registry


def write(cid: str, path: str = "notes/a.md", **kw: Any) -> ToolCall:
    return ToolCall(cid, "write_file", {"path": path, "text": "x", **kw})


class Scripted:
    """An approver answering from a function, recording what it was shown."""

    def __init__(self, answer: Any = True, delay: float = 0.0, by: str = "ann") -> None:
        self.answer, self.delay, self.by = answer, delay, by
        self.requests: list[ApprovalRequest] = []
        self.told: list[ApprovalAnswer] = []

    async def request(self, request: ApprovalRequest) -> ApprovalAnswer:
        self.requests.append(request)
        await trio.sleep(self.delay)
        answer = self.answer(request) if callable(self.answer) else self.answer
        return ApprovalAnswer(answer, self.by, "" if answer else "not now")

    def resolved(self, request: ApprovalRequest, answer: ApprovalAnswer) -> None:
        self.told.append(answer)


class Gate:
    """A tool recording overlap: announces entry to asyncio, waits for a trio event.

    Its trio code runs on the asyncio thread (``toolexec.aio`` guest mode), so
    it may set the asyncio event directly.
    """

    def __init__(self, expected: int) -> None:
        self.active = self.peak = self.entries = 0
        self.expected = expected
        self.entered = asyncio.Event()  # set once ``expected`` calls are inside
        self.release = trio.Event()

    async def __call__(self) -> str:
        self.active += 1
        self.entries += 1
        self.peak = max(self.peak, self.active)
        if self.entries == self.expected:
            self.entered.set()
        try:
            await self.release.wait()
        finally:
            self.active -= 1
        return "ok"


class SpawnCounter(trio.abc.Instrument):
    """A trio instrument counting the tasks spawned while it is added."""

    def __init__(self) -> None:
        self.spawned = 0

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.spawned += 1


@function_tool(side_effects=SideEffects.READ, timeout=5.0)
async def stubborn(seconds: float) -> str:
    """Wait through its cancellation (a shielded cleanup), then answer."""
    with trio.CancelScope(shield=True):
        await trio.sleep(seconds)
    return "finished anyway"


#: The batch ``cancels_its_batch`` cancels: a test puts it here before running it.
BATCHES: list[Batch] = []


@function_tool(side_effects=SideEffects.READ, timeout=5.0)
async def cancels_its_batch() -> str:
    """Wait; when its deadline cancels it, cancel its batch (the host, in that instant)."""
    try:
        await trio.sleep_forever()
    finally:
        BATCHES[0].cancel()


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[_pg.Cluster]:
    """A PostgreSQL cluster for this test process (``_pg``); skips where there is none."""
    reason = _pg.missing()
    if reason is not None:
        pytest.skip(reason)
    with _pg.running_cluster() as cluster:
        yield cluster


@pytest.fixture
def pg_dsn(pg_cluster: _pg.Cluster) -> str:
    """The connection string of a fresh, empty PostgreSQL database for one test."""
    return pg_cluster.create_database()
