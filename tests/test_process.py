"""The process module with real subprocesses: groups, termination, reaping, capture."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import pytest
import trio
import trio.testing

import toolexec._proc._process
import toolexec._proc._reaper
from conftest import ESCAPES, group_members
from toolexec._proc._process import (
    LineTail,
    OutputCapture,
    PipeCollector,
    group_alive,
    open_group_process,
    reap,
    supervise,
    terminate_group,
)
from toolexec._proc._reaper import (
    _REAPER,
    Attempt,
    ReapedProcess,
    _Reaper,
    encode_env,
    open_reaped,
    supervise_reaped,
)
from toolexec._proc._supervisor import proc_stat, processes, signal_process


def _state(pid: int) -> str | None:
    """The /proc state letter of ``pid`` (``Z`` for a zombie), or ``None`` if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0].decode()
    except (FileNotFoundError, ProcessLookupError):
        return None


def _runs(pid: int) -> bool:
    return _state(pid) not in (None, "Z", "X")


async def _start(script: str) -> trio.Process:
    return await open_group_process(
        ["sh", "-c", script], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=None
    )


async def _read_pids(process: trio.Process, count: int) -> list[int]:
    """Read ``count`` whitespace-separated pids the script prints (it prints them once ready)."""
    assert process.stdout is not None
    text = b""
    while len(text.split()) < count or not text.endswith(b"\n"):
        chunk = await process.stdout.receive_some(1024)
        assert chunk, f"the script ended after printing {text!r}"
        text += chunk
    return [int(p) for p in text.split()]


