"""Workspace confinement, with real files, links, FIFOs and a racing thread."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from toolexec import (
    ErrorClass,
    ToolCall,
    ToolError,
    ToolExecutor,
    ToolRegistry,
    Workspace,
    WorkspaceError,
    WorkspaceErrorKind,
    register_builtin_tools,
)
from toolexec._core._display import show
from toolexec._tools._search import _SearchState
from toolexec.tools import EditFileTool, SearchFilesTool

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator

SECRET = b"SECRET-OUTSIDE-BYTES"
SRC = Path(__file__).parent.parent / "src"


@pytest.fixture
def world(tmp_path: Path) -> dict[str, Path]:
    root = tmp_path / "ws"
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_bytes(b"inside\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_bytes(SECRET)
    sibling = tmp_path / "ws-sibling"  # shares the root's prefix
    sibling.mkdir()
    (sibling / "s.txt").write_bytes(SECRET)
    os.symlink(outside / "secret.txt", root / "abs-file-link")
    os.symlink("../outside/secret.txt", root / "rel-file-link")
    os.symlink(outside, root / "dir-link")
    os.symlink("sub/../../outside", root / "tricky-link")
    os.symlink(root / "a.txt", root / "inside-abs-link")
    os.symlink("sub/../a.txt", root / "inside-rel-link")
    return {"root": root, "outside": outside, "sibling": sibling}


def _outside_untouched(world: dict[str, Path]) -> None:
    assert sorted(p.name for p in world["outside"].iterdir()) == ["secret.txt"]
    assert (world["outside"] / "secret.txt").read_bytes() == SECRET


ESCAPES = [
    "../outside/secret.txt",
    "sub/../../outside/secret.txt",
    "abs-file-link",
    "rel-file-link",
    "dir-link/secret.txt",
    "tricky-link/secret.txt",
    "{outside}/secret.txt",
    "{sibling}/s.txt",
    "{root}/../outside/secret.txt",
]


def _fill(path: str, world: dict[str, Path]) -> str:
    return path.format(**{k: str(v) for k, v in world.items()})


@pytest.mark.parametrize("path", ESCAPES)
async def test_reads_never_leave_the_root(world: dict[str, Path], path: str) -> None:
    ws = Workspace(world["root"])
    path = _fill(path, world)
    with pytest.raises(WorkspaceError) as info:
        await ws.read_bytes(path)
    assert info.value.error_class is ErrorClass.PERMISSION_DENIED
    assert path in info.value.message


@pytest.mark.parametrize("path", [*ESCAPES, "dir-link/new.txt", "../outside/new.txt"])
async def test_writes_never_leave_the_root(world: dict[str, Path], path: str) -> None:
    ws = Workspace(world["root"])
    with pytest.raises(WorkspaceError) as info:
        await ws.write_bytes(_fill(path, world), b"overwritten")
    assert info.value.error_class is ErrorClass.PERMISSION_DENIED
    _outside_untouched(world)


@pytest.mark.parametrize("path", ["dir-link", "tricky-link", "..", "{outside}"])
async def test_listings_never_leave_the_root(world: dict[str, Path], path: str) -> None:
    ws = Workspace(world["root"])
    with pytest.raises(WorkspaceError) as info:
        await ws.list_dir(_fill(path, world))
    assert info.value.error_class is ErrorClass.PERMISSION_DENIED


async def test_a_dangling_link_out_is_not_created_by_a_write(world: dict[str, Path]) -> None:
    os.symlink(world["outside"] / "created.txt", world["root"] / "dangling")
    ws = Workspace(world["root"])
    with pytest.raises(WorkspaceError) as info:
        await ws.write_bytes("dangling", b"x")
    assert info.value.error_class is ErrorClass.PERMISSION_DENIED
    assert "symbolic link" in info.value.message
    _outside_untouched(world)


async def test_links_that_stay_inside_are_followed(world: dict[str, Path]) -> None:
    ws = Workspace(world["root"])
    assert await ws.read_bytes("inside-abs-link") == b"inside\n"
    assert await ws.read_bytes("inside-rel-link") == b"inside\n"
    assert await ws.read_bytes(str(world["root"] / "a.txt")) == b"inside\n"
    assert await ws.resolve("inside-rel-link") == "a.txt"
    os.symlink("later.txt", world["root"] / "dangling-in")
    assert await ws.write_bytes("dangling-in", b"made") is True
    assert (world["root"] / "later.txt").read_bytes() == b"made"


async def test_a_write_replaces_a_hard_link_instead_of_writing_through(
    world: dict[str, Path],
) -> None:
    os.link(world["outside"] / "secret.txt", world["root"] / "hard.txt")
    ws = Workspace(world["root"])
    assert await ws.write_bytes("hard.txt", b"new content") is False
    assert (world["root"] / "hard.txt").read_bytes() == b"new content"
    _outside_untouched(world)


async def test_writes_are_atomic_and_keep_the_mode(world: dict[str, Path]) -> None:
    target = world["root"] / "script.sh"
    target.write_bytes(b"old")
    target.chmod(0o750)
    ws = Workspace(world["root"])
    assert await ws.write_bytes("script.sh", b"new") is False
    assert target.read_bytes() == b"new"
    assert target.stat().st_mode & 0o777 == 0o750
    assert await ws.write_bytes("deep/er/file.txt", b"x") is True
    leftovers = [p.name for p in world["root"].rglob(".toolexec-*")]
    assert leftovers == []


async def test_fifos_and_sockets_are_refused_without_blocking(world: dict[str, Path]) -> None:
    os.mkfifo(world["root"] / "pipe")
    ws = Workspace(world["root"])
    with pytest.raises(WorkspaceError) as info:
        await ws.read_bytes("pipe")  # a blocking open would hang here
    assert info.value.error_class is ErrorClass.PERMISSION_DENIED
    assert "fifo" in info.value.message
    with pytest.raises(WorkspaceError, match="only regular files can be written"):
        await ws.write_bytes("pipe", b"x")
    sock_path = world["root"] / "sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(sock_path))
        with pytest.raises(WorkspaceError, match="socket"):
            await ws.read_bytes("sock")


async def test_devices_reached_through_links_are_refused(world: dict[str, Path]) -> None:
    os.symlink("/dev/zero", world["root"] / "zero")
    ws = Workspace(world["root"])
    with pytest.raises(WorkspaceError) as info:
        await ws.read_bytes("zero")
    assert info.value.error_class is ErrorClass.PERMISSION_DENIED


async def test_oversize_reads_are_refused(world: dict[str, Path]) -> None:
    (world["root"] / "big.bin").write_bytes(b"x" * 101)
    ws = Workspace(world["root"], max_read_bytes=100)
    with pytest.raises(WorkspaceError, match="100-byte read limit"):
        await ws.read_bytes("big.bin")
    assert await ws.read_bytes("a.txt") == b"inside\n"


@pytest.mark.parametrize(
    ("path", "error_class", "words", "writable"),
    [
        ("a\x00b", ErrorClass.INVALID_ARGUMENTS, "NUL byte", False),
        ("n" * 300, ErrorClass.INVALID_ARGUMENTS, "too long", False),
        ("sub/" + "n" * 300 + "/x", ErrorClass.INVALID_ARGUMENTS, "too long", False),
        ("bad\ud800name", ErrorClass.INVALID_ARGUMENTS, "cannot be encoded", False),
        ("a.txt/child", ErrorClass.EXECUTION_ERROR, "'a.txt' is not a directory", False),
        ("sub", ErrorClass.EXECUTION_ERROR, "is a directory", False),
        ("missing/file.txt", ErrorClass.EXECUTION_ERROR, "'missing' is missing", True),
    ],
)
async def test_odd_names_give_clean_errors(
    world: dict[str, Path], path: str, error_class: ErrorClass, words: str, writable: bool
) -> None:
    ws = Workspace(world["root"])
    with pytest.raises(WorkspaceError) as info:
        await ws.read_bytes(path)
    assert info.value.error_class is error_class
    assert words in info.value.message
    if writable:  # writes create missing parents
        assert await ws.write_bytes(path, b"x") is True
        return
    with pytest.raises(WorkspaceError) as info:
        await ws.write_bytes(path, b"x")
    assert info.value.error_class is error_class


@pytest.mark.parametrize(
    ("operation", "path", "kind"),
    [
        ("read", "missing.txt", WorkspaceErrorKind.NOT_FOUND),
        ("read", "missing/file.txt", WorkspaceErrorKind.NOT_FOUND),
        ("read", "../outside/secret.txt", WorkspaceErrorKind.OUTSIDE),
        ("read", "{outside}/secret.txt", WorkspaceErrorKind.OUTSIDE),
        ("read", "dir-link/secret.txt", WorkspaceErrorKind.OUTSIDE),
        ("read", "a.txt/child", WorkspaceErrorKind.NOT_A_DIRECTORY),
        ("list", "a.txt", WorkspaceErrorKind.NOT_A_DIRECTORY),
        ("read", "sub", WorkspaceErrorKind.IS_A_DIRECTORY),
        ("write", "sub", WorkspaceErrorKind.IS_A_DIRECTORY),
        ("read", "pipe", WorkspaceErrorKind.SPECIAL_FILE),
        ("write", "pipe", WorkspaceErrorKind.SPECIAL_FILE),
        ("read", "big.bin", WorkspaceErrorKind.TOO_LARGE),
        ("read", "a\x00b", WorkspaceErrorKind.INVALID_PATH),
        ("read", "n" * 300, WorkspaceErrorKind.INVALID_PATH),
        ("read", "loop", WorkspaceErrorKind.TOO_MANY_LINKS),
        ("read", "a/" * 256 + "f", WorkspaceErrorKind.INVALID_PATH),
        ("write", "a/" * 256 + "f", WorkspaceErrorKind.INVALID_PATH),
        ("list", ("n" * 200 + "/") * 21, WorkspaceErrorKind.INVALID_PATH),
    ],
)
async def test_every_refusal_says_its_kind_and_the_kind_gives_the_class(
    world: dict[str, Path], operation: str, path: str, kind: WorkspaceErrorKind
) -> None:
    os.mkfifo(world["root"] / "pipe")
    (world["root"] / "big.bin").write_bytes(b"x" * 101)
    os.symlink("loop", world["root"] / "loop")
    ws = Workspace(world["root"], max_read_bytes=100)
    attempts: dict[str, Callable[[], Awaitable[object]]] = {
        "read": lambda: ws.read_bytes(_fill(path, world)),
        "write": lambda: ws.write_bytes(_fill(path, world), b"x"),
        "list": lambda: ws.list_dir(_fill(path, world)),
    }
    with pytest.raises(WorkspaceError) as info:
        await attempts[operation]()
    assert info.value.kind is kind
    assert info.value.error_class is kind.error_class
    assert info.value.message == f"{show(info.value.path)} {info.value.reason}"


# -- path limits ----------------------------------------------------------------------


async def test_paths_over_the_limits_are_refused_naming_the_limit(
    world: dict[str, Path],
) -> None:
    ws = Workspace(world["root"])
    assert (ws.max_path_depth, ws.max_path_bytes) == (256, 4096)
    assert await ws.write_bytes("a/" * 255 + "f", b"deep") is True  # 256 components: allowed
    assert await ws.read_bytes("/".join(["a"] * 127 + [".."] * 127 + ["a.txt"])) == b"inside\n"
    refusals = {
        "a/" * 256 + "f": "has 257 components; a path may have at most 256 (the path depth limit).",
        "d/" * 3000 + "../" * 3000 + "ok.txt": "is 15006 bytes long; a path may be at most "
        "4096 bytes (the path length limit).",
        str(world["root"]) + "/" + "a/" * 257: "has 257 components; a path may have at most 256 "
        "(the path depth limit).",
    }
    for path, reason in refusals.items():
        with pytest.raises(WorkspaceError) as info:
            await ws.read_bytes(path)
        assert (info.value.kind, info.value.reason) == (WorkspaceErrorKind.INVALID_PATH, reason)
        assert info.value.error_class is ErrorClass.INVALID_ARGUMENTS
        assert len(info.value.message) < 250  # an over-long path is not repeated whole
        assert f"…[{len(path) - 99} characters]…" in info.value.path  # its two ends shown


async def test_links_cannot_take_a_walk_below_the_depth_limit(world: dict[str, Path]) -> None:
    root = world["root"]
    (root / "d" / "d" / "d" / "d" / "d").mkdir(parents=True)
    (root / "d" / "d" / "d" / "d" / "d" / "f.txt").write_bytes(b"deep")
    os.symlink("d/d/d", root / "three")
    ws = Workspace(root, max_path_depth=5)
    assert await ws.resolve("d/d/d/d/d") == "d/d/d/d/d"  # five components: walked
    assert await ws.resolve("three/d") == "d/d/d/d"
    with pytest.raises(WorkspaceError) as info:
        await ws.read_bytes("three/d/d/f.txt")  # four components, six levels down
    assert info.value.kind is WorkspaceErrorKind.INVALID_PATH
    assert info.value.reason == (
        "goes more than 5 levels below the workspace root (the path depth limit)."
    )
    with pytest.raises(ValueError, match="max_path_depth"):
        Workspace(root, max_path_depth=0)
    with pytest.raises(ValueError, match="max_path_bytes"):
        Workspace(root, max_path_bytes=0)


def test_a_workspace_error_made_by_hand_keeps_its_old_defaults() -> None:
    error = WorkspaceError("x.txt", "is odd.")
    assert (error.kind, error.error_class) == (
        WorkspaceErrorKind.OS_ERROR,
        ErrorClass.EXECUTION_ERROR,
    )
    denied = WorkspaceError("x.txt", "is mine.", error_class=ErrorClass.PERMISSION_DENIED)
    assert denied.error_class is ErrorClass.PERMISSION_DENIED


async def test_non_utf8_names_round_trip(world: dict[str, Path]) -> None:
    raw = os.fsencode(world["root"]) + b"/caf\xe9.txt"
    with open(raw, "wb") as f:
        f.write(b"latin-1 name\n")
    ws = Workspace(world["root"])
    names = [e.name for e in await ws.list_dir(".")]
    assert "caf\udce9.txt" in names
    assert await ws.read_bytes("caf\udce9.txt") == b"latin-1 name\n"
    with pytest.raises(WorkspaceError) as info:
        await ws.read_bytes("caf\udce9-missing.txt")
    assert "caf\\xe9-missing.txt" in info.value.message  # shown escaped, never raw


def test_the_root_must_be_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a directory"):
        Workspace(tmp_path / "nope")


# -- a link swapped in while operations run -----------------------------------------


def _exchange() -> Callable[[bytes, bytes], None] | None:
    """renameat2(RENAME_EXCHANGE) when libc has it: swaps two names atomically."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    fn = getattr(libc, "renameat2", None)
    if fn is None:
        return None
    at_fdcwd, rename_exchange = -100, 2

    def swap(a: bytes, b: bytes) -> None:
        fn(at_fdcwd, a, at_fdcwd, b, rename_exchange)

    return swap


