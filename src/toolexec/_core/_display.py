"""Text printed for a model or a person: one line, in its own order.

The one escaper for everything toolexec prints that came from outside: the
paths in tool output (``show``) and the tool names and arguments a human
approves (``display_text``). A character is escaped when printing it could
start a new line of output (forging an entry, a result or a message), show
text in another order than it has (bidirectional controls), or hide
something (zero-width and other format characters, unassigned code points):
the Unicode categories Cc (controls: C0, DEL, C1), Cf (format), Cs
(surrogates), Co (private use), Cn (unassigned), Zl and Zp (the line and
paragraph separators). Everything else is printed as it is.

The functions differ only in how they spell an escape: ``show`` the way
Python writes a string (``\\n``, ``\\x1b``, ``\\u202e``), since a path is
read like one; ``display_text`` always as ``\\uXXXX`` (a summary is JSON-like
text where ``\\xNN`` would mean nothing); ``display_json`` as JSON escapes
(surrogate pairs above U+FFFF), so JSON stays JSON; ``display_lines``
escapes each line of a text toolexec wrote itself, keeping its line breaks.
"""

from __future__ import annotations

import os
import unicodedata
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["display_json", "display_lines", "display_text", "show"]

_ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(text: str, spell: Callable[[str], str]) -> str:
    if text.isprintable():  # no character of those categories (nor a Zs but space)
        return text
    return "".join(spell(c) if unicodedata.category(c) in _ESCAPED_CATEGORIES else c for c in text)


def _unicode_escape(c: str) -> str:
    code = ord(c)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _python_escape(c: str) -> str:
    named = _NAMED.get(c)
    if named is not None:
        return named
    return f"\\x{ord(c):02x}" if ord(c) <= 0xFF else _unicode_escape(c)


def show(name: str) -> str:
    """Render a path for the model, on one line.

    Quoted; non-UTF-8 bytes become ``\\xNN`` escapes, and so do control
    characters (``\\n``, ``\\r``, ``\\t`` for those three), so no name can
    start a new line of a tool's output. Format characters (bidirectional
    controls, zero-width characters), the line and paragraph separators and
    unassigned code points become ``\\uXXXX``.
    """
    if not name:
        return "'.'"
    try:
        text = os.fsencode(name).decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate no file name has: escaped below
        text = name
    return f"'{_escape(text, _python_escape)}'"


def display_text(text: str) -> str:
    """Escape control, format (bidi, zero-width) and unassigned characters as ``\\uXXXX``."""
    return _escape(text, _unicode_escape)


def _json_escape(c: str) -> str:
    if c == "\n":  # the JSON text's own layout: a newline in a string is already \\n
        return c
    code = ord(c)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def display_json(text: str) -> str:
    """Escape, in JSON text, every such character as a JSON ``\\u`` escape.

    ``json.dumps(..., ensure_ascii=False)`` keeps C1 controls, bidirectional
    and zero-width characters as they are; the result of this is the same
    JSON value, safe to print on a terminal.
    """
    return _escape(text, _json_escape)


def display_lines(text: str) -> str:
    """Escape each line of ``text`` as ``display_text`` does, keeping the line breaks."""
    return "\n".join(display_text(line) for line in text.split("\n"))
