"""The tree walker: list a directory, and walk a tree below one, without following links.

``scan`` lists an open directory; ``walk_tree`` walks depth-first below
one without recursion, each directory opened relative to its parent with
``O_NOFOLLOW``. The directories on the way down live on a ``DirStack``
(``_dirstack``): however deep the tree, only a bounded number of
descriptors stays open (32 for a walk 256 levels deep), and climbing back
up costs O(1) opens, amortized: an ancestor that was closed is reopened by
name (again with ``O_NOFOLLOW``) from the nearest open one, at most a few
levels below it. A directory that changed meanwhile, or cannot be entered,
is reported and skipped, never followed elsewhere. Both check a cancel
token at every entry and fail with ``cancelled`` once it is set, so a
listing whose caller stopped waiting ends at once.
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING

import attrs

from .._core._display import show
from .._core._workspace_errors import check_cancelled
from ._dirstack import DirStack
from ._file_ops import DIR_FLAGS, kind_of

if TYPE_CHECKING:
    import threading
    from collections.abc import Generator, Iterator

__all__ = ["DirEntry", "scan", "walk_tree"]


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


def scan(dir_fd: int, cancel: threading.Event | None = None, path: str = ".") -> list[DirEntry]:
    """The entries of an open directory, sorted by name; links are not followed.

    ``cancel``: once set, the listing (of ``path``) fails with ``cancelled``.
    """
    entries = []
    with os.scandir(dir_fd) as it:
        for entry in it:
            check_cancelled(cancel, path)
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
    rel: str
    entries: Iterator[DirEntry]


def walk_tree(
    top_fd: int,
    top_rel: str,
    max_depth: int,
    problems: list[str],
    skip_dirs: frozenset[str] = frozenset(),
    cancel: threading.Event | None = None,
) -> Generator[tuple[str, DirEntry, int, int], None, None]:
    """Depth-first, pre-order walk below an open directory, without recursion.

    Yields ``(relative path, entry, depth, parent fd)``; the parent fd is
    valid until the next item. Entries are listed down to ``max_depth``
    levels (1: the directory's own); the descriptors held stay bounded by
    about ``2 * sqrt(max_depth)`` (see the module docstring), so callers
    keep ``max_depth`` to the workspace's path depth limit. Directories
    that cannot be entered are reported in ``problems``; directories named
    in ``skip_dirs`` are listed but not entered. Once ``cancel`` is set the
    walk fails with ``cancelled``. ``top_fd`` stays owned by the caller.
    """
    where = top_rel or "."  # what a cancelled walk's error names
    dirs = DirStack.at(top_fd, max_depth, owns_base=False)
    frames = [_Frame(top_rel, iter(scan(top_fd, cancel, where)))]
    try:
        while frames:
            check_cancelled(cancel, where)
            frame = frames[-1]
            entry = next(frame.entries, None)
            if entry is None:
                _leave(frames, dirs)
                continue
            try:
                fd = dirs.top()
            except OSError:
                problems.append(f"{show(frame.rel)} changed during the listing; skipped")
                _leave(frames, dirs)
                continue
            rel = entry.name if frame.rel in ("", ".") else f"{frame.rel}/{entry.name}"
            depth = len(frames)
            yield rel, entry, depth, fd
            if entry.kind == "dir" and depth < max_depth and entry.name not in skip_dirs:
                _enter(frames, dirs, fd, entry.name, rel, problems, cancel)
    finally:
        dirs.close()


def _leave(frames: list[_Frame], dirs: DirStack) -> None:
    """Done with the deepest directory: climb back to its parent."""
    frames.pop()
    if frames:  # frames[0] is the caller's directory, the stack's base
        dirs.pop()


def _enter(
    frames: list[_Frame],
    dirs: DirStack,
    fd: int,
    name: str,
    rel: str,
    problems: list[str],
    cancel: threading.Event | None,
) -> None:
    """Go down into ``name`` (in ``fd``), or report why it cannot be entered."""
    try:
        child = os.open(name, DIR_FLAGS, dir_fd=fd)
    except OSError as exc:
        problems.append(f"{show(rel)} could not be opened ({exc.strerror}); skipped")
        return
    try:
        entries = scan(child, cancel, rel)
    except BaseException as exc:
        os.close(child)
        if not isinstance(exc, OSError):
            raise
        problems.append(f"{show(rel)} could not be listed ({exc.strerror}); skipped")
        return
    dirs.push(name, child)
    frames.append(_Frame(rel, iter(entries)))
