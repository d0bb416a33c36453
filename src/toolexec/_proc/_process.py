"""Child processes in a process group of their own: start, watch, capture, end.

Every subprocess toolexec starts (the shell tool's command, the
``search_files`` matcher, an MCP stdio server) goes through this module, so
they all share one set of rules.

Theory of operation.

* *Start*: ``open_group_process`` starts the child with
  ``start_new_session=True``: it leads a new session and a process group
  whose id is its pid, and everything it starts stays in that group unless
  it starts a session of its own. A session leader cannot leave its group,
  so while the leader runs, the group exists.
* *Liveness*: ``group_alive(process)`` first asks whether the leader still
  runs (reaping it if it exited); only when it does not, it asks the
  kernel whether the group has members (``killpg(pgid, 0)``) and, if so,
  reads ``/proc`` for one that is not a zombie.
* *Signals*: a group id is a pid, and pids are reused. While the leader is
  not reaped, the kernel keeps its pid, and so the group's id, from being
  reused (an exited leader stays a zombie until ``poll`` or ``wait``
  reaps it, and nothing else reaps it): only then is the group signalled
  whole (``killpg``). Once the leader is reaped, the id is held only while
  members are left, so the group is not signalled as a group any more: its
  members are listed from ``/proc`` and each is signalled through a pidfd,
  after checking it is still the process listed (its start time;
  ``_supervisor.signal_process``). One window remains: right after the
  leader is reaped, ``killpg(pgid, 0)`` (which sends nothing) asks whether
  anything is left and the members are listed by group id; were the group
  to empty and its number be handed to a new group in those microseconds,
  that group's members would be listed. Pids are handed out in turn, so
  the kernel's counter would have to wrap around in between.
* *Termination*: ``terminate_group`` sends SIGTERM (and SIGCONT, so a
  stopped process acts on it) to the group, waits up to a grace period for
  the group to empty, then sends SIGKILL, even when it is cancelled
  mid-wait. ``reap`` does that (shielded) if anything is left, reaps the
  leader and closes the pipes trio made for it.
* *Capture*: output is read while a process runs and while its group winds
  down, so a process writing during its SIGTERM handler never blocks on a
  full pipe. ``PipeCollector`` reads stdout and stderr through one selector
  (epoll, kqueue) that also watches a pidfd for the leader's exit; where
  there are no pidfds, a second task waits for the exit instead.
  ``OutputCapture`` keeps the first and last bytes of a stream and
  ``LineTail`` its last lines, so memory stays bounded whatever a process
  prints. ``supervise`` puts these together: collect until the leader
  exits or a time limit passes, end whatever is left of the group while
  still collecting, then drain the pipes for a bounded time.
"""

from __future__ import annotations

import collections
import contextlib
import os
import selectors
import signal
from typing import TYPE_CHECKING

import attrs
import trio

from ._supervisor import processes, signal_process

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = [
    "LineTail",
    "OutputCapture",
    "PipeCollector",
    "group_alive",
    "group_has_members",
    "open_group_process",
    "reap",
    "supervise",
    "terminate_group",
]

_READ_CHUNK = 1 << 16
#: How long the pipes are drained after the group is gone (a process that
#: left the group may still hold them open).
_DRAIN_SECONDS = 2.0
#: How long the group gets to disappear after SIGKILL.
_KILL_WAIT = 1.0
#: How long ``reap`` waits for the leader after the group was ended.
_LEADER_WAIT = 5.0


# -- starting ------------------------------------------------------------------


async def open_group_process(
    argv: Sequence[str],
    *,
    stdin: int | None,
    stdout: int | None,
    stderr: int | None,
    executable: str | None = None,
    cwd: str | None = None,
    env: dict[str, str] | None = None,
    pass_fds: Sequence[int] = (),
) -> trio.Process:
    """Start ``argv`` as the leader of a new session and process group.

    ``stdin``, ``stdout`` and ``stderr`` are what ``subprocess`` takes (a
    descriptor, ``subprocess.PIPE``, ``subprocess.DEVNULL``); ``pass_fds``
    are more descriptors the child keeps, at the same numbers. End it with
    ``reap`` on every path.
    """
    return await trio.lowlevel.open_process(
        list(argv),
        executable=executable,
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        cwd=cwd,
        env=env,
        start_new_session=True,
        pass_fds=tuple(pass_fds),
    )


# -- liveness --------------------------------------------------------------------


def group_alive(process: trio.Process) -> bool:
    """Whether a live (non-zombie) process is left in ``process``'s group.

    Reaps the leader if it has exited.
    """
    if process.poll() is None:
        return True  # a session leader cannot leave its group
    return _has_live_member(process.pid)


def group_has_members(pgid: int) -> bool:
    """Whether a live (non-zombie) process is in group ``pgid``, whose leader is reaped."""
    return _has_live_member(pgid)


