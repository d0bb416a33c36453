"""The reaper program: subreapers that start commands and end whatever they leave.

``_reaper`` runs this file as ``python -I -S _supervisor.py 3`` with a
``SOCK_SEQPACKET`` socket on descriptor 3. It imports only the standard
library, never toolexec (``_process`` imports its ``/proc`` helpers).

Two kinds of process run this code, both Linux *child subreapers*
(``prctl(PR_SET_CHILD_SUBREAPER)``): a process orphaned anywhere below
one is re-parented to it rather than to init, so ``setsid``, a double
fork, ``nohup`` or ``disown`` cannot take a process out of its subtree.

* The *supervisor*, one per toolexec process. For each message ``b"w"``
  with a socket attached, it forks a worker serving that socket. Any
  other process that becomes its child can only be the orphan of a worker
  that was killed (a command killing its own worker): it is SIGKILLed,
  with everything below it. It exits when toolexec's end of its socket
  closes, that is when toolexec exits or dies.
* A *worker* per socket, serving one call at a time. Messages are
  marshalled tuples::

      toolexec -> worker  ("run", attempts, cwd, grace) + stdout and stderr
                          ("term",)   end the command now (timeout, cancel)
      worker -> toolexec  ("exited", returncode)   leftovers are being ended
                          ("done", returncode, killed, left, failed, error)

  ``attempts`` are ``(executable, argv, env)`` in bytes, tried in order
  (the shell's direct exec, then bash); ``failed`` says how many failed to
  start; ``error`` is ``(errno, strerror, filename)`` when none started.
  The command starts in a session of its own, every signal at its default
  and none blocked. When it exits, every descendant left gets SIGTERM and
  SIGCONT, up to ``grace`` seconds to go, then SIGKILL until the worker
  has no child left; ``killed`` counts them (never the command itself),
  ``left`` the ones that could not be ended (another user's, say). After
  ``"term"`` the same happens to the command too. "exited" is sent only
  when there are leftovers, so a clean call costs one message each way.
  When toolexec's end closes, the worker kills everything at once and
  exits.

Both ignore every signal that can be ignored, so that a command's
``kill 0``, ``pkill -TERM`` or stray ``kill`` cannot end them; SIGKILL and
SIGSTOP cannot be ignored. Signals go to a process through a pidfd opened
after the process was listed and checked to be the same one (same start
time), so a pid reused since the listing is never signalled.
"""

from __future__ import annotations

import marshal
import os
import select
import signal
import socket
import sys
import time
from typing import Any

__all__ = [
    "KILL_LIMIT",
    "ProcStat",
    "main",
    "proc_stat",
    "processes",
    "signal_process",
    "subtree",
]

_PR_SET_NAME = 15
_PR_SET_CHILD_SUBREAPER = 36
#: How often a wait re-reads /proc when no child has changed state.
_POLL = 0.05
#: How long SIGKILL is repeated before the stragglers are reported.
KILL_LIMIT = 5.0
_UNIGNORABLE = {signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD, signal.SIGCONT}
_DEFAULT_IGNORED = {signal.SIGWINCH, signal.SIGURG}


# -- /proc -----------------------------------------------------------------------------


#: ``(state, ppid, pgrp, start time)`` of a process, from ``/proc/<pid>/stat``.
ProcStat = tuple[bytes, int, int, int]


