"""The workspace: a directory tree that file tools cannot leave.

Theory of operation. A path is never resolved to a string and then opened
(the check-then-use window every path-escape bug lives in). Instead the path
is split into components and walked from a descriptor of the root: each
directory is opened *relative to the descriptor of its parent* with
``O_NOFOLLOW | O_DIRECTORY``, so a component that is a symbolic link fails
to open instead of being followed by the kernel. Links are then expanded
here, by reading them (``readlinkat``) and pushing their target's components
back onto the walk; ``..`` pops a descriptor off the stack, and popping the
root is an escape. Whatever the walk ends on is what gets used: the final
file is opened relative to the parent descriptor with ``O_NOFOLLOW``, so a
link swapped in after the walk makes the open fail rather than escape.

Writes go to a fresh temporary file in the target's directory and are
renamed over the name, so a hard link to a file outside the workspace is
replaced, never written through. Reads open with ``O_NONBLOCK`` and check
the descriptor with ``fstat``: FIFOs, sockets and devices are refused, and
so are files over the size cap.

Everything here that touches the file system is blocking; the public
methods are async and run it in a worker thread.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import secrets
import stat
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING

import attrs
import trio

from ._display import show
from ._errors import ToolError
from ._types import ErrorClass

if TYPE_CHECKING:
    from collections.abc import Callable, Generator, Iterator

__all__ = ["DirEntry", "Workspace", "WorkspaceError"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_MAX_LINKS = 40
_EUID_ACCESS = os.access in os.supports_effective_ids
_MAX_OPEN_DIRS = 32
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


class WorkspaceError(ToolError):
    """A workspace operation was refused or failed; the message names the path.

    ``path`` is the path as given (workspace-relative where it could be
    made so) and ``reason`` says why. ``error_class`` is
    ``permission_denied`` for anything that would leave the workspace or
    touch a special file, ``invalid_arguments`` for names that cannot be
    file names, and ``execution_error`` otherwise (a missing file, ...).
    """

    def __init__(
        self, path: str, reason: str, *, error_class: ErrorClass = ErrorClass.EXECUTION_ERROR
    ) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{show(path)} {reason}", error_class=error_class)


def _denied(path: str, reason: str) -> WorkspaceError:
    return WorkspaceError(path, reason, error_class=ErrorClass.PERMISSION_DENIED)


def _os_error(path: str, exc: OSError) -> WorkspaceError:
    code = exc.errno
    if code == errno.ENOENT:
        return WorkspaceError(path, "does not exist.")
    if code == errno.ENAMETOOLONG:
        return WorkspaceError(
            path,
            "has a name that is too long (at most 255 bytes per component).",
            error_class=ErrorClass.INVALID_ARGUMENTS,
        )
    if code in (errno.EACCES, errno.EPERM):
        return _denied(path, "is not accessible (the operating system denied access).")
    if code == errno.ENOTDIR:
        return WorkspaceError(path, "has a component that is not a directory.")
    if code == errno.ELOOP:
        return WorkspaceError(path, "was replaced by a symbolic link during the operation.")
    return WorkspaceError(path, f"could not be accessed: {exc.strerror or exc}.")


@attrs.frozen
class DirEntry:
    """One entry of a directory listing (links are described, never followed).

    Attributes:
        name: the entry's name (non-UTF-8 bytes kept as surrogate escapes).
        kind: ``file``, ``dir``, ``link``, ``fifo``, ``socket``,
            ``char device``, ``block device`` or ``other``.
        size: size in bytes for regular files, else ``None``.
        target: what a link points to, else ``None``.
    """

    name: str
    kind: str
    size: int | None = None
    target: str | None = None


def _absolute(root: str | os.PathLike[str]) -> Path:
    return Path(os.path.abspath(root))


@attrs.frozen
class _Located:
    """A walk's end: the parent directory descriptor and the final name."""

    dir_fd: int
    name: str | None  # None: the path is the directory dir_fd itself
    parts: tuple[str, ...]

    @property
    def relative(self) -> str:
        return "/".join(self.parts) or "."


