"""Why a workspace refused or failed an operation: ``WorkspaceError`` and its kinds.

Every refusal names the path (escaped by ``show``) and says why in words
the model can act on; ``kind`` says the same as a value, so code branches
on it instead of on the words, and the error class a call gets follows from
it: ``permission_denied`` for anything that would leave the workspace,
touch a special file or that the system forbids, ``invalid_arguments`` for
names that cannot be file names (or paths over the limits), ``cancelled``
for an operation whose caller stopped waiting, ``execution_error``
otherwise.
"""

from __future__ import annotations

import enum
import errno
from typing import TYPE_CHECKING

from ._display import show
from ._errors import ToolError
from ._types import ErrorClass

if TYPE_CHECKING:
    import threading

__all__ = ["WorkspaceError", "WorkspaceErrorKind", "check_cancelled", "os_error"]


class WorkspaceErrorKind(enum.Enum):
    """Why a workspace operation was refused or failed."""

    #: The path, or a directory on the way to it, does not exist.
    NOT_FOUND = "not_found"
    #: A directory was needed, and the path (or a part of it) is something else.
    NOT_A_DIRECTORY = "not_a_directory"
    #: A file was needed, and the path is a directory.
    IS_A_DIRECTORY = "is_a_directory"
    #: A FIFO, socket or device: only regular files are read or written.
    SPECIAL_FILE = "special_file"
    #: Over the read limit.
    TOO_LARGE = "too_large"
    #: It leads out of the workspace (``..``, an absolute path, a link), or the
    #: root is no longer the directory the workspace was made for.
    OUTSIDE = "outside"
    #: The operating system denies access (or writing).
    PERMISSION = "permission"
    #: Not something a file name can be (NUL, unencodable, too long a name), or a
    #: path over the limits (too many components, too many bytes, too deep).
    INVALID_PATH = "invalid_path"
    #: It changed during the operation (a link swapped in, a write meanwhile).
    CHANGED = "changed"
    #: More symbolic links than a walk follows.
    TOO_MANY_LINKS = "too_many_links"
    #: Another failure of the operating system.
    OS_ERROR = "os_error"
    #: Stopped part-way: the caller cancelled the operation (or stopped waiting for it).
    CANCELLED = "cancelled"

    @property
    def error_class(self) -> ErrorClass:
        """The error class of a call that fails this way."""
        return _ERROR_CLASSES.get(self, ErrorClass.EXECUTION_ERROR)


_ERROR_CLASSES = {
    WorkspaceErrorKind.OUTSIDE: ErrorClass.PERMISSION_DENIED,
    WorkspaceErrorKind.SPECIAL_FILE: ErrorClass.PERMISSION_DENIED,
    WorkspaceErrorKind.PERMISSION: ErrorClass.PERMISSION_DENIED,
    WorkspaceErrorKind.INVALID_PATH: ErrorClass.INVALID_ARGUMENTS,
    WorkspaceErrorKind.CANCELLED: ErrorClass.CANCELLED,
}


class WorkspaceError(ToolError):
    """A workspace operation was refused or failed; the message names the path.

    ``path`` is the path as given (workspace-relative where it could be
    made so) and ``reason`` says why. ``error_class`` is
    ``permission_denied`` for anything that would leave the workspace or
    touch a special file, ``invalid_arguments`` for names that cannot be
    file names and paths over the limits, ``cancelled`` for an operation
    its caller stopped, and ``execution_error`` otherwise (a missing file,
    ...).
    """

    def __init__(
        self,
        path: str,
        reason: str,
        *,
        error_class: ErrorClass | None = None,
        kind: WorkspaceErrorKind = WorkspaceErrorKind.OS_ERROR,
    ) -> None:
        """Name ``path`` and say why in ``reason``; ``kind`` says it as a value.

        ``kind`` (a ``WorkspaceErrorKind``: ``not_found``, ``outside``,
        ``too_large``, ...) is what code should branch on; ``error_class``
        defaults to the one it implies.
        """
        self.path = path
        self.reason = reason
        self.kind = kind
        super().__init__(f"{show(path)} {reason}", error_class=error_class or kind.error_class)


_ERRNO_KINDS = {
    errno.ENOENT: (WorkspaceErrorKind.NOT_FOUND, "does not exist."),
    errno.ENAMETOOLONG: (
        WorkspaceErrorKind.INVALID_PATH,
        "has a name that is too long (at most 255 bytes per component).",
    ),
    errno.EACCES: (
        WorkspaceErrorKind.PERMISSION,
        "is not accessible (the operating system denied access).",
    ),
    errno.ENOTDIR: (
        WorkspaceErrorKind.NOT_A_DIRECTORY,
        "has a component that is not a directory.",
    ),
    errno.ELOOP: (
        WorkspaceErrorKind.CHANGED,
        "was replaced by a symbolic link during the operation.",
    ),
    errno.EROFS: (WorkspaceErrorKind.PERMISSION, "is on a read-only file system."),
    errno.ENOSPC: (
        WorkspaceErrorKind.OS_ERROR,
        "could not be written: no space is left on the file system.",
    ),
    errno.EDQUOT: (
        WorkspaceErrorKind.OS_ERROR,
        "could not be written: the disk quota is used up.",
    ),
    errno.EFBIG: (
        WorkspaceErrorKind.OS_ERROR,
        "could not be written: it would pass the largest file size allowed"
        " (the file system's, or the process's file-size limit).",
    ),
}
_ERRNO_KINDS[errno.EPERM] = _ERRNO_KINDS[errno.EACCES]


def os_error(path: str, exc: OSError) -> WorkspaceError:
    """The ``WorkspaceError`` for an ``OSError`` met on ``path``."""
    kind, reason = _ERRNO_KINDS.get(
        exc.errno or 0,
        (WorkspaceErrorKind.OS_ERROR, f"could not be accessed: {exc.strerror or exc}."),
    )
    return WorkspaceError(path, reason, kind=kind)


def check_cancelled(cancel: threading.Event | None, path: str) -> None:
    """Fail the operation on ``path`` (``cancelled``) once its cancel token is set.

    Blocking work calls this between its steps; the token is set when the
    caller stops waiting (``_worker.run_abandonable``).
    """
    if cancel is not None and cancel.is_set():
        raise WorkspaceError(
            path,
            "was not finished: the operation was cancelled.",
            kind=WorkspaceErrorKind.CANCELLED,
        )
