"""Lines as ``str.splitlines`` sees them, counted and sliced without building the list.

``read_file`` pages through text by line number; a list of every line of a
large file would cost tens of bytes per line on top of the text. These
count line breaks with ``str.count`` and walk only the lines a caller takes.

``take_capped`` is the one output cap of the tools that return lines
(``read_file``'s lines, ``list_dir``'s entries): at most so many lines and
so many characters, saying which bound stopped it.
"""

from __future__ import annotations

import enum
import itertools
import re
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

__all__ = ["MAX_OUTPUT_CHARS", "Capped", "Stop", "line_count", "lines_from", "take_capped"]

#: The most characters a tool that returns lines gives back by default.
MAX_OUTPUT_CHARS = 100_000

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


class Stop(enum.Enum):
    """Why ``take_capped`` stopped before the lines ran out."""

    #: ``count`` lines were taken and more remain.
    COUNT = "count"
    #: The next line would have passed the character cap.
    CHARS = "chars"
    #: The first line alone is longer than the cap: only its start was taken.
    CUT = "cut"


@attrs.frozen
class Capped:
    """What ``take_capped`` took: the lines, why it stopped (``None``: they ran out)."""

    lines: list[str]
    stop: Stop | None = None
    cut_from: int = 0  # Stop.CUT: how long the line that was cut is

    @property
    def chars(self) -> int:
        """How many characters were taken."""
        return sum(map(len, self.lines))


def take_capped(lines: Iterable[str], count: int, max_chars: int) -> Capped:
    """Take up to ``count`` of ``lines``, at most ``max_chars`` characters in all.

    Whole lines only, except that a first line longer than ``max_chars``
    gives its first ``max_chars`` characters (``Stop.CUT``). One line past
    ``count`` is looked at, to tell "exactly ``count``" from "more".
    """
    taken: list[str] = []
    used = 0
    for line in lines:
        if len(taken) == count:
            return Capped(taken, Stop.COUNT)
        if used + len(line) > max_chars:
            if taken:
                return Capped(taken, Stop.CHARS)
            return Capped([line[:max_chars]], Stop.CUT, len(line))
        taken.append(line)
        used += len(line)
    return Capped(taken)
