"""The built-in tools: files in a ``Workspace``, ``search_files``, ``echo``.

Each tool holds the ``Workspace`` it works in (it does not look at
``ToolContext.workspace``), is stateless, and acts as its own factory.
``register_builtin_tools(registry, workspace)`` is the one way to get all
of them. File work runs in worker threads, one hop per call.

``search_files`` never runs a regular expression in this process: Python's
``re`` holds the GIL while it backtracks, so a pathological pattern would
freeze the event loop. The workspace walk and the reads happen here (so the
workspace guarantees hold); the text is streamed to a small matcher
subprocess that is killed when the time bound expires.
"""

from __future__ import annotations

import fnmatch
import itertools
import json
import os
import re
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any, TypeAlias

import attrs
import trio

from ._display import show
from ._errors import ToolError
from ._file_ops import open_regular_at
from ._process import open_group_process, reap
from ._shell import ShellTool
from ._tree import walk_tree
from ._types import ErrorClass, SideEffects, ToolDefinition, ToolOutput
from ._workspace_errors import WorkspaceError, WorkspaceErrorKind

if TYPE_CHECKING:
    from collections.abc import Generator, Iterator, Mapping

    from ._registry import ToolRegistry
    from ._tool import ToolContext
    from ._tree import DirEntry
    from ._workspace import Workspace

__all__ = [
    "EchoTool",
    "EditFileTool",
    "ListDirTool",
    "ReadFileTool",
    "SearchFilesTool",
    "WriteFileTool",
    "register_builtin_tools",
]

_BINARY_SNIFF = 8192
_Item: TypeAlias = tuple[str, bytes] | None  # None: a heartbeat from a walk, so a batch can end


