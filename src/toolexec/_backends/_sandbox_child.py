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
and (at the namespace levels, without the network) installs a seccomp filter
that refuses unix sockets. This process stays to wait for it: it
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


# The seccomp filter without the network: ``socket(AF_UNIX, ...)`` fails with
# EACCES, so the work cannot connect to a unix socket it sees in the file tree
# (the workspace's, say); a filesystem path is the one way out of a network
# namespace. ``socketpair`` stays (it reaches nothing outside). Per machine:
# (the audit architecture, the number of ``socket``); a foreign architecture's
# calls fail. BPF: (code, jump if true, jump if false, k).
_SECCOMP_ARCHES = {"x86_64": (0xC000003E, 41), "aarch64": (0xC00000B7, 198)}
_X32_SYSCALL_BIT = 0x40000000


def _seal_unix_sockets() -> None:
    """Refuse creating ``AF_UNIX`` sockets from now on, in this process and its children."""
    import ctypes
    import struct

    arch, socket_nr = _SECCOMP_ARCHES[os.uname().machine]
    allow, deny = 0x7FFF0000, 0x00050000 | 13  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | EACCES
    program = [
        (0x20, 0, 0, 4),  # A = arch
        (0x15, 1, 0, arch),  # A == arch: go on
        (0x06, 0, 0, deny),
        (0x20, 0, 0, 0),  # A = the syscall's number
        (0x35, 4, 0, _X32_SYSCALL_BIT),  # x32 calls: deny
        (0x15, 0, 2, socket_nr),  # not socket(): allow
        (0x20, 0, 0, 16),  # A = the domain (the first argument, its low 32 bits)
        (0x15, 1, 0, 1),  # AF_UNIX: deny
        (0x06, 0, 0, allow),
        (0x06, 0, 0, deny),
    ]
    code = b"".join(struct.pack("HBBI", *op) for op in program)
    filters = ctypes.create_string_buffer(code, len(code))
    fprog = struct.pack("HxxxxxxP", len(program), ctypes.addressof(filters))
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
        if request.get("seal_unix"):
            _seal_unix_sockets()
        if request["kind"] == "exec":
            os.close(report_fd)
            argv = request["argv"]
            os.execve(argv[0], argv, dict(os.environ))
        _run_function(request, report_fd)
    except BaseException as exc:
        try:
            _report(report_fd, {"op": "crash", "message": f"{type(exc).__name__}: {exc}"})
        finally:
            os._exit(127)
    os._exit(0)


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
                if os.WIFSIGNALED(status):
                    _report(report_fd, {"op": "exit", "signal": os.WTERMSIG(status)})
                else:
                    _report(report_fd, {"op": "exit", "code": os.waitstatus_to_exitcode(status)})
                os._exit(0)


def main(argv: list[str]) -> None:
    """Run one sandboxed call (see the module docstring)."""
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