@pytest.fixture
def signals(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Every ``killpg`` the process module makes, as ``(pgid, signal)``; signal 0 is a probe."""
    sent: list[tuple[int, int]] = []
    real = os.killpg

    def killpg(pgid: int, sig: int) -> None:
        sent.append((pgid, int(sig)))
        real(pgid, sig)

    monkeypatch.setattr(os, "killpg", killpg)  # the same object _process calls
    return sent


def _real_signals(sent: list[tuple[int, int]]) -> list[int]:
    return [sig for _pgid, sig in sent if sig != 0]


@pytest.fixture
def one_by_one(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Every signal the process module sends to one process (through a pidfd), as (pid, sig)."""
    sent: list[tuple[int, int]] = []
    real = signal_process

    def recording(pid: int, start: int, sig: int) -> bool:
        sent.append((pid, int(sig)))
        return real(pid, start, sig)

    monkeypatch.setattr(toolexec._proc._process, "signal_process", recording)
    return sent


# -- termination -----------------------------------------------------------------------


async def test_a_group_that_ignores_sigterm_is_killed_after_the_grace_period(
    signals: list[tuple[int, int]],
) -> None:
    # SIG_IGN is inherited, so the background child ignores SIGTERM too.
    process = await _start("trap '' TERM; sleep 1000 & echo $$ $!; wait; wait")
    leader, child = await _read_pids(process, 2)
    with trio.fail_after(30):
        await terminate_group(process, grace=0.2)
    assert _real_signals(signals) == [signal.SIGTERM, signal.SIGCONT, signal.SIGKILL]
    assert group_members(leader) == []
    assert not _runs(child)
    await reap(process, 0)
    assert process.returncode == -signal.SIGKILL


async def test_grandchildren_are_gone_and_the_leader_is_no_zombie() -> None:
    script = "sleep 1000 & echo $!; (sleep 1000 & echo $!; wait) & wait"
    process = await _start(script)
    pids = await _read_pids(process, 2)
    with trio.fail_after(30):
        await reap(process, grace=5.0)
    assert process.returncode == -signal.SIGTERM
    assert group_members(process.pid) == []
    assert not any(_runs(pid) for pid in pids)
    assert _state(process.pid) is None  # reaped: not even a zombie is left of it
    assert process.stdout is not None
    with pytest.raises(trio.ClosedResourceError):  # and trio's pipe is closed
        await process.stdout.receive_some(1)


async def test_what_the_leader_leaves_behind_is_terminated_one_process_at_a_time(
    signals: list[tuple[int, int]], one_by_one: list[tuple[int, int]]
) -> None:
    process = await _start("sleep 1000 & echo $!")
    (orphan,) = await _read_pids(process, 1)
    assert await process.wait() == 0  # the leader is reaped; its child still runs
    assert _runs(orphan)
    assert group_alive(process)
    with trio.fail_after(30):
        await reap(process, grace=5.0)
    # Once the leader is reaped, its group id could name another group: the
    # group is only probed, and what is left is signalled through pidfds.
    assert _real_signals(signals) == []
    assert (orphan, signal.SIGTERM) in one_by_one
    assert not _runs(orphan)
    assert group_members(process.pid) == []


async def test_a_group_is_signalled_whole_while_its_leader_is_not_reaped(
    signals: list[tuple[int, int]], one_by_one: list[tuple[int, int]]
) -> None:
    process = await _start("sleep 1000 & echo $!; exec sleep 1000")
    (child,) = await _read_pids(process, 1)
    with trio.fail_after(30):
        await terminate_group(process, grace=5.0)
    assert _real_signals(signals)[:2] == [signal.SIGTERM, signal.SIGCONT]
    assert {pgid for pgid, _ in signals} == {process.pid}
    assert one_by_one == []
    assert not _runs(child)
    await reap(process, 0)


def test_a_listed_process_whose_pid_now_names_another_is_not_signalled() -> None:
    # What a reused pid looks like: the number is there, with another start time.
    victim = subprocess.Popen(["sleep", "1000"])
    try:
        stat = proc_stat(victim.pid)
        assert stat is not None
        assert not signal_process(victim.pid, stat[3] - 1, signal.SIGKILL)
        assert victim.poll() is None
        assert signal_process(victim.pid, stat[3], signal.SIGKILL)
        assert victim.wait(timeout=30) == -signal.SIGKILL
        assert not signal_process(victim.pid, stat[3], signal.SIGKILL)  # reaped: gone
    finally:
        victim.kill()
        victim.wait()


def test_signals_go_through_a_pidfd(monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[int] = []
    real_open = os.pidfd_open

    def pidfd_open(pid: int, flags: int = 0) -> int:
        opened.append(pid)
        return real_open(pid, flags)

    monkeypatch.setattr(os, "pidfd_open", pidfd_open)
    monkeypatch.setattr(os, "kill", None)  # a plain kill would fail loudly
    victim = subprocess.Popen(["sleep", "1000"])
    try:
        stat = proc_stat(victim.pid)
        assert stat is not None
        assert signal_process(victim.pid, stat[3], signal.SIGTERM)
        assert opened == [victim.pid]
        assert victim.wait(timeout=30) == -signal.SIGTERM
    finally:
        monkeypatch.undo()
        victim.kill()
        victim.wait()


async def test_a_reaped_group_is_never_signalled(signals: list[tuple[int, int]]) -> None:
    process = await _start("exit 0")
    assert await process.wait() == 0
    assert not group_alive(process)
    await terminate_group(process, grace=5.0)
    await reap(process, grace=5.0)
    assert signals  # it did look (signal 0 is a probe, not a signal) ...
    assert _real_signals(signals) == []  # ... and sent nothing to a pgid that may be reused


async def test_sigkill_follows_even_when_termination_is_cancelled(
    signals: list[tuple[int, int]],
) -> None:
    process = await _start("trap '' TERM; echo $$; sleep 1000 & wait; wait")
    await _read_pids(process, 1)
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(terminate_group, process, 1000.0)
            while signal.SIGTERM not in _real_signals(signals):
                await trio.lowlevel.checkpoint()
            await trio.testing.wait_all_tasks_blocked()
            scope.cancel()
    assert _real_signals(signals)[-1] == signal.SIGKILL
    with trio.fail_after(30):
        assert await process.wait() == -signal.SIGKILL
    await reap(process, 0)


async def test_reap_finishes_the_job_when_the_caller_is_cancelled() -> None:
    process = await _start("sleep 1000 & echo $!; wait")
    (child,) = await _read_pids(process, 1)
    with trio.CancelScope() as scope:
        try:
            scope.cancel()
            await trio.sleep_forever()
        finally:
            await reap(process, grace=5.0)  # shielded inside: runs to the end
    assert scope.cancelled_caught
    assert process.returncode is not None
    assert not _runs(child)
    assert group_members(process.pid) == []


# -- capture ---------------------------------------------------------------------------


async def _supervised(
    script: str, collector: PipeCollector, *, limit: float, grace: float
) -> tuple[trio.Process, bool]:
    """Run ``script`` with its output in ``collector``, as the shell tool runs a command."""
    try:
        process = await open_group_process(
            ["sh", "-c", script],
            stdin=subprocess.DEVNULL,
            stdout=collector.write_ends[0],
            stderr=collector.write_ends[1],
        )
        collector.close_write_ends()
        try:
            timed_out = await supervise(process, collector, limit=limit, grace=grace)
        finally:
            await reap(process, 1.0)
    finally:
        collector.close()
    return process, timed_out


@pytest.mark.parametrize("pidfds", [True, False], ids=["pidfd", "watcher task"])
async def test_capture_is_bounded_and_counts_everything(
    pidfds: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not pidfds:
        monkeypatch.setattr(toolexec._proc._process, "_pidfd_open", None)
    out, err = OutputCapture(1000), OutputCapture(10)
    seen: list[tuple[str, int]] = []
    collector = PipeCollector(out, err, lambda name, chunk: seen.append((name, len(chunk))))
    script = "head -c 5000000 /dev/zero; echo oops >&2"
    process, timed_out = await _supervised(script, collector, limit=60, grace=1.0)
    assert not timed_out
    assert process.returncode == 0
    assert (out.total, out.kept, out.truncated) == (5_000_000, 1000, True)
    assert out.text().startswith("\0" * 500 + "\n[... 4999000 bytes omitted ...]\n")
    assert (err.total, err.text()) == (5, "oops\n")
    assert sum(n for name, n in seen if name == "stdout") == 5_000_000
    assert ("stdout", 0) in seen  # the listener is told about EOF
    assert ("stderr", 0) in seen


async def test_supervise_ends_a_process_that_runs_out_of_time_and_keeps_its_last_words() -> None:
    out = OutputCapture(1 << 20)
    collector = PipeCollector(out, OutputCapture(100))
    script = "trap 'echo bye; exit 0' TERM; echo hi; sleep 1000 & wait"
    process, timed_out = await _supervised(script, collector, limit=0.5, grace=30.0)
    assert timed_out
    assert out.text() == "hi\nbye\n"
    assert group_members(process.pid) == []


def test_line_tail_keeps_the_last_lines_each_cut_short() -> None:
    tail = LineTail(2, width=8)
    assert tail.add(b"one\ntw") == ["one"]
    assert tail.add(b"o\r\n" + b"x" * 100_000) == ["two"]
    assert len(tail._partial) == 8  # a line without end costs no more than the width
    assert tail.add(b"y\nfour \xff\n") == ["xxxxxxxx", "four \ufffd"]
    assert list(tail.lines) == ["xxxxxxxx", "four \ufffd"]
    assert tail.add(b"last") == []
    assert tail.close() == ["last"]
    assert list(tail.lines) == ["four \ufffd", "last"]
    assert tail.close() == []


# -- the reaper: every descendant, whatever group or session it made -----------------------


def _attempt(script: str) -> Attempt:
    bash = shutil.which("bash") or "/bin/bash"
    return Attempt.of(bash, [bash, "-c", script], encode_env({"PATH": os.environ["PATH"]}))


async def _run_reaped(
    script: str, cwd: Path, *, limit: float = 60.0, grace: float = 5.0
) -> tuple[ReapedProcess, bool]:
    """Run ``script`` under the reaper as the shell tool does; return it, and if it timed out."""
    collector = PipeCollector(OutputCapture(1 << 16), OutputCapture(1 << 16))
    try:
        stdout, stderr = collector.write_ends
        process = await open_reaped([_attempt(script)], str(cwd), stdout, stderr, grace)
        assert process is not None, "the reaper is not available here"
        collector.close_write_ends()
        try:
            timed_out = await supervise_reaped(process, collector, limit, grace)
        finally:
            await process.aclose(grace)
    finally:
        collector.close()
    return process, timed_out


def _pids(cwd: Path) -> list[int]:
    return [int(p) for p in (cwd / "pids").read_text().split()]


def _wait_until_gone(pids: list[int], limit: float = 30.0) -> None:
    """Poll until none of ``pids`` runs (another process may end them a little later)."""
    deadline = time.monotonic() + limit
    while any(_runs(pid) for pid in pids):
        assert time.monotonic() < deadline, [p for p in pids if _runs(p)]
        time.sleep(0.01)


async def test_the_reaper_ends_every_background_job_when_the_command_exits(
    tmp_path: Path,
) -> None:
    process, timed_out = await _run_reaped(ESCAPES, tmp_path)
    assert not timed_out
    assert process.returncode == 0
    assert process.descendants_killed == 5
    assert process.descendants_left == 0
    shell, *jobs = _pids(tmp_path)
    assert len(jobs) == 5
    assert not any(_runs(pid) for pid in [shell, *jobs])


async def test_the_reaper_ends_every_descendant_on_timeout(tmp_path: Path) -> None:
    process, timed_out = await _run_reaped(ESCAPES + "sleep 1000\n", tmp_path, limit=1.0)
    assert timed_out
    assert process.returncode == -signal.SIGTERM  # exact: a signal stays a signal
    assert process.descendants_killed == 5  # bash exec'd the last sleep: it is the command
    assert not any(_runs(pid) for pid in _pids(tmp_path))


async def test_the_reaper_ends_every_descendant_on_cancellation(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "ready")
    script = ESCAPES + "echo go > ready; sleep 1000\n"
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(_run_reaped, script, tmp_path, grace=1.0))
            await trio.to_thread.run_sync((tmp_path / "ready").read_text)
            shell, *jobs = _pids(tmp_path)
            stats = [proc_stat(pid) for pid in jobs]
            # Two left the command's group (setsid, set -m): a group kill would miss
            # them; the other three are orphans that init would adopt.
            assert sum(s is not None and s[2] != shell for s in stats) == 2
            scope.cancel()
    assert scope.cancelled_caught
    assert not any(_runs(pid) for pid in [shell, *jobs])


async def test_a_descendant_that_ignores_sigterm_is_killed_after_the_grace_period(
    tmp_path: Path,
) -> None:
    script = (
        "echo $$ > pids; (trap '' TERM; echo $BASHPID >> pids; exec setsid sleep 1000) & "
        'while [ "$(wc -l < pids)" -lt 2 ]; do :; done'
    )
    start = time.monotonic()
    process, _ = await _run_reaped(script, tmp_path, grace=0.3)
    assert time.monotonic() - start >= 0.3  # it had its grace period, then SIGKILL
    assert process.returncode == 0
    assert process.descendants_killed == 1
    assert not any(_runs(pid) for pid in _pids(tmp_path))


async def test_a_clean_command_costs_one_message_and_keeps_its_worker(tmp_path: Path) -> None:
    first, _ = await _run_reaped("exit 3", tmp_path)
    assert (first.returncode, first.descendants_killed, first.lost) == (3, 0, False)
    idle = set(_REAPER.idle)
    assert idle  # handed back for the next call
    second, _ = await _run_reaped("true", tmp_path)
    assert second.returncode == 0
    assert set(_REAPER.idle) == idle  # the same worker served it


async def test_a_command_cannot_end_its_worker_with_an_ordinary_signal(tmp_path: Path) -> None:
    script = "for s in TERM INT HUP QUIT USR1 PIPE; do kill -s $s $PPID; done; kill 0; echo $$"
    process, _ = await _run_reaped(script, tmp_path)
    assert not process.lost
    assert process.returncode == -signal.SIGTERM  # "kill 0" reached its own group only


async def test_the_orphans_of_a_killed_worker_are_killed_by_the_supervisor(
    tmp_path: Path,
) -> None:
    script = "setsid sleep 1000 & echo $$ $! > pids; sleep 1000 & echo $! >> pids; kill -9 $PPID"
    process, _ = await _run_reaped(script, tmp_path)
    assert process.lost  # its worker was killed: no exit status
    await trio.to_thread.run_sync(_wait_until_gone, _pids(tmp_path))
    again, _ = await _run_reaped("true", tmp_path)
    assert again.returncode == 0


async def test_a_killed_supervisor_is_started_again(tmp_path: Path) -> None:
    await _run_reaped("true", tmp_path)
    old = _REAPER.pid
    assert old is not None
    with _REAPER.lock:
        for worker in _REAPER.idle:
            worker.close()  # the next call needs a new worker, from the supervisor
        _REAPER.idle.clear()
    os.kill(old, signal.SIGKILL)
    await trio.to_thread.run_sync(_wait_until_gone, [old])
    process, _ = await _run_reaped(ESCAPES, tmp_path)
    assert process.returncode == 0
    assert process.descendants_killed == 5
    assert _REAPER.pid not in (None, old)


def test_when_toolexec_dies_the_supervisor_ends_everything_below_it(tmp_path: Path) -> None:
    program = f"""
import sys, trio
from toolexec._proc._reaper import _REAPER
sys.path.insert(0, {str(Path(__file__).parent)!r})
from test_process import _run_reaped
async def main():
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_run_reaped, "setsid sleep 1000 & echo $PPID $$ $! > pids; sleep 1000",
                           trio.Path({str(tmp_path)!r}))
        pids = trio.Path({str(tmp_path / "pids")!r})
        while not (await pids.exists() and (await pids.read_text()).endswith("\\n")):
            await trio.sleep(0.01)
        print(_REAPER.pid, flush=True)
        await trio.sleep_forever()
trio.run(main)
"""
    with subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE) as child:
        try:
            assert child.stdout is not None
            supervisor = int(child.stdout.readline())
            worker, shell, job = _pids(tmp_path)
            assert all(_runs(pid) for pid in (supervisor, worker, shell, job))
        finally:
            child.kill()
    _wait_until_gone([supervisor, worker, shell, job])


async def test_a_dead_idle_worker_is_passed_over(tmp_path: Path) -> None:
    await _run_reaped("true", tmp_path)
    supervisor = _REAPER.pid
    workers = [pid for pid, stat in processes().items() if stat[1] == supervisor]
    assert workers
    for worker in workers:
        os.kill(worker, signal.SIGKILL)
    await trio.to_thread.run_sync(_wait_until_gone, workers)
    process, _ = await _run_reaped("exit 4", tmp_path)
    assert process.returncode == 4


async def test_where_the_supervisor_cannot_start_the_caller_is_told_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    refusing = "import socket, sys; socket.socket(fileno=int(sys.argv[1])).send(b'unsupported: no')"
    reaper = _Reaper(command=[sys.executable, "-c", refusing])
    monkeypatch.setattr(toolexec._proc._reaper, "_REAPER", reaper)
    collector = PipeCollector(OutputCapture(10), OutputCapture(10))
    try:
        for _ in range(2):
            stdout, stderr = collector.write_ends
            assert await open_reaped([_attempt("true")], str(tmp_path), stdout, stderr, 1.0) is None
    finally:
        collector.close()
    assert reaper.unsupported == "unsupported: no"
    assert [r.getMessage() for r in caplog.records] == [
        "shell commands are contained by process group only: unsupported: no"
    ]


def test_closing_or_forking_lets_the_supervisor_go() -> None:
    reaper = _Reaper()
    assert reaper.start()
    supervisor = reaper.pid
    assert supervisor is not None
    worker = reaper.take()
    assert worker is not None
    reaper.give_back(worker)
    assert reaper.control is not None
    assert reaper.descriptors() == {reaper.control.fileno(), worker.fileno()}
    reaper.after_fork()  # as in a forked child: the copies are closed, nothing is kept
    assert reaper.pid is None
    assert reaper.control is None
    assert reaper.idle == []
    os.waitpid(supervisor, 0)  # its socket closed: it exits
    assert reaper.start()
    assert reaper.close() not in (None, supervisor)
    assert reaper.descriptors() == set()


def test_an_environment_that_cannot_be_passed_is_refused() -> None:
    with pytest.raises(ValueError, match="NUL"):
        encode_env({"A": "x\0y"})
    with pytest.raises(ValueError, match="null byte"):
        Attempt.of("/bin/true", ["tr\0ue"], {})
