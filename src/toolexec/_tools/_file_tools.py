"""The file tools: ``read_file``, ``write_file``, ``edit_file`` and ``list_dir``.

Each holds the ``Workspace`` it works in (it does not look at
``ToolContext.workspace``), is stateless, and acts as its own factory; its
definition names that workspace, so policies resolve path arguments the
way the tool will. Every file operation goes through the workspace, in a
worker thread, one hop per call; names in results and errors are escaped
by ``show``. The schema helpers here serve ``search_files`` too.

Every integer argument has a schema ``minimum`` and ``maximum``, so an
extreme value (``10**30``, ``1e308``) is ``invalid_arguments`` before the
tool runs. Tools that return lines (``read_file``, ``list_dir``) cap them
with ``take_capped``, by count and by characters (``max_output_chars``).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import attrs

from .._core._display import show
from .._core._errors import ToolError
from .._core._types import SideEffects, ToolDefinition, ToolOutput
from .._core._workspace_errors import WorkspaceError, WorkspaceErrorKind
from ._confined import MAX_PATH_DEPTH
from ._lines import MAX_OUTPUT_CHARS, Capped, Stop, line_count, lines_from, take_capped
from ._path_keys import path_resources
from ._tree import walk_tree
from ._worker import run_abandonable

if TYPE_CHECKING:
    import threading
    from collections.abc import Mapping

    from .._core._tool_protocol import ToolContext
    from ._tree import DirEntry
    from ._workspace import Workspace

__all__ = [
    "PATH_ARGUMENT",
    "EditFileTool",
    "ListDirTool",
    "ReadFileTool",
    "WriteFileTool",
    "bound_to_workspace",
    "is_binary",
    "tool_schema",
]

_BINARY_SNIFF = 8192
#: The largest ``offset`` read_file takes: a line number no readable file reaches.
MAX_LINE_NUMBER = 1_000_000_000
#: The most lines read_file returns per call (each line is at least one character).
MAX_LINES = MAX_OUTPUT_CHARS
#: The most entries list_dir returns per call.
MAX_ENTRIES = 10_000


def tool_schema(properties: dict[str, Any], *required: str) -> dict[str, Any]:
    """An object schema with these properties, these required, nothing else."""
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


PATH_ARGUMENT = {"type": "string", "description": "A path relative to the workspace root."}


def bound_to_workspace(definition: ToolDefinition) -> Any:
    """The definition, naming the tool's workspace (for policies that resolve paths)
    and declaring its path arguments as the resources its calls touch."""
    return attrs.Factory(
        lambda tool: attrs.evolve(
            definition,
            workspace=tool.workspace,
            resources=path_resources(definition.path_arguments, tool.workspace),
        ),
        takes_self=True,
    )


def is_binary(data: bytes) -> bool:
    """Whether ``data`` looks binary: a NUL byte near the start."""
    return b"\x00" in data[:_BINARY_SNIFF]


# -- read_file ----------------------------------------------------------------

READ_FILE = ToolDefinition(
    name="read_file",
    description=(
        "Read a text file from the workspace. Returns its lines as they are; use offset "
        "and limit to page through long files (the result says which lines it shows). "
        "Binary files, directories and special files are refused."
    ),
    input_schema=tool_schema(
        {
            "path": PATH_ARGUMENT,
            "offset": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_LINE_NUMBER,
                "description": "The first line to return, counting from 1 (default 1).",
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_LINES,
                "description": f"The most lines to return (default 2000, at most {MAX_LINES}).",
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
    max_output_chars: int = MAX_OUTPUT_CHARS
    default_limit: int = 2000
    definition: ToolDefinition = attrs.field(init=False, default=bound_to_workspace(READ_FILE))

    def __call__(self) -> ReadFileTool:
        """Act as its own factory: it keeps no per-call state."""
        return self

    async def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        """Read the file and return the selected lines."""
        path = arguments["path"]
        data = await self.workspace.read_bytes(path)
        if is_binary(data):
            raise ToolError(
                f"{show(path)} is a binary file ({len(data)} bytes); read_file shows text only."
            )
        text = data.decode("utf-8", "replace")
        total = line_count(text)
        first = int(arguments.get("offset", 1))
        limit = int(arguments.get("limit", self.default_limit))
        if not total:
            return ToolOutput.text(f"{show(path)} is empty.", path=path, lines=0)
        if first > total:
            raise ToolError(
                f"offset {first} is past the end of {show(path)}, which has {total} lines."
            )
        chosen, notes = self._take_lines(text, first, limit)
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

    def _take_lines(self, text: str, first: int, limit: int) -> tuple[list[str], list[str]]:
        """Up to ``limit`` lines from line ``first`` within ``max_output_chars``; and notes."""
        taken = take_capped(lines_from(text, first), limit, self.max_output_chars)
        if taken.stop is Stop.CUT:  # one line longer than the cap: show its start
            cut = self.max_output_chars
            note = f"[line {first} is {taken.cut_from} characters; showing the first {cut}]"
            return [taken.lines[0] + "\n"], [note]
        return taken.lines, []


# -- write_file ---------------------------------------------------------------

WRITE_FILE = ToolDefinition(
    name="write_file",
    description=(
        "Create a file in the workspace or replace its whole content (missing parent "
        "directories are created). The replacement is atomic. To change part of a file, "
        "use edit_file."
    ),
    input_schema=tool_schema(
        {
            "path": PATH_ARGUMENT,
            "content": {"type": "string", "description": "The complete new content."},
        },
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
    definition: ToolDefinition = attrs.field(init=False, default=bound_to_workspace(WRITE_FILE))

    def __call__(self) -> WriteFileTool:
        """Act as its own factory: it keeps no per-call state."""
        return self

    async def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        """Write the content; say whether the file was created or replaced."""
        path, content = arguments["path"], arguments["content"]
        data = content.encode("utf-8", "replace")
        created = await self.workspace.write_bytes(path, data)
        verb = "Created" if created else "Replaced"
        return ToolOutput.text(
            f"{verb} {show(path)} ({len(data)} bytes, {line_count(content)} lines).",
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
    input_schema=tool_schema(
        {
            "path": PATH_ARGUMENT,
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


def _unique_spot(path: str, data: bytes, old: str) -> tuple[str, int]:
    """The file's text and where its one occurrence of ``old`` starts; else why not."""
    if is_binary(data):
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
    return text, spots[0]


