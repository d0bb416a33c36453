"""Commands under a reaper: nothing a command starts outlives its call (Linux).

A process group does not hold a command's background jobs: ``set -m``
gives each job a group of its own, ``setsid`` a session of its own, and a
double fork or ``nohup``/``disown`` leaves an orphan that init adopts. A
Linux *child subreaper* does: every process orphaned below it is
re-parented to it instead of to init, so all of a command's descendants
stay below it, whatever groups and sessions they make.

Theory of operation.

* *Who is the subreaper.* Not toolexec: the flag is process-wide, and the
  host's other children's orphans would pile up as zombies in it. Not the
  command's shell: when it exits, its orphans move on to init before
  toolexec hears of it. So a small supervisor (``_supervisor.py``, run
  with ``python -I -S``) is started once per toolexec process, on the
  first call, and forks one *worker* per concurrent call; workers are
  kept (up to ``_MAX_IDLE`` idle) and reused, one call at a time, so a
  call costs no interpreter start-up and no fork of the host: one small
  message each way and the ``posix_spawn`` of the command, which is about
  what ``trio.open_process`` costs (it hands ``Popen`` to a thread); the
  benchmark is in ``docs/performance.md``. The other designs cost more: a
  fresh interpreter per call tens of milliseconds, a ``preexec_fn`` (to
  set the flag in a forked child) a fork of the whole host per call, and
  neither gives the exact exit status or the second line of defence
  below. A worker learns of the command's exit through a pidfd (through
  SIGCHLD where there are none).
* *Attribution.* A worker serves one call at a time and is a subreaper,
  so every process below it belongs to that call. It starts the command
  in a session of its own with ``posix_spawn``; when the command exits
  and nothing is left (``waitpid`` says the worker has no child) it
  reports at once; otherwise it SIGTERMs every descendant, waits up to
  the grace period, SIGKILLs until it has no child left, and reports how
  many it ended. On timeout or cancellation toolexec sends ``"term"`` and
  the same happens to the command as well.
* *Exit status.* The worker is the command's parent, so it reads the
  exact status (a signal stays a signal, -15, not 143).
* *Dying with toolexec.* The supervisor and each worker watch their
  socket to toolexec: when toolexec exits or is killed, the sockets close,
  each worker kills everything below it and exits, and so does the
  supervisor. ``PR_SET_PDEATHSIG`` is not used: it fires when the *thread*
  that started the process ends, and trio starts processes from worker
  threads that end when idle.
* *The command against its supervisors.* Both ignore every signal that
  can be ignored and live outside the command's session and group, so
  ``kill 0``, ``kill -TERM -$$`` or ``pkill -TERM sleep`` do not reach
  them. A command that SIGKILLs its worker (``kill -9 $PPID``) leaves its
  orphans to the supervisor, itself a subreaper, which SIGKILLs every
  child that is not a worker. What remains: the supervisors run as the
  same user, so a command that sets out to kill (or SIGSTOP) both of them
  escapes, and so do processes started by another service on the
  command's behalf (``systemd-run``, an existing ``tmux`` server,
  ``docker run``), which are not its descendants, and setuid programs'
  processes, which it may not signal. Only a sandbox backend (another
  user, a pid namespace) contains those.
* *Signals.* Workers signal through pidfds opened after listing and
  checked against the listed start time (``_supervisor.signal_process``),
  so a pid reused meanwhile is never signalled.
* *Elsewhere.* Where there is no subreaper (not Linux) or the supervisor
  cannot start, ``open_reaped`` returns ``None`` and the caller uses a
  process group as before (``_process``); that is logged once.

What the command inherits from the supervisor rather than from toolexec
at the time of the call: the umask, resource limits and scheduling
priority (the supervisor takes toolexec's when it starts).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import marshal
import os
import signal
import socket
import sys
import threading
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ._supervisor import KILL_LIMIT

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from ._process import PipeCollector

__all__ = ["Attempt", "ReapedProcess", "open_reaped", "supervise_reaped"]

_log = logging.getLogger("toolexec.process")

_PROGRAM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_supervisor.py")
#: Idle workers kept for later calls; more are closed when their call ends.
_MAX_IDLE = 4
#: How long the supervisor gets to start and say it is ready.
_START_SECONDS = 30.0
#: Beyond the grace period: how long a worker gets to report after "term"
#: (it repeats SIGKILL for up to ``KILL_LIMIT`` seconds).
_REPORT_MARGIN = KILL_LIMIT + 5.0
#: How long the pipes are drained once the worker has reported.
_DRAIN_SECONDS = 2.0
_TERM = marshal.dumps(("term",))


@attrs.frozen
class Attempt:
    """One way to start a command: the program, its argv and environment, encoded."""

    executable: bytes
    argv: list[bytes]
    env: dict[bytes, bytes]

    @classmethod
    def of(cls, executable: str, argv: Sequence[str], env: dict[bytes, bytes]) -> Attempt:
        """Encode ``executable`` and ``argv`` as ``subprocess`` would.

        Raises:
            ValueError: an argument holds a NUL byte or cannot be encoded.
        """
        encoded = [os.fsencode(a) for a in argv]
        path = os.fsencode(executable)
        if any(b"\0" in a for a in (path, *encoded)):
            raise ValueError("embedded null byte")
        return cls(path, encoded, env)


def encode_env(env: Mapping[str, str]) -> dict[bytes, bytes]:
    """An environment in bytes, for ``Attempt``.

    Raises:
        ValueError: a name or value holds a NUL byte (or a name ``=``), or
            cannot be encoded.
    """
    encoded = {os.fsencode(k): os.fsencode(v) for k, v in env.items()}
    if any(b"\0" in k or b"=" in k or b"\0" in v for k, v in encoded.items()):
        raise ValueError("an environment variable holds a NUL byte, or its name a '='")
    return encoded


# -- the supervisor process and its workers --------------------------------------------


@attrs.define(eq=False)
class _Reaper:
    """The supervisor process of this toolexec process, and the idle workers."""

    #: Held briefly, around the state below; never while waiting.
    lock: threading.Lock = attrs.Factory(threading.Lock)
    #: Held (in a thread) while the supervisor starts.
    starting: threading.Lock = attrs.Factory(threading.Lock)
    pid: int | None = None
    control: socket.socket | None = None
    idle: list[socket.socket] = attrs.Factory(list)
    unsupported: str | None = None
    #: How to run the supervisor program (the descriptor number follows).
    command: list[str] = attrs.Factory(lambda: [sys.executable, "-I", "-S", _PROGRAM])

    def start(self) -> bool:
        """Start the supervisor unless it runs; block until it is ready. Returns whether it is.

        Blocks for the start of a Python interpreter: call it in a thread.
        """
        with self.starting:
            if self.control is None and self.unsupported is None:
                old, self.pid = self.pid, None
                if old is not None:  # it died: reap it
                    _reap_quietly(old)
                pid, control, failure = _start_supervisor(self.command)
                with self.lock:
                    self.pid, self.control = pid, control
                    self.unsupported = failure
                if failure is not None:
                    _log.warning("shell commands are contained by process group only: %s", failure)
            return self.control is not None

    def take(self) -> socket.socket | None:
        """An idle worker, or a new one; ``None`` if the supervisor does not run."""
        with self.lock:
            if self.idle:
                return self.idle.pop()
            if self.control is None:
                return None
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                socket.send_fds(self.control, [b"w"], [theirs.fileno()])
            except OSError:  # the supervisor is gone (or stuck): start another
                ours.close()
                self.control.close()
                self.control = None
                return None
            finally:
                theirs.close()
        ours.setblocking(False)
        return ours

    def give_back(self, worker: socket.socket) -> None:
        with self.lock:
            if len(self.idle) < _MAX_IDLE:
                self.idle.append(worker)
                return
        worker.close()

    def descriptors(self) -> set[int]:
        """The descriptors held between calls (for tests that look for leaks)."""
        with self.lock:
            held = [self.control, *self.idle]
            return {s.fileno() for s in held if s is not None}

    def close(self) -> int | None:
        """Let the supervisor and the idle workers go (they exit); return its pid.

        The next call starts another. A worker serving a call ends when
        the call does.
        """
        with self.lock:
            for sock in (self.control, *self.idle):
                if sock is not None:
                    sock.close()
            pid, self.pid, self.control, self.idle = self.pid, None, None, []
        return pid

    def after_fork(self) -> None:
        """In a forked child: let go of the parent's supervisor and workers."""
        for sock in (self.control, *self.idle):
            if sock is not None:
                sock.close()
        self.lock, self.starting = threading.Lock(), threading.Lock()
        self.pid, self.control, self.idle = None, None, []


