"""The workspace: a directory tree that file tools cannot leave.

``Workspace`` is the API the file tools (and hosts) use: read, write, edit,
list and resolve paths beneath a root. It holds no logic of its own about
paths or files; it puts three others together:

* ``_confined``: every path is walked from a descriptor of the root,
  component by component, links expanded by hand, so nothing ever leaves
  the root and nothing is checked on one object and used on another;
* ``_file_ops``: the final name is opened, read (capped, special files
  refused) or atomically replaced relative to the directory the walk
  ended on;
* ``_tree``: directories are listed and walked without following links.

Refusals are ``WorkspaceError`` (``_workspace_errors``), naming the path.
Everything that touches the file system blocks; the async methods run it
in a worker thread that cancellation abandons and stops (``_worker``: the
work checks a cancel token between steps), and the ``_sync`` ones are for
callers already in a thread (they take the token as ``cancel``).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from .._core._workspace_errors import WorkspaceError, WorkspaceErrorKind, check_cancelled, os_error
from ._confined import MAX_PATH_BYTES, MAX_PATH_DEPTH, ConfinedRoot
from ._file_ops import (
    DIR_FLAGS,
    OpenFile,
    file_version,
    is_a_directory,
    open_regular_at,
    read_capped,
    replace_file,
)
from ._tree import DirEntry, scan
from ._worker import run_abandonable

if TYPE_CHECKING:
    import threading
    from collections.abc import Callable

__all__ = ["DirEntry", "Workspace", "WorkspaceError"]


def _absolute(root: str | os.PathLike[str]) -> Path:
    return Path(os.path.abspath(root))


@attrs.define(eq=False)
class Workspace:
    """A directory whose files tools may read and write, and nothing outside it.

    Every path is resolved beneath ``root``: ``..`` cannot climb above it,
    absolute paths must lie under it, and symbolic links are followed only
    while they stay inside (checked on the descriptors actually used, so a
    link swapped in mid-operation cannot redirect it). Writes replace files
    atomically through a temporary file and never write through hard links.
    FIFOs, sockets and devices are refused, and so are reads over
    ``max_read_bytes`` and paths over the limits. Errors are
    ``WorkspaceError`` naming the path. Resolving a path takes time linear
    in its length and a bounded number of descriptors; a cancelled
    operation stops between steps and frees its worker thread.

    Example::

        ws = Workspace("/srv/project")
        await ws.write_bytes("notes/today.txt", b"hello\\n")
        data = await ws.read_bytes("notes/today.txt")

    Args:
        root: the workspace directory (it must exist). Links in it are
            resolved once, here; absolute paths may name the root either as
            given or as resolved.
        max_read_bytes: files larger than this are refused by reads.
        max_path_depth: the most components a path may have below the root
            (256); a walk through links never goes deeper either.
        max_path_bytes: the longest a path may be, in bytes (4096, like
            ``PATH_MAX``).
    """

    root: Path = attrs.field(converter=_absolute)
    max_read_bytes: int = 16 * 1024 * 1024
    max_path_depth: int = attrs.field(default=MAX_PATH_DEPTH, validator=attrs.validators.ge(1))
    max_path_bytes: int = attrs.field(default=MAX_PATH_BYTES, validator=attrs.validators.ge(1))
    _confined: ConfinedRoot = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        if not self.root.is_dir():
            raise ValueError(f"workspace root {str(self.root)!r} is not a directory")
        self._confined = ConfinedRoot.of(self.root, self.max_path_depth, self.max_path_bytes)

    # -- public, async ----------------------------------------------------

    async def resolve(self, path: str) -> str:
        """Return ``path`` as a canonical workspace-relative path (links inside expanded)."""
        return await run_abandonable(lambda cancel: self.resolve_sync(path, cancel=cancel))

    async def read_bytes(self, path: str, *, max_bytes: int | None = None) -> bytes:
        """Read a regular file; refuse special files and files over the cap."""
        return await run_abandonable(
            lambda cancel: self.read_bytes_sync(path, max_bytes, cancel=cancel)
        )

    async def write_bytes(self, path: str, data: bytes, *, create_parents: bool = True) -> bool:
        """Replace (or create) a file atomically; return whether it was created.

        If the call is cancelled, the write stops while the path is being
        resolved; once the file is being replaced, it completes (atomically)
        in the background.
        """
        return await run_abandonable(
            lambda cancel: self.write_bytes_sync(path, data, create_parents, cancel=cancel)
        )

    async def edit_bytes(self, path: str, edit: Callable[[bytes], bytes]) -> None:
        """Replace a file's content with ``edit(content)``; see ``edit_bytes_sync``."""
        await run_abandonable(lambda cancel: self.edit_bytes_sync(path, edit, cancel=cancel))

    async def list_dir(self, path: str = ".") -> list[DirEntry]:
        """List a directory's entries, sorted by name, without following links."""
        return await run_abandonable(lambda cancel: self.list_dir_sync(path, cancel=cancel))

    # -- blocking versions (call from a worker thread) ----------------------
    #
    # ``cancel``: a token the caller sets when it stops waiting; the work then
    # fails with ``cancelled`` at its next step (a path component, a chunk
    # read, a directory entry).

    def resolve_sync(self, path: str, *, cancel: threading.Event | None = None) -> str:
        """Blocking ``resolve``: run it in a worker thread."""
        where = self._confined.locate(path, cancel=cancel)
        os.close(where.dir_fd)
        return where.relative

    def read_bytes_sync(
        self, path: str, max_bytes: int | None = None, *, cancel: threading.Event | None = None
    ) -> bytes:
        """Blocking ``read_bytes``: run it in a worker thread."""
        cap = self.max_read_bytes if max_bytes is None else min(max_bytes, self.max_read_bytes)
        with self._open_regular(path, cancel) as (fd, _size):
            return read_capped(fd, cap, path, cancel)

    def edit_bytes_sync(
        self,
        path: str,
        edit: Callable[[bytes], bytes],
        *,
        cancel: threading.Event | None = None,
    ) -> None:
        """Replace a file's content with ``edit(content)``, resolving the path once.

        The read and the replacing write go through the same directory
        descriptor, so a link changed in between cannot make one file's
        edited content land on another. If the file itself changed meanwhile
        (another writer), nothing is written and the error says so; nor is
        anything written once ``cancel`` is set. Exceptions from ``edit``
        propagate. Blocking: run it in a worker thread.
        """
        where = self._confined.locate(path, cancel=cancel)
        try:
            if where.name is None:
                raise is_a_directory(path, "give a file path.")
            fd, _size = open_regular_at(where.dir_fd, where.name, path)
            try:
                before = os.fstat(fd)
                data = read_capped(fd, self.max_read_bytes, path, cancel)
            finally:
                os.close(fd)
            updated = edit(data)
            check_cancelled(cancel, path)
            try:
                now = os.stat(where.name, dir_fd=where.dir_fd, follow_symlinks=False)
            except OSError as exc:
                raise os_error(path, exc) from None
            if file_version(now) != file_version(before):
                raise WorkspaceError(
                    path,
                    "changed while it was being edited; read it again and retry.",
                    kind=WorkspaceErrorKind.CHANGED,
                )
            replace_file(where.dir_fd, where.name, updated, path)
        finally:
            os.close(where.dir_fd)

    def write_bytes_sync(
        self,
        path: str,
        data: bytes,
        create_parents: bool = True,
        *,
        cancel: threading.Event | None = None,
    ) -> bool:
        """Blocking ``write_bytes``: run it in a worker thread."""
        where = self._confined.locate(path, create_dirs=create_parents, cancel=cancel)
        try:
            if where.name is None:
                raise is_a_directory(path, "give a file path.")
            check_cancelled(cancel, path)
            return replace_file(where.dir_fd, where.name, data, path)
        finally:
            os.close(where.dir_fd)

    def list_dir_sync(
        self, path: str = ".", *, cancel: threading.Event | None = None
    ) -> list[DirEntry]:
        """Blocking ``list_dir``: run it in a worker thread."""
        fd = self.open_dir(path, cancel=cancel)
        try:
            return scan(fd, cancel)
        finally:
            os.close(fd)

    # -- building blocks for the tools ---------------------------------------

    def open_dir(self, path: str, *, cancel: threading.Event | None = None) -> int:
        """Open a directory of the workspace; return its descriptor (caller closes)."""
        where = self._confined.locate(path, cancel=cancel)
        if where.name is None:
            return where.dir_fd
        try:
            return os.open(where.name, DIR_FLAGS, dir_fd=where.dir_fd)
        except OSError as exc:
            if exc.errno in (errno.ENOTDIR, errno.ELOOP):
                raise WorkspaceError(
                    path, "is not a directory.", kind=WorkspaceErrorKind.NOT_A_DIRECTORY
                ) from None
            raise os_error(path, exc) from None
        finally:
            if where.name is not None:
                os.close(where.dir_fd)

    def _open_regular(self, path: str, cancel: threading.Event | None) -> OpenFile:
        where = self._confined.locate(path, cancel=cancel)
        try:
            if where.name is None:
                raise is_a_directory(path, "use list_dir to see its entries.")
            return OpenFile(open_regular_at(where.dir_fd, where.name, path))
        finally:
            os.close(where.dir_fd)