def _schema(properties: dict[str, Any], *required: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


_PATH = {"type": "string", "description": "A path relative to the workspace root."}


def _bound(definition: ToolDefinition) -> Any:
    """The definition, naming the tool's workspace (for policies that resolve paths)."""
    return attrs.Factory(
        lambda tool: attrs.evolve(definition, workspace=tool.workspace), takes_self=True
    )


def _is_binary(data: bytes) -> bool:
    return b"\x00" in data[:_BINARY_SNIFF]


# Where ``str.splitlines`` ends a line; "\r\n" is one break.
_BREAK_CHARS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"
_SKIP_CHUNK = 1 << 16
_BREAK = re.compile("\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")


def _breaks(text: str, start: int = 0, end: int | None = None) -> int:
    """How many line breaks ``text[start:end]`` holds (``str.splitlines``'s)."""
    end = len(text) if end is None else end
    found = sum(text.count(c, start, end) for c in _BREAK_CHARS)
    return found - text.count("\r\n", start, end)


def _line_count(text: str) -> int:
    """``len(text.splitlines())`` without building the list of lines."""
    return _breaks(text) + (text[-1:] not in ("", *_BREAK_CHARS))


def _lines_from(text: str, first: int) -> Iterator[str]:
    """``text.splitlines(keepends=True)[first - 1 :]``, one line at a time.

    A list of every line costs tens of bytes per line on top of the text
    (a file of short lines would take ~30 times its size); this keeps only
    the lines the caller takes. Whole chunks before line ``first`` are
    skipped by counting their breaks.
    """
    start, skip = 0, first - 1
    while skip:
        end = min(start + _SKIP_CHUNK, len(text))
        if text[end - 1 : end + 1] == "\r\n":
            end += 1  # never split a "\r\n"
        found = _breaks(text, start, end)
        if found >= skip:
            last = next(itertools.islice(_BREAK.finditer(text, start, end), skip - 1, None))
            start = last.end()
            break
        if end == len(text):
            return
        start, skip = end, skip - found
    for found_break in _BREAK.finditer(text, start):
        yield text[start : found_break.end()]
        start = found_break.end()
    if start < len(text):
        yield text[start:]


# -- read_file ----------------------------------------------------------------

READ_FILE = ToolDefinition(
    name="read_file",
    description=(
        "Read a text file from the workspace. Returns its lines as they are; use offset "
        "and limit to page through long files (the result says which lines it shows). "
        "Binary files, directories and special files are refused."
    ),
    input_schema=_schema(
        {
            "path": _PATH,
            "offset": {
                "type": "integer",
                "minimum": 1,
                "description": "The first line to return, counting from 1 (default 1).",
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "description": "The most lines to return (default 2000).",
            },
        },
        "path",
    ),
    side_effects=SideEffects.READ,
    path_arguments={"path": "r"},
)


@attrs.define(eq=False)
class ReadFileTool:
    """``read_file``: lines of a text file, paged by ``offset``/``limit``.

    Files over the workspace's ``max_read_bytes`` are refused; the text
    returned is also capped at ``max_output_chars`` (the result says where
    it stopped and how to continue).
    """

    workspace: Workspace
    max_output_chars: int = 100_000
    default_limit: int = 2000
    definition: ToolDefinition = attrs.field(init=False, default=_bound(READ_FILE))

    def __call__(self) -> ReadFileTool:
        """Act as its own factory: it keeps no per-call state."""
        return self

    async def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        """Read the file and return the selected lines."""
        path = arguments["path"]
        data = await trio.to_thread.run_sync(self.workspace.read_bytes_sync, path)
        if _is_binary(data):
            raise ToolError(
                f"{show(path)} is a binary file ({len(data)} bytes); read_file shows text only."
            )
        text = data.decode("utf-8", "replace")
        total = _line_count(text)
        first = int(arguments.get("offset", 1))
        limit = int(arguments.get("limit", self.default_limit))
        if not total:
            return ToolOutput.text(f"{show(path)} is empty.", path=path, lines=0)
        if first > total:
            raise ToolError(
                f"offset {first} is past the end of {show(path)}, which has {total} lines."
            )
        chosen: list[str] = []
        used = 0
        notes = []
        for line in itertools.islice(_lines_from(text, first), limit):
            if used + len(line) > self.max_output_chars:
                if not chosen:  # one line longer than the cap: show its start
                    cut = self.max_output_chars
                    chosen.append(line[:cut] + "\n")
                    notes.append(
                        f"[line {first} is {len(line)} characters; showing the first {cut}]"
                    )
                break
            chosen.append(line)
            used += len(line)
        last = first + len(chosen) - 1
        body = "".join(chosen)
        if first > 1 or last < total:
            more = f"; continue with offset={last + 1}" if last < total else ""
            notes.append(f"[showing lines {first}-{last} of {total}{more}]")
        if "\ufffd" in body and b"\xef\xbf\xbd" not in data:
            notes.append("[the file is not valid UTF-8; undecodable bytes are shown as U+FFFD]")
        if notes:
            body = body + ("" if body.endswith("\n") else "\n") + "\n".join(notes)
        return ToolOutput.text(body, path=path, lines=total, start=first, end=last)


# -- write_file ---------------------------------------------------------------

WRITE_FILE = ToolDefinition(
    name="write_file",
    description=(
        "Create a file in the workspace or replace its whole content (missing parent "
        "directories are created). The replacement is atomic. To change part of a file, "
        "use edit_file."
    ),
    input_schema=_schema(
        {"path": _PATH, "content": {"type": "string", "description": "The complete new content."}},
        "path",
        "content",
    ),
    side_effects=SideEffects.WRITE,
    path_arguments={"path": "w"},
)


@attrs.define(eq=False)
class WriteFileTool:
    """``write_file``: create or atomically replace a file (UTF-8)."""

    workspace: Workspace
    definition: ToolDefinition = attrs.field(init=False, default=_bound(WRITE_FILE))

    def __call__(self) -> WriteFileTool:
        """Act as its own factory: it keeps no per-call state."""
        return self

    async def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        """Write the content; say whether the file was created or replaced."""
        path, content = arguments["path"], arguments["content"]
        data = content.encode("utf-8", "replace")
        created = await trio.to_thread.run_sync(self.workspace.write_bytes_sync, path, data)
        verb = "Created" if created else "Replaced"
        return ToolOutput.text(
            f"{verb} {show(path)} ({len(data)} bytes, {_line_count(content)} lines).",
            path=path,
            bytes=len(data),
            created=created,
        )


# -- edit_file ----------------------------------------------------------------

EDIT_FILE = ToolDefinition(
    name="edit_file",
    description=(
        "Replace one exact occurrence of old_string with new_string in a text file. "
        "old_string must occur exactly once (include surrounding lines to make it "
        "unique); whitespace and indentation must match. Read the file first."
    ),
    input_schema=_schema(
        {
            "path": _PATH,
            "old_string": {
                "type": "string",
                "minLength": 1,
                "description": "The exact text to replace; it must occur exactly once.",
            },
            "new_string": {"type": "string", "description": "The text to put in its place."},
        },
        "path",
        "old_string",
        "new_string",
    ),
    side_effects=SideEffects.WRITE,
    path_arguments={"path": "w"},
)


def _occurrences(text: str, needle: str, stop: int = 1000) -> list[int]:
    """Start offsets of ``needle`` in ``text``, overlapping ones included."""
    found: list[int] = []
    at = text.find(needle)
    while at >= 0 and len(found) < stop:
        found.append(at)
        at = text.find(needle, at + 1)
    return found


@attrs.define(eq=False)
class EditFileTool:
    """``edit_file``: replace a string that occurs exactly once.

    Zero or several occurrences (overlapping ones count) fail with a
    message that says how many there were; the file is then untouched.
    """

    workspace: Workspace
    definition: ToolDefinition = attrs.field(init=False, default=_bound(EDIT_FILE))

    def __call__(self) -> EditFileTool:
        """Act as its own factory: it keeps no per-call state."""
        return self

    async def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        """Apply the replacement and report the line it happened at."""
        return await trio.to_thread.run_sync(
            self._edit, arguments["path"], arguments["old_string"], arguments["new_string"]
        )

    def _edit(self, path: str, old: str, new: str) -> ToolOutput:
        if old == new:
            raise ToolError("old_string and new_string are identical; there is nothing to change.")
        at_line: list[int] = []

        def replace(data: bytes) -> bytes:
            if _is_binary(data):
                raise ToolError(f"{show(path)} is a binary file; edit_file edits text only.")
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ToolError(
                    f"{show(path)} is not valid UTF-8 text (byte {exc.start}); "
                    "edit_file edits UTF-8 text only."
                ) from None
            spots = _occurrences(text, old)
            if not spots:
                raise ToolError(
                    f"old_string was not found in {show(path)}. It must match exactly, "
                    "including whitespace and indentation; read the file to copy the text."
                )
            if len(spots) > 1:
                lines = ", ".join(str(text.count("\n", 0, s) + 1) for s in spots[:10])
                raise ToolError(
                    f"old_string occurs {len(spots)} times in {show(path)} (at lines {lines}); "
                    "it must occur exactly once. Include more surrounding text to make it unique."
                )
            at = spots[0]
            at_line.append(text.count("\n", 0, at) + 1)
            return (text[:at] + new + text[at + len(old) :]).encode("utf-8", "replace")

        self.workspace.edit_bytes_sync(path, replace)
        line = at_line[0]
        return ToolOutput.text(
            f"Edited {show(path)}: replaced 1 occurrence at line {line} "
            f"({_line_count(old)} lines removed, {_line_count(new)} lines inserted).",
            path=path,
            line=line,
        )


# -- list_dir -----------------------------------------------------------------

LIST_DIR = ToolDefinition(
    name="list_dir",
    description=(
        "List a directory of the workspace: one entry per line, directories ending in "
        "'/', links shown as 'name -> target' (never followed), file sizes in bytes. "
        "depth > 1 lists subdirectories too; the listing stops at limit entries."
    ),
    input_schema=_schema(
        {
            "path": {**_PATH, "description": "The directory, relative to the root (default '.')."},
            "depth": {
                "type": "integer",
                "minimum": 1,
                "description": "How many levels to list (default 1: only the directory).",
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": 10_000,
                "description": "The most entries to return (default 500).",
            },
        }
    ),
    side_effects=SideEffects.READ,
    path_arguments={"path": "r"},
)


def _describe(rel: str, entry: DirEntry) -> str:
    name = show(rel)[1:-1]
    if entry.kind == "dir":
        return f"{name}/"
    if entry.kind == "file":
        return f"{name}  ({entry.size} bytes)"
    if entry.kind == "link":
        return f"{name} -> {show(entry.target or '')[1:-1]}"
    return f"{name}  [{entry.kind}]"


@attrs.define(eq=False)
class ListDirTool:
    """``list_dir``: a bounded listing, depth-first, links shown and not followed.

    Deep trees are walked without recursion and with a bounded number of
    open directories, so depth is limited only by ``limit``.
    """

    workspace: Workspace
    default_limit: int = 500
    definition: ToolDefinition = attrs.field(init=False, default=_bound(LIST_DIR))

    def __call__(self) -> ListDirTool:
        """Act as its own factory: it keeps no per-call state."""
        return self

    async def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        """List the directory."""
        path = arguments.get("path", ".")
        depth = int(arguments.get("depth", 1))
        limit = int(arguments.get("limit", self.default_limit))
        return await trio.to_thread.run_sync(self._list, path, depth, limit)

    def _list(self, path: str, depth: int, limit: int) -> ToolOutput:
        fd = self.workspace.open_dir(path)
        problems: list[str] = []
        lines: list[str] = []
        complete = True
        walk = walk_tree(fd, "", depth, problems)
        try:
            for rel, entry, _level, _parent in walk:
                if len(lines) == limit:
                    complete = False
                    break
                lines.append(_describe(rel, entry))
        except OSError as exc:  # the directory itself could not be read
            raise WorkspaceError(path, f"could not be listed: {exc.strerror}.") from None
        finally:
            walk.close()
            os.close(fd)
        if not lines:
            lines.append(f"{show(path)} is empty.")
        if not complete:
            lines.append(
                f"[listing stopped after {limit} entries; list a subdirectory, lower depth "
                "or raise limit]"
            )
        lines.extend(f"[{p}]" for p in problems)
        return ToolOutput.text("\n".join(lines), path=path, entries=len(lines), complete=complete)


# -- search_files -------------------------------------------------------------

SEARCH_FILES = ToolDefinition(
    name="search_files",
    description=(
        "Search text files of the workspace for a regular expression (Python syntax), "
        "line by line. Returns 'path:line: text' for each match. Binary files, files "
        "over 2 MB and .git directories are skipped; the search is bounded in time and "
        "in the number of matches."
    ),
    input_schema=_schema(
        {
            "pattern": {
                "type": "string",
                "minLength": 1,
                "maxLength": 10_000,
                "description": "The regex to find.",
            },
            "path": {**_PATH, "description": "File or directory to search (default '.')."},
            "glob": {
                "type": "string",
                "description": "Only files whose name matches this pattern, e.g. '*.py'.",
            },
            "ignore_case": {"type": "boolean", "description": "Match case-insensitively."},
            "max_results": {
                "type": "integer",
                "minimum": 1,
                "maximum": 1000,
                "description": "The most matching lines to return (default 100).",
            },
        },
        "pattern",
    ),
    side_effects=SideEffects.READ,
    path_arguments={"path": "r"},
)

_MATCHER = r"""
import json, re, sys
inp, out = sys.stdin.buffer, sys.stdout
head = json.loads(inp.readline())
try:
    rx = re.compile(head["pattern"], head["flags"])
except RecursionError:
    out.write(json.dumps({"invalid": "it is nested too deeply"}) + "\n")
    sys.exit(0)
except (re.error, OverflowError, ValueError) as exc:
    out.write(json.dumps({"invalid": str(exc)}) + "\n")
    sys.exit(0)
left, width = head["max"], head["width"]
while left > 0:
    frame = inp.readline()
    if not frame:
        break
    name_len, size = map(int, frame.split())
    name = inp.read(name_len).decode("utf-8", "surrogateescape")
    text = inp.read(size).decode("utf-8", "replace")
    for number, row in enumerate(text.splitlines(), 1):
        if rx.search(row):
            out.write(json.dumps([name, number, row[:width]]) + "\n")
            left -= 1
            if not left:
                break
    out.write("\n")
    out.flush()
"""


@attrs.frozen
class _Hit:
    path: str
    line: int
    text: str


@attrs.define(eq=False)
class _SearchState:
    hits: list[_Hit] = attrs.Factory(list)
    files: int = 0
    skipped: int = 0
    problems: list[str] = attrs.Factory(list)
    invalid: str | None = None  # the matcher could not build the pattern: why
    failed: int | None = None  # the matcher's exit status, if it failed


@attrs.define(eq=False)
class SearchFilesTool:
    """``search_files``: regex over the workspace, bounded in time and output.

    The regex runs in a matcher subprocess killed after ``time_limit``
    seconds, so a catastrophic pattern costs at most that; the result then
    says the search was cut short and shows what was found.
    """

    workspace: Workspace
    time_limit: float = 10.0
    max_file_bytes: int = 2 * 1024 * 1024
    line_width: int = 300
    definition: ToolDefinition = attrs.field(init=False, default=_bound(SEARCH_FILES))

    def __call__(self) -> SearchFilesTool:
        """Act as its own factory: it keeps no per-call state."""
        return self

    async def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        """Run the search; see the class docstring."""
        pattern = arguments["pattern"]
        flags = re.IGNORECASE if arguments.get("ignore_case") else 0
        # Off the event loop: building a large pattern can take a while.
        await trio.to_thread.run_sync(_check_pattern, pattern, flags, abandon_on_cancel=True)
        path = arguments.get("path", ".")
        limit = int(arguments.get("max_results", 100))
        start = await trio.to_thread.run_sync(self._start, path)
        try:
            files = self._files(path, start, arguments.get("glob"), state := _SearchState())
            try:
                with trio.move_on_after(self.time_limit) as bound:
                    await self._match(files, pattern, int(flags), limit, state)
            finally:
                files.close()
        finally:
            if isinstance(start, int):
                os.close(start)
        return self._report(path, pattern, limit, state, bound.cancelled_caught)

    async def _match(
        self,
        files: Iterator[_Item],
        pattern: str,
        flags: int,
        limit: int,
        state: _SearchState,
    ) -> None:
        process = await open_group_process(
            [sys.executable, "-I", "-S", "-c", _MATCHER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={},
        )
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._feed, process, files, pattern, flags, limit, state)
                await self._collect(process, state)
                nursery.cancel_scope.cancel()
            if await process.wait() != 0:  # it closed its output: it is exiting
                state.failed = process.returncode
        finally:
            await reap(process, 0)

    async def _feed(
        self,
        process: trio.Process,
        files: Iterator[_Item],
        pattern: str,
        flags: int,
        limit: int,
        state: _SearchState,
    ) -> None:
        stdin = process.stdin
        assert stdin is not None
        header = {"pattern": pattern, "flags": flags, "max": limit, "width": self.line_width}
        try:
            await stdin.send_all(json.dumps(header).encode() + b"\n")
            done = False
            while not done:
                batch, done = await trio.to_thread.run_sync(_take, files, 1 << 20, 0.05)
                for name, data in batch:
                    raw = name.encode("utf-8", "surrogateescape")
                    await stdin.send_all(b"%d %d\n" % (len(raw), len(data)) + raw + data)
            await stdin.aclose()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the matcher stopped early: enough results

    async def _collect(self, process: trio.Process, state: _SearchState) -> None:
        stdout = process.stdout
        assert stdout is not None
        buffer = b""
        while chunk := await stdout.receive_some(1 << 16):
            buffer += chunk
            *rows, buffer = buffer.split(b"\n")
            for row in rows:
                if not row:
                    state.files += 1
                    continue
                try:
                    decoded = json.loads(row)
                    if isinstance(decoded, dict):
                        state.invalid = str(decoded["invalid"])
                        continue
                    name, line, text = decoded
                except (ValueError, KeyError):
                    continue
                state.hits.append(_Hit(str(name), int(line), str(text)))

    def _start(self, path: str) -> int | bytes | None:
        """Open the directory to search, or read the one file to search.

        ``None``: the file is over ``max_file_bytes`` (it is skipped, as in
        a directory).
        """
        try:
            return self.workspace.open_dir(path)
        except WorkspaceError as exc:
            if exc.kind is not WorkspaceErrorKind.NOT_A_DIRECTORY:
                raise
        try:
            return self.workspace.read_bytes_sync(path, self.max_file_bytes)
        except WorkspaceError as refused:
            if refused.kind is not WorkspaceErrorKind.TOO_LARGE:
                raise
        return None

    def _files(
        self, path: str, start: int | bytes | None, glob: str | None, state: _SearchState
    ) -> Generator[_Item, None, None]:
        if not isinstance(start, int):  # one file: capped and skipped like a directory's
            if start is None or _is_binary(start):
                state.skipped += 1
            else:
                yield path, start
            return
        walk = walk_tree(start, "", 1 << 30, state.problems, frozenset({".git"}))
        try:
            yield from self._readable(walk, path, glob, state)
        finally:
            walk.close()

    def _readable(
        self,
        walk: Generator[tuple[str, DirEntry, int, int], None, None],
        path: str,
        glob: str | None,
        state: _SearchState,
    ) -> Generator[_Item, None, None]:
        seen = 0
        while True:
            try:
                rel, entry, _level, parent = next(walk)
            except StopIteration:
                return
            except OSError as exc:  # the top directory could not be listed
                state.problems.append(f"{show(path)} could not be listed ({exc.strerror})")
                return
            seen += 1
            if seen % 256 == 0:
                yield None
            if entry.kind != "file" or (glob and not fnmatch.fnmatchcase(entry.name, glob)):
                continue
            if (entry.size or 0) > self.max_file_bytes:
                state.skipped += 1
                continue
            data = _read_at(parent, entry.name, rel, self.max_file_bytes)
            if data is None or _is_binary(data):
                state.skipped += 1
                continue
            yield (rel if path in (".", "") else f"{path.rstrip('/')}/{rel}"), data

    def _report(
        self, path: str, pattern: str, limit: int, state: _SearchState, timed_out: bool
    ) -> ToolOutput:
        if state.invalid is not None:
            raise _invalid_pattern(pattern, state.invalid)
        if state.failed is not None:
            raise ToolError(
                f"search_files failed: its matcher process exited with status {state.failed}."
            )
        lines = [f"{show(h.path)[1:-1]}:{h.line}: {h.text}" for h in state.hits]
        summary = (
            f"{len(state.hits)} matching lines for {pattern!r} in {show(path)} "
            f"({state.files} files searched, {state.skipped} skipped)."
        )
        if len(state.hits) >= limit:
            lines.append(f"[stopped at {limit} matches; narrow the pattern, path or glob]")
        lines.extend(f"[{p}]" for p in state.problems)
        if timed_out:
            raise ToolError(
                "\n".join(
                    [
                        f"search_files stopped after {self.time_limit:g} s: the pattern may "
                        "backtrack catastrophically or the tree is too large; simplify the "
                        "pattern or narrow path/glob. Partial result:",
                        summary,
                        *lines,
                    ]
                ),
                error_class=ErrorClass.TIMEOUT,
            )
        return ToolOutput.text(
            "\n".join([summary, *lines]), matches=len(state.hits), files=state.files
        )


def _invalid_pattern(pattern: str, why: str) -> ToolError:
    shown = repr(pattern) if len(pattern) <= 100 else f"{pattern[:100]!r}... ({len(pattern)} chars)"
    return ToolError(
        f"Invalid regular expression {shown}: {why}.", error_class=ErrorClass.INVALID_ARGUMENTS
    )


def _check_pattern(pattern: str, flags: int) -> None:
    """Refuse a pattern ``re`` cannot build, as ``invalid_arguments``.

    Besides ``re.error``, a bad pattern can raise ``OverflowError`` (a huge
    repeat count), ``RecursionError`` (deep nesting) or ``ValueError``.
    """
    try:
        re.compile(pattern, flags)
    except RecursionError:
        raise _invalid_pattern(pattern, "it is nested too deeply") from None
    except (re.error, OverflowError, ValueError) as exc:
        raise _invalid_pattern(pattern, str(exc)) from None


def _take(
    files: Iterator[_Item], budget: int, seconds: float
) -> tuple[list[tuple[str, bytes]], bool]:
    """Pull files until ``budget`` bytes or ``seconds`` of walking; say if the walk ended.

    The time bound keeps each worker-thread hop short even when the walk
    yields no file for a long time, so the search's own deadline can act.
    """
    batch: list[tuple[str, bytes]] = []
    stop = time.monotonic() + seconds
    for item in files:
        if item is not None:
            batch.append(item)
            budget -= len(item[1])
        if budget <= 0 or time.monotonic() > stop:
            return batch, False
    return batch, True


def _read_at(parent: int, name: str, rel: str, cap: int) -> bytes | None:
    """Read a file relative to ``parent``; ``None`` if it is refused or over ``cap``."""
    try:
        fd, _size = open_regular_at(parent, name, rel)
    except WorkspaceError:
        return None
    try:
        chunks, size = [], 0
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
            size += len(chunk)
            if size > cap:
                return None
        return b"".join(chunks)
    finally:
        os.close(fd)


# -- echo ---------------------------------------------------------------------

ECHO = ToolDefinition(
    name="echo",
    description="Return the given text unchanged (useful for testing tool calling).",
    input_schema=_schema(
        {"text": {"type": "string", "description": "The text to return."}}, "text"
    ),
    side_effects=SideEffects.NONE,
)


@attrs.define(eq=False)
class EchoTool:
    """``echo``: return the text it is given."""

    definition: ToolDefinition = attrs.field(default=ECHO, init=False)

    def __call__(self) -> EchoTool:
        """Act as its own factory: it keeps no per-call state."""
        return self

    async def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        """Return the text."""
        return ToolOutput.text(arguments["text"])


# -- registration -----------------------------------------------------------------


def register_builtin_tools(
    registry: ToolRegistry, workspace: Workspace, *, shell: bool = True
) -> list[ToolDefinition]:
    """Register the built-in tools for ``workspace``; return their definitions.

    Registers ``read_file``, ``write_file``, ``edit_file``, ``list_dir``,
    ``search_files``, ``echo`` and (unless ``shell=False``) ``shell``. To
    tune a tool (caps, timeouts), register its class yourself instead, e.g.
    ``registry.register(ShellTool(workspace, default_timeout=30))``.

    Raises:
        RegistrationError: a tool of the same name is already registered.
    """
    tools: list[Any] = [
        ReadFileTool(workspace),
        WriteFileTool(workspace),
        EditFileTool(workspace),
        ListDirTool(workspace),
        SearchFilesTool(workspace),
        EchoTool(),
    ]
    if shell:
        tools.append(ShellTool(workspace))
    return [registry.register(tool) for tool in tools]