@attrs.define(eq=False)
class Workspace:
    """A directory whose files tools may read and write, and nothing outside it.

    Every path is resolved beneath ``root``: ``..`` cannot climb above it,
    absolute paths must lie under it, and symbolic links are followed only
    while they stay inside (checked on the descriptors actually used, so a
    link swapped in mid-operation cannot redirect it). Writes replace files
    atomically through a temporary file and never write through hard links.
    FIFOs, sockets and devices are refused, and so are reads over
    ``max_read_bytes``. Errors are ``WorkspaceError`` naming the path.

    Example::

        ws = Workspace("/srv/project")
        await ws.write_bytes("notes/today.txt", b"hello\\n")
        data = await ws.read_bytes("notes/today.txt")

    Args:
        root: the workspace directory (it must exist). Links in it are
            resolved once, here; absolute paths may name the root either as
            given or as resolved.
        max_read_bytes: files larger than this are refused by reads.
    """

    root: Path = attrs.field(converter=_absolute)
    max_read_bytes: int = 16 * 1024 * 1024
    _real: str = attrs.field(init=False, repr=False)
    _prefixes: tuple[tuple[str, ...], ...] = attrs.field(init=False, repr=False)
    _identity: tuple[int, int] = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        if not self.root.is_dir():
            raise ValueError(f"workspace root {str(self.root)!r} is not a directory")
        self._real = os.path.realpath(self.root)
        st = os.stat(self._real)
        self._identity = (st.st_dev, st.st_ino)
        # Absolute paths (and link targets) may name the root either way.
        real, given = Path(self._real).parts[1:], self.root.parts[1:]
        self._prefixes = (real,) if real == given else (real, given)

    # -- public, async ----------------------------------------------------

    async def resolve(self, path: str) -> str:
        """Return ``path`` as a canonical workspace-relative path (links inside expanded)."""
        return await trio.to_thread.run_sync(self.resolve_sync, path)

    async def read_bytes(self, path: str, *, max_bytes: int | None = None) -> bytes:
        """Read a regular file; refuse special files and files over the cap."""
        return await trio.to_thread.run_sync(self.read_bytes_sync, path, max_bytes)

    async def write_bytes(self, path: str, data: bytes, *, create_parents: bool = True) -> bool:
        """Replace (or create) a file atomically; return whether it was created."""
        return await trio.to_thread.run_sync(self.write_bytes_sync, path, data, create_parents)

    async def edit_bytes(self, path: str, edit: Callable[[bytes], bytes]) -> None:
        """Replace a file's content with ``edit(content)``; see ``edit_bytes_sync``."""
        await trio.to_thread.run_sync(self.edit_bytes_sync, path, edit)

    async def list_dir(self, path: str = ".") -> list[DirEntry]:
        """List a directory's entries, sorted by name, without following links."""
        return await trio.to_thread.run_sync(self.list_dir_sync, path)

    # -- blocking versions (call from a worker thread) ----------------------

    def resolve_sync(self, path: str) -> str:
        """Blocking ``resolve``: run it in a worker thread."""
        where = self._locate(path)
        os.close(where.dir_fd)
        return where.relative

    def read_bytes_sync(self, path: str, max_bytes: int | None = None) -> bytes:
        """Blocking ``read_bytes``: run it in a worker thread."""
        cap = self.max_read_bytes if max_bytes is None else min(max_bytes, self.max_read_bytes)
        with self._open_regular(path) as (fd, _size):
            return _read_capped(fd, cap, path)

    def edit_bytes_sync(self, path: str, edit: Callable[[bytes], bytes]) -> None:
        """Replace a file's content with ``edit(content)``, resolving the path once.

        The read and the replacing write go through the same directory
        descriptor, so a link changed in between cannot make one file's
        edited content land on another. If the file itself changed meanwhile
        (another writer), nothing is written and the error says so.
        Exceptions from ``edit`` propagate. Blocking: run it in a worker thread.
        """
        where = self._locate(path)
        try:
            if where.name is None:
                raise WorkspaceError(path, "is a directory; give a file path.")
            fd, _size = open_regular_at(where.dir_fd, where.name, path)
            try:
                before = os.fstat(fd)
                data = _read_capped(fd, self.max_read_bytes, path)
            finally:
                os.close(fd)
            updated = edit(data)
            try:
                now = os.stat(where.name, dir_fd=where.dir_fd, follow_symlinks=False)
            except OSError as exc:
                raise _os_error(path, exc) from None
            if _version(now) != _version(before):
                raise WorkspaceError(
                    path, "changed while it was being edited; read it again and retry."
                )
            _replace_file(where.dir_fd, where.name, updated, path)
        finally:
            os.close(where.dir_fd)

    def write_bytes_sync(self, path: str, data: bytes, create_parents: bool = True) -> bool:
        """Blocking ``write_bytes``: run it in a worker thread."""
        where = self._locate(path, create_dirs=create_parents)
        try:
            if where.name is None:
                raise WorkspaceError(path, "is a directory; give a file path.")
            return _replace_file(where.dir_fd, where.name, data, path)
        finally:
            os.close(where.dir_fd)

    def list_dir_sync(self, path: str = ".") -> list[DirEntry]:
        """Blocking ``list_dir``: run it in a worker thread."""
        fd = self.open_dir(path)
        try:
            return scan(fd)
        finally:
            os.close(fd)

    # -- building blocks for the tools ---------------------------------------

    def open_dir(self, path: str) -> int:
        """Open a directory of the workspace; return its descriptor (caller closes)."""
        where = self._locate(path)
        if where.name is None:
            return where.dir_fd
        try:
            return os.open(where.name, _DIR_FLAGS, dir_fd=where.dir_fd)
        except OSError as exc:
            if exc.errno in (errno.ENOTDIR, errno.ELOOP):
                raise WorkspaceError(path, "is not a directory.") from None
            raise _os_error(path, exc) from None
        finally:
            if where.name is not None:
                os.close(where.dir_fd)

    def _open_regular(self, path: str) -> _OpenFile:
        where = self._locate(path)
        try:
            if where.name is None:
                raise WorkspaceError(path, "is a directory; use list_dir to see its entries.")
            return _OpenFile(open_regular_at(where.dir_fd, where.name, path))
        finally:
            os.close(where.dir_fd)

    # -- the walk --------------------------------------------------------

    def _split(self, path: str) -> list[str]:
        if not isinstance(path, str):
            raise WorkspaceError(
                str(path), "is not a string.", error_class=ErrorClass.INVALID_ARGUMENTS
            )
        if "\x00" in path:
            raise WorkspaceError(
                path.replace("\x00", "\\0"),
                "contains a NUL byte, which no file name can hold.",
                error_class=ErrorClass.INVALID_ARGUMENTS,
            )
        try:
            os.fsencode(path)
        except UnicodeEncodeError:
            raise WorkspaceError(
                path.encode("utf-8", "backslashreplace").decode("ascii"),
                "contains characters that cannot be encoded as a file name.",
                error_class=ErrorClass.INVALID_ARGUMENTS,
            ) from None
        parts = [p for p in path.split("/") if p not in ("", ".")]
        if not path.startswith("/"):
            return parts
        inside = self._strip_root(parts)
        if inside is None:
            raise _denied(path, "is outside the workspace; use a path relative to its root.")
        return inside

    def _strip_root(self, parts: list[str]) -> list[str] | None:
        for prefix in self._prefixes:
            n = len(prefix)
            if len(parts) >= n and tuple(parts[:n]) == prefix:
                return parts[n:]
        return None

    def _locate(self, path: str, *, create_dirs: bool = False) -> _Located:
        """Walk ``path`` from the root; return the parent descriptor and final name."""
        parts = self._split(path)
        try:
            root_fd = os.open(self._real, _DIR_FLAGS & ~os.O_NOFOLLOW)
        except OSError as exc:
            raise WorkspaceError(
                ".", f"(the workspace root) cannot be opened: {exc.strerror}."
            ) from None
        st = os.fstat(root_fd)
        if (st.st_dev, st.st_ino) != self._identity:  # moved away, something else put there
            os.close(root_fd)
            raise _denied(
                ".", "(the workspace root) is no longer the directory the workspace was made for."
            )
        # A trailing '/' (or '/.') says the last part is a directory, as the kernel reads it.
        directory = path.endswith(("/", "/.")) and bool(parts)
        walk = _Walk(self, path, deque(parts), [root_fd], create_dirs, directory)
        try:
            return walk.run()
        finally:
            for fd in walk.fds:
                if fd is not None:
                    os.close(fd)


