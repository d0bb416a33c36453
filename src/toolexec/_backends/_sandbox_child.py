"""The program that runs inside the subprocess sandbox (``_sandbox``).

It is started as ``python -I -S -c <this file's source> REQUEST_FD REPORT_FD``
(under bwrap, under unshare, or as a plain child), so it uses the standard
library only until it runs a function tool. It reads one request from
``REQUEST_FD``: its length (8 bytes, big-endian), then a dict in ``marshal``
format, which the interpreter reads without importing anything (the host
runs this same interpreter, so the format matches). It writes JSON lines to
``REPORT_FD``:

* ``{"op": "started"}`` once the work runs, or ``{"op": "failed", "message"}``
  when the set-up failed (nothing ran);
* for a function tool: ``progress``, ``update``, then ``result``, ``error``
  (a ``ToolError``) or ``crash`` (any other exception);
* ``{"op": "exit", "code"}`` or ``{"op": "exit", "signal"}`` when the work
  process ended.

Set-up, in this order: (at the namespace levels) this process makes itself
non-dumpable, so that the work, which has no capability, cannot open its
``/proc/<pid>/fd`` and write records into the report pipe (nor can it reach
the pipe otherwise: the command is exec'd without it, and a function tool's
own process is non-dumpable too); (at the ``unshare`` level) the mounts: the whole
tree read-only, private tmpfs over the hidden directories, the directories
to keep re-bound read-only, the workspace bound read-only or writable;
then the working directory; then the work runs in a forked child, which
sets the resource limits first, then (at ``unshare``) drops every capability
and (at the namespace levels) installs a seccomp filter that refuses the
keyring calls and, without the network, unix sockets. This process stays to wait for it: it
ignores SIGTERM (the child gets the host's SIGTERM itself) and, when the
request pipe reaches EOF (toolexec is gone), it ends the work: by exiting,
which ends the pid namespace, or outside one by killing its process group.
"""

from __future__ import annotations

# Only modules written in C until a function tool runs: every call starts this
# interpreter, so each import is paid per call (``signal``, ``json`` and
# ``typing`` would pull in ``enum`` and ``re``).
import _signal as signal  # type: ignore[import-not-found]
import marshal
import os
import select
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_RLIMITS = {
    "cpu_seconds": "RLIMIT_CPU",
    "memory_bytes": "RLIMIT_AS",
    "open_files": "RLIMIT_NOFILE",
    "file_size_bytes": "RLIMIT_FSIZE",
    "processes": "RLIMIT_NPROC",
}

_MS_BIND = 4096
_MS_REC = 16384
_AT_FDCWD = -100
_AT_RECURSIVE = 0x8000
_MOUNT_ATTR_RDONLY = 1
_SYS_MOUNT_SETATTR = 442  # the same number on every architecture (a new syscall)


def _report(fd: int, message: dict[str, Any]) -> None:
    """Write one JSON line (``started`` and ``exit`` without importing ``json``)."""
    op = message["op"]
    if op == "started":
        text = '{"op": "started"}'
    elif op == "exit" and "code" in message:
        text = f'{{"op": "exit", "code": {int(message["code"])}}}'
    elif op == "exit":
        text = f'{{"op": "exit", "signal": {int(message["signal"])}}}'
    else:
        import json

        text = json.dumps(message, default=repr)
    data = (text + "\n").encode()
    while data:
        data = data[os.write(fd, data) :]


def _read_request(fd: int) -> dict[str, Any]:
    """Read the request: its length (8 bytes, big-endian), then it, marshalled."""
    data = b""
    size = None
    while size is None or len(data) < size:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            raise OSError("the request ended early")
        data += chunk
        if size is None and len(data) >= 8:
            size, data = int.from_bytes(data[:8], "big"), data[8:]
    request: dict[str, Any] = marshal.loads(data)
    return request


# -- mounts (the unshare level) ------------------------------------------------------


def _libc() -> Any:
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        import ctypes

        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


def _set_readonly(libc: Any, path: str, readonly: bool) -> None:
    import struct

    attr = struct.pack("QQQQ", _MOUNT_ATTR_RDONLY if readonly else 0, 0 if readonly else 1, 0, 0)
    result = libc.syscall(_SYS_MOUNT_SETATTR, _AT_FDCWD, path.encode(), _AT_RECURSIVE, attr, 32)
    _check(result, f"making {path} {'read-only' if readonly else 'writable'}")


