"""The tree walker: list a directory, and walk a tree below one, without following links.

``scan`` lists an open directory; ``walk_tree`` walks depth-first below
one without recursion, each directory opened relative to its parent with
``O_NOFOLLOW``. However deep the tree, only ``MAX_OPEN_DIRS`` descriptors
stay open: deeper ancestors are closed and reopened by name (again with
``O_NOFOLLOW``, from the nearest open ancestor) when the walk climbs back
to them. A directory that changed meanwhile, or cannot be entered, is
reported and skipped, never followed elsewhere.
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING

import attrs

from ._display import show
from ._file_ops import DIR_FLAGS, MAX_OPEN_DIRS, kind_of

if TYPE_CHECKING:
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
    valid until the next item. Only ``MAX_OPEN_DIRS`` descriptors stay open
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
        child = os.open(name, DIR_FLAGS, dir_fd=fd)
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
    """Keep at most ``MAX_OPEN_DIRS`` descriptors open: the deepest ones."""
    open_frames = [f for f in stack[1:] if f.fd is not None]  # stack[0]'s is the caller's
    for frame in open_frames[: max(0, len(open_frames) - MAX_OPEN_DIRS)]:
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
            frame.fd = os.open(frame.name, DIR_FLAGS, dir_fd=fd)
        except OSError:
            return None
        parent = stack[i - 1]
        if i - 1 > base and top - (i - 1) >= MAX_OPEN_DIRS:  # reopened only to pass through
            assert parent.fd is not None
            os.close(parent.fd)
            parent.fd = None
        fd = frame.fd
    _evict(stack)
    return fd
