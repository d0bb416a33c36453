"""The directory stack under both walks: O(1) steps up, a bounded number of descriptors."""

from __future__ import annotations

import contextlib
import os
import subprocess
from typing import TYPE_CHECKING, Any

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from toolexec import Workspace
from toolexec._tools._dirstack import DirStack, spacing_for
from toolexec._tools._tree import walk_tree

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    import pytest

DIR = os.O_RDONLY | os.O_DIRECTORY


@attrs.define
class Descriptors:
    """What was opened and closed while counting: calls, and the most open at once."""

    opens: int = 0
    open_now: int = 0
    peak: int = 0
    mine: set[int] = attrs.Factory(set)

    def opened(self, fd: int) -> None:
        self.opens += 1
        self.mine.add(fd)
        self.open_now += 1
        self.peak = max(self.peak, self.open_now)

    def closed(self, fd: int) -> None:
        if fd in self.mine:
            self.mine.discard(fd)
            self.open_now -= 1


@contextlib.contextmanager
def counting() -> Iterator[Descriptors]:
    """Count ``os.open`` calls, and the descriptors they return that are open at once."""
    real_open, real_close = os.open, os.close
    seen = Descriptors()

    def open_(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        fd = real_open(path, flags, mode, dir_fd=dir_fd)
        seen.opened(fd)
        return fd

    def close(fd: int) -> None:
        seen.closed(fd)
        real_close(fd)

    os.open, os.close = open_, close
    try:
        yield seen
    finally:
        os.open, os.close = real_open, real_close


def chain(root: Path, levels: int, name: str = "d") -> None:
    """``name/name/.../name``, ``levels`` deep under ``root``."""
    fd = os.open(root, DIR)
    for _ in range(levels):
        os.mkdir(name, dir_fd=fd)
        child = os.open(name, DIR, dir_fd=fd)
        os.close(fd)
        fd = child
    os.close(fd)


def test_the_spacing_is_the_square_root_of_the_depth() -> None:
    assert [spacing_for(n) for n in (1, 2, 4, 5, 16, 17, 256, 257, 4000)] == [
        1, 2, 2, 3, 4, 5, 16, 17, 64,
    ]  # fmt: skip
    assert 256 // spacing_for(256) + spacing_for(256) == 32


@settings(max_examples=40, deadline=None)
@given(steps=st.lists(st.sampled_from(["down", "up", "top"]), max_size=300))
def test_the_stack_agrees_with_the_tree_and_keeps_few_descriptors(
    tmp_path_factory: pytest.TempPathFactory, steps: list[str]
) -> None:
    root = tmp_path_factory.mktemp("stack")
    depth_limit = 64
    chain(root, depth_limit)
    spacing = spacing_for(depth_limit)
    stack = DirStack.at(os.open(root, DIR), depth_limit)
    with counting() as fds:
        try:
            for step in steps:
                if step == "down" and stack.depth < depth_limit:
                    stack.push("d", os.open("d", DIR, dir_fd=stack.top()))
                elif step == "up" and stack.depth:
                    stack.pop()
                here = root.joinpath(*stack.names)
                assert os.fstat(stack.top()).st_ino == here.stat().st_ino
                assert len(fds.mine) <= stack.depth // spacing + spacing
        finally:
            stack.close()
    assert fds.mine == set()
    # Every step costs O(1) opens, amortized: a reopen of k levels follows k free steps up.
    assert fds.opens <= 2 * len(steps) + spacing


def test_a_walk_down_and_back_up_costs_opens_linear_in_its_length(tmp_path: Path) -> None:
    levels = 127  # the path below has 255 components, under the limit
    chain(tmp_path, levels)
    (tmp_path / "ok.txt").write_text("ok\n")
    ws = Workspace(tmp_path)
    path = "d/" * levels + "../" * levels + "ok.txt"
    with counting() as fds:
        assert ws.resolve_sync(path) == "ok.txt"
    # Reopening each parent from the root instead costs ~levels**2 / 2 (over 4,000).
    assert fds.opens <= 3 * levels, fds
    assert fds.peak <= 32
    assert fds.mine == set()


def test_a_tree_walk_climbing_back_up_costs_opens_linear_in_the_tree(tmp_path: Path) -> None:
    levels = 250
    chain(tmp_path, levels)
    here = tmp_path
    for _ in range(levels):  # beside each level, a directory visited on the way back up
        (here / "z").mkdir()
        here = here / "d"
    problems: list[str] = []
    top = os.open(tmp_path, DIR)
    try:
        with counting() as fds:
            listed = [rel for rel, entry, _depth, _fd in walk_tree(top, "", 256, problems)]
    finally:
        os.close(top)
        subprocess.run(["rm", "-rf", str(tmp_path / "d")], check=True)
    assert len(listed) == 2 * levels
    assert problems == []
    assert fds.opens <= 3 * levels, fds  # one walk per level, and reopens
    assert fds.peak <= 32
    assert fds.mine == set()
