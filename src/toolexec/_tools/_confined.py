"""The confined walk: resolve a path beneath a root, on descriptors, never leaving it.

Theory of operation. A path is never resolved to a string and then opened
(the check-then-use window every path-escape bug lives in). Instead the path
is split into components and walked from a descriptor of the root: each
directory is opened *relative to the descriptor of its parent* with
``O_NOFOLLOW | O_DIRECTORY``, so a component that is a symbolic link fails
to open instead of being followed by the kernel. Links are then expanded
here, by reading them (``readlinkat``) and pushing their target's components
back onto the walk; ``..`` pops a level off the stack, and popping the
root is an escape. Whatever the walk ends on is what gets used: the caller
opens the final name relative to the parent descriptor with ``O_NOFOLLOW``
(``_file_ops``), so a link swapped in after the walk makes the open fail
rather than escape.

Bounded work. The directories walked through live on a ``DirStack``
(``_dirstack``): the names of every level, and open descriptors for the
root, a checkpoint every ``spacing`` levels and the levels just below the
top. ``..`` costs O(1) (a closed parent is reopened, by name from the
checkpoint below it, only when it is used, and the levels reopened stay
open for the next steps up), so a walk costs time linear in the number
of components it takes, and holds at most ``2 * sqrt(max_depth)``
descriptors: 32 at the default limits. Those limits bound the work a path
can ask for: at most ``max_bytes`` bytes (4096, like ``PATH_MAX``) and
``max_depth`` components below the root (256), and the walk never goes
more than ``max_depth`` levels down (a link could otherwise take it
deeper); both refusals are ``invalid_path``. Links are followed at most 40
times a walk (and a target is at most ``PATH_MAX`` bytes), and
``create_dirs`` makes missing directories on the way (each counted, so a
racing remover cannot loop it).

Cancellation. Everything here blocks, and callers run it in a worker
thread that a cancelled caller abandons (``_worker``). The thread is not
stopped by that; the walk is: it checks a cancel token (a
``threading.Event`` the caller sets when it stops waiting) before each
component and then fails with ``cancelled``, closing what it opened, so an
abandoned walk frees its thread after at most one more step.
"""

from __future__ import annotations

import errno
import os
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from .._core._display import show
from .._core._messages import clip
from .._core._workspace_errors import WorkspaceError, WorkspaceErrorKind, check_cancelled, os_error
from ._dirstack import DirStack
from ._file_ops import DIR_FLAGS

if TYPE_CHECKING:
    import threading

__all__ = ["MAX_PATH_BYTES", "MAX_PATH_DEPTH", "ConfinedRoot", "Located"]

#: The most components a path may have below the root, and the deepest a walk goes.
MAX_PATH_DEPTH = 256
#: The longest a path may be, in bytes (``PATH_MAX``).
MAX_PATH_BYTES = 4096
_MAX_LINKS = 40
_SHOWN = 100  # characters of an over-long path that its error shows
_INVALID = WorkspaceErrorKind.INVALID_PATH
_OUTSIDE = WorkspaceErrorKind.OUTSIDE
_OS_ERROR = WorkspaceErrorKind.OS_ERROR


@attrs.frozen
class Located:
    """A walk's end: the parent directory descriptor and the final name."""

    dir_fd: int
    name: str | None  # None: the path is the directory dir_fd itself
    parts: tuple[str, ...]

    @property
    def relative(self) -> str:
        """The canonical workspace-relative path the walk ended on."""
        return "/".join(self.parts) or "."