@contextlib.contextmanager
def _swapping(root: Path, outside: Path) -> Iterator[list[int]]:
    """Keep swapping root/d between a real directory and a link to ``outside``."""
    (root / "d").mkdir(exist_ok=True)
    (root / "d" / "f.txt").write_bytes(b"inside\n")
    os.symlink(outside, root / "d.swap")
    d, swap_name = os.fsencode(root / "d"), os.fsencode(root / "d.swap")
    exchange = _exchange()
    stop = threading.Event()
    count = [0]

    def run() -> None:
        while not stop.is_set():
            if exchange is not None:
                exchange(d, swap_name)
            else:  # not atomic, but still races every step of a walk
                with contextlib.suppress(OSError):
                    os.rename(d, d + b".real")
                    os.symlink(outside, d)
                    os.unlink(d)
                    os.rename(d + b".real", d)
            count[0] += 1

    thread = threading.Thread(target=run)
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    thread.start()
    try:
        yield count
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(old)


def test_a_link_swapped_in_during_operations_never_leaks(world: dict[str, Path]) -> None:
    root, outside = world["root"], world["outside"]
    (outside / "e.txt").write_bytes(SECRET)  # what an edit through the link would hit
    ws = Workspace(root)
    edit = EditFileTool(ws)
    search = SearchFilesTool(ws)
    outcomes: dict[str, int] = {"ok": 0, "refused": 0}

    def searched() -> list[bytes]:
        start = search._start("d")
        try:
            items = search._files("d", start, None, _SearchState(), threading.Event())
            return [item[1] for item in items if item is not None]
        finally:
            if isinstance(start, int):
                os.close(start)

    (root / "d").mkdir()
    (root / "d" / "e.txt").write_bytes(b"alpha")  # before the swapping starts
    with _swapping(root, outside) as swaps:
        for i in range(1000):
            for operation in (
                lambda: ws.read_bytes_sync("d/f.txt"),
                lambda i=i: ws.write_bytes_sync(f"d/w{i % 7}.txt", b"written"),
                lambda: [e.name for e in ws.list_dir_sync("d")],
                lambda i=i: edit._edit(
                    "d/e.txt", *(("alpha", "beta") if i % 2 else ("beta", "alpha"))
                ),
                searched,
            ):
                try:
                    got = operation()
                except ToolError:  # refused, or an edit that found the other word
                    outcomes["refused"] += 1
                    continue
                outcomes["ok"] += 1
                if isinstance(got, bytes):
                    assert got == b"inside\n"
                elif isinstance(got, list):
                    assert "secret.txt" not in got
                    assert SECRET not in got
    assert sorted(p.name for p in outside.iterdir()) == ["e.txt", "secret.txt"]
    assert (outside / "secret.txt").read_bytes() == SECRET
    assert (outside / "e.txt").read_bytes() == SECRET
    assert swaps[0] > 100, swaps
    assert outcomes["ok"] > 0, outcomes


