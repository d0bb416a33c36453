"""File operations at a directory descriptor: open to read, read capped, replace atomically.

The confined walk (``_confined``) ends on a descriptor of the directory
that holds the file and the file's name; these operations take that pair,
so nothing is ever looked up by a full path string again. Reads open with
``O_NOFOLLOW | O_NONBLOCK`` and check the descriptor with ``fstat``:
FIFOs, sockets and devices are refused (and looked at before opening,
since opening a FIFO has effects), and so are files over the size cap.
Writes go to a fresh owner-only temporary file in the same directory and
are renamed over the name, so a hard link to a file outside the workspace
is replaced, never written through.

Everything here blocks; callers run it in a worker thread.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import secrets
import stat
from typing import TYPE_CHECKING

import attrs

from .._core._workspace_errors import WorkspaceError, WorkspaceErrorKind, check_cancelled, os_error

if TYPE_CHECKING:
    import threading

__all__ = [
    "DIR_FLAGS",
    "OpenFile",
    "file_version",
    "is_a_directory",
    "kind_of",
    "open_regular_at",
    "read_capped",
    "replace_file",
]

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_EUID_ACCESS = os.access in os.supports_effective_ids
_CHUNK = 1 << 16

_KINDS = {
    stat.S_IFREG: "file",
    stat.S_IFDIR: "dir",
    stat.S_IFLNK: "link",
    stat.S_IFIFO: "fifo",
    stat.S_IFSOCK: "socket",
    stat.S_IFCHR: "char device",
    stat.S_IFBLK: "block device",
}


def kind_of(mode: int) -> str:
    """Name the file type of a ``st_mode``."""
    return _KINDS.get(stat.S_IFMT(mode), "other")


def _special(path: str, mode: int, verb: str) -> WorkspaceError:
    return WorkspaceError(
        path,
        f"is a {kind_of(mode)}; only regular files can be {verb}.",
        kind=WorkspaceErrorKind.SPECIAL_FILE,
    )


def is_a_directory(path: str, hint: str) -> WorkspaceError:
    """The error for a directory where a file was needed; ``hint`` says what to do."""
    return WorkspaceError(path, f"is a directory; {hint}", kind=WorkspaceErrorKind.IS_A_DIRECTORY)


def open_regular_at(dir_fd: int, name: str, path: str) -> tuple[int, int]:
    """Open a regular file relative to ``dir_fd`` without following links.

    Returns ``(fd, size)``; refuses directories and special files.
    """
    with contextlib.suppress(OSError):  # look before opening: opening a FIFO has effects
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
            raise _special(path, mode, "read")
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ENXIO, errno.ENODEV, errno.EOPNOTSUPP):  # sockets, devices
            with contextlib.suppress(OSError):
                mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
                raise _special(path, mode, "read") from None
        raise os_error(path, exc) from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise is_a_directory(path, "use list_dir to see its entries.")
        if not stat.S_ISREG(st.st_mode):
            raise _special(path, st.st_mode, "read")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, st.st_size


@attrs.define
class OpenFile:
    """``(fd, size)`` as a context manager that closes ``fd``."""

    opened: tuple[int, int]

    def __enter__(self) -> tuple[int, int]:
        return self.opened

    def __exit__(self, *_exc: object) -> None:
        os.close(self.opened[0])


def read_capped(fd: int, cap: int, path: str, cancel: threading.Event | None = None) -> bytes:
    """Read ``fd`` to its end; refuse it (``too_large``) past ``cap`` bytes.

    ``cancel``: once set, the read fails with ``cancelled`` before its next chunk.
    """
    data = bytearray()
    while len(data) <= cap:
        check_cancelled(cancel, path)
        chunk = os.read(fd, _CHUNK)
        if not chunk:
            return bytes(data)
        data += chunk
    raise WorkspaceError(
        path, f"is larger than the {cap}-byte read limit.", kind=WorkspaceErrorKind.TOO_LARGE
    )


def file_version(st: os.stat_result) -> tuple[int, int, int, int]:
    """What changes when a file is replaced or written: inode, size, times."""
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def replace_file(dir_fd: int, name: str, data: bytes, path: str) -> bool:
    """Replace (or create) ``name`` in ``dir_fd`` with ``data``; return whether it was created."""
    st = _replaceable(dir_fd, name, path)
    # The final mode: the old file's without set-user/group-id (new content must
    # not inherit them), or what creating the file would give.
    mode = stat.S_IMODE(st.st_mode) & ~(stat.S_ISUID | stat.S_ISGID) if st else _new_file_mode()
    temp = f".toolexec-{secrets.token_hex(8)}.tmp"
    try:
        # Owner-only while it fills, so nobody else can read the data meanwhile.
        fd = os.open(temp, _TEMP_FLAGS, 0o600, dir_fd=dir_fd)
    except OSError as exc:
        raise os_error(path, exc) from None
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
        os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=dir_fd)
        if isinstance(exc, OSError):
            raise os_error(path, exc) from None
        raise
    return st is None


def _replaceable(dir_fd: int, name: str, path: str) -> os.stat_result | None:
    """The file ``replace_file`` would replace (``None``: none yet), or why it may not."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise os_error(path, exc) from None
    if stat.S_ISDIR(st.st_mode):
        raise is_a_directory(path, "give a file path.")
    if stat.S_ISLNK(st.st_mode):
        raise WorkspaceError(
            path,
            "was replaced by a symbolic link during the operation.",
            kind=WorkspaceErrorKind.CHANGED,
        )
    if not stat.S_ISREG(st.st_mode):
        raise _special(path, st.st_mode, "written")
    if not os.access(name, os.W_OK, dir_fd=dir_fd, effective_ids=_EUID_ACCESS):
        # Renaming over it needs only the directory's permission; opening it for
        # writing would be refused, and so is this.
        raise WorkspaceError(
            path,
            "is not writable (the operating system denies writing to it).",
            kind=WorkspaceErrorKind.PERMISSION,
        )
    return st


@functools.cache
def _new_file_mode() -> int:
    """0o666 less the process's umask, read without changing it (Linux), else 0o644."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o644
