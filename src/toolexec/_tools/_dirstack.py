"""A stack of directories, walked down and up in constant time, on a bounded number of descriptors.

Theory of operation. Both walks of the workspace (the confined walk of a
path, the tree walk of a listing or a search) go down a chain of
directories, each opened relative to its parent with ``O_NOFOLLOW``, and
climb back up it. Keeping every level open costs a descriptor per level
(hundreds per call, thousands per batch); keeping only the deepest few and
reopening the others from the base when the walk climbs back makes each
step up cost the whole depth, so a walk down and back up costs the square
of it.

This stack keeps the *names* of all its levels, and open descriptors for
only three kinds of level:

* the base (level 0, where the walk starts);
* checkpoints: every ``spacing``-th level;
* the window: levels less than ``spacing`` above the top.

Going down opens the new level and closes the one that leaves the window
(unless it is a checkpoint). Going up closes the top and costs nothing
more: a level that is no longer open is reopened only when it is used, by
name (``O_NOFOLLOW | O_DIRECTORY``, as the walk first opened it) from the
nearest open level below it, which is at most ``spacing - 1`` levels down
(the checkpoint); the levels reopened on the way stay open, so the next
``spacing - 1`` steps up are free again. Each step down or up therefore
costs O(1) opens, amortized, and a stack ``depth`` levels deep holds at
most ``depth // spacing + spacing`` descriptors. With ``spacing`` the
square root of the deepest the stack may go (``spacing_for``), that is
twice the root: 32 descriptors at the workspace's default depth limit of
256 levels.

A level reopened by name is the directory now at that name beneath its
ancestor: still beneath the base, never through a link, but possibly not
the one the walk left if the tree changed meanwhile (as with any walk by
name).

Everything here blocks; callers run it in a worker thread.
"""

from __future__ import annotations

import math
import os

import attrs

from ._file_ops import DIR_FLAGS

__all__ = ["DirStack", "spacing_for"]


def spacing_for(max_depth: int) -> int:
    """The checkpoint spacing that keeps the fewest descriptors for ``max_depth`` levels."""
    return max(1, math.isqrt(max(max_depth, 1) - 1) + 1)


@attrs.define(eq=False)
class DirStack:
    """Directories from a base downwards: names for all, descriptors for a few.

    ``names[i]`` is the name of level ``i + 1`` in level ``i``; level 0 is
    the base. ``top()`` is the deepest level's descriptor, reopened if it was
    closed. The stack owns every descriptor it holds (the base too, unless
    made with ``owns_base=False``); ``close()`` closes them, ``detach()``
    hands the top one to the caller.
    """

    spacing: int
    _fds: list[int | None]
    names: list[str] = attrs.Factory(list)
    _owns_base: bool = True

    @classmethod
    def at(cls, base_fd: int, max_depth: int, *, owns_base: bool = True) -> DirStack:
        """A stack on ``base_fd`` spaced for at most ``max_depth`` levels below it."""
        return cls(spacing_for(max_depth), [base_fd], owns_base=owns_base)

    @property
    def depth(self) -> int:
        """How many levels are above the base."""
        return len(self.names)

    def push(self, name: str, fd: int) -> None:
        """Go down into ``name``, already opened as ``fd`` (the stack now owns it)."""
        self._fds.append(fd)
        self.names.append(name)
        leaving = len(self.names) - self.spacing  # the level that leaves the window
        if leaving > 0 and leaving % self.spacing:
            closing = self._fds[leaving]
            if closing is not None:
                self._fds[leaving] = None
                os.close(closing)

    def pop(self) -> None:
        """Go up one level, closing the top's descriptor; the base cannot be popped."""
        assert self.names, "the base is not popped"
        self.names.pop()
        closing = self._fds.pop()
        if closing is not None:
            os.close(closing)

    def reset(self) -> None:
        """Go back up to the base."""
        while self.names:
            self.pop()

    def top(self) -> int:
        """The deepest level's descriptor; reopened by name if it was closed.

        Raises:
            OSError: it could not be reopened (the tree changed meanwhile).
        """
        fd = self._fds[-1]
        return self._reopen() if fd is None else fd

    def detach(self) -> int:
        """Hand the top's descriptor to the caller and take the level off the stack."""
        fd = self.top()
        self._fds.pop()
        if self.names:
            self.names.pop()
        return fd

    def close(self) -> None:
        """Close every descriptor the stack owns; it is empty afterwards."""
        fds, self._fds = self._fds, []
        self.names.clear()
        for i, fd in enumerate(fds):
            if fd is not None and (i or self._owns_base):
                os.close(fd)

    def _reopen(self) -> int:
        """Reopen the levels between the nearest open one and the top; return the top's."""
        top = len(self._fds) - 1
        below = top - 1
        while self._fds[below] is None:  # a checkpoint or the base is at most spacing - 1 down
            below -= 1
        fd = self._fds[below]
        assert fd is not None
        try:
            for level in range(below + 1, top + 1):
                fd = os.open(self.names[level - 1], DIR_FLAGS, dir_fd=fd)
                self._fds[level] = fd
        except OSError:
            for level in range(below + 1, top + 1):
                closing = self._fds[level]
                if closing is not None:
                    self._fds[level] = None
                    os.close(closing)
            raise
        return fd
