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

The two functions differ only in how they spell an escape: ``show`` the
way Python writes a string (``\\n``, ``\\x1b``, ``\\u202e``), since a path
is read like one, and ``display_text`` always as ``\\uXXXX`` (a summary is
JSON-like text where ``\\xNN`` would mean nothing).
"""

from __future__ import annotations

import os
import unicodedata
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["display_text", "show"]

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