@attrs.define(eq=False)
class EditFileTool:
    """``edit_file``: replace a string that occurs exactly once.

    Zero or several occurrences (overlapping ones count) fail with a
    message that says how many there were; the file is then untouched.
    """

    workspace: Workspace
    definition: ToolDefinition = attrs.field(init=False, default=bound_to_workspace(EDIT_FILE))

    def __call__(self) -> EditFileTool:
        """Act as its own factory: it keeps no per-call state."""
        return self

    async def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        """Apply the replacement and report the line it happened at."""
        path, old, new = arguments["path"], arguments["old_string"], arguments["new_string"]
        return await run_abandonable(lambda cancel: self._edit(path, old, new, cancel))

    def _edit(
        self, path: str, old: str, new: str, cancel: threading.Event | None = None
    ) -> ToolOutput:
        if old == new:
            raise ToolError("old_string and new_string are identical; there is nothing to change.")
        at_line: list[int] = []

        def replace(data: bytes) -> bytes:
            text, at = _unique_spot(path, data, old)
            at_line.append(text.count("\n", 0, at) + 1)
            return (text[:at] + new + text[at + len(old) :]).encode("utf-8", "replace")

        self.workspace.edit_bytes_sync(path, replace, cancel=cancel)
        line = at_line[0]
        return ToolOutput.text(
            f"Edited {show(path)}: replaced 1 occurrence at line {line} "
            f"({line_count(old)} lines removed, {line_count(new)} lines inserted).",
            path=path,
            line=line,
        )


# -- list_dir -----------------------------------------------------------------