def _start_supervisor(
    command: list[str],
) -> tuple[int | None, socket.socket | None, str | None]:
    """Start a supervisor and wait until it is ready: its pid and socket, or why not."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = None
    try:
        pid = _spawn_supervisor(command, theirs.fileno())
        ours.settimeout(_START_SECONDS)
        answer = ours.recv(1024)
    except OSError as exc:
        answer = f"could not start the supervisor: {exc}".encode()
    finally:
        theirs.close()
    if answer == b"ready":
        ours.setblocking(False)
        return pid, ours, None
    ours.close()
    if pid is not None:  # our child, not reaped: the pid is still its own
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
    return None, None, answer.decode(errors="replace") or "the supervisor did not start"


def _spawn_supervisor(command: list[str], fd: int) -> int:
    if fd == 3:  # dup2 onto itself would keep close-on-exec
        fd = os.dup(fd)
        try:
            return _spawn_supervisor(command, fd)
        finally:
            os.close(fd)
    return os.posix_spawn(
        command[0],
        [*command, "3"],
        {},
        file_actions=[
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
            (os.POSIX_SPAWN_DUP2, 1, 2),
            (os.POSIX_SPAWN_DUP2, fd, 3),
        ],
        setsid=True,
        setsigmask=(),
    )


def _reap_quietly(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


_REAPER = _Reaper()
if sys.platform != "linux" or not sys.executable or not os.path.isfile(_PROGRAM):
    _REAPER.unsupported = "no child subreaper on this platform"
os.register_at_fork(after_in_child=_REAPER.after_fork)


# -- one call --------------------------------------------------------------------------


class ReapedProcess:
    """A command a worker runs; what the worker reported so far.

    ``exited`` once the command exited (``returncode`` is then set),
    ``done`` once its descendants are gone too and the worker reported
    ``descendants_killed`` (and ``descendants_left``, those it could not
    end). ``error`` is set when the command could not start; ``lost``
    when the worker ended or stopped answering without a report.
    """

    def __init__(self, worker: socket.socket) -> None:
        self._worker = worker
        self._term_sent = False
        self.exited = False
        self.done = False
        self.lost = False
        self.returncode: int | None = None
        #: Known once the worker reported (``None`` if it never did).
        self.descendants_killed: int | None = None
        self.descendants_left: int | None = None
        self.failed_attempts = 0
        self.error: OSError | None = None

    def fileno(self) -> int:
        """A descriptor that is readable when the worker has something to report."""
        return self._worker.fileno()

    def receive(self) -> None:
        """Take in what the worker sent, if anything."""
        try:
            data = self._worker.recv(4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        try:
            message = marshal.loads(data) if data else ("lost",)
        except (EOFError, ValueError, TypeError):
            message = ("lost",)
        self._take(message)

    def _take(self, message: tuple[Any, ...]) -> None:
        if message[0] == "exited":
            self.exited, self.returncode = True, message[1]
        elif message[0] == "done":
            _, self.returncode, self.descendants_killed, self.descendants_left = message[:4]
            self.failed_attempts = message[4]
            if message[5] is not None:
                code, text, name = message[5]
                self.error = OSError(code, text, os.fsdecode(name) or None)
            self.exited = self.done = True
        else:
            self.exited = self.done = self.lost = True

    def terminate(self) -> None:
        """Ask the worker to end the command and everything below it (once)."""
        if self.exited or self._term_sent:  # once it exited, the worker is ending the rest
            return
        self._term_sent = True
        try:
            self._worker.send(_TERM)
        except OSError:
            self.exited = self.done = self.lost = True

    async def wait_done(self, limit: float) -> None:
        """Wait up to ``limit`` s for the report; past it, the worker counts as lost."""
        with trio.move_on_after(limit):
            while not self.done:
                await trio.lowlevel.wait_readable(self._worker)
                self.receive()
        if not self.done:
            self.exited = self.done = self.lost = True

    async def aclose(self, grace: float) -> None:
        """End the command if it has not ended (shielded); keep the worker for another call."""
        if not self.done:
            with trio.CancelScope(shield=True):
                self.terminate()
                await self.wait_done(grace + _REPORT_MARGIN)
        if self.lost or self.descendants_left:
            self._worker.close()  # it kills what is left below it, and exits
        else:
            _REAPER.give_back(self._worker)


async def open_reaped(
    attempts: Sequence[Attempt], cwd: str, stdout: int, stderr: int, grace: float
) -> ReapedProcess | None:
    """Have a worker start the first of ``attempts`` that starts, or ``None`` (no reaper here).

    ``stdout`` and ``stderr`` are passed to the command; the caller still
    closes its own copies. Always ``aclose`` what this returns.

    Raises:
        OSError: the request cannot be sent (an argument list that is too long).
    """
    request = marshal.dumps(
        ("run", [(a.executable, a.argv, a.env) for a in attempts], os.fsencode(cwd), grace)
    )
    for _ in range(_MAX_IDLE + 2):  # dead idle workers, a dead supervisor: try another
        if _REAPER.unsupported is not None:
            return None
        worker = _REAPER.take()
        if worker is None:
            if not await trio.to_thread.run_sync(_REAPER.start):
                return None
            continue
        try:
            socket.send_fds(worker, [request], [stdout, stderr])
        except OSError as exc:
            worker.close()
            if exc.errno == errno.EMSGSIZE:
                raise OSError(errno.E2BIG, os.strerror(errno.E2BIG)) from None
            continue
        return ReapedProcess(worker)
    return None


async def supervise_reaped(
    process: ReapedProcess, collector: PipeCollector, limit: float, grace: float
) -> bool:
    """Collect output until the command exits or ``limit`` passes, then until all is ended.

    Past ``limit`` the worker is told to end the command; output is still
    collected while it and its descendants wind down, then the pipes are
    drained for a bounded time. Returns whether ``limit`` passed.
    """
    with trio.move_on_after(limit) as deadline:
        while not process.exited:
            await collector.until_exit(process.fileno())
            process.receive()
    process.terminate()  # nothing to do if it exited
    with trio.move_on_after(grace + _REPORT_MARGIN):
        while not process.done:
            await collector.until_exit(process.fileno())
            process.receive()
    if not process.done:
        process.exited = process.done = process.lost = True
    if not collector.done:
        with trio.move_on_after(_DRAIN_SECONDS):
            await collector.drain()
    return deadline.cancelled_caught