@attrs.define(eq=False)
class _Walk:
    """The state of one component-wise walk (see the module docstring)."""

    workspace: Workspace
    path: str
    queue: deque[str]
    fds: list[int | None]  # root first; None: closed to bound the count, reopened on '..'
    create_dirs: bool
    directory: bool = False  # the path ends with '/': its last part must be a directory
    names: list[str] = attrs.Factory(list)
    budget: int = _MAX_LINKS
    created: int = 0
    via_link: str | None = None

    def run(self) -> _Located:
        queue, fds, names = self.queue, self.fds, self.names
        while queue:
            part = queue.popleft()
            if part == "..":
                if len(fds) == 1:
                    raise self._escape("leads above the workspace root.")
                closing = fds.pop()
                if closing is not None:
                    os.close(closing)
                names.pop()
                if fds[-1] is None:
                    self._reopen()
            elif queue or self.directory:
                self._descend(part)
            else:
                target = _link_target(self._top, part, self.path)
                if target is None:
                    return _Located(self._pop(), part, (*names, part))
                self._expand(part, target)
        return _Located(self._pop(), None, tuple(names))

    @property
    def _top(self) -> int:
        fd = self.fds[-1]
        assert fd is not None  # the deepest directory is always open
        return fd

    def _pop(self) -> int:
        fd = self._top
        self.fds.pop()
        return fd

    def _reopen(self) -> None:
        """Reopen the deepest directory by name, from the nearest open ancestor."""
        base = max(i for i, fd in enumerate(self.fds) if fd is not None)
        parent = self.fds[base]
        assert parent is not None
        opened: list[int] = []
        try:
            for name in self.names[base : len(self.fds) - 1]:
                opened.append(os.open(name, _DIR_FLAGS, dir_fd=opened[-1] if opened else parent))
        except OSError as exc:
            for fd in opened:
                os.close(fd)
            raise WorkspaceError(
                self.path,
                f"cannot be walked back up ({exc.strerror}): it changed during the operation.",
            ) from None
        for fd in opened[:-1]:  # only the deepest stays open
            os.close(fd)
        self.fds[-1] = opened[-1]

    def _descend(self, part: str) -> None:
        try:
            self.fds.append(os.open(part, _DIR_FLAGS, dir_fd=self._top))
            self.names.append(part)
            if len(self.fds) > _MAX_OPEN_DIRS:  # bound the descriptors: close the oldest open one
                i = next(i for i, fd in enumerate(self.fds) if i > 0 and fd is not None)
                evicted = self.fds[i]
                assert evicted is not None
                os.close(evicted)
                self.fds[i] = None
            return
        except OSError as exc:
            failure = exc
        here = show("/".join((*self.names, part)))
        if failure.errno in (errno.ENOTDIR, errno.ELOOP):
            target = _link_target(self._top, part, self.path)
            if target is not None:
                self._expand(part, target)
                return
            if failure.errno == errno.ENOTDIR:
                raise WorkspaceError(self.path, f"cannot be reached: {here} is not a directory.")
        elif failure.errno == errno.ENOENT and self.create_dirs and self.queue:
            try:
                os.mkdir(part, 0o777, dir_fd=self._top)
            except FileExistsError:
                pass  # made meanwhile: look again, spending from the budget below
            except OSError as exc:
                raise _os_error(self.path, exc) from None
            else:
                # A new directory is not a link hop: it has a budget of its own,
                # one per part of the path (and some to spare for races).
                self.created += 1
                if self.created <= len(self.path) // 2 + _MAX_LINKS:
                    self.queue.appendleft(part)
                    return
        elif failure.errno == errno.ENOENT:
            raise WorkspaceError(self.path, f"does not exist ({here} is missing).")
        else:
            raise _os_error(self.path, failure) from None
        self._spend()  # the entry changed under us, or was just created: look again
        self.queue.appendleft(part)

    def _expand(self, part: str, target: str) -> None:
        self._spend()
        self.via_link = "/".join((*self.names, part))
        parts = [p for p in target.split("/") if p not in ("", ".")]
        if target.startswith("/"):
            inside = self.workspace._strip_root(parts)
            if inside is None:
                raise self._escape("is outside the workspace.", target)
            while len(self.fds) > 1:
                closing = self.fds.pop()
                if closing is not None:
                    os.close(closing)
            self.names.clear()
            parts = inside
        self.queue.extendleft(reversed(parts))

    def _spend(self) -> None:
        self.budget -= 1
        if self.budget < 0:
            raise WorkspaceError(
                self.path,
                "involves too many symbolic links (or kept changing during the operation).",
            )

    def _escape(self, why: str, target: str | None = None) -> WorkspaceError:
        if self.via_link is None:
            return _denied(self.path, why)
        to = f" to {target!r}" if target is not None else ""
        return _denied(
            self.path,
            f"goes through the symbolic link {show(self.via_link)}{to}, "
            "which leads outside the workspace.",
        )