@attrs.frozen
class ConfinedRoot:
    """A root directory, and the walk of paths beneath it (see the module docstring).

    ``real`` is the root with its links resolved, ``identity`` its device
    and inode (a root moved away and replaced is refused), ``prefixes`` the
    components an absolute path may start with to name the root;
    ``max_depth`` and ``max_bytes`` are the path limits.
    """

    real: str
    identity: tuple[int, int]
    prefixes: tuple[tuple[str, ...], ...]
    max_depth: int = MAX_PATH_DEPTH
    max_bytes: int = MAX_PATH_BYTES

    @classmethod
    def of(
        cls, root: Path, max_depth: int = MAX_PATH_DEPTH, max_bytes: int = MAX_PATH_BYTES
    ) -> ConfinedRoot:
        """Resolve ``root`` (an absolute path to a directory) once."""
        real = os.path.realpath(root)
        st = os.stat(real)
        # Absolute paths (and link targets) may name the root either way.
        resolved, given = Path(real).parts[1:], root.parts[1:]
        prefixes = (resolved,) if resolved == given else (resolved, given)
        return cls(real, (st.st_dev, st.st_ino), prefixes, max_depth, max_bytes)

    def split(self, path: str) -> list[str]:
        """The components of ``path`` below the root; refuse what no walk may take."""
        self._check_length(path)
        parts = [p for p in path.split("/") if p not in ("", ".")]
        if path.startswith("/"):
            inside = self.strip_root(parts)
            if inside is None:
                raise WorkspaceError(
                    path,
                    "is outside the workspace; use a path relative to its root.",
                    kind=_OUTSIDE,
                )
            parts = inside
        if len(parts) > self.max_depth:
            raise WorkspaceError(
                _shortened(path),
                f"has {len(parts)} components; a path may have at most {self.max_depth} "
                "(the path depth limit).",
                kind=_INVALID,
            )
        return parts

    def _check_length(self, path: str) -> None:
        """Refuse what is not a string, cannot be a file name, or is too long."""
        if not isinstance(path, str):
            raise WorkspaceError(str(path), "is not a string.", kind=_INVALID)
        if "\x00" in path:
            raise WorkspaceError(
                _shortened(path).replace("\x00", "\\0"),
                "contains a NUL byte, which no file name can hold.",
                kind=_INVALID,
            )
        try:
            size = len(os.fsencode(path))
        except UnicodeEncodeError:
            raise WorkspaceError(
                _shortened(path).encode("utf-8", "backslashreplace").decode("ascii"),
                "contains characters that cannot be encoded as a file name.",
                kind=_INVALID,
            ) from None
        if size > self.max_bytes:
            raise WorkspaceError(
                _shortened(path),
                f"is {size} bytes long; a path may be at most {self.max_bytes} bytes "
                "(the path length limit).",
                kind=_INVALID,
            )

    def strip_root(self, parts: list[str]) -> list[str] | None:
        """``parts`` of an absolute path without the root's prefix; ``None`` if outside."""
        for prefix in self.prefixes:
            n = len(prefix)
            if len(parts) >= n and tuple(parts[:n]) == prefix:
                return parts[n:]
        return None

    def locate(
        self, path: str, *, create_dirs: bool = False, cancel: threading.Event | None = None
    ) -> Located:
        """Walk ``path`` from the root; return the parent descriptor and final name.

        ``cancel``: once set, the walk stops before its next component and
        fails with ``cancelled`` (see the module docstring).
        """
        parts = self.split(path)
        dirs = DirStack.at(self._open_root(), self.max_depth)
        # A trailing '/' (or '/.') says the last part is a directory, as the kernel reads it.
        directory = path.endswith(("/", "/.")) and bool(parts)
        try:
            return _Walk(self, path, deque(parts), dirs, create_dirs, directory, cancel).run()
        finally:
            dirs.close()

    def _open_root(self) -> int:
        try:
            root_fd = os.open(self.real, DIR_FLAGS & ~os.O_NOFOLLOW)
        except OSError as exc:
            raise WorkspaceError(
                ".", f"(the workspace root) cannot be opened: {exc.strerror}.", kind=_OS_ERROR
            ) from None
        st = os.fstat(root_fd)
        if (st.st_dev, st.st_ino) != self.identity:  # moved away, something else put there
            os.close(root_fd)
            raise WorkspaceError(
                ".",
                "(the workspace root) is no longer the directory the workspace was made for.",
                kind=_OUTSIDE,
            )
        return root_fd


def _shortened(path: str) -> str:
    """``path``, or its two ends if it is too long to repeat in an error."""
    return clip(path, _SHOWN)


