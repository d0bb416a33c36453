"""The confined walk: resolve a path beneath a root, on descriptors, never leaving it.

Theory of operation. A path is never resolved to a string and then opened
(the check-then-use window every path-escape bug lives in). Instead the path
is split into components and walked from a descriptor of the root: each
directory is opened *relative to the descriptor of its parent* with
``O_NOFOLLOW | O_DIRECTORY``, so a component that is a symbolic link fails
to open instead of being followed by the kernel. Links are then expanded
here, by reading them (``readlinkat``) and pushing their target's components
back onto the walk; ``..`` pops a descriptor off the stack, and popping the
root is an escape. Whatever the walk ends on is what gets used: the caller
opens the final name relative to the parent descriptor with ``O_NOFOLLOW``
(``_file_ops``), so a link swapped in after the walk makes the open fail
rather than escape.

The walk keeps at most ``MAX_OPEN_DIRS`` directories open: older ones are
closed and reopened by name when ``..`` climbs back to them. Links are
followed at most 40 times a walk, and ``create_dirs`` makes missing
directories on the way (each counted, so a racing remover cannot loop it).

Everything here blocks; callers run it in a worker thread.
"""

from __future__ import annotations

import errno
import os
from collections import deque
from pathlib import Path

import attrs

from ._display import show
from ._file_ops import DIR_FLAGS, MAX_OPEN_DIRS
from ._workspace_errors import WorkspaceError, WorkspaceErrorKind, os_error

__all__ = ["ConfinedRoot", "Located"]

_MAX_LINKS = 40
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
    components an absolute path may start with to name the root.
    """

    real: str
    identity: tuple[int, int]
    prefixes: tuple[tuple[str, ...], ...]

    @classmethod
    def of(cls, root: Path) -> ConfinedRoot:
        """Resolve ``root`` (an absolute path to a directory) once."""
        real = os.path.realpath(root)
        st = os.stat(real)
        # Absolute paths (and link targets) may name the root either way.
        resolved, given = Path(real).parts[1:], root.parts[1:]
        prefixes = (resolved,) if resolved == given else (resolved, given)
        return cls(real, (st.st_dev, st.st_ino), prefixes)

    def split(self, path: str) -> list[str]:
        """The components of ``path`` below the root; refuse what no walk may take."""
        if not isinstance(path, str):
            raise WorkspaceError(str(path), "is not a string.", kind=_INVALID)
        if "\x00" in path:
            raise WorkspaceError(
                path.replace("\x00", "\\0"),
                "contains a NUL byte, which no file name can hold.",
                kind=_INVALID,
            )
        try:
            os.fsencode(path)
        except UnicodeEncodeError:
            raise WorkspaceError(
                path.encode("utf-8", "backslashreplace").decode("ascii"),
                "contains characters that cannot be encoded as a file name.",
                kind=_INVALID,
            ) from None
        parts = [p for p in path.split("/") if p not in ("", ".")]
        if not path.startswith("/"):
            return parts
        inside = self.strip_root(parts)
        if inside is None:
            raise WorkspaceError(
                path, "is outside the workspace; use a path relative to its root.", kind=_OUTSIDE
            )
        return inside

    def strip_root(self, parts: list[str]) -> list[str] | None:
        """``parts`` of an absolute path without the root's prefix; ``None`` if outside."""
        for prefix in self.prefixes:
            n = len(prefix)
            if len(parts) >= n and tuple(parts[:n]) == prefix:
                return parts[n:]
        return None

    def locate(self, path: str, *, create_dirs: bool = False) -> Located:
        """Walk ``path`` from the root; return the parent descriptor and final name."""
        parts = self.split(path)
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

    root: ConfinedRoot
    path: str
    queue: deque[str]
    fds: list[int | None]  # root first; None: closed to bound the count, reopened on '..'
    create_dirs: bool
    directory: bool = False  # the path ends with '/': its last part must be a directory
    names: list[str] = attrs.Factory(list)
    budget: int = _MAX_LINKS
    created: int = 0
    via_link: str | None = None

    def run(self) -> Located:
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
                    return Located(self._pop(), part, (*names, part))
                self._expand(part, target)
        return Located(self._pop(), None, tuple(names))

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
                opened.append(os.open(name, DIR_FLAGS, dir_fd=opened[-1] if opened else parent))
        except OSError as exc:
            for fd in opened:
                os.close(fd)
            raise self._error(
                f"cannot be walked back up ({exc.strerror}): it changed during the operation.",
                WorkspaceErrorKind.CHANGED,
            ) from None
        for fd in opened[:-1]:  # only the deepest stays open
            os.close(fd)
        self.fds[-1] = opened[-1]

    def _descend(self, part: str) -> None:
        try:
            fd = os.open(part, DIR_FLAGS, dir_fd=self._top)
        except OSError as exc:
            failure = exc
        else:
            self._push(part, fd)
            return
        self._not_entered(part, failure)

    def _push(self, part: str, fd: int) -> None:
        self.fds.append(fd)
        self.names.append(part)
        if len(self.fds) > MAX_OPEN_DIRS:  # bound the descriptors: close the oldest open one
            i = next(i for i, held in enumerate(self.fds) if i > 0 and held is not None)
            evicted = self.fds[i]
            assert evicted is not None
            os.close(evicted)
            self.fds[i] = None

    def _not_entered(self, part: str, failure: OSError) -> None:
        """``part`` did not open as a directory: follow it as a link, make it, or say why."""
        here = show("/".join((*self.names, part)))
        code = failure.errno
        if code in (errno.ENOTDIR, errno.ELOOP):
            target = _link_target(self._top, part, self.path)
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
            os.mkdir(part, 0o777, dir_fd=self._top)
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
        self.via_link = "/".join((*self.names, part))
        parts = [p for p in target.split("/") if p not in ("", ".")]
        if target.startswith("/"):
            inside = self.root.strip_root(parts)
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
            raise self._error(
                "involves too many symbolic links (or kept changing during the operation).",
                WorkspaceErrorKind.TOO_MANY_LINKS,
            )

    def _escape(self, why: str, target: str | None = None) -> WorkspaceError:
        if self.via_link is None:
            return self._error(why, _OUTSIDE)
        to = f" to {target!r}" if target is not None else ""
        return self._error(
            f"goes through the symbolic link {show(self.via_link)}{to}, "
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
