"""Warm sandboxes: one launcher per isolation level, set of limits and mounts,
serving many calls (docs/sandbox.md, "Warm sandboxes").

Theory of operation.

* *A sandbox* is the launcher (``_sandbox_child``, run as ``--serve``) under
  the same wrapper a fresh call gets (``bwrap``, ``unshare``, or none), with
  one end of a unix socket. It reads its set-up once (the mounts, the seccomp
  filter, the scratch directories to empty, what function tools import) and
  says ``R`` when ready. At the namespace levels it is the pid namespace's
  first process; at ``rlimits`` a child subreaper.
* *A call*: toolexec sends the request (its length, then ``marshal``) with
  three descriptors: the call's stdout, stderr and report pipe. The launcher
  forks the call's process (its own environment, directory and process
  group; the request's resource limits), reports on the pipe as a fresh
  launcher does, and when the process exits kills everything else the call
  started (``kill(-1)`` from the namespace's first process: exactly the
  call's processes; at ``rlimits``, its group and every orphan it inherited),
  empties the scratch directories back to what they held before the first
  call, removes System V IPC objects, closes the report pipe, and says ``I``
  (idle), or ``B`` and why (broken), and exits.
* *Ending a call early*: toolexec closes its end of the socket. The launcher
  sends the call SIGTERM, waits the grace period, sends SIGKILL, reports the
  exit and exits; the sandbox is never reused.
* *The pool* keeps at most ``size`` idle sandboxes, the least recently used
  closed first. A sandbox is reused only after a call that ended by itself,
  was reported whole, and was cleaned up (``I``); anything else (a timeout, a
  cancellation, a signal, a lost launcher, a failed clean-up) retires it.
  ``aclose`` closes the idle ones, waits for them to exit (SIGKILL to their
  process group after a bound), and retires busy ones when their calls end.
  The pool holds plain sockets and pids, no trio object, so it outlives one
  ``trio.run``; if toolexec dies, each launcher sees its socket close and
  exits, which ends its namespace.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import select
import signal
import socket
from typing import TYPE_CHECKING

import attrs
import trio

from .._core._errors import ToolError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence
    from typing import Any

    from .._proc._process import PipeCollector

__all__ = ["WarmPool", "WarmSandbox"]

#: How long a launcher gets to set up and say it is ready.
_START_SECONDS = 30.0
#: How long a launcher gets to say it is clean once the call's pipe closed.
_IDLE_SECONDS = 10.0
#: Beyond the grace period: how long a stopped call gets to report.
_STOP_MARGIN = 10.0
#: How long output is still read once the call has reported its end.
_DRAIN_SECONDS = 2.0
#: How long a closed launcher gets to exit before its group gets SIGKILL.
_EXIT_SECONDS = 5.0
#: The descriptor the launcher finds its socket at.
_CONTROL_FD = 3


@attrs.define(eq=False)
class WarmSandbox:
    """One live launcher: its process (the wrapper's pid, leading its group) and socket."""

    key: bytes
    pid: int
    control: socket.socket
    exit_fd: int
    errors: int
    calls: int = 0

    def usable(self) -> bool:
        """Whether it still runs and has said nothing it was not asked for."""
        ready = select.select([self.exit_fd, self.control.fileno()], [], [], 0)[0]
        return not ready

    def stderr(self) -> str:
        """What the wrapper or the launcher wrote on stderr (read without waiting)."""
        try:
            return os.read(self.errors, 4096).decode(errors="replace").strip()
        except OSError:
            return ""

    async def send(self, data: bytes, fds: Sequence[int]) -> None:
        """Send a request with the call's descriptors."""
        sent = socket.send_fds(self.control, [data], list(fds))
        view = memoryview(data)[sent:]
        while view:
            await trio.lowlevel.wait_writable(self.control)
            try:
                view = view[self.control.send(view) :]
            except BlockingIOError:
                continue

    async def receive(self, limit: float) -> bytes:
        """The launcher's next message (``b""``: it closed, or said nothing in time)."""
        with trio.move_on_after(limit):
            while True:
                await trio.lowlevel.wait_readable(self.control)
                try:
                    return self.control.recv(4096)
                except BlockingIOError:
                    continue
                except OSError:
                    return b""
        return b""

    def exited(self) -> bool:
        """Reap the wrapper if it has exited; whether it has."""
        try:
            pid, _ = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            return True
        return pid == self.pid

    def close_files(self) -> None:
        self.control.close()
        for fd in (self.exit_fd, self.errors):
            with contextlib.suppress(OSError):
                os.close(fd)


def _spawn(argv: Sequence[str], env: dict[str, str], control: int, errors: int) -> int:
    if control == _CONTROL_FD:  # dup2 onto itself would keep close-on-exec
        control = os.dup(control)
        try:
            return _spawn(argv, env, control, errors)
        finally:
            os.close(control)
    return os.posix_spawn(
        argv[0],
        [*argv, "--serve", str(_CONTROL_FD)],
        env,
        file_actions=[
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
            (os.POSIX_SPAWN_DUP2, errors, 2),
            (os.POSIX_SPAWN_DUP2, control, _CONTROL_FD),
        ],
        setsid=True,
        setsigmask=(),
    )


def _framed(message: dict[str, Any]) -> bytes:
    body = marshal.dumps(message)
    return len(body).to_bytes(8, "big") + body


@attrs.define(eq=False)
class WarmPool:
    """The warm sandboxes of one ``SubprocessBackend``: at most ``size`` idle."""

    size: int
    idle: list[WarmSandbox] = attrs.Factory(list)
    busy: set[WarmSandbox] = attrs.Factory(set)
    ending: list[WarmSandbox] = attrs.Factory(list)
    closed: bool = False

    def statistics(self) -> dict[str, int]:
        """How many sandboxes are idle, busy, and closed but not yet reaped."""
        self._reap_ended()
        return {"idle": len(self.idle), "busy": len(self.busy), "ending": len(self.ending)}

    async def take(self, key: bytes, argv: Sequence[str], setup: dict[str, Any]) -> WarmSandbox:
        """An idle sandbox for ``key``, else a new one (``argv`` and ``setup`` start it).

        Raises:
            ToolError: the sandbox could not be started (its message says why).
        """
        self._reap_ended()
        for sandbox in reversed(self.idle):
            if sandbox.key == key:
                self.idle.remove(sandbox)
                if sandbox.usable():
                    self.busy.add(sandbox)
                    return sandbox
                self._end(sandbox)
                break
        sandbox = await self._start(key, argv, setup)
        self.busy.add(sandbox)
        return sandbox

    async def _start(self, key: bytes, argv: Sequence[str], setup: dict[str, Any]) -> WarmSandbox:
        if self.closed:
            raise ToolError("the backend was closed (aclose)")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        errors, errors_w = os.pipe()
        try:
            pid = _spawn(argv, {}, theirs.fileno(), errors_w)
        except OSError as exc:
            ours.close()
            os.close(errors)
            raise ToolError(f"cannot start {argv[0]}: {exc.strerror or exc}") from None
        finally:
            theirs.close()
            os.close(errors_w)
        os.set_blocking(errors, False)
        sandbox = WarmSandbox(key, pid, ours, os.pidfd_open(pid), errors)
        try:
            answer = await _handshake(sandbox, ours, setup)
        except BaseException:
            with trio.CancelScope(shield=True):
                await self._stop(sandbox)
            raise
        if answer != b"R":
            said = answer[1:].decode(errors="replace") if answer[:1] == b"F" else ""
            if not said:  # it ended before it could answer: what it wrote, once it has ended
                with trio.move_on_after(_START_SECONDS):
                    await trio.lowlevel.wait_readable(sandbox.exit_fd)
            said = said or sandbox.stderr() or "it did not start"
            with trio.CancelScope(shield=True):
                await self._stop(sandbox)
            raise ToolError(said)
        return sandbox

    async def call(
        self,
        sandbox: WarmSandbox,
        request: dict[str, Any],
        collector: PipeCollector,
        read_reports: Callable[[trio.lowlevel.FdStream], Awaitable[None]],
        finished: trio.Event,
        limits: tuple[float, float],
    ) -> bool:
        """Run one call in ``sandbox`` and give it back (or retire it); whether
        ``limits[0]`` (the call's time) ran out. ``read_reports`` reads the
        report pipe and sets ``finished`` when it closes; ``limits[1]`` is the
        grace period."""
        limit, grace = limits
        reusable = False
        report, report_w = os.pipe()
        try:
            try:
                await sandbox.send(_framed(request), [*collector.write_ends, report_w])
            except OSError:  # it died since it was taken: nothing started, nothing reported
                return False
            finally:
                collector.close_write_ends()
                os.close(report_w)
            stream = trio.lowlevel.FdStream(report)
            report = -1
            timed_out = await self._follow(
                sandbox, stream, collector, read_reports, finished, limit, grace
            )
            if not timed_out:
                reusable = await sandbox.receive(_IDLE_SECONDS) == b"I"
            return timed_out
        finally:
            if report >= 0:
                os.close(report)
            sandbox.calls += 1
            with trio.CancelScope(shield=True):
                await self._give_back(sandbox, reusable, grace)

    async def _follow(
        self,
        sandbox: WarmSandbox,
        stream: trio.lowlevel.FdStream,
        collector: PipeCollector,
        read_reports: Callable[[trio.lowlevel.FdStream], Awaitable[None]],
        finished: trio.Event,
        limit: float,
        grace: float,
    ) -> bool:
        drained = trio.Event()

        async def drain() -> None:
            await collector.drain()
            drained.set()

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(read_reports, stream)
                nursery.start_soon(drain)
                with trio.move_on_after(limit) as deadline:
                    await finished.wait()
                if deadline.cancelled_caught:
                    sandbox.control.shutdown(socket.SHUT_WR)  # the launcher ends the call
                    with trio.move_on_after(grace + _STOP_MARGIN):
                        await finished.wait()
                with trio.move_on_after(_DRAIN_SECONDS):
                    await drained.wait()
                nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True):
                await stream.aclose()
        return deadline.cancelled_caught

    async def _give_back(self, sandbox: WarmSandbox, reusable: bool, grace: float) -> None:
        self.busy.discard(sandbox)
        if not reusable or self.closed:
            await self._stop(sandbox, grace + _STOP_MARGIN)
            return
        self.idle.append(sandbox)
        while len(self.idle) > self.size:
            self._end(self.idle.pop(0))

    def _end(self, sandbox: WarmSandbox) -> None:
        """Close an idle sandbox: it exits on its own; reaped later."""
        with contextlib.suppress(OSError):
            sandbox.control.shutdown(socket.SHUT_RDWR)
        self.ending.append(sandbox)
        self._reap_ended()

    def _reap_ended(self) -> None:
        for sandbox in list(self.ending):
            if sandbox.exited():
                sandbox.close_files()
                self.ending.remove(sandbox)

    async def _stop(self, sandbox: WarmSandbox, limit: float = _EXIT_SECONDS) -> None:
        """Close a sandbox and wait (up to ``limit`` s) for it to exit; then SIGKILL its group."""
        with contextlib.suppress(OSError):
            sandbox.control.shutdown(socket.SHUT_RDWR)
        with trio.move_on_after(limit):
            await trio.lowlevel.wait_readable(sandbox.exit_fd)
        if not sandbox.exited():
            with contextlib.suppress(OSError):
                os.killpg(sandbox.pid, signal.SIGKILL)
            with trio.move_on_after(_EXIT_SECONDS):
                await trio.lowlevel.wait_readable(sandbox.exit_fd)
            sandbox.exited()
        sandbox.close_files()

    async def aclose(self) -> None:
        """Close every idle sandbox and wait for it to exit; busy ones close when
        their calls end. No call is started after."""
        self.closed = True
        ending = [*self.idle, *self.ending]
        self.idle.clear()
        self.ending.clear()
        with trio.CancelScope(shield=True):
            for sandbox in ending:
                await self._stop(sandbox)


async def _handshake(sandbox: WarmSandbox, ours: socket.socket, setup: dict[str, Any]) -> bytes:
    """Send a new sandbox its set-up; its first answer (``b""``: it ended first, as
    ``bwrap`` does when it cannot set the sandbox up, even before reading it)."""
    try:
        ours.sendall(_framed(setup))
    except OSError:  # it has already gone (a broken pipe): its stderr says why
        return b""
    ours.setblocking(False)
    return await sandbox.receive(_START_SECONDS)
