"""Lines as ``str.splitlines`` sees them, counted and sliced without building the list.

``read_file`` pages through text by line number; a list of every line of a
large file would cost tens of bytes per line on top of the text. These
count line breaks with ``str.count`` and walk only the lines a caller takes.
"""

from __future__ import annotations

import itertools
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["line_count", "lines_from"]

# Where ``str.splitlines`` ends a line; "\r\n" is one break.
_BREAK_CHARS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"
_SKIP_CHUNK = 1 << 16
_BREAK = re.compile("\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")


def _breaks(text: str, start: int = 0, end: int | None = None) -> int:
    """How many line breaks ``text[start:end]`` holds (``str.splitlines``'s)."""
    end = len(text) if end is None else end
    found = sum(text.count(c, start, end) for c in _BREAK_CHARS)
    return found - text.count("\r\n", start, end)


def line_count(text: str) -> int:
    """``len(text.splitlines())`` without building the list of lines."""
    return _breaks(text) + (text[-1:] not in ("", *_BREAK_CHARS))


def lines_from(text: str, first: int) -> Iterator[str]:
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
