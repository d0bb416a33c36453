"""A fresh ``bwrap`` sandbox for a shell command, with no launcher (docs/sandbox.md).

Where the call has no resource limit to set (the one thing bwrap cannot do
itself), the command runs under bwrap directly, with the namespaces and
mounts a launched call gets: bwrap's own first process reaps orphans and ends
the namespace when the command exits, ``--chdir`` sets the working directory,
``--cap-drop ALL`` drops every capability, and the same seccomp filter
(the keyring calls refused, and without the network unix sockets) is read
from descriptor 3 (``--seccomp 3``).

bwrap is started with ``posix_spawn`` from the thread running trio (no
thread hand-off, no fork of the host), leading a session and process group
of its own, with ``--die-with-parent``: if that thread ends (toolexec dies),
the kernel kills bwrap and everything in its namespace. The call waits on a
pidfd while it collects output. On timeout or cancellation the group gets
SIGTERM, the grace period, then SIGKILL (shielded); bwrap dying ends the
namespace, whatever sessions the command made.

What differs from a launched call: a command killed by a signal ends with
exit code 128 + the signal's number (as bwrap passes it on); and bwrap's
own failure to set up (``bwrap: ...`` on stderr, exit code 1) is told apart
from the command's by that message.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
from typing import TYPE_CHECKING, Any

import trio

from .._core._errors import ToolError
from .._proc._process import PipeCollector, group_has_members
from .._tools._shell import CommandEnd
from ._sandbox_child import seccomp_filter
from ._sandbox_launch import bwrap_command, seal_of

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._proc._process import OutputCapture
    from ._sandbox_launch import Detection
    from ._sandbox_limits import SandboxLimits

__all__ = ["run_in_bwrap"]

#: How long output is still read once bwrap has exited or been ended.
_DRAIN_SECONDS = 2.0
#: How long bwrap gets to go after SIGKILL.
_KILL_WAIT = 5.0
_FILTERS: dict[bool, bytes] = {}


def _filter_pipe(unix: bool) -> int:
    """A pipe's read end holding the seccomp filter, whole (it fits the pipe's buffer)."""
    code = _FILTERS.get(unix)
    if code is None:
        code = _FILTERS[unix] = seccomp_filter(unix)
    read, write = os.pipe()
    try:
        os.write(write, code)
    finally:
        os.close(write)
    return read


def _spawn(argv: list[str], env: dict[str, str], fds: list[int]) -> int:
    """Start ``argv`` with ``fds`` as its descriptors 1, 2 (and 3), in a new session."""
    if fds[2:3] == [3]:  # dup2 onto itself would keep close-on-exec
        moved = [os.dup(fd) for fd in fds]
        try:
            return _spawn(argv, env, moved)
        finally:
            for fd in moved:
                os.close(fd)
    actions: list[tuple[Any, ...]] = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)]
    actions += [(os.POSIX_SPAWN_DUP2, fd, target) for target, fd in enumerate(fds, start=1)]
    return os.posix_spawn(argv[0], argv, env, file_actions=actions, setsid=True, setsigmask=())


def _exited(exit_fd: int) -> bool:
    return bool(select.select([exit_fd], [], [], 0)[0])


def _signal(pid: int, *signals: signal.Signals) -> None:
    for sig in signals:  # the leader is not reaped yet: the group's id is still its own
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)


async def _end(pid: int, exit_fd: int, grace: float) -> bool:
    """SIGTERM to bwrap's group, up to ``grace`` s, then SIGKILL (shielded);
    whether it had to (bwrap had not exited)."""
    with trio.CancelScope(shield=True):
        if _exited(exit_fd):
            return False
        _signal(pid, signal.SIGTERM, signal.SIGCONT)
        with trio.move_on_after(grace):
            await trio.lowlevel.wait_readable(exit_fd)
        if not _exited(exit_fd):
            _signal(pid, signal.SIGKILL)
            with trio.move_on_after(_KILL_WAIT):
                await trio.lowlevel.wait_readable(exit_fd)
    return True


async def _namespace_gone(pgid: int) -> None:
    """Wait (shielded, bounded) until bwrap's group is empty. Ended early, bwrap
    exits before its first process has finished ending the namespace; that
    process stays in the group until every process in the namespace is gone."""
    with trio.CancelScope(shield=True), trio.move_on_after(_KILL_WAIT):
        delay = 0.001
        while group_has_members(pgid):  # no event to wait on: poll, backing off
            await trio.sleep(delay)
            delay = min(delay * 2, 0.05)


async def _follow(
    pid: int, exit_fd: int, collector: PipeCollector, limit: float, grace: float
) -> tuple[bool, bool]:
    """Collect output until bwrap exits or ``limit`` passes (then end it); whether
    it passed, and whether bwrap was ended (and not exited by itself)."""
    try:
        with trio.move_on_after(limit) as deadline:
            await collector.until_exit(exit_fd)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(collector.drain)
            ended = await _end(pid, exit_fd, grace)
            nursery.cancel_scope.deadline = trio.current_time() + _DRAIN_SECONDS
    except BaseException:  # cancelled, say: end it, reap it, and let the namespace go
        ended = await _end(pid, exit_fd, grace)
        if _exited(exit_fd):
            os.waitpid(pid, 0)  # noqa: ASYNC222  # it exited
            if ended:
                await _namespace_gone(pid)
        raise
    return deadline.cancelled_caught, ended


async def run_in_bwrap(
    found: Detection,
    limits: SandboxLimits,
    workspace: str,
    attempt: tuple[str, list[str], dict[str, str] | None],
    output: tuple[OutputCapture, OutputCapture, Callable[[str, bytes], None] | None],
    limit: float,
    grace: float,
    env: dict[str, str],
) -> CommandEnd | str | None:
    """Run the command of ``attempt`` (its program, argv and environment;
    ``None``: ``env``) under bwrap; how it ended, or why the sandbox could
    not be set up, or ``None`` where this way is not open (the program
    lives where the sandbox hides it)."""
    path, argv, attempt_env = attempt
    command = bwrap_command(found, limits, workspace, path, argv)
    if command is None:
        return None
    out, err, listener = output
    try:
        collector = PipeCollector(out, err, listener)
    except OSError as exc:
        raise ToolError(f"Could not create the pipes for the sandbox: {exc}") from None
    try:
        seal = seal_of(limits)
        seccomp = [_filter_pipe(unix=seal == "unix")] if seal else []
        try:
            pid = _spawn(command, attempt_env or env, [*collector.write_ends, *seccomp])
        except OSError as exc:
            return f"cannot start bwrap: {exc.strerror or exc}"
        finally:
            collector.close_write_ends()
            for fd in seccomp:
                os.close(fd)
        exit_fd = os.pidfd_open(pid)
        try:
            timed_out, ended = await _follow(pid, exit_fd, collector, limit, grace)
            # Reaped once it exited; one that outlived SIGKILL is left to the kernel.
            gone = _exited(exit_fd)
            status = os.waitpid(pid, 0)[1] if gone else None  # noqa: ASYNC222  # it exited
            if gone and ended:
                await _namespace_gone(pid)
        finally:
            os.close(exit_fd)
    finally:
        collector.close()
    if status is None:
        return CommandEnd(None, timed_out, None, None, True)
    code = os.waitstatus_to_exitcode(status)
    said = err.text()
    if code == 1 and said.startswith("bwrap: ") and not out.total:
        return said.strip()
    return CommandEnd(code, timed_out, None, None, False)