def proc_stat(pid: int) -> ProcStat | None:
    """``pid``'s state letter, parent, process group and start time, or ``None`` if gone."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
    except OSError:
        return None
    try:
        data = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    fields = data.rpartition(b")")[2].split()
    try:
        return fields[0], int(fields[1]), int(fields[2]), int(fields[19])
    except (IndexError, ValueError):
        return None


def processes() -> dict[int, ProcStat]:
    """Every process that is not a zombie, by pid."""
    found = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            stat = proc_stat(int(name))
            if stat is not None and stat[0] not in (b"Z", b"X"):
                found[int(name)] = stat
    return found


def subtree(roots: set[int], table: dict[int, ProcStat] | None = None) -> dict[int, int]:
    """The live descendants of ``roots`` (and the roots themselves), as pid -> start time."""
    table = processes() if table is None else table
    children: dict[int, list[int]] = {}
    for pid, stat in table.items():
        children.setdefault(stat[1], []).append(pid)
    found, todo = {}, list(roots)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found[child] = table[child][3]
                todo.append(child)
    found.update({pid: table[pid][3] for pid in roots if pid in table})
    return found


def signal_process(pid: int, start: int, sig: int) -> bool:
    """Send ``sig`` to ``pid`` if it is still the process that started at ``start``.

    The pidfd is opened first and the start time checked after: if the pid
    was reused in between, the check fails and nothing is sent; if it is
    reused after, the pidfd still names the old process. Where there are
    no pidfds (Linux before 5.3) the check is made just before ``kill``,
    which leaves a window of a few microseconds. Returns whether it was sent.
    """
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    except OSError:
        return _kill_checked(pid, start, sig)
    try:
        stat = proc_stat(pid)
        if stat is None or stat[3] != start:
            return False
        signal.pidfd_send_signal(fd, sig)
    except OSError:  # gone meanwhile, or another user's
        return False
    finally:
        os.close(fd)
    return True


def _kill_checked(pid: int, start: int, sig: int) -> bool:
    stat = proc_stat(pid)
    if stat is None or stat[3] != start:
        return False
    try:
        os.kill(pid, sig)
    except OSError:
        return False
    return True


# -- the process itself ----------------------------------------------------------------


def _prctl(option: int, argument: int | bytes) -> int:
    """Call prctl; return 0 or the errno."""
    import ctypes  # here: toolexec imports this module for its /proc helpers only

    libc = ctypes.CDLL(None, use_errno=True)
    value = ctypes.c_char_p(argument) if isinstance(argument, bytes) else ctypes.c_ulong(argument)
    if libc.prctl(ctypes.c_int(option), value, ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
        return ctypes.get_errno() or -1
    return 0


def _ignore_signals() -> tuple[int, ...]:
    """Ignore what can be ignored; return those signals (a command gets them at default)."""
    ignored = []
    for sig in signal.valid_signals():
        if sig in _UNIGNORABLE or sig in _DEFAULT_IGNORED:
            continue
        try:
            signal.signal(sig, signal.SIG_IGN)
        except (OSError, ValueError, RuntimeError):
            continue
        ignored.append(int(sig))
    return tuple(ignored)


def _wakeup_pipe() -> tuple[int, int]:
    """A pipe that becomes readable on SIGCHLD."""
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    os.set_blocking(write_end, False)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    return read_end, write_end


def _has_pidfds() -> bool:
    try:
        os.close(os.pidfd_open(os.getpid()))
    except (AttributeError, OSError):
        return False
    return True


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except OSError:
        pass


def _reap(statuses: dict[int, int]) -> bool:
    """Reap every child that ended (into ``statuses``); return whether a child is left."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True
        statuses[pid] = os.waitstatus_to_exitcode(status)


# -- the worker ------------------------------------------------------------------------


