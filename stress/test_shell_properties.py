"""Random batches of real shell commands: every call answered once, in call order,
with its true exit code and byte counts, and nothing left behind (no descriptor,
no task, and no process: under the reaper no live descendant of any call at all,
whichever way its background jobs left the group; in a process group, nothing
in any call's group), whatever mix of output, exit codes, background jobs,
ignored SIGTERM, timeouts and host cancels is drawn.

Each example runs real processes in real time, so the short profile runs
fewer examples than the executor properties do.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

import toolexec._proc._process
from conftest import group_members, live_tasks, open_fds
from stress.conftest import stress_profile
from toolexec import ErrorClass, ToolCall, ToolExecutor, ToolRegistry, Workspace
from toolexec._proc._reaper import _REAPER
from toolexec._proc._supervisor import proc_stat, processes, subtree
from toolexec.tools import ShellTool

# Slow (tests/README.md): random batches of real shell commands.
pytestmark = pytest.mark.slow

TIMEOUT = 0.15
GRACE = 0.1


@attrs.frozen
class Command:
    """One call: what it prints, how it ends, what it leaves running."""

    direct: str | None  # a plain command started without bash ("true", "false", "ls -d .")
    out_bytes: int
    err_bytes: int
    exit_code: int
    background: str  # a key of JOBS: what it leaves behind, and how
    ignore_term: bool  # the shell and its children ignore SIGTERM
    hang: bool  # ends only by the call's timeout

    def text(self, index: int) -> str:
        if self.direct is not None:
            return self.direct
        parts = ["trap '' TERM"] if self.ignore_term else []
        parts.append(f"echo $$ > pgid{index}")
        if self.background != "none":
            parts.append(JOBS[self.background].format(index=index))
        if self.out_bytes:
            parts.append(f"yes x | head -c {self.out_bytes}")
        if self.err_bytes:
            parts.append(f"yes y | head -c {self.err_bytes} >&2")
        if self.hang:
            parts.append("sleep 1000")
        parts.append(f"exit {self.exit_code}")
        return "\n".join(parts)


#: Background jobs a command leaves, each writing its pid to ``jobs<index>``. A
#: process group holds the first only; the reaper holds them all.
JOBS = {
    "in the group": "sleep 1000 & echo $! >> jobs{index}",
    "setsid": "setsid sleep 1000 & echo $! >> jobs{index}",
    "set -m": "set -m; sleep 1000 & echo $! >> jobs{index}; set +m",
    "double fork": "( (sleep 1000 & echo $! >> jobs{index}) & )",
    "nohup, disowned": "nohup sleep 1000 >/dev/null 2>&1 & echo $! >> jobs{index}; disown",
}
_sizes = st.sampled_from([0, 1, 100, 70_000, 300_000])
_PLAIN = {"true": (0, 0), "false": (0, 1), "ls -d .": (2, 0)}  # stdout bytes, exit code


def _commands(reaper: bool) -> st.SearchStrategy[Command]:
    jobs = ["none", *JOBS] if reaper else ["none", "in the group"]
    return st.one_of(
        st.sampled_from(
            [
                Command(name, out, 0, code, "none", False, False)
                for name, (out, code) in _PLAIN.items()
            ]
        ),
        st.builds(
            Command,
            direct=st.none(),
            out_bytes=_sizes,
            err_bytes=_sizes,
            exit_code=st.sampled_from([0, 1, 3]),
            background=st.sampled_from(jobs),
            ignore_term=st.booleans(),
            hang=st.booleans(),
        ),
    )


@attrs.frozen
class Case:
    commands: list[Command]
    cancel_after: float | None  # real seconds before the host cancels the batch
    reaper: bool  # under the reaper, or in a process group (where there is none)
    pidfd: bool  # in a group: learn of the exit through a pidfd, or a watcher task


def _cases(reaper: bool) -> st.SearchStrategy[Case]:
    return st.builds(
        Case,
        commands=st.lists(_commands(reaper), min_size=1, max_size=4),
        cancel_after=st.one_of(st.none(), st.sampled_from([0.0, 0.01, 0.05, 0.2])),
        reaper=st.just(reaper),
        pidfd=st.booleans(),
    )


cases = st.booleans().flatmap(_cases)


def _below_workers() -> list[int]:
    """Live processes below the reaper's workers: what some call left behind."""
    if _REAPER.pid is None:
        return []
    table = processes()
    workers = {pid for pid, stat in table.items() if stat[1] == _REAPER.pid}
    return sorted(set(subtree(workers, table)) - workers)


def _live(pid: int) -> bool:
    stat = proc_stat(pid)
    return stat is not None and stat[0] not in (b"Z", b"X")


def _check(case: Case, root: Path, results: Any) -> None:
    assert [r.call_id for r in results] == [f"c{i}" for i in range(len(case.commands))]
    for command, result in zip(case.commands, results, strict=True):
        if result.error_class is ErrorClass.CANCELLED:
            assert case.cancel_after is not None, result.text
            continue
        if command.hang:
            assert result.error_class is ErrorClass.TIMEOUT, result.text
            continue
        assert result.details["exit_code"] == command.exit_code, result.text
        assert result.details["stdout_bytes"] == command.out_bytes, result.text
        assert result.details["stderr_bytes"] == command.err_bytes, result.text
        assert result.is_error == (command.exit_code != 0)
    for marker in root.glob("pgid*"):
        text = marker.read_text().strip()
        if text:
            assert not group_members(int(text)), f"group {text} outlived its call"
    for marker in root.glob("jobs*"):
        jobs = [int(p) for p in marker.read_text().split()]
        assert not any(_live(pid) for pid in jobs), f"{marker.name}: {jobs} outlived the call"
    if case.reaper:
        assert _below_workers() == [], "a descendant outlived its call"


async def _run(case: Case, root: Path) -> None:
    registry = ToolRegistry()
    registry.register(ShellTool(Workspace(root), default_timeout=30.0))
    executor = ToolExecutor(registry, grace_period=GRACE)
    calls = []
    for i, command in enumerate(case.commands):
        arguments: dict[str, Any] = {"command": command.text(i)}
        if command.hang:
            arguments["timeout"] = TIMEOUT
        calls.append(ToolCall(f"c{i}", "shell", arguments))
    tasks_before = live_tasks()
    fds_before = open_fds()
    batch = executor.prepare(calls)
    outcome: list[Any] = []

    async def run() -> None:
        outcome.append(await batch.run())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        if case.cancel_after is not None:
            await trio.sleep(case.cancel_after)
            batch.cancel()
    _check(case, root, outcome[0].results)
    assert open_fds() - fds_before - _REAPER.descriptors() == set()  # idle workers are kept
    assert live_tasks() == tasks_before
    assert executor.statistics().calls_in_flight == 0


_examples = 20 if stress_profile() == "stress-short" else 1000


@settings(settings.get_profile(stress_profile()), max_examples=_examples)
@given(case=cases)
def test_random_shell_batches_leave_nothing_behind(case: Case) -> None:
    saved = toolexec._proc._process._pidfd_open, _REAPER.unsupported
    if not case.reaper:
        _REAPER.unsupported = "off for this example"
        if not case.pidfd:
            toolexec._proc._process._pidfd_open = None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            trio.run(_run, case, Path(tmp))
    finally:
        toolexec._proc._process._pidfd_open, _REAPER.unsupported = saved