def _bind(libc: Any, fd: int, path: str, readonly: bool) -> None:
    os.makedirs(path, exist_ok=True)  # inside a tmpfs: the mount point
    source = f"/proc/self/fd/{fd}".encode()
    _check(libc.mount(source, path.encode(), None, _MS_BIND | _MS_REC, None), f"binding {path}")
    _set_readonly(libc, path, readonly)


def _mount(spec: dict[str, Any]) -> None:
    if os.readlink("/proc/self/ns/mnt") == spec["host_ns"]:
        raise OSError("refusing to change the mounts: not in a mount namespace of its own")
    libc = _libc()
    workspace, keep = spec.get("workspace"), spec.get("keep", [])
    held = {}
    for path in [*keep, *([workspace] if workspace else [])]:
        try:
            held[path] = os.open(path, os.O_PATH)  # reachable after the tmpfs hides it
        except OSError:
            if path == workspace:
                raise
    _set_readonly(libc, "/", True)
    for path in spec.get("hide", []):
        if os.path.isdir(path):
            _check(libc.mount(b"tmpfs", path.encode(), b"tmpfs", 0, b"mode=0755"), f"tmpfs {path}")
    for path in sorted(held, key=lambda p: p.count("/")):
        _bind(libc, held[path], path, path != workspace or not spec.get("workspace_rw"))
        os.close(held[path])


def _protect() -> None:
    """Make this process non-dumpable: no process without ``CAP_SYS_PTRACE`` (the
    work has none) may open its ``/proc/<pid>/fd``, and so reach the report pipe."""
    _check(_libc().prctl(4, 0, 0, 0, 0), "not dumpable")  # PR_SET_DUMPABLE


def _drop_capabilities() -> None:
    """No capability, now or after exec, and no gaining any (setuid programs)."""
    import ctypes

    libc = _libc()
    _check(libc.prctl(38, 1, 0, 0, 0), "no_new_privs")  # PR_SET_NO_NEW_PRIVS
    for cap in range(64):
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP; EINVAL past the last cap
            break
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (ctypes.c_uint32 * 6)()
    _check(libc.syscall(126 if os.uname().machine == "x86_64" else 91, header, data), "capset")


# The seccomp filter of the namespace levels. The kernel's keyrings belong to a
# user, not to a sandbox (a call could read the host process's session keyring,
# or leave a key for the next call of a warm sandbox): ``add_key``,
# ``request_key`` and ``keyctl`` fail with EPERM, as in Docker's default
# profile. Without the network, ``socket(AF_UNIX, ...)`` fails with EACCES too,
# so the work cannot connect to a unix socket it sees in the file tree (the
# workspace's, say); a filesystem path is the one way out of a network
# namespace. ``socketpair`` stays (it reaches nothing outside). Per machine:
# (the audit architecture, the number of ``socket``, those of the keyring
# calls); a foreign architecture's calls fail. BPF: (code, jump if true, jump
# if false, k), a jump naming the return it goes to.
SECCOMP_ARCHES = {
    "x86_64": (0xC000003E, 41, (248, 249, 250)),
    "aarch64": (0xC00000B7, 198, (217, 218, 219)),
}
_X32_SYSCALL_BIT = 0x40000000
_RETURNS = {"allow": 0x7FFF0000, "eacces": 0x00050000 | 13, "eperm": 0x00050000 | 1}


def seccomp_filter(unix: bool) -> bytes:
    """The filter (``unix``: refusing unix sockets too), as the BPF program ``bwrap
    --seccomp`` and ``prctl`` take."""
    import struct

    arch, socket_nr, keyring_calls = SECCOMP_ARCHES[os.uname().machine]
    program: list[tuple[int, int | str, int | str, int]] = [
        (0x20, 0, 0, 4),  # A = arch
        (0x15, 0, "eacces", arch),
        (0x20, 0, 0, 0),  # A = the syscall's number
        (0x35, "eacces", 0, _X32_SYSCALL_BIT),  # x32 calls
        *((0x15, "eperm", 0, nr) for nr in keyring_calls),
    ]
    if unix:
        program += [
            (0x15, 0, "allow", socket_nr),  # socket()
            (0x20, 0, 0, 16),  # A = the domain (the first argument, its low 32 bits)
            (0x15, "eacces", "allow", 1),  # AF_UNIX
        ]
    at = {name: len(program) + i for i, name in enumerate(_RETURNS)}
    program += [(0x06, 0, 0, value) for value in _RETURNS.values()]

    def jump(i: int, to: int | str) -> int:
        return to if isinstance(to, int) else at[to] - i - 1

    return b"".join(
        struct.pack("HBBI", code, jump(i, jt), jump(i, jf), k)
        for i, (code, jt, jf, k) in enumerate(program)
    )