def _has_live_member(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    members = _members(pgid)
    return members is None or bool(members)  # no /proc: trust killpg


def _members(pgid: int) -> dict[int, int] | None:
    """The live members of group ``pgid`` as pid -> start time; ``None`` without /proc."""
    try:
        table = processes()
    except OSError:
        return None
    return {pid: stat[3] for pid, stat in table.items() if stat[2] == pgid}


# -- ending ----------------------------------------------------------------------


def _signal_group(process: trio.Process, *sigs: signal.Signals) -> None:
    """Signal what is left of ``process``'s group (see the module docstring).

    Several signals go, in order, to the same processes: whether the leader
    has been reaped is read once, so a leader that dies of the first signal
    does not send the next one another way.
    """
    # Not reaped: the group's id is still the group's. Reaped: its members, or the
    # group id anyway (just after the probe) where there is no /proc to list them.
    members = None if process.returncode is None else _members(process.pid)
    for sig in sigs:
        if members is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, sig)
            continue
        for pid, start in members.items():
            signal_process(pid, start, sig)


async def terminate_group(process: trio.Process, grace: float) -> None:
    """End every process in ``process``'s group: SIGTERM, up to ``grace`` s, SIGKILL.

    The leader is reaped as soon as it exits, so that it does not count as
    alive. SIGKILL is sent even if this is cancelled mid-wait; after it,
    the group gets up to a second to disappear. Nothing is signalled when
    nothing in the group is alive.
    """
    if not group_alive(process):
        return
    # A stopped process acts on SIGTERM only once resumed.
    _signal_group(process, signal.SIGTERM, signal.SIGCONT)
    try:
        await _wait_gone(process, grace)
    finally:
        if group_alive(process):
            _signal_group(process, signal.SIGKILL)
    await _wait_gone(process, _KILL_WAIT)


async def _wait_gone(process: trio.Process, limit: float) -> None:
    # Another process's death has no event to wait on: poll, backing off.
    with trio.move_on_after(limit):
        delay = 0.001
        while True:
            if not group_alive(process):
                return
            await trio.sleep(delay)
            delay = min(delay * 2, 0.05)


async def reap(process: trio.Process, grace: float) -> None:
    """Terminate what is left of the group, reap the leader and close trio's pipes, shielded.

    Returns without a scheduling round trip when the leader is reaped, its
    group is empty and trio made no pipes (the shell's own case).
    """
    if group_alive(process):
        with trio.CancelScope(shield=True):
            await terminate_group(process, grace)
            with trio.move_on_after(_LEADER_WAIT):
                await process.wait()
    streams = [s for s in (process.stdin, process.stdout, process.stderr) if s is not None]
    if streams:
        with trio.CancelScope(shield=True):
            for stream in streams:
                await stream.aclose()


# -- bounded capture ---------------------------------------------------------------


@attrs.define(eq=False)
class OutputCapture:
    """Keep the first and last bytes of a stream, count the rest.

    Memory is bounded by ``limit`` (half head, half tail) whatever the
    stream's size.
    """

    limit: int
    head: bytearray = attrs.Factory(bytearray)
    tail: bytearray = attrs.Factory(bytearray)
    total: int = 0

    def add(self, chunk: bytes | bytearray) -> None:
        """Take a chunk of output."""
        self.total += len(chunk)
        room = self.limit // 2 - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            keep = self.limit - self.limit // 2
            if len(self.tail) > keep:
                del self.tail[: len(self.tail) - keep]

    @property
    def kept(self) -> int:
        """How many bytes are held."""
        return len(self.head) + len(self.tail)

    @property
    def truncated(self) -> bool:
        """Whether bytes were dropped."""
        return self.total > self.kept

    def text(self) -> str:
        """The kept bytes, decoded with replacement, marking any gap."""
        if not self.truncated:
            return (bytes(self.head) + bytes(self.tail)).decode("utf-8", "replace")
        head = self.head.decode("utf-8", "replace")
        tail = self.tail.decode("utf-8", "replace")
        return f"{head}\n[... {self.total - self.kept} bytes omitted ...]\n{tail}"


@attrs.define(eq=False)
class LineTail:
    """Keep the last ``count`` lines of a stream, each cut at ``width`` bytes.

    Lines are decoded with replacement and lose trailing white space.
    Memory is bounded by about ``count * width`` bytes, however long a line
    the stream sends.
    """

    count: int
    width: int = 4096
    lines: collections.deque[str] = attrs.field(init=False)
    _partial: bytearray = attrs.field(init=False, factory=bytearray)

    def __attrs_post_init__(self) -> None:
        self.lines = collections.deque(maxlen=self.count)

    def add(self, chunk: bytes | bytearray) -> list[str]:
        """Take a chunk of the stream; return the lines it completed."""
        *ended, rest = bytes(chunk).split(b"\n")
        done = []
        for piece in ended:
            self._keep(piece)
            done.append(self._end_line())
        self._keep(rest)
        return done

    def close(self) -> list[str]:
        """End the stream; return its last line if it had no newline."""
        return [self._end_line()] if self._partial else []

    def _keep(self, piece: bytes) -> None:
        room = self.width - len(self._partial)
        if room > 0:
            self._partial += piece[:room]

    def _end_line(self) -> str:
        line = self._partial.decode("utf-8", "replace").rstrip()
        self._partial.clear()
        self.lines.append(line)
        return line


