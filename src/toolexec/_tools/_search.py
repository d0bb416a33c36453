"""``search_files``: a regular expression over the workspace's text files, bounded.

Theory of operation. A regular expression never runs in this process:
Python's ``re`` holds the GIL while it backtracks, so a pathological
pattern would freeze the event loop. The pattern is checked here (in a
worker thread: building a huge one takes a while), then the workspace is
walked and its files read here, so the workspace's guarantees hold (no
link followed, special and oversize files skipped), in short worker-thread
hops. The text is streamed, framed by name and size, to a small matcher
subprocess (``_process``: its own process group, reaped on every path)
that writes back one JSON line per match and an empty line per file. When
the time bound expires the matcher is killed, and the result says the
search was cut short and shows what was found.

The walk runs in short worker-thread hops that the tool waits for (a hop
is never abandoned: the walk's generator must not be touched while a
thread runs it). When the search ends, for any reason, a cancel token is
set that the tree walk checks at every entry, so a hop in progress ends
at once; the walk goes down at most the workspace's path depth limit.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, TypeAlias

import attrs
import trio

from .._core._display import show
from .._core._errors import ToolError
from .._core._messages import clip
from .._core._types import ErrorClass, SideEffects, ToolDefinition, ToolOutput
from .._core._workspace_errors import WorkspaceError, WorkspaceErrorKind
from .._proc._process import open_group_process, reap
from ._file_ops import open_regular_at
from ._file_tools import PATH_ARGUMENT, bound_to_workspace, is_binary, tool_schema
from ._tree import walk_tree

if TYPE_CHECKING:
    from collections.abc import Generator, Iterator, Mapping

    from .._core._tool_protocol import ToolContext
    from ._tree import DirEntry
    from ._workspace import Workspace

__all__ = ["SearchFilesTool"]

_Item: TypeAlias = tuple[str, bytes] | None  # None: a heartbeat from a walk, so a batch can end


SEARCH_FILES = ToolDefinition(
    name="search_files",
    description=(
        "Search text files of the workspace for a regular expression (Python syntax), "
        "line by line. Returns 'path:line: text' for each match. Binary files, files "
        "over 2 MB and .git directories are skipped; the search is bounded in time and "
        "in the number of matches."
    ),
    input_schema=tool_schema(
        {
            "pattern": {
                "type": "string",
                "minLength": 1,
                "maxLength": 10_000,
                "description": "The regex to find.",
            },
            "path": {**PATH_ARGUMENT, "description": "File or directory to search (default '.')."},
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
    too_deep: int = 0  # directories at the path depth limit, not entered
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
    definition: ToolDefinition = attrs.field(init=False, default=bound_to_workspace(SEARCH_FILES))

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
        # What the matcher reads first: the pattern and its bounds.
        header = {"pattern": pattern, "flags": int(flags), "max": limit, "width": self.line_width}
        start = await trio.to_thread.run_sync(self._start, path)
        try:
            stop = threading.Event()  # set when the search ends: a walk hop then ends too
            files = self._files(path, start, arguments.get("glob"), state := _SearchState(), stop)
            try:
                with trio.move_on_after(self.time_limit) as bound:
                    await self._match(files, header, state, stop)
            finally:
                files.close()
        finally:
            if isinstance(start, int):
                os.close(start)
        return self._report(path, pattern, limit, state, bound.cancelled_caught)

    async def _match(
        self,
        files: Iterator[_Item],
        header: dict[str, Any],
        state: _SearchState,
        stop: threading.Event,
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
                nursery.start_soon(_feed, process, files, header)
                try:
                    await self._collect(process, state)
                finally:  # done, timed out or cancelled: a walk hop under way ends now
                    stop.set()
                nursery.cancel_scope.cancel()
            if await process.wait() != 0:  # it closed its output: it is exiting
                state.failed = process.returncode
        finally:
            await reap(process, 0)

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
        self,
        path: str,
        start: int | bytes | None,
        glob: str | None,
        state: _SearchState,
        stop: threading.Event,
    ) -> Generator[_Item, None, None]:
        if not isinstance(start, int):  # one file: capped and skipped like a directory's
            if start is None or is_binary(start):
                state.skipped += 1
            else:
                yield path, start
            return
        depth = self.workspace.max_path_depth
        walk = walk_tree(start, "", depth, state.problems, frozenset({".git"}), stop)
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
                rel, entry, level, parent = next(walk)
            except StopIteration:
                return
            except OSError as exc:  # the top directory could not be listed
                state.problems.append(f"{show(path)} could not be listed ({exc.strerror})")
                return
            seen += 1
            if seen % 256 == 0:
                yield None
            if entry.kind == "dir" and level == self.workspace.max_path_depth:
                state.too_deep += 1
            if entry.kind != "file" or (glob and not fnmatch.fnmatchcase(entry.name, glob)):
                continue
            if (entry.size or 0) > self.max_file_bytes:
                state.skipped += 1
                continue
            data = _read_at(parent, entry.name, rel, self.max_file_bytes)
            if data is None or is_binary(data):
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
        if state.too_deep:
            lines.append(
                f"[{state.too_deep} directories {self.workspace.max_path_depth} levels down "
                "were not searched: no path may go deeper]"
            )
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
    shown = repr(clip(pattern, 100))
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


async def _feed(process: trio.Process, files: Iterator[_Item], header: dict[str, Any]) -> None:
    """Send the matcher ``header``, then each file framed by name and size, then EOF."""
    stdin = process.stdin
    assert stdin is not None
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


def _take(
    files: Iterator[_Item], budget: int, seconds: float
) -> tuple[list[tuple[str, bytes]], bool]:
    """Pull files until ``budget`` bytes or ``seconds`` of walking; say if the walk ended.

    The time bound keeps each worker-thread hop short even when the walk
    yields no file for a long time, so the search's own deadline can act.
    """
    batch: list[tuple[str, bytes]] = []
    stop = time.monotonic() + seconds
    try:
        for item in files:
            if item is not None:
                batch.append(item)
                budget -= len(item[1])
            if budget <= 0 or time.monotonic() > stop:
                return batch, False
    except WorkspaceError as exc:  # the search ended while this hop walked
        if exc.kind is not WorkspaceErrorKind.CANCELLED:
            raise
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