async def test_a_root_reached_through_a_link_is_known_by_both_names(
    world: dict[str, Path], tmp_path: Path
) -> None:
    alias = tmp_path / "alias"
    os.symlink(world["root"], alias)
    os.symlink(alias / "a.txt", world["root"] / "via-alias")  # absolute, through the alias
    ws = Workspace(alias)
    assert await ws.read_bytes(str(alias / "a.txt")) == b"inside\n"
    assert await ws.read_bytes(str(world["root"] / "a.txt")) == b"inside\n"
    assert await ws.read_bytes("via-alias") == b"inside\n"
    with pytest.raises(WorkspaceError) as info:
        await ws.read_bytes(str(alias) + "/../outside/secret.txt")
    assert info.value.error_class is ErrorClass.PERMISSION_DENIED


# -- what a replacing write leaves, and paths the kernel would read differently -----


async def test_written_data_is_owner_only_until_it_is_in_place(
    world: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    modes: list[int] = []
    real_write = os.write

    def write(fd: int, data: bytes) -> int:
        modes.append(os.fstat(fd).st_mode & 0o7777)  # what others could do meanwhile
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    ws = Workspace(world["root"])
    (world["root"] / "shared.txt").write_bytes(b"old")
    (world["root"] / "shared.txt").chmod(0o644)
    await ws.write_bytes("shared.txt", b"new private data")
    await ws.write_bytes("fresh.txt", b"more private data")
    monkeypatch.undo()
    assert modes
    assert set(modes) == {0o600}
    assert (world["root"] / "shared.txt").stat().st_mode & 0o7777 == 0o644


async def test_a_replaced_file_loses_set_user_and_group_id(world: dict[str, Path]) -> None:
    program = world["root"] / "tool"
    program.write_bytes(b"#!/bin/sh\n")
    program.chmod(0o6755)
    await Workspace(world["root"]).write_bytes("tool", b"#!/bin/sh\necho replaced\n")
    assert program.stat().st_mode & 0o7777 == 0o755


async def test_a_new_file_gets_the_mode_the_umask_gives(world: dict[str, Path]) -> None:
    old = os.umask(0o027)
    try:
        os.umask(old)  # put it back at once; read the expected mode from it
        await Workspace(world["root"]).write_bytes("new.txt", b"x")
        assert (world["root"] / "new.txt").stat().st_mode & 0o777 == 0o666 & ~old
    finally:
        os.umask(old)


def test_a_file_the_os_would_not_let_us_write_is_not_replaced() -> None:
    # As an unprivileged user (root may write anything), in a directory that user
    # may write: renaming over the file would work, opening it must not be bypassed.
    script = (
        "import sys, trio\n"
        "from toolexec import Workspace, WorkspaceError\n"
        "async def main():\n"
        "    try:\n"
        "        await Workspace(sys.argv[1]).write_bytes('ro.txt', b'replaced')\n"
        "    except WorkspaceError as exc:\n"
        "        print(exc.error_class.value, exc)\n"
        "trio.run(main)\n"
    )
    command: list[str] = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv: cannot act as an unprivileged user")
        command = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
    shared = Path(tempfile.mkdtemp(prefix="toolexec-ro-"))  # under /tmp: reachable by all
    try:
        shared.chmod(0o777)
        target = shared / "ro.txt"
        target.write_bytes(b"keep")
        target.chmod(0o444)
        result = subprocess.run(
            [*command, sys.executable, "-c", script, str(shared)],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(SRC)},
        )
        assert result.stdout.startswith("permission_denied 'ro.txt' is not writable"), (
            result.stdout + result.stderr
        )
        assert target.read_bytes() == b"keep"
    finally:
        shutil.rmtree(shared)