def _link_target(dir_fd: int, name: str, path: str) -> str | None:
    """What ``name`` links to, or ``None`` if it is not a link (or does not exist)."""
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.EINVAL, errno.ENOENT, errno.ENOTDIR):
            return None
        raise _os_error(path, exc) from None


def kind_of(mode: int) -> str:
    """Name the file type of a ``st_mode``."""
    return _KINDS.get(stat.S_IFMT(mode), "other")


def open_regular_at(dir_fd: int, name: str, path: str) -> tuple[int, int]:
    """Open a regular file relative to ``dir_fd`` without following links.

    Returns ``(fd, size)``; refuses directories and special files.
    """
    with contextlib.suppress(OSError):  # look before opening: opening a FIFO has effects
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
            raise _denied(path, f"is a {kind_of(mode)}; only regular files can be read.")
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ENXIO, errno.ENODEV, errno.EOPNOTSUPP):  # sockets, devices
            with contextlib.suppress(OSError):
                mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
                raise _denied(
                    path, f"is a {kind_of(mode)}; only regular files can be read."
                ) from None
        raise _os_error(path, exc) from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise WorkspaceError(path, "is a directory; use list_dir to see its entries.")
        if not stat.S_ISREG(st.st_mode):
            raise _denied(path, f"is a {kind_of(st.st_mode)}; only regular files can be read.")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, st.st_size