@attrs.define(eq=False)
class _Walk:
    """The state of one component-wise walk (see the module docstring)."""

    root: ConfinedRoot
    path: str
    queue: deque[str]
    dirs: DirStack  # the root at its base; names and a bounded set of open descriptors
    create_dirs: bool
    directory: bool = False  # the path ends with '/': its last part must be a directory
    cancel: threading.Event | None = None  # set: the caller stopped waiting; stop
    budget: int = _MAX_LINKS
    created: int = 0
    via_link: str | None = None

    def run(self) -> Located:
        queue, dirs = self.queue, self.dirs
        while queue:
            check_cancelled(self.cancel, self.path)
            part = queue.popleft()
            if part == "..":
                if not dirs.depth:
                    raise self._escape("leads above the workspace root.")
                dirs.pop()  # O(1): the parent is reopened only if it is used, and cheaply
            elif dirs.depth >= self.root.max_depth:
                raise self._error(
                    f"goes more than {self.root.max_depth} levels below the workspace root "
                    "(the path depth limit).",
                    _INVALID,
                )
            elif queue or self.directory:
                self._descend(part)
            else:
                target = _link_target(self._top(), part, self.path)
                if target is None:
                    parts = (*dirs.names, part)
                    return Located(self._detach(), part, parts)
                self._expand(part, target)
        parts = tuple(dirs.names)
        return Located(self._detach(), None, parts)

    def _top(self) -> int:
        """The deepest directory's descriptor (reopened by name if it was closed)."""
        try:
            return self.dirs.top()
        except OSError as exc:
            raise self._error(
                f"cannot be walked back up ({exc.strerror}): it changed during the operation.",
                WorkspaceErrorKind.CHANGED,
            ) from None

    def _detach(self) -> int:
        self._top()  # reopened here, so a failure says so
        return self.dirs.detach()

    def _descend(self, part: str) -> None:
        try:
            fd = os.open(part, DIR_FLAGS, dir_fd=self._top())
        except OSError as exc:
            failure = exc
        else:
            self.dirs.push(part, fd)
            return
        self._not_entered(part, failure)

    def _not_entered(self, part: str, failure: OSError) -> None:
        """``part`` did not open as a directory: follow it as a link, make it, or say why."""
        here = show("/".join((*self.dirs.names, part)))
        code = failure.errno
        if code in (errno.ENOTDIR, errno.ELOOP):
            target = _link_target(self._top(), part, self.path)
            if target is not None:
                self._expand(part, target)
                return
            if code == errno.ENOTDIR:
                raise self._error(
                    f"cannot be reached: {here} is not a directory.",
                    WorkspaceErrorKind.NOT_A_DIRECTORY,
                )
        elif code == errno.ENOENT and self.create_dirs and self.queue:
            if self._make(part):
                return
        elif code == errno.ENOENT:
            raise self._error(f"does not exist ({here} is missing).", WorkspaceErrorKind.NOT_FOUND)
        else:
            raise os_error(self.path, failure) from None
        self._spend()  # the entry changed under us, or was just created: look again
        self.queue.appendleft(part)

    def _make(self, part: str) -> bool:
        """Create the missing directory ``part``; return whether the walk goes on into it.

        A new directory is not a link hop: it has a budget of its own, one per
        part of the path (and some to spare for races). ``False``: someone
        made it meanwhile, or the budget is spent; the caller looks again.
        """
        try:
            os.mkdir(part, 0o777, dir_fd=self._top())
        except FileExistsError:
            return False
        except OSError as exc:
            raise os_error(self.path, exc) from None
        self.created += 1
        if self.created > len(self.path) // 2 + _MAX_LINKS:
            return False
        self.queue.appendleft(part)
        return True

    def _expand(self, part: str, target: str) -> None:
        self._spend()
        self.via_link = "/".join((*self.dirs.names, part))
        parts = [p for p in target.split("/") if p not in ("", ".")]
        if target.startswith("/"):
            inside = self.root.strip_root(parts)
            if inside is None:
                raise self._escape("is outside the workspace.")
            self.dirs.reset()
            parts = inside
        self.queue.extendleft(reversed(parts))

    def _spend(self) -> None:
        self.budget -= 1
        if self.budget < 0:
            raise self._error(
                "involves too many symbolic links (or kept changing during the operation).",
                WorkspaceErrorKind.TOO_MANY_LINKS,
            )

    def _escape(self, why: str) -> WorkspaceError:
        if self.via_link is None:
            return self._error(why, _OUTSIDE)
        # Where the link leads is not said: a host path outside the workspace is
        # none of the model's (or a runner's) business.
        return self._error(
            f"goes through the symbolic link {show(_shortened(self.via_link))}, "
            "which leads outside the workspace.",
            _OUTSIDE,
        )

    def _error(self, reason: str, kind: WorkspaceErrorKind) -> WorkspaceError:
        return WorkspaceError(self.path, reason, kind=kind)


def _link_target(dir_fd: int, name: str, path: str) -> str | None:
    """What ``name`` links to, or ``None`` if it is not a link (or does not exist)."""
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.EINVAL, errno.ENOENT, errno.ENOTDIR):
            return None
        raise os_error(path, exc) from None
