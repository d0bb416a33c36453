"""The one escaper: paths in tool output and approval summaries hide nothing and break no line."""

from __future__ import annotations

import pytest

from toolexec._core._display import display_text, show


def test_show_spells_escapes_as_python_does() -> None:
    assert show("a\nb\rc\td\x1b[31m\x7f\x85") == "'a\\nb\\rc\\td\\x1b[31m\\x7f\\x85'"
    assert show("") == "'.'"
    assert show("plain name.txt") == "'plain name.txt'"


def test_display_text_spells_every_escape_as_a_unicode_escape() -> None:
    assert display_text('{"path":"a\nb\x1b"}') == '{"path":"a\\u000ab\\u001b"}'
    assert display_text("plain") == "plain"


@pytest.mark.parametrize(
    ("char", "why"),
    [
        ("\u202e", "right-to-left override"),
        ("\u2066", "left-to-right isolate"),
        ("\u200b", "zero-width space"),
        ("\u200d", "zero-width joiner"),
        ("\ufeff", "byte order mark"),
        ("\u00ad", "soft hyphen"),
        ("\u2028", "line separator"),
        ("\u2029", "paragraph separator"),
        ("\ue000", "private use"),
        ("\u0378", "unassigned"),
    ],
)
def test_both_escape_format_separator_private_and_unassigned_characters(
    char: str, why: str
) -> None:
    spelled = f"\\u{ord(char):04x}"
    in_path = f"\\x{ord(char):02x}" if ord(char) <= 0xFF else spelled
    assert show(f"a{char}b") == f"'a{in_path}b'", why
    assert display_text(f"a{char}b") == f"a{spelled}b", why


def test_both_escape_exactly_the_same_characters() -> None:
    for code in [*range(0x3000), *range(0xD7F0, 0xE010), *range(0xFFF0, 0x10010), 0x10FFFF]:
        char = chr(code)
        if 0xDC80 <= code <= 0xDCFF:
            continue  # in a path, an undecodable byte: shown as that byte (below)
        shown = show(char) != f"'{char}'"
        displayed = display_text(char) != char
        assert shown == displayed, hex(code)


def test_bytes_a_name_cannot_decode_and_astral_characters() -> None:
    assert show("caf\udce9") == "'caf\\xe9'"  # an undecodable byte of a file name
    assert show("x\ud800") == "'x\\ud800'"  # a surrogate no file name holds: no crash
    assert show("\U000f0000") == "'\\U000f0000'"  # private use, beyond the BMP
    assert display_text("\U000f0000") == "\\U000f0000"
    assert show("caf\u00e9 \u4e2d\U0001f600") == "'caf\u00e9 \u4e2d\U0001f600'"  # printable stays