def _read_capped(fd: int, cap: int, path: str) -> bytes:
    data = bytearray()
    while len(data) <= cap:
        chunk = os.read(fd, _CHUNK)
        if not chunk:
            return bytes(data)
        data += chunk
    raise WorkspaceError(path, f"is larger than the {cap}-byte read limit.")


def _version(st: os.stat_result) -> tuple[int, int, int, int]:
    """What changes when a file is replaced or written: inode, size, times."""
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@attrs.define
class _OpenFile:
    opened: tuple[int, int]

    def __enter__(self) -> tuple[int, int]:
        return self.opened

    def __exit__(self, *_exc: object) -> None:
        os.close(self.opened[0])


def _replace_file(dir_fd: int, name: str, data: bytes, path: str) -> bool:
    try:
        st: os.stat_result | None = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise _os_error(path, exc) from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        if stat.S_ISDIR(st.st_mode):
            raise WorkspaceError(path, "is a directory; give a file path.")
        if stat.S_ISLNK(st.st_mode):
            raise WorkspaceError(path, "was replaced by a symbolic link during the operation.")
        raise _denied(path, f"is a {kind_of(st.st_mode)}; only regular files can be written.")
    if st is not None and not os.access(name, os.W_OK, dir_fd=dir_fd, effective_ids=_EUID_ACCESS):
        # Renaming over it needs only the directory's permission; opening it for
        # writing would be refused, and so is this.
        raise _denied(path, "is not writable (the operating system denies writing to it).")
    # The final mode: the old file's without set-user/group-id (new content must
    # not inherit them), or what creating the file would give.
    mode = stat.S_IMODE(st.st_mode) & ~(stat.S_ISUID | stat.S_ISGID) if st else _new_file_mode()
    temp = f".toolexec-{secrets.token_hex(8)}.tmp"
    try:
        # Owner-only while it fills, so nobody else can read the data meanwhile.
        fd = os.open(temp, _TEMP_FLAGS, 0o600, dir_fd=dir_fd)
    except OSError as exc:
        raise _os_error(path, exc) from None
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
            raise _os_error(path, exc) from None
        raise
    return st is None


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