class _Worker:
    """Serves calls over one socket, one at a time; see the module docstring."""

    def __init__(self, sock: socket.socket, defaults: tuple[int, ...]) -> None:
        self.sock = sock
        self.defaults = defaults
        # The command's exit is watched through a pidfd; only without pidfds
        # (Linux before 5.3) does SIGCHLD wake the worker, through a pipe.
        self.wakeup: int | None = None if _has_pidfds() else _wakeup_pipe()[0]
        if self.wakeup is None:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        self.statuses: dict[int, int] = {}
        self.term = False  # toolexec asked to end the command
        self.orphaned = False  # toolexec's end is closed

    def serve(self) -> None:
        probe = bytearray(1)
        while not self.orphaned:
            try:  # the size of the next request first, then the request
                size = self.sock.recv_into(probe, 1, socket.MSG_PEEK | socket.MSG_TRUNC)
                data, fds, _, _ = socket.recv_fds(self.sock, size, 2, socket.MSG_CMSG_CLOEXEC)
            except OSError:
                data, fds = b"", []
            if not data:
                break
            message = marshal.loads(data)
            if message[0] == "run":
                _, attempts, cwd, grace = message
                self.run(attempts, cwd, grace, fds)
            else:  # a "term" that crossed the "done" of the call it meant
                for fd in fds:
                    os.close(fd)
        self.end(0.0)

    def run(self, attempts: list[Any], cwd: bytes, grace: float, fds: list[int]) -> None:
        self.term = False
        self.statuses.clear()
        try:
            pid, failed = _spawn(attempts, cwd, fds, self.defaults)
        except OSError as exc:
            error = (exc.errno, exc.strerror, os.fsencode(exc.filename or b""))
            self.send(("done", None, 0, 0, len(attempts), error))
            return
        except ValueError as exc:  # an argument toolexec should have refused
            self.send(("done", None, 0, 0, len(attempts), (22, str(exc), b"")))
            return
        finally:
            for fd in fds:
                os.close(fd)
            os.chdir("/")  # hold no directory between calls
        code = self.wait_exit(pid)
        if code is None:  # timeout or cancellation: the command too
            ended, left = self.end(0.0 if self.orphaned else grace)
            code = self.statuses.get(pid)
        elif _reap(self.statuses):
            self.send(("exited", code))
            ended, left = self.end(grace)
        else:
            ended, left = set(), 0
        self.send(("done", code, len(ended - {pid}), left, failed, None))

    def wait_exit(self, pid: int) -> int | None:
        """The command's exit code, or ``None`` if asked to end it first."""
        watch = os.pidfd_open(pid) if self.wakeup is None else None
        try:
            while True:
                _reap(self.statuses)
                if pid in self.statuses:
                    return self.statuses[pid]
                if self.term or self.orphaned:
                    return None
                self.pause(None, watch)
        finally:
            if watch is not None:
                os.close(watch)

    def end(self, grace: float) -> tuple[set[int], int]:
        """SIGTERM every descendant, up to ``grace`` s, SIGKILL until none is left.

        Returns the pids signalled and how many could not be ended.
        """
        ended: set[int] = set()
        if not _reap(self.statuses):
            return ended, 0
        self.signal_all((signal.SIGTERM, signal.SIGCONT), ended)
        deadline = time.monotonic() + grace
        delay = 0.001
        while _reap(self.statuses) and not self.orphaned:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            self.pause(min(remaining, delay))
            delay = min(delay * 2, _POLL)
        deadline = time.monotonic() + KILL_LIMIT
        delay = 0.001
        while _reap(self.statuses) and time.monotonic() < deadline:
            self.signal_all((signal.SIGKILL,), ended)
            self.pause(delay)
            delay = min(delay * 2, _POLL / 5)
        left = len(subtree({os.getpid()})) - 1 if _reap(self.statuses) else 0
        return ended, left

    def signal_all(self, signals: tuple[int, ...], ended: set[int]) -> None:
        me = os.getpid()
        for pid, start in subtree({me}).items():
            if pid != me:
                for sig in signals:
                    if signal_process(pid, start, sig):
                        ended.add(pid)

    def pause(self, timeout: float | None, watch: int | None = None) -> None:
        """Wait for a message, ``watch`` (a pidfd), SIGCHLD (without pidfds), or ``timeout``."""
        watched = [fd for fd in (watch, self.wakeup) if fd is not None]
        if not self.orphaned:
            watched.append(self.sock.fileno())
        ready, _, _ = select.select(watched, [], [], timeout)
        if self.wakeup is not None and self.wakeup in ready:
            _drain(self.wakeup)
        if self.sock.fileno() in ready:
            try:
                data = self.sock.recv(4096, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            self.orphaned = self.orphaned or not data
            self.term = self.term or bool(data)

    def send(self, message: tuple[Any, ...]) -> None:
        try:
            self.sock.send(marshal.dumps(message))
        except OSError:
            self.orphaned = True


def _spawn(
    attempts: list[Any], cwd: bytes, fds: list[int], defaults: tuple[int, ...]
) -> tuple[int, int]:
    """Start the first attempt that starts; return its pid and how many failed before it."""
    os.chdir(cwd)
    actions = [(os.POSIX_SPAWN_DUP2, fd, target) for target, fd in enumerate(fds, start=1)]
    for failed, (executable, argv, env) in enumerate(attempts):
        try:
            pid = os.posix_spawn(
                executable,
                argv,
                env,
                file_actions=actions,
                setsid=True,
                setsigmask=(),
                setsigdef=defaults,
            )
        except OSError:
            if failed == len(attempts) - 1:
                raise
            continue
        return pid, failed
    raise ValueError("no attempt to start the command")


# -- the supervisor --------------------------------------------------------------------


class _Supervisor:
    """Forks a worker per socket it is sent; kills every other child it inherits."""

    def __init__(self, control: socket.socket, defaults: tuple[int, ...]) -> None:
        self.control = control
        self.defaults = defaults
        self.wakeup, self.wakeup_write = _wakeup_pipe()
        self.workers: set[int] = set()
        self.sweep_due = False

    def run(self) -> None:
        self.control.send(b"ready")
        while True:
            timeout = _POLL if self.sweep_due else None
            watched = [self.control.fileno(), self.wakeup]
            ready, _, _ = select.select(watched, [], [], timeout)
            if self.control.fileno() in ready and not self.receive():
                break
            _drain(self.wakeup)
            self.reap()
            if self.sweep_due:
                self.sweep()
        self.sweep()

    def receive(self) -> bool:
        """Fork a worker for each socket received; ``False`` once toolexec's end closed."""
        try:
            data, fds, _, _ = socket.recv_fds(self.control, 16, 8, socket.MSG_CMSG_CLOEXEC)
        except BlockingIOError:
            return True
        except OSError:
            return False
        for fd in fds:
            self.fork_worker(fd)
        return bool(data)

    def fork_worker(self, fd: int) -> None:
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                for own in (self.control.fileno(), self.wakeup, self.wakeup_write):
                    os.close(own)
                if _prctl(_PR_SET_CHILD_SUBREAPER, 1):  # not inherited across fork
                    return
                _Worker(socket.socket(fileno=fd), self.defaults).serve()
                status = 0
            finally:
                os._exit(status)
        os.close(fd)
        self.workers.add(pid)

    def reap(self) -> None:
        statuses: dict[int, int] = {}
        _reap(statuses)
        for pid, code in statuses.items():
            # A worker that exits cleanly has no child left; any other end
            # (a worker killed, an orphan ended) may have left children here.
            self.sweep_due |= pid not in self.workers or code != 0
            self.workers.discard(pid)

    def sweep(self) -> None:
        """SIGKILL every process below this one that is not a worker or below one."""
        table = processes()
        me = os.getpid()
        strays = {pid for pid, stat in table.items() if stat[1] == me} - self.workers
        sent = [signal_process(pid, s, signal.SIGKILL) for pid, s in subtree(strays, table).items()]
        self.sweep_due = any(sent)  # look again soon: one of them may have forked meanwhile


def main(argv: list[str]) -> int:
    """Run the supervisor on the socket whose descriptor is ``argv[1]``."""
    fd = int(argv[1])
    os.closerange(3, fd)
    os.closerange(fd + 1, os.sysconf("SC_OPEN_MAX"))
    control = socket.socket(fileno=fd)
    os.set_inheritable(fd, False)
    os.chdir("/")  # hold no directory of toolexec's
    problem = _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    if problem:
        control.send(f"unsupported: prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(problem)}".encode())
        return 3
    _prctl(_PR_SET_NAME, b"toolexec-reaper")
    _Supervisor(control, _ignore_signals()).run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