async def test_a_trailing_slash_means_a_directory(world: dict[str, Path]) -> None:
    ws = Workspace(world["root"])
    for path in ("a.txt/", "a.txt/."):
        with pytest.raises(WorkspaceError, match=r"'a\.txt' is not a directory"):
            await ws.read_bytes(path)
    with pytest.raises(WorkspaceError):
        await ws.write_bytes("newdir/", b"x")
    assert not (world["root"] / "newdir").exists()
    assert [e.name for e in await ws.list_dir("sub/")] == []


async def test_a_root_replaced_after_creation_is_not_followed(
    world: dict[str, Path], tmp_path: Path
) -> None:
    ws = Workspace(world["root"])
    world["root"].rename(tmp_path / "moved")
    world["root"].symlink_to(world["outside"])
    for attempt in (ws.read_bytes("secret.txt"), ws.write_bytes("planted.txt", b"x")):
        with pytest.raises(WorkspaceError, match="no longer the directory") as caught:
            await attempt
        assert caught.value.error_class is ErrorClass.PERMISSION_DENIED
    _outside_untouched(world)


async def test_many_new_directories_are_not_link_hops(world: dict[str, Path]) -> None:
    deep = "/".join(f"d{i}" for i in range(60)) + "/file.txt"
    assert await Workspace(world["root"]).write_bytes(deep, b"x") is True
    assert (world["root"] / deep).read_bytes() == b"x"


