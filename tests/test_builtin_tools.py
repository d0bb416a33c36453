"""The built-in tools through a real executor, on real files."""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import tracemalloc
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from toolexec import (
    Batched,
    ConcurrencyConfig,
    ErrorClass,
    Parallel,
    RoutingClass,
    Sequential,
    SideEffects,
    ToolCall,
    ToolDefinition,
    ToolExecutor,
    ToolRegistry,
    ToolResult,
    Workspace,
    register_builtin_tools,
)
from toolexec._tools._file_tools import _problem_lines
from toolexec.tools import ListDirTool, SearchFilesTool

if TYPE_CHECKING:
    from toolexec import ExecutionStrategy

SECRET = "SECRET-OUTSIDE"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(f"{SECRET}\n")
    os.symlink(outside, root / "out-link")
    return root


def _executor(root: Path, **kw: Any) -> ToolExecutor:
    registry = ToolRegistry()
    register_builtin_tools(registry, Workspace(root), shell=True)
    return ToolExecutor(registry, **kw)


async def call(executor: ToolExecutor, name: str, **arguments: Any) -> ToolResult:
    outcome = await executor.execute_batch([ToolCall("c1", name, arguments)])
    return outcome.results[0]


def test_registration_declares_capabilities(root: Path) -> None:
    registry = ToolRegistry()
    defs = {d.name: d for d in register_builtin_tools(registry, Workspace(root), shell=True)}
    assert set(defs) == {
        "read_file",
        "write_file",
        "edit_file",
        "list_dir",
        "search_files",
        "echo",
        "shell",
    }
    assert defs["read_file"].side_effects is SideEffects.READ
    assert defs["list_dir"].side_effects is SideEffects.READ
    assert defs["search_files"].side_effects is SideEffects.READ
    assert defs["write_file"].side_effects is SideEffects.WRITE
    assert defs["edit_file"].side_effects is SideEffects.WRITE
    assert defs["shell"].side_effects is SideEffects.EXECUTE
    assert defs["echo"].side_effects is SideEffects.NONE
    assert defs["read_file"].path_arguments == {"path": "r"}
    assert defs["write_file"].path_arguments == {"path": "w"}
    assert defs["edit_file"].path_arguments == {"path": "w"}
    by_default = ToolRegistry()
    register_builtin_tools(by_default, Workspace(root))
    assert "shell" not in by_default  # the shell is opt-in
    assert set(by_default) == set(defs) - {"shell"}


# -- read_file ------------------------------------------------------------------------