def scan(dir_fd: int) -> list[DirEntry]:
    """The entries of an open directory, sorted by name; links are not followed."""
    entries = []
    with os.scandir(dir_fd) as it:
        for entry in it:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue  # vanished while listing
            kind = kind_of(st.st_mode)
            size = st.st_size if kind == "file" else None
            target = None
            if kind == "link":
                with contextlib.suppress(OSError):
                    target = os.readlink(entry.name, dir_fd=dir_fd)
            entries.append(DirEntry(entry.name, kind, size, target))
    entries.sort(key=lambda e: os.fsencode(e.name))
    return entries


@attrs.define(eq=False)
class _Frame:
    name: str
    rel: str
    depth: int
    fd: int | None
    entries: Iterator[DirEntry]


def walk_tree(
    top_fd: int,
    top_rel: str,
    max_depth: int,
    problems: list[str],
    skip_dirs: frozenset[str] = frozenset(),
) -> Generator[tuple[str, DirEntry, int, int], None, None]:
    """Depth-first, pre-order walk below an open directory, without recursion.

    Yields ``(relative path, entry, depth, parent fd)``; the parent fd is
    valid until the next item. Only ``_MAX_OPEN_DIRS`` descriptors stay open
    however deep the tree: deeper ancestors are closed and reopened (each
    component with ``O_NOFOLLOW``) when the walk climbs back to them.
    Directories that cannot be entered are reported in ``problems``;
    directories named in ``skip_dirs`` are listed but not entered.
    ``top_fd`` stays owned by the caller.
    """
    stack = [_Frame("", top_rel, 0, top_fd, iter(scan(top_fd)))]
    try:
        while stack:
            frame = stack[-1]
            entry = next(frame.entries, None)
            if entry is None:
                done = stack.pop()
                if done.fd is not None and len(stack) > 0:
                    os.close(done.fd)
                continue
            fd = _frame_fd(stack)
            if fd is None:
                problems.append(f"{show(frame.rel)} changed during the listing; skipped")
                stack.pop()
                continue
            rel = entry.name if frame.rel in ("", ".") else f"{frame.rel}/{entry.name}"
            yield rel, entry, frame.depth + 1, fd
            if entry.kind == "dir" and frame.depth + 1 < max_depth and entry.name not in skip_dirs:
                _push(stack, fd, entry.name, rel, frame.depth + 1, problems)
    finally:
        for frame in stack[1:]:
            if frame.fd is not None:
                os.close(frame.fd)


def _push(
    stack: list[_Frame], fd: int, name: str, rel: str, depth: int, problems: list[str]
) -> None:
    try:
        child = os.open(name, _DIR_FLAGS, dir_fd=fd)
    except OSError as exc:
        problems.append(f"{show(rel)} could not be opened ({exc.strerror}); skipped")
        return
    try:
        entries = scan(child)
    except OSError as exc:
        os.close(child)
        problems.append(f"{show(rel)} could not be listed ({exc.strerror}); skipped")
        return
    stack.append(_Frame(name, rel, depth, child, iter(entries)))
    _evict(stack)


def _evict(stack: list[_Frame]) -> None:
    """Keep at most ``_MAX_OPEN_DIRS`` descriptors open: the deepest ones."""
    open_frames = [f for f in stack[1:] if f.fd is not None]  # stack[0]'s is the caller's
    for frame in open_frames[: max(0, len(open_frames) - _MAX_OPEN_DIRS)]:
        assert frame.fd is not None
        os.close(frame.fd)
        frame.fd = None


def _frame_fd(stack: list[_Frame]) -> int | None:
    """The descriptor of the top frame, reopening it from an open ancestor."""
    if stack[-1].fd is not None:
        return stack[-1].fd
    base = max(i for i, f in enumerate(stack) if f.fd is not None)
    fd = stack[base].fd
    assert fd is not None
    top = len(stack) - 1
    for i in range(base + 1, top + 1):
        frame = stack[i]
        try:
            frame.fd = os.open(frame.name, _DIR_FLAGS, dir_fd=fd)
        except OSError:
            return None
        parent = stack[i - 1]
        if i - 1 > base and top - (i - 1) >= _MAX_OPEN_DIRS:  # reopened only to pass through
            assert parent.fd is not None
            os.close(parent.fd)
            parent.fd = None
        fd = frame.fd
    _evict(stack)
    return fd