LIST_DIR = ToolDefinition(
    name="list_dir",
    description=(
        "List a directory of the workspace: one entry per line, directories ending in "
        "'/', links shown as 'name -> target' (never followed), file sizes in bytes. "
        "depth > 1 lists subdirectories too; the listing stops at limit entries "
        f"or {MAX_OUTPUT_CHARS:,} characters."
    ),
    input_schema=tool_schema(
        {
            "path": {
                **PATH_ARGUMENT,
                "description": "The directory, relative to the root (default '.').",
            },
            "depth": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_PATH_DEPTH,
                "description": (
                    "How many levels to list (default 1: only the directory; "
                    f"at most {MAX_PATH_DEPTH})."
                ),
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_ENTRIES,
                "description": f"The most entries to return (default 500, at most {MAX_ENTRIES}).",
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

    The listing stops at ``limit`` entries or ``max_output_chars``
    characters, whichever comes first, and says so. Deep trees are walked
    without recursion, with a bounded number of open directories, down to
    ``depth`` levels (at most the workspace's path depth limit, 256).
    """

    workspace: Workspace
    default_limit: int = 500
    max_output_chars: int = MAX_OUTPUT_CHARS
    definition: ToolDefinition = attrs.field(init=False, default=bound_to_workspace(LIST_DIR))

    def __call__(self) -> ListDirTool:
        """Act as its own factory: it keeps no per-call state."""
        return self

    async def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        """List the directory."""
        path = arguments.get("path", ".")
        depth = int(arguments.get("depth", 1))
        limit = int(arguments.get("limit", self.default_limit))
        return await run_abandonable(lambda cancel: self._list(path, depth, limit, cancel))

    def _list(self, path: str, depth: int, limit: int, cancel: threading.Event) -> ToolOutput:
        fd = self.workspace.open_dir(path, cancel=cancel)
        problems: list[str] = []
        walk = walk_tree(fd, "", depth, problems, cancel=cancel)
        try:  # an entry's line break counts toward the cap
            entries = (f"{_describe(rel, entry)}\n" for rel, entry, _level, _parent in walk)
            taken = take_capped(entries, limit, self.max_output_chars)
        except OSError as exc:  # the directory itself could not be read
            raise WorkspaceError(
                path, f"could not be listed: {exc.strerror}.", kind=WorkspaceErrorKind.OS_ERROR
            ) from None
        finally:
            walk.close()
            os.close(fd)
        lines = [line.removesuffix("\n") for line in taken.lines]
        lines += self._notes(path, limit, taken)
        lines += _problem_lines(problems, self.max_output_chars - taken.chars)
        return ToolOutput.text(
            "\n".join(lines), path=path, entries=len(taken.lines), complete=taken.stop is None
        )

    def _notes(self, path: str, limit: int, taken: Capped) -> list[str]:
        """What follows the entries: that the directory is empty, or why the listing stopped."""
        count, cap = len(taken.lines), self.max_output_chars
        if taken.stop is None:
            return [] if count else [f"{show(path)} is empty."]
        if taken.stop is Stop.COUNT:
            return [
                f"[listing stopped after {limit} entries; list a subdirectory, lower depth "
                "or raise limit]"
            ]
        if taken.stop is Stop.CHARS:
            return [
                f"[listing stopped after {count} entries at the {cap:,}-character output cap; "
                "list a subdirectory or lower depth]"
            ]
        long = taken.cut_from - 1  # its line break aside
        return [f"[the first entry is {long:,} characters; showing the first {cap:,}]"]


def _problem_lines(problems: list[str], room: int) -> list[str]:
    """One line per problem, within ``room`` characters; then how many did not fit."""
    shown = take_capped((f"[{p}]\n" for p in problems), len(problems), max(0, room))
    lines = [] if shown.stop is Stop.CUT else [line.removesuffix("\n") for line in shown.lines]
    if len(lines) < len(problems):
        lines.append(f"[{len(problems) - len(lines)} more problems not shown (output cap)]")
    return lines