async def test_read_file_pages_by_lines(root: Path) -> None:
    (root / "f.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    ex = _executor(root)
    whole = await call(ex, "read_file", path="f.txt")
    assert whole.text == "".join(f"line {i}\n" for i in range(1, 11))
    part = await call(ex, "read_file", path="f.txt", offset=3, limit=2)
    assert part.text == "line 3\nline 4\n[showing lines 3-4 of 10; continue with offset=5]"
    tail = await call(ex, "read_file", path="f.txt", offset=9)
    assert tail.text == "line 9\nline 10\n[showing lines 9-10 of 10]"
    past = await call(ex, "read_file", path="f.txt", offset=11)
    assert past.error_class is ErrorClass.EXECUTION_ERROR
    assert "past the end" in past.text
    assert "10 lines" in past.text


async def test_read_file_refuses_binary_and_reports_missing(root: Path) -> None:
    (root / "blob.bin").write_bytes(b"\x00\x01\x02binary")
    (root / "empty.txt").write_bytes(b"")
    ex = _executor(root)
    blob = await call(ex, "read_file", path="blob.bin")
    assert blob.error_class is ErrorClass.EXECUTION_ERROR
    assert "binary" in blob.text
    missing = await call(ex, "read_file", path="nope/x.txt")
    assert missing.error_class is ErrorClass.EXECUTION_ERROR
    assert missing.text == "'nope/x.txt' does not exist ('nope' is missing)."
    assert (await call(ex, "read_file", path="empty.txt")).text == "'empty.txt' is empty."


async def test_read_file_caps_output_and_marks_bad_utf8(root: Path) -> None:
    (root / "wide.txt").write_text("x" * 60 + "\n" + "y" * 60 + "\n")
    (root / "latin.txt").write_bytes(b"caf\xe9\n")
    registry = ToolRegistry()
    from toolexec.tools import ReadFileTool

    registry.register(ReadFileTool(Workspace(root), max_output_chars=100))
    ex = ToolExecutor(registry)
    capped = await call(ex, "read_file", path="wide.txt")
    assert capped.text.startswith("x" * 60 + "\n[showing lines 1-1 of 2; continue with offset=2]")
    (root / "one-line.js").write_text("z" * 250)
    long_line = await call(ex, "read_file", path="one-line.js")
    assert long_line.text == "z" * 100 + "\n[line 1 is 250 characters; showing the first 100]"
    latin = await call(ex, "read_file", path="latin.txt")
    assert latin.text.startswith("caf\ufffd\n")
    assert "not valid UTF-8" in latin.text


# -- write_file and edit_file ---------------------------------------------------------


async def test_write_file_creates_and_replaces(root: Path) -> None:
    ex = _executor(root)
    created = await call(ex, "write_file", path="a/b/c.txt", content="one\ntwo\n")
    assert created.text == "Created 'a/b/c.txt' (8 bytes, 2 lines)."
    replaced = await call(ex, "write_file", path="a/b/c.txt", content="three")
    assert replaced.text == "Replaced 'a/b/c.txt' (5 bytes, 1 lines)."
    assert (root / "a/b/c.txt").read_text() == "three"


async def test_edit_file_needs_exactly_one_occurrence(root: Path) -> None:
    target = root / "code.py"
    target.write_text("x = 1\ny = 2\nx = 1\n")
    ex = _executor(root)
    twice = await call(ex, "edit_file", path="code.py", old_string="x = 1", new_string="x = 3")
    assert twice.error_class is ErrorClass.EXECUTION_ERROR
    assert "occurs 2 times" in twice.text
    assert "lines 1, 3" in twice.text
    never = await call(ex, "edit_file", path="code.py", old_string="z = 9", new_string="z = 0")
    assert "was not found in 'code.py'" in never.text
    assert target.read_text() == "x = 1\ny = 2\nx = 1\n"  # failed edits change nothing
    overlap = await call(ex, "edit_file", path="code.py", old_string="\n", new_string="")
    assert "occurs 3 times" in overlap.text
    once = await call(ex, "edit_file", path="code.py", old_string="y = 2", new_string="y = 20")
    assert (
        once.text
        == "Edited 'code.py': replaced 1 occurrence at line 2 (1 lines removed, 1 lines inserted)."
    )
    assert target.read_text() == "x = 1\ny = 20\nx = 1\n"
    same = await call(ex, "edit_file", path="code.py", old_string="y", new_string="y")
    assert "identical" in same.text


async def test_edit_file_refuses_non_utf8(root: Path) -> None:
    (root / "latin.txt").write_bytes(b"caf\xe9\n")
    ex = _executor(root)
    result = await call(ex, "edit_file", path="latin.txt", old_string="caf", new_string="x")
    assert "not valid UTF-8" in result.text
    assert (root / "latin.txt").read_bytes() == b"caf\xe9\n"


# -- list_dir -------------------------------------------------------------------------


async def test_list_dir_shows_kinds_and_never_follows_links(root: Path) -> None:
    (root / "sub").mkdir()
    (root / "sub" / "inner.txt").write_text("hi")
    (root / "file.txt").write_text("12345")
    os.mkfifo(root / "pipe")
    ex = _executor(root)
    listing = await call(ex, "list_dir")
    outside = str(root.parent / "outside")
    assert listing.text.splitlines() == [
        "file.txt  (5 bytes)",
        f"out-link -> {outside}",
        "pipe  [fifo]",
        "sub/",
    ]
    deep = await call(ex, "list_dir", depth=5)
    assert "sub/inner.txt  (2 bytes)" in deep.text
    assert "secret" not in deep.text
    limited = await call(ex, "list_dir", depth=5, limit=2)
    assert limited.text.splitlines()[-1].startswith("[listing stopped after 2 entries")
    empty = root / "empty"
    empty.mkdir()
    assert (await call(ex, "list_dir", path="empty")).text == "'empty' is empty."


async def test_list_dir_caps_its_output_in_characters_like_read_file(root: Path) -> None:
    for i in range(2000):
        (root / f"{i:04d}-{'n' * 200}").write_text("x")
    ex = _executor(root)
    listing = await call(ex, "list_dir", limit=10_000)
    assert not listing.is_error
    entries, note = listing.text.splitlines()[:-1], listing.text.splitlines()[-1]
    assert len("\n".join(entries)) + 1 <= 100_000 < len("\n".join(entries)) + 1 + 215
    assert entries[-1].startswith(f"{len(entries) - 1:04d}-")
    assert note == (
        f"[listing stopped after {len(entries)} entries at the 100,000-character output cap; "
        "list a subdirectory or lower depth]"
    )
    assert listing.details["complete"] is False
    assert listing.details["entries"] == len(entries)
    registry = ToolRegistry()
    registry.register(ListDirTool(Workspace(root), max_output_chars=100))
    tiny = await call(ToolExecutor(registry), "list_dir", limit=10_000)
    assert tiny.text == (
        "0000-" + "n" * 95 + "\n[the first entry is 216 characters; showing the first 100]"
    )


def test_problems_after_a_listing_share_its_output_cap() -> None:
    problems = [f"dir{i} could not be opened" for i in range(5)]
    assert _problem_lines(problems, 1000) == [f"[{p}]" for p in problems]
    assert _problem_lines(problems, 60) == [
        "[dir0 could not be opened]",
        "[dir1 could not be opened]",
        "[3 more problems not shown (output cap)]",
    ]
    assert _problem_lines(problems, 0) == ["[5 more problems not shown (output cap)]"]
    assert _problem_lines([], 0) == []


async def test_listings_and_searches_stop_at_the_path_depth_limit(root: Path) -> None:
    levels = 300
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for level in range(1, levels + 1):
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
        if level in (100, 280):
            with open(os.open("f.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "w") as f:
                f.write("needle\n")
    os.close(fd)
    ex = _executor(root)
    try:
        listing = await call(ex, "list_dir", depth=256, limit=5000)
        search = await call(ex, "search_files", pattern="needle")
        too_deep = await call(ex, "list_dir", depth=257)
        deepest = "/".join(["d"] * 256)
        beneath = await call(ex, "list_dir", path=deepest)
        below = await call(ex, "list_dir", path=deepest + "/d")
    finally:  # shutil.rmtree (pytest's cleanup) recurses per level: remove it here
        subprocess.run(["rm", "-rf", str(root / "d")], check=True)
    assert not listing.is_error, listing.text
    lines = listing.text.splitlines()
    assert len(lines) == 256 + 2  # every level down to the limit, f.txt, out-link
    assert lines[-3:-1] == [deepest + "/", "/".join(["d"] * 100) + "/f.txt  (7 bytes)"]
    assert search.text.splitlines()[:2] == [
        "1 matching lines for 'needle' in '.' (1 files searched, 0 skipped).",
        "/".join(["d"] * 100) + "/f.txt:1: needle",
    ]
    assert search.text.splitlines()[-1] == (
        "[1 directories 256 levels down were not searched: no path may go deeper]"
    )
    assert too_deep.error_class is ErrorClass.INVALID_ARGUMENTS
    assert "$.depth: 257 is greater than the maximum of 256" in too_deep.text
    assert beneath.text == "d/"  # the deepest path listed is one the tools take
    assert below.error_class is ErrorClass.INVALID_ARGUMENTS
    assert "a path may have at most 256 (the path depth limit)" in below.text


# -- argument bounds ------------------------------------------------------------------

#: The documented bounds of every number a built-in takes (docs/tools.md).
BOUNDS = {
    ("read_file", "offset"): (1, 1_000_000_000),
    ("read_file", "limit"): (1, 100_000),
    ("list_dir", "depth"): (1, 256),
    ("list_dir", "limit"): (1, 10_000),
    ("search_files", "max_results"): (1, 1000),
    ("shell", "timeout"): (0, 600),  # exclusive minimum: any positive number of seconds
}
#: What a built-in needs besides the number to run.
REQUIRED: dict[str, dict[str, Any]] = {
    "read_file": {"path": "a.txt"},
    "list_dir": {},
    "search_files": {"pattern": "x"},
    "shell": {"command": "true"},
}
EXTREMES: list[object] = [0, -1, 2**63, 10**30, 1e308, -1e308, True, False]


def _numbers(definitions: list[ToolDefinition]) -> dict[tuple[str, str], dict[str, Any]]:
    """Every integer or number argument of ``definitions``, with its schema."""
    return {
        (d.name, name): schema
        for d in definitions
        for name, schema in d.input_schema["properties"].items()
        if schema.get("type") in ("integer", "number")
    }


async def test_every_number_a_built_in_takes_is_bounded_and_extremes_are_refused(
    root: Path,
) -> None:
    (root / "a.txt").write_text("x\n")
    registry = ToolRegistry()
    numbers = _numbers(register_builtin_tools(registry, Workspace(root), shell=True))
    executor = ToolExecutor(registry)
    bounds = {
        key: (schema.get("minimum", schema.get("exclusiveMinimum")), schema.get("maximum"))
        for key, schema in numbers.items()
    }
    assert bounds == BOUNDS
    for (tool, name), (_low, high) in BOUNDS.items():
        for value in EXTREMES:
            result = await call(executor, tool, **REQUIRED[tool], **{name: value})
            assert result.error_class is ErrorClass.INVALID_ARGUMENTS, (tool, name, value)
            assert f"$.{name}" in result.text
        at_most = await call(executor, tool, **REQUIRED[tool], **{name: high})
        assert at_most.error_class is not ErrorClass.INVALID_ARGUMENTS, (tool, name)
        assert "traceback" not in at_most.details, at_most.text  # a result, never a crash


async def test_a_huge_limit_is_refused_instead_of_crashing_the_read(root: Path) -> None:
    (root / "a.txt").write_text("x\n")
    result = await call(_executor(root), "read_file", path="a.txt", limit=10**30)
    assert result.error_class is ErrorClass.INVALID_ARGUMENTS
    assert "$.limit: 1000000000000000000000000000000 is greater than the maximum of 100000" in (
        result.text
    )


# -- search_files ---------------------------------------------------------------------


async def test_search_files_reports_path_line_and_text(root: Path) -> None:
    (root / "src").mkdir()
    (root / "src" / "a.py").write_text("def alpha():\n    return 1\n")
    (root / "src" / "b.txt").write_text("Alpha and beta\n")
    (root / "blob.bin").write_bytes(b"\x00alpha")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("alpha\n")
    ex = _executor(root)
    found = await call(ex, "search_files", pattern="alpha")
    assert found.text.splitlines() == [
        "1 matching lines for 'alpha' in '.' (2 files searched, 1 skipped).",
        "src/a.py:1: def alpha():",
    ]
    both = await call(ex, "search_files", pattern="alpha", ignore_case=True, path="src")
    assert both.text.splitlines()[1:] == ["src/a.py:1: def alpha():", "src/b.txt:1: Alpha and beta"]
    only_py = await call(ex, "search_files", pattern="a", glob="*.py", max_results=1)
    assert only_py.text.splitlines()[1:] == [
        "src/a.py:1: def alpha():",
        "[stopped at 1 matches; narrow the pattern, path or glob]",
    ]
    one_file = await call(ex, "search_files", pattern="return", path="src/a.py")
    assert one_file.text.splitlines()[1:] == ["src/a.py:2:     return 1"]


async def test_search_files_caps_a_single_file_like_a_directory(root: Path) -> None:
    (root / "big.log").write_text("filler line\n" * 20 + "needle\n")
    (root / "small.log").write_text("needle\n")
    (root / "blob.bin").write_bytes(b"\x00needle\n")
    registry = ToolRegistry()
    registry.register(SearchFilesTool(Workspace(root), max_file_bytes=100))
    ex = ToolExecutor(registry)
    for path in ["big.log", "blob.bin"]:
        alone = await call(ex, "search_files", pattern="needle", path=path)
        assert alone.text == (
            f"0 matching lines for 'needle' in '{path}' (0 files searched, 1 skipped)."
        )
    small = await call(ex, "search_files", pattern="needle", path="small.log")
    assert small.text.splitlines() == [
        "1 matching lines for 'needle' in 'small.log' (1 files searched, 0 skipped).",
        "small.log:1: needle",
    ]
    whole = await call(ex, "search_files", pattern="needle")
    assert whole.text.splitlines()[0] == (
        "1 matching lines for 'needle' in '.' (1 files searched, 2 skipped)."
    )


async def test_search_files_does_not_follow_links_out(root: Path) -> None:
    ex = _executor(root)
    result = await call(ex, "search_files", pattern=SECRET)
    assert result.text == f"0 matching lines for {SECRET!r} in '.' (0 files searched, 0 skipped)."
    escaped = await call(ex, "search_files", pattern=SECRET, path="out-link")
    assert escaped.error_class is ErrorClass.PERMISSION_DENIED


async def test_search_files_rejects_bad_regex(root: Path) -> None:
    result = await call(_executor(root), "search_files", pattern="(unclosed")
    assert result.error_class is ErrorClass.INVALID_ARGUMENTS
    assert "Invalid regular expression" in result.text


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        ("a{99999999999}", "the repetition number is too large"),
        ("(" * 2000 + ")" * 2000, "nested too deeply"),
        ("(?:" * 500 + "a" + ")" * 500, "nested too deeply"),
    ],
    ids=["overflow", "groups", "non-capturing"],
)
async def test_search_files_rejects_patterns_re_cannot_build(
    root: Path, pattern: str, why: str
) -> None:
    (root / "a.txt").write_text("aaa\n")
    result = await call(_executor(root), "search_files", pattern=pattern)
    assert result.error_class is ErrorClass.INVALID_ARGUMENTS, result.text
    assert result.text.startswith("Invalid regular expression")
    assert why in result.text
    assert len(result.text) < 400


async def test_a_pattern_longer_than_ten_thousand_characters_is_refused(root: Path) -> None:
    result = await call(_executor(root), "search_files", pattern="a" * 10_001)
    assert result.error_class is ErrorClass.INVALID_ARGUMENTS, result.text
    assert "pattern" in result.text


async def test_the_matcher_reports_a_pattern_it_cannot_build(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from toolexec._tools import _search

    (root / "a.txt").write_text("aaa\n")
    monkeypatch.setattr(_search, "_check_pattern", lambda pattern, flags: None)
    result = await call(_executor(root), "search_files", pattern="a{99999999999}")
    assert result.error_class is ErrorClass.INVALID_ARGUMENTS, result.text
    assert "the repetition number is too large" in result.text


async def test_a_failing_matcher_is_an_error_not_an_empty_result(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from toolexec._tools import _search

    (root / "a.txt").write_text("aaa\n")
    monkeypatch.setattr(_search, "_MATCHER", "import sys; sys.exit(3)")
    result = await call(_executor(root), "search_files", pattern="a")
    assert result.error_class is ErrorClass.EXECUTION_ERROR, result.text
    assert "matcher process exited with status 3" in result.text


async def test_a_pathological_regex_is_stopped(root: Path) -> None:
    (root / "evil.txt").write_text("a" * 64 + "!\n")
    registry = ToolRegistry()
    registry.register(SearchFilesTool(Workspace(root), time_limit=0.5))
    ex = ToolExecutor(registry)
    result = await call(ex, "search_files", pattern="^(a+)+$")
    assert result.error_class is ErrorClass.TIMEOUT
    assert "catastrophically" in result.text


# -- names with control characters cannot forge output lines ------------------------------

EVIL = "a\nFAKE LINE"


async def test_names_with_control_characters_stay_on_their_line(root: Path) -> None:
    (root / EVIL).write_text("needle\n")
    (root / "b\rx").write_text("needle\n")
    (root / "c\x1b[31m\x85\u2028d").write_text("needle\n")
    os.symlink("t\nFAKE TARGET", root / "link")
    (root / "tab\tname").write_text("needle\n")
    ex = _executor(root)
    listing = (await call(ex, "list_dir")).text
    assert listing.splitlines() == [
        "a\\nFAKE LINE  (7 bytes)",
        "b\\rx  (7 bytes)",
        "c\\x1b[31m\\x85\\u2028d  (7 bytes)",
        "link -> t\\nFAKE TARGET",
        f"out-link -> {root.parent / 'outside'}",
        "tab\\tname  (7 bytes)",
    ]
    found = (await call(ex, "search_files", pattern="needle")).text
    assert found.splitlines() == [
        "4 matching lines for 'needle' in '.' (4 files searched, 0 skipped).",
        "a\\nFAKE LINE:1: needle",
        "b\\rx:1: needle",
        "c\\x1b[31m\\x85\\u2028d:1: needle",
        "tab\\tname:1: needle",
    ]
    one = (await call(ex, "search_files", pattern="needle", path=EVIL)).text
    assert one.splitlines() == [
        "1 matching lines for 'needle' in 'a\\nFAKE LINE' (1 files searched, 0 skipped).",
        "a\\nFAKE LINE:1: needle",
    ]


@pytest.mark.parametrize(
    ("name", "arguments", "expected"),
    [
        ("write_file", {"path": EVIL, "content": "x"}, "Replaced 'a\\nFAKE LINE' (1 bytes"),
        (
            "edit_file",
            {"path": EVIL, "old_string": "needle", "new_string": "pin"},
            "Edited 'a\\nFAKE LINE': replaced",
        ),
        ("read_file", {"path": "e\nFAKE"}, "'e\\nFAKE' does not exist."),
        ("read_file", {"path": "sub\n"}, "is a binary file"),
        ("read_file", {"path": "empty\n"}, "'empty\\n' is empty."),
        ("read_file", {"path": EVIL, "offset": 5}, "past the end of 'a\\nFAKE LINE'"),
        ("list_dir", {"path": "dir\n"}, "'dir\\n' is empty."),
        # Where a link out of the workspace leads is not said at all (a host path).
        ("list_dir", {"path": "bad-link"}, "link 'bad-link', which leads outside the workspace."),
        ("search_files", {"pattern": "x", "path": "x\ny/z"}, "'x\\ny/z' does not exist"),
    ],
)
async def test_messages_escape_the_names_they_echo(
    root: Path, name: str, arguments: dict[str, Any], expected: str
) -> None:
    (root / EVIL).write_text("needle\n")
    (root / "sub\n").write_bytes(b"\x00bin")
    (root / "empty\n").write_bytes(b"")
    (root / "dir\n").mkdir()
    os.symlink("/\nFAKE TARGET", root / "bad-link")
    result = await call(_executor(root), name, **arguments)
    assert len(result.text.splitlines()) == 1, result.text
    assert expected in result.text


# -- echo and escapes through every tool --------------------------------------------------


async def test_echo(root: Path) -> None:
    result = await call(_executor(root), "echo", text="hello")
    assert result.text == "hello"
    assert result.routing is RoutingClass.READ_ONLY


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("read_file", {"path": "../outside/secret.txt"}),
        ("read_file", {"path": "out-link/secret.txt"}),
        ("write_file", {"path": "out-link/new.txt", "content": "x"}),
        ("write_file", {"path": "../outside/secret.txt", "content": "x"}),
        ("edit_file", {"path": "out-link/secret.txt", "old_string": "S", "new_string": "T"}),
        ("list_dir", {"path": "out-link"}),
        ("list_dir", {"path": ".."}),
        ("search_files", {"pattern": "S", "path": "../outside"}),
    ],
)
async def test_every_file_tool_refuses_escapes(
    root: Path, name: str, arguments: dict[str, Any]
) -> None:
    result = await call(_executor(root), name, **arguments)
    assert result.error_class is ErrorClass.PERMISSION_DENIED, result.text
    assert f"'{arguments['path']}'" in result.text
    assert SECRET not in result.text
    outside = root.parent / "outside"
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == f"{SECRET}\n"


# -- ordering with real files (acceptance 3) ----------------------------------------------

BATCH = [
    ToolCall("1", "read_file", {"path": "a.txt"}),
    ToolCall("2", "edit_file", {"path": "a.txt", "old_string": "old", "new_string": "new"}),
    ToolCall("3", "read_file", {"path": "a.txt"}),
    ToolCall("4", "write_file", {"path": "b.txt", "content": "b content\n"}),
    ToolCall("5", "read_file", {"path": "b.txt"}),
]
EXPECTED = [
    "old value\n",
    "Edited 'a.txt': replaced 1 occurrence at line 1 (1 lines removed, 1 lines inserted).",
    "new value\n",
    "Created 'b.txt' (10 bytes, 1 lines).",
    "b content\n",
]
STRATEGIES: list[ExecutionStrategy] = [Parallel(), Sequential(), Batched(2)]
CONFIGS = [
    ConcurrencyConfig(),
    ConcurrencyConfig(read_width=1),
    ConcurrencyConfig(per_tool={"read_file": 1, "edit_file": 1}),
    ConcurrencyConfig(serial_mut_width=3, promoted=frozenset({"edit_file", "write_file"})),
]


@pytest.mark.parametrize("strategy", STRATEGIES, ids=repr)
@pytest.mark.parametrize("config", CONFIGS, ids=["default", "read-1", "tool-caps", "promoted"])
async def test_mixed_batches_give_the_sequential_results(
    tmp_path: Path, strategy: ExecutionStrategy, config: ConcurrencyConfig
) -> None:
    registry = ToolRegistry()
    register_builtin_tools(registry, Workspace(tmp_path), shell=False)
    executor = ToolExecutor(registry, config=config, strategy=strategy)
    for _ in range(20):
        (tmp_path / "a.txt").write_text("old value\n")
        (tmp_path / "b.txt").unlink(missing_ok=True)
        outcome = await executor.execute_batch(BATCH)
        assert [r.text for r in outcome.results] == EXPECTED
        assert not any(r.is_error for r in outcome.results)


# -- the documentation pages run and print what they show ---------------------------------


@pytest.mark.parametrize("page", ["tools.md", "workspace.md"])
def test_docs_page_examples_print_what_the_page_shows(
    page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = (Path(__file__).parent.parent / "docs" / page).read_text()
    code = re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
    shown = re.findall(r"\nprints\n\n```\n(.*?)```", text, flags=re.DOTALL)
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile("\n".join(code), page, "exec"), {"__name__": f"docs_{page}"})
    expected = "".join(shown)
    pattern = ".*".join(re.escape(part) for part in expected.split("..."))
    assert re.fullmatch(pattern, out.getvalue(), flags=re.DOTALL), out.getvalue()


@pytest.mark.parametrize(
    ("name", "arguments", "error_class"),
    [
        ("read_file", {"path": "a\x00b"}, ErrorClass.INVALID_ARGUMENTS),
        ("write_file", {"path": "x" * 400, "content": ""}, ErrorClass.INVALID_ARGUMENTS),
        (
            "edit_file",
            {"path": "\ud800", "old_string": "a", "new_string": "b"},
            ErrorClass.INVALID_ARGUMENTS,
        ),
        ("list_dir", {"path": "a\x00"}, ErrorClass.INVALID_ARGUMENTS),
        ("search_files", {"pattern": "a", "path": "y" * 400}, ErrorClass.INVALID_ARGUMENTS),
        ("read_file", {"path": "caf\udce9.txt"}, ErrorClass.EXECUTION_ERROR),
    ],
)
async def test_odd_names_give_clean_error_results(
    root: Path, name: str, arguments: dict[str, Any], error_class: ErrorClass
) -> None:
    result = await call(_executor(root), name, **arguments)
    assert result.error_class is error_class, result.text
    assert "Traceback" not in result.text
    assert "traceback" not in result.details
    result.text.encode("utf-8")  # always valid text for the model


async def test_read_file_memory_does_not_grow_with_the_number_of_lines(root: Path) -> None:
    size = 4 << 20
    (root / "short.txt").write_bytes(b"x\n" * (size // 2))
    ex = _executor(root)
    tracemalloc.start()
    try:
        result = await call(ex, "read_file", path="short.txt", limit=1)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.text == f"x\n[showing lines 1-1 of {size // 2}; continue with offset=2]"
    assert peak < 4 * size, f"peak {peak / size:.1f} times the file size"