def _seal(unix: bool) -> None:
    """Install the filter (``seccomp_filter``) in this process and its children."""
    import ctypes
    import struct

    code = seccomp_filter(unix)
    filters = ctypes.create_string_buffer(code, len(code))
    fprog = struct.pack("HxxxxxxP", len(code) // 8, ctypes.addressof(filters))
    libc = _libc()
    _check(libc.prctl(38, 1, 0, 0, 0), "no_new_privs")  # PR_SET_NO_NEW_PRIVS
    _check(libc.prctl(22, 2, fprog, 0, 0), "seccomp")  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER


# -- the work ------------------------------------------------------------------------


def _set_limits(limits: dict[str, int]) -> None:
    import resource

    for key, value in limits.items():
        which = getattr(resource, _RLIMITS[key])
        _soft, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        # A CPU limit warns with SIGXCPU first; a second later the kernel kills.
        high = value
        if key == "cpu_seconds" and (hard == resource.RLIM_INFINITY or hard > value):
            high = value + 1 if hard == resource.RLIM_INFINITY else min(value + 1, hard)
        resource.setrlimit(which, (value, high))


def _run_function(request: dict[str, Any], report_fd: int) -> None:
    spec = request["function"]
    sys.path[:] = spec["sys_path"]
    import trio

    from toolexec._backends._sandbox_codec import (
        call_context,
        output_from_json,
        output_to_json,
        resolve,
    )
    from toolexec._core._errors import ToolError

    def emit(kind: str, payload: Any) -> None:
        if kind == "progress":
            _report(report_fd, {"op": "progress", "message": str(payload)})
        elif kind == "update":
            _report(report_fd, {"op": "update", "output": output_to_json(payload)})

    try:
        tool = resolve(spec["module"], spec["qualname"], spec["name"])
        ctx = call_context(spec["context"], emit)
        output = trio.run(tool.execute, spec["arguments"], ctx)
        if not hasattr(output, "content"):
            output = output_from_json({"content": [], "is_error": True})
        _report(report_fd, {"op": "result", "output": output_to_json(output)})
    except ToolError as exc:
        _report(
            report_fd,
            {
                "op": "error",
                "message": exc.message,
                "error_class": exc.error_class.value,
                "details": dict(exc.details),
            },
        )
    except BaseException as exc:  # the host reads it as the tool's crash
        import traceback

        text = "".join(traceback.format_exception(exc))
        _report(report_fd, {"op": "crash", "message": f"{type(exc).__name__}: {exc}", "tb": text})


def _child(request: dict[str, Any], report_fd: int) -> None:
    """In the forked child: limits, then exec the command or run the function."""
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        _set_limits(request.get("rlimits", {}))
        if request.get("drop_caps"):
            _drop_capabilities()
        if request.get("seal"):
            _seal(request["seal"] == "unix")
        if request["kind"] == "exec":
            os.close(report_fd)
            _exec(request["attempts"])
        _run_function(request, report_fd)
    except BaseException as exc:
        try:
            _report(report_fd, {"op": "crash", "message": f"{type(exc).__name__}: {exc}"})
        finally:
            os._exit(127)
    os._exit(0)


def _exec(attempts: list[tuple[str, list[str], dict[str, str] | None]]) -> None:
    """Exec the first attempt that starts (a plain command directly, then through
    the shell, as the shell tool does); ``None`` as the environment: this one."""
    for path, argv, env in attempts[:-1]:
        try:
            os.execve(path, argv, dict(os.environ) if env is None else env)
        except OSError:
            continue
    path, argv, env = attempts[-1]
    os.execve(path, argv, dict(os.environ) if env is None else env)


def _wait(child: int, request_fd: int, report_fd: int, own_pid_ns: bool) -> None:
    """Wait for the work; reap orphans; end everything when toolexec is gone."""
    try:
        exit_fd = os.pidfd_open(child)
    except (AttributeError, OSError):
        exit_fd = None
    while True:
        ready: list[int | None] = [None]
        if exit_fd is not None:
            ready = list(select.select([exit_fd, request_fd], [], [])[0])
        if request_fd in ready and not os.read(request_fd, 4096):
            if not own_pid_ns:  # no namespace ends it: the process group does
                os.killpg(os.getpgrp(), signal.SIGKILL)
            os._exit(137)
        if exit_fd in ready or exit_fd is None:
            pid, status = os.waitpid(child, 0 if exit_fd is None else os.WNOHANG)
            if pid == child:
                _report_exit(report_fd, status)
                os._exit(0)


def _report_exit(report_fd: int, status: int) -> None:
    if os.WIFSIGNALED(status):
        _report(report_fd, {"op": "exit", "signal": os.WTERMSIG(status)})
    else:
        _report(report_fd, {"op": "exit", "code": os.waitstatus_to_exitcode(status)})


# -- warm: one launcher, many calls (see _sandbox_warm) ------------------------------


def _read_exact(sock: Any, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def _next_request(sock: Any) -> tuple[dict[str, Any], list[int]] | None:
    """The next request and its descriptors (stdout, stderr, reports); ``None`` at EOF."""
    import socket

    try:
        head, fds, _flags, _addr = socket.recv_fds(sock, 8, 3, socket.MSG_CMSG_CLOEXEC)
        if not head:
            return None
        head += _read_exact(sock, 8 - len(head))
        request: dict[str, Any] = marshal.loads(_read_exact(sock, int.from_bytes(head, "big")))
    except (OSError, EOFError):
        return None
    return request, fds


def _snapshot(path: str, dev: int) -> dict[str, tuple[int, str | None]]:
    """What a scratch directory holds before any call: path -> (mode, link target)."""
    held = {}
    for entry in os.scandir(path):
        info = entry.stat(follow_symlinks=False)
        link = os.readlink(entry.path) if entry.is_symlink() else None
        held[entry.path] = (info.st_mode, link)
        if entry.is_dir(follow_symlinks=False) and info.st_dev == dev:
            held.update(_snapshot(entry.path, dev))
    return held


def _remove(path: str, dev: int, keep: dict[str, tuple[int, str | None]]) -> None:
    """Remove what ``path`` holds that ``keep`` does not (mounts and all below them stay)."""
    for entry in os.scandir(path):
        info = entry.stat(follow_symlinks=False)
        if info.st_dev != dev:
            continue  # a mount point: a kept directory, a device
        kept = keep.get(entry.path)
        if kept is not None and kept[0] != info.st_mode:
            os.chmod(entry.path, kept[0] & 0o7777)
        if entry.is_dir(follow_symlinks=False):
            if kept is None:
                os.chmod(entry.path, 0o700)
            _remove(entry.path, dev, keep)
            if kept is None:
                os.rmdir(entry.path)
        elif kept is None or kept[1] != (os.readlink(entry.path) if entry.is_symlink() else None):
            os.unlink(entry.path)


class _Scratch:
    """The sandbox's private writable directories, emptied after every call."""

    def __init__(self, paths: list[str], host_ipc: str | None = None) -> None:
        # System V IPC objects are removed only in an IPC namespace of the sandbox's own.
        self.ipc = host_ipc is not None and os.readlink("/proc/self/ns/ipc") != host_ipc
        root = os.stat("/").st_dev
        self.dirs = {}
        for path in paths:
            info = os.stat(path)
            if info.st_dev == root:  # never empty a directory of the host's
                raise OSError(f"{path} is not a private file system")
            self.dirs[path] = (info.st_dev, info.st_mode, _snapshot(path, info.st_dev))

    def clean(self) -> str | None:
        """Empty every directory as it was; why not, if that failed."""
        try:
            for path, (dev, mode, held) in self.dirs.items():
                if os.stat(path).st_mode != mode:
                    os.chmod(path, mode & 0o7777)
                _remove(path, dev, held)
                missing = [p for p in held if not os.path.lexists(p)]
                if missing:
                    return f"{missing[0]} was removed"
            if self.ipc:
                _remove_ipc()
        except OSError as exc:
            return f"cleaning up: {exc}"
        return None


def _remove_ipc() -> None:
    """Remove the System V IPC objects a call left (the namespace's own)."""
    for kind, call, extra in (
        ("shm", "shmctl", ()),
        ("sem", "semctl", (0,)),
        ("msg", "msgctl", ()),
    ):
        try:
            with open(f"/proc/sysvipc/{kind}") as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            ident = int(row.split()[1])
            _check(getattr(_libc(), call)(ident, *extra, 0, None), f"removing {kind} {ident}")


def _children() -> list[int]:
    me = os.getpid()
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat.rsplit(b")", 1)[1].split()[1]) == me:
                found.append(int(name))
    return found


def _kill_all(sig: int, group: int) -> None:
    """Signal every process of the call: the whole pid namespace from its first
    process, else the call's group and every process left to this subreaper."""
    targets = [-1] if os.getpid() == 1 else [-group, *_children()]
    for target in targets:
        try:
            os.kill(target, sig)
        except OSError:  # gone already
            continue


def _reap_all(group: int, limit: float) -> bool:
    """Kill and reap every process of the call; whether none is left after ``limit`` s."""
    import time

    deadline = time.monotonic() + limit
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return True
        if pid:
            continue
        if time.monotonic() > deadline:
            return False
        _kill_all(signal.SIGKILL, group)
        select.select([], [], [], 0.001)


def _spawn(path: str, argv: list[str], env: dict[str, str], actions: list[Any]) -> int:
    """``posix_spawn`` in a process group of its own outside a pid namespace of its own."""
    resets = (signal.SIGTERM, signal.SIGPIPE, signal.SIGINT)
    if os.getpid() == 1:
        return os.posix_spawn(path, argv, env, file_actions=actions, setsigdef=resets)
    return os.posix_spawn(path, argv, env, file_actions=actions, setsigdef=resets, setpgroup=0)


def _spawn_call(request: dict[str, Any], fds: list[int]) -> int:
    """Start a command with no limit to set: ``posix_spawn`` (no copy of this
    process), from the call's directory, with its stdio, environment and group."""
    out, err, report_fd = fds
    os.chdir(request["cwd"])  # failing, it is reported as a set-up that failed
    _report(report_fd, {"op": "started"})
    actions = [(os.POSIX_SPAWN_DUP2, out, 1), (os.POSIX_SPAWN_DUP2, err, 2)]
    try:
        for path, argv, env in request["attempts"]:
            try:
                return _spawn(path, argv, request["env"] if env is None else env, actions)
            except OSError:
                continue
        # None started: exit 127 without output, as a fresh launcher's child does.
        return _spawn("/bin/sh", ["sh", "-c", "exit 127"], {}, [])
    finally:
        os.chdir("/")
        os.close(out)
        os.close(err)


def _start_call(sock: Any, request: dict[str, Any], fds: list[int]) -> int:
    """Fork the call's process: its own stdio, environment, directory and group."""
    if request["kind"] == "exec" and not request["rlimits"]:
        return _spawn_call(request, fds)
    out, err, report_fd = fds
    child = os.fork()
    if child:
        os.close(out)
        os.close(err)
        return child
    try:
        sock.close()
        os.dup2(out, 1)
        os.dup2(err, 2)
        os.close(out)
        os.close(err)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        if os.getpid() != 1:
            os.setpgid(0, 0)
    except BaseException as exc:
        _report(report_fd, {"op": "failed", "message": f"{exc}"})
        os._exit(125)
    _report(report_fd, {"op": "started"})
    _child(request, report_fd)
    os._exit(0)  # not reached: _child exits


def _await_call(sock: Any, child: int, grace: float) -> tuple[int, bool]:
    """Wait for the call's process; its status, and whether toolexec ended the call
    (anything on the socket, or its end: SIGTERM to the call, ``grace`` s, SIGKILL)."""
    import time

    exit_fd = os.pidfd_open(child)
    stopped = False
    kill_at = None
    try:
        while True:
            timeout = None if kill_at is None else max(kill_at - time.monotonic(), 0.0)
            watched = [exit_fd] if stopped else [exit_fd, sock.fileno()]
            ready = select.select(watched, [], [], timeout)[0]
            if exit_fd in ready:
                pid, status = os.waitpid(child, os.WNOHANG)
                if pid == child:
                    return status, stopped
            elif sock.fileno() in ready:
                sock.recv(64)
                stopped = True
                _kill_all(signal.SIGTERM, child)
                _kill_all(signal.SIGCONT, child)
                kill_at = time.monotonic() + grace
            elif kill_at is not None:
                _kill_all(signal.SIGKILL, child)
                kill_at = None
    finally:
        os.close(exit_fd)


def _serve_one(sock: Any, scratch: _Scratch, request: dict[str, Any], fds: list[int]) -> bool:
    """Run one call, report, clean up; whether the sandbox may serve another."""
    report_fd = fds[2]
    try:
        child = _start_call(sock, request, fds)
    except OSError as exc:
        _report(report_fd, {"op": "failed", "message": f"{exc}"})
        os.close(report_fd)
        return False
    status, stopped = _await_call(sock, child, float(request.get("grace", 1.0)))
    _report_exit(report_fd, status)
    gone = _reap_all(child, 5.0)
    why = scratch.clean() if gone else "a process of the call could not be ended"
    if why is None and os.WIFSIGNALED(status):  # a limit that tripped, say: start afresh
        why = f"the call's process was killed by signal {os.WTERMSIG(status)}"
    os.close(report_fd)
    if stopped:
        return False
    sock.sendall(b"I" if why is None else b"B" + why.encode()[:4000])
    return why is None


def _prepare(setup: dict[str, Any]) -> _Scratch:
    """Set the sandbox up once: mounts, capabilities, filters, what the calls preload."""
    if setup.get("own_pid_ns") and os.getpid() != 1:
        raise OSError("not the first process of a pid namespace of its own")
    if setup.get("mounts"):
        _mount(setup["mounts"])
    if setup.get("drop_caps"):
        _drop_capabilities()
    if setup.get("own_pid_ns"):
        _protect()
    else:
        _check(_libc().prctl(36, 1, 0, 0, 0), "child subreaper")  # PR_SET_CHILD_SUBREAPER
    if setup.get("seal"):
        _seal(setup["seal"] == "unix")
    import resource  # noqa: F401  # for the calls' limits, imported once

    if setup.get("sys_path") is not None:  # function tools: import what every call needs
        sys.path[:] = setup["sys_path"]
        import trio  # noqa: F401

        import toolexec._backends._sandbox_codec  # noqa: F401
    return _Scratch(setup.get("scratch", []), setup.get("host_ipc"))


def serve(control_fd: int) -> None:
    """Serve calls over the socket ``control_fd`` until it closes (see ``_sandbox_warm``)."""
    import socket

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sock = socket.socket(fileno=control_fd)
    sock.set_inheritable(False)
    try:
        head = _read_exact(sock, 8)
        setup: dict[str, Any] = marshal.loads(_read_exact(sock, int.from_bytes(head, "big")))
        scratch = _prepare(setup)
    except Exception as exc:
        sock.sendall(b"F" + f"{exc}".encode()[:4000])
        os._exit(125)
    sock.sendall(b"R")
    while True:
        got = _next_request(sock)
        if got is None or not _serve_one(sock, scratch, *got):
            os._exit(0)  # nothing of a call is left: it was reaped


def main(argv: list[str]) -> None:
    """Run one sandboxed call (see the module docstring)."""
    if argv[1] == "--serve":
        serve(int(argv[2]))
    if argv[1] == "--probe":  # can the mounts be made here? (argv[2]: the host's namespace)
        _mount({"hide": ["/tmp"], "host_ns": argv[2]})
        _drop_capabilities()
        return
    request_fd, report_fd = int(argv[1]), int(argv[2])
    os.set_inheritable(request_fd, False)
    os.set_inheritable(report_fd, False)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        request = _read_request(request_fd)
        if request.get("own_pid_ns"):
            _protect()
        if request.get("mounts"):
            _mount(request["mounts"])
        os.chdir(request["cwd"])
        _report(report_fd, {"op": "started"})
        child = os.fork()
    except Exception as exc:
        _report(report_fd, {"op": "failed", "message": f"{exc}"})
        os._exit(125)
    if child == 0:
        os.close(request_fd)
        _child(request, report_fd)
    _wait(child, request_fd, report_fd, bool(request.get("own_pid_ns")))


if __name__ == "__main__":
    main(sys.argv)
