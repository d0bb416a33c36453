"""Fuzz workspace path resolution: ``Workspace.resolve_sync`` and reads.

The harness builds, once, a workspace holding files, a nested directory,
links that stay inside, links that leave it (to the directory holding the
root, to an absolute path outside, through ``..``), a dangling link and a
link loop, and a secret file beside the root.

Property: resolving any path either gives a canonical workspace-relative
path, inside the root (checked against the kernel's own ``realpath``) and
resolving to itself again, or raises ``WorkspaceError``; reading a path
never returns the secret's bytes and fails only with ``WorkspaceError``.
"""

from __future__ import annotations

import os
import tempfile

from _draw import Draw

from toolexec import Workspace, WorkspaceError

_BASE = tempfile.mkdtemp(prefix="toolexec-fuzz-")
ROOT = os.path.join(_BASE, "root")
SECRET = b"secret-outside-the-workspace"


def _build() -> Workspace:
    os.makedirs(os.path.join(ROOT, "dir", "sub"))
    with open(os.path.join(_BASE, "secret.txt"), "wb") as f:
        f.write(SECRET)
    for rel, data in [("a.txt", b"a"), ("dir/b.txt", b"b"), ("dir/sub/c.txt", b"c")]:
        with open(os.path.join(ROOT, rel), "wb") as f:
            f.write(data)
    links = {
        "in": "dir",
        "dir/up": "..",
        "dir/sub/file": "../b.txt",
        "out": "..",
        "abs_out": os.path.join(_BASE, "secret.txt"),
        "dotdot": "dir/../../secret.txt",
        "dangling": "missing/x",
        "loop1": "loop2",
        "loop2": "loop1",
        "self": ".",
    }
    for name, target in links.items():
        os.symlink(target, os.path.join(ROOT, name))
    return Workspace(ROOT)


WORKSPACE = _build()
REAL_ROOT = os.path.realpath(ROOT)
PARTS = [
    "a.txt",
    "dir",
    "sub",
    "b.txt",
    "c.txt",
    "in",
    "up",
    "file",
    "out",
    "abs_out",
    "dotdot",
    "dangling",
    "loop1",
    "self",
    "..",
    ".",
    "",
    "secret.txt",
    "\x00",
    "~",
    ROOT,
    REAL_ROOT,
    _BASE,
    "/etc",
    "/",
    "//",
    "\\",
]


def _path(draw: Draw) -> str:
    if draw.below(5) == 0:
        return draw.rest().decode("utf-8", "surrogateescape")
    parts = [draw.text(PARTS, 8) for _ in range(draw.below(7))]
    sep = draw.pick(["/", "//", "/./"])
    lead = draw.pick(["", "", "/", "./"])
    return lead + sep.join(parts)


def test_one_input(data: bytes) -> None:
    draw = Draw(data)
    path = _path(draw)
    try:
        relative = WORKSPACE.resolve_sync(path)
    except WorkspaceError:
        pass
    else:
        parts = relative.split("/")
        assert relative == "." or not ({"", ".", ".."} & set(parts)), (path, relative)
        real = os.path.realpath(os.path.join(REAL_ROOT, relative))
        assert real == REAL_ROOT or real.startswith(REAL_ROOT + os.sep), (path, relative, real)
        assert WORKSPACE.resolve_sync(relative) == relative, (path, relative)
    try:
        content = WORKSPACE.read_bytes_sync(path, None)
    except WorkspaceError:
        return
    assert content != SECRET, path