async def test_deep_trees_need_only_a_bounded_number_of_descriptors(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    deep = root / "/".join(["d"] * 255)  # the leaf is at the path depth limit
    deep.mkdir(parents=True)
    (deep / "leaf.txt").write_text("needle\n")
    (root / "top.txt").write_text("needle\n")  # listed after the walk climbs back up
    registry = ToolRegistry()
    register_builtin_tools(registry, Workspace(root))
    executor = ToolExecutor(registry)
    leaf = "/".join(["d"] * 255) + "/leaf.txt"
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 128, hard))
    try:
        outcome = await executor.execute_batch(
            [
                ToolCall("r", "read_file", {"path": leaf}),
                ToolCall("w", "write_file", {"path": leaf, "content": "needle again\n"}),
                ToolCall("l", "list_dir", {"path": ".", "depth": 256}),
                ToolCall("s", "search_files", {"pattern": "needle"}),
            ]
        )
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    read, write, listing, search = outcome.results
    assert read.text.endswith("needle\n"), read.text
    assert not write.is_error, write.text
    assert not listing.is_error, listing.text
    assert "skipped" not in listing.text
    assert "leaf.txt" in listing.text
    assert "top.txt" in listing.text
    assert "2 matching lines" in search.text, search.text


async def test_an_edit_reads_and_writes_the_same_file(world: dict[str, Path]) -> None:
    root = world["root"]
    for name in ("d1", "d2"):
        (root / name).mkdir()
        (root / name / "e.txt").write_bytes(name.encode())
    (root / "d").symlink_to("d1")

    def swap_then_edit(data: bytes) -> bytes:
        (root / "d").unlink()  # meanwhile, the link is pointed elsewhere
        (root / "d").symlink_to("d2")
        return data + b" edited"

    await Workspace(root).edit_bytes("d/e.txt", swap_then_edit)
    assert (root / "d1" / "e.txt").read_bytes() == b"d1 edited"
    assert (root / "d2" / "e.txt").read_bytes() == b"d2"