class PipeCollector:
    """A process's stdout and stderr pipes, read by one task through one selector.

    ``listener``, when given, sees every chunk as it is read (and ``b""`` at
    EOF), with the stream's name. One task and a selector (epoll, kqueue)
    instead of a pump task per pipe: a call that prints little costs no
    tasks and no nursery. Each wake-up reads at most one chunk per pipe and
    then waits again, so a flood of output cannot starve other tasks. The
    collector owns every descriptor it opens; ``close`` closes whatever is
    still open. Trio itself only ever waits on the selector's descriptor,
    and never while it is being closed, so nothing needs ``notify_closing``.
    """

    def __init__(
        self,
        stdout: OutputCapture,
        stderr: OutputCapture,
        listener: Callable[[str, bytes], None] | None = None,
    ) -> None:
        self._open: list[int] = []
        self._pipes: dict[int, OutputCapture] = {}
        self._names: dict[int, str] = {}
        self._listener = listener
        self.write_ends: list[int] = []
        self._selector = selectors.DefaultSelector()
        try:
            for name, capture in (("stdout", stdout), ("stderr", stderr)):
                read_end, write_end = os.pipe()
                self._open += (read_end, write_end)
                self.write_ends.append(write_end)
                os.set_blocking(read_end, False)
                self._selector.register(read_end, selectors.EVENT_READ)
                self._pipes[read_end] = capture
                self._names[read_end] = name
        except BaseException:
            self.close()
            raise

    def close_write_ends(self) -> None:
        """Close the parent's copies of the write ends (the child holds its own)."""
        self._close(self.write_ends)

    def close(self) -> None:
        """Close the selector and every pipe end still open."""
        self._selector.close()
        self._close(list(self._open))

    def _close(self, fds: list[int]) -> None:
        for fd in fds:
            if fd in self._open:
                self._open.remove(fd)
                with contextlib.suppress(OSError):
                    os.close(fd)

    @property
    def done(self) -> bool:
        """Whether both pipes reached EOF."""
        return not self._pipes

    async def until_exit(self, exit_fd: int) -> None:
        """Collect output until ``exit_fd`` (a pidfd) is readable: the leader has exited."""
        selector = self._selector
        selector.register(exit_fd, selectors.EVENT_READ)
        try:
            while True:
                await trio.lowlevel.wait_readable(selector.fileno())
                for key, _ in selector.select(0):
                    if key.fd == exit_fd:
                        return
                    self._read(key.fd)
        finally:
            selector.unregister(exit_fd)

    async def drain(self) -> None:
        """Collect output until both pipes reach EOF."""
        while True:
            for fd in list(self._pipes):
                self._read(fd)
            if not self._pipes:
                return
            await trio.lowlevel.wait_readable(self._selector.fileno())

    def _read(self, fd: int) -> None:
        try:
            chunk = os.read(fd, _READ_CHUNK)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""  # a read error ends the output like EOF does
        if chunk:
            self._pipes[fd].add(chunk)
        else:
            self._selector.unregister(fd)
            del self._pipes[fd]
        if self._listener is not None:
            self._listener(self._names[fd], chunk)  # b"" at EOF


def _pidfd(process: trio.Process) -> int | None:
    """A descriptor that becomes readable when ``process`` exits, where the OS has one."""
    if _pidfd_open is None:
        return None
    try:
        return _pidfd_open(process.pid)
    except OSError:  # a kernel without pidfds
        return None


_pidfd_open: Callable[[int], int] | None = getattr(os, "pidfd_open", None)


async def supervise(
    process: trio.Process, collector: PipeCollector, limit: float, grace: float
) -> bool:
    """Collect output until the leader exits or ``limit`` passes; end the group; drain.

    Whatever is left in the group when the leader exits (background
    processes that could hold the pipes open) is terminated like a process
    that ran out of time, while the output is still collected. Returns
    whether ``limit`` passed.
    """
    with trio.move_on_after(limit) as deadline:
        await _collect_until_exit(process, collector)
    if group_alive(process):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(collector.drain)
            await terminate_group(process, grace)
            nursery.cancel_scope.deadline = trio.current_time() + _DRAIN_SECONDS
    elif not collector.done:
        with trio.move_on_after(_DRAIN_SECONDS):
            await collector.drain()
    return deadline.cancelled_caught


async def _collect_until_exit(process: trio.Process, collector: PipeCollector) -> None:
    exit_fd = _pidfd(process)
    if exit_fd is None:  # no pidfds: a task collects while this one waits
        async with trio.open_nursery() as nursery:
            nursery.start_soon(collector.drain)
            await process.wait()
            nursery.cancel_scope.cancel()
        return
    try:
        await collector.until_exit(exit_fd)
    finally:
        os.close(exit_fd)