async def test_an_edit_does_not_overwrite_a_change_made_meanwhile(world: dict[str, Path]) -> None:
    target = world["root"] / "a.txt"

    def edit_racing_another_writer(data: bytes) -> bytes:
        target.write_bytes(b"the other writer's text, longer\n")
        return data.upper()

    with pytest.raises(WorkspaceError, match="changed while it was being edited"):
        await Workspace(world["root"]).edit_bytes("a.txt", edit_racing_another_writer)
    assert target.read_bytes() == b"the other writer's text, longer\n"


def test_names_are_shown_on_one_line_and_in_their_own_order() -> None:
    assert show("a\nb\rc\td\x1b[31m") == "'a\\nb\\rc\\td\\x1b[31m'"
    assert show("evil\u202etxt.exe\u2028x") == "'evil\\u202etxt.exe\\u2028x'"
    assert show("caf\udce9") == "'caf\\xe9'"  # an undecodable byte


def test_a_write_the_os_cuts_short_keeps_the_old_file_and_leaves_no_temp(tmp_path: Path) -> None:
    # A process whose file-size limit is 1 KiB (SIGXFSZ ignored, so write()
    # fails with EFBIG, as it would with ENOSPC on a full disk) replaces a
    # file with 64 KiB: the write fails cleanly, the old content stays, and
    # the temporary file it was writing is gone.
    (tmp_path / "keep.txt").write_bytes(b"old content")
    script = (
        "import resource, signal, sys, trio\n"
        "from toolexec import Workspace, WorkspaceError\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))\n"
        "async def main():\n"
        "    ws = Workspace(sys.argv[1])\n"
        "    for path in ('keep.txt', 'new.txt'):\n"
        "        try:\n"
        "            await ws.write_bytes(path, b'x' * 65536)\n"
        "        except WorkspaceError as exc:\n"
        "            print(path, exc.error_class.value, exc)\n"
        "trio.run(main)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(SRC)},
    )
    lines = result.stdout.splitlines()
    assert [line.split()[:2] for line in lines] == [
        ["keep.txt", "execution_error"],
        ["new.txt", "execution_error"],
    ], result.stdout + result.stderr
    assert all(
        "could not be written: it would pass the largest file size" in line for line in lines
    )
    assert (tmp_path / "keep.txt").read_bytes() == b"old content"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]
