"""Whether a shell command plainly only reads: the shell tool's per-call classifier.

Pure: no I/O, no processes. ``classify_shell_command`` marks a command
read-only only when a small scanner understands all of it: plain words and
quotes, ``;``, ``&&``, ``||`` and ``|`` between commands from a fixed list
of read-only programs, and none of their writing options. Anything else
(expansions, redirections, subshells, background jobs, unknown programs)
keeps the declared ``EXECUTE``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._types import SideEffects

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["classify_arguments", "classify_shell_command"]

_READ_ONLY = frozenset(
    {
        "basename", "cat", "cmp", "cut", "df", "diff", "dirname", "du", "echo",
        "egrep", "false", "fgrep", "file", "find", "grep", "head", "id", "ls",
        "md5sum", "nl", "od", "printf", "pwd", "readlink", "realpath", "rg",
        "sha1sum", "sha256sum", "sha512sum", "sort", "stat", "tail", "tr", "true",
        "uname", "wc", "which", "whoami",
    }
)  # fmt: skip
_FIND_WRITERS = frozenset(
    {"-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf", "-fls"}
)
#: Programs with options that write or run programs: (long options, short letters).
_RISKY_OPTIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "sort": (("--output", "--compress-program"), "o"),
    "rg": (("--pre",), ""),
    "file": (("--compile",), "C"),
}
_UNSAFE_UNQUOTED = frozenset("$`\\<>(){}#!")
_GLOB = frozenset("*?[")


def classify_arguments(arguments: Mapping[str, Any]) -> SideEffects:
    """Classify a ``shell`` call by its ``command`` argument."""
    return classify_shell_command(str(arguments.get("command", "")))


def classify_shell_command(command: str) -> SideEffects:
    """Return ``READ`` if ``command`` plainly only reads, else ``EXECUTE``.

    Conservative: ``READ`` only when every part is understood, namely plain
    words and quotes joined by ``;``, ``&&``, ``||`` or ``|``, each command
    from a fixed read-only list (``ls``, ``cat``, ``grep``, ``find``, ...)
    without options that write or run programs (``find -exec``,
    ``sort -o``). Variables, command substitution, redirection, subshells,
    background jobs and unknown programs all give ``EXECUTE``.
    """
    segments = _scan(command)
    if not segments:
        return SideEffects.EXECUTE
    for words in segments:
        if not words or not _read_only_command(words):
            return SideEffects.EXECUTE
    return SideEffects.READ


def _read_only_command(words: list[tuple[str, bool]]) -> bool:
    name = words[0][0]
    if name not in _READ_ONLY or words[0][1]:
        return False
    args = words[1:]
    if name == "find":
        return not any(glob or text in _FIND_WRITERS for text, glob in args)
    if name in _RISKY_OPTIONS:
        longs, letters = _RISKY_OPTIONS[name]
        for text, glob in args:
            if glob:
                return False
            if text.startswith("--"):
                # getopt takes any unambiguous prefix: --outp=F is --output=F.
                option = text.split("=", 1)[0]
                if len(option) > 2 and any(risky.startswith(option) for risky in longs):
                    return False
            elif text.startswith("-") and set(text) & set(letters):
                return False
    return True


def _scan(command: str) -> list[list[tuple[str, bool]]] | None:
    """Split into commands of ``(word, has unquoted glob)``; ``None`` if not understood."""
    if any((ord(c) < 32 and c != "\t") or c == "\x7f" for c in command):
        return None
    scanner = _Scanner(command)
    i, n = 0, len(command)
    while i < n:
        c = command[i]
        if c in " \t;|&":
            step = scanner.separator(i)
        elif c in "'\"":
            step = scanner.quoted(i)
        elif c in _UNSAFE_UNQUOTED:
            return None
        else:
            step = scanner.plain(i)
        if step is None:
            return None
        i += step
    scanner.end_word()
    return scanner.segments


class _Scanner:
    """The state of ``_scan``: the commands so far and the word being read."""

    def __init__(self, command: str) -> None:
        self.command = command
        self.segments: list[list[tuple[str, bool]]] = [[]]
        self.word: list[str] = []
        self.started = self.glob = False

    def end_word(self) -> None:
        if self.started:
            self.segments[-1].append(("".join(self.word), self.glob))
            self.word, self.started, self.glob = [], False, False

    def separator(self, i: int) -> int | None:
        """Blank or operator at ``i``: how many characters it takes; ``None``: refuse."""
        self.end_word()
        command, c = self.command, self.command[i]
        if c in " \t":
            return 1
        pair = command[i : i + 2]
        op = pair if pair in ("&&", "||") else c
        if op == "&" or pair == "|&":  # background jobs, or stderr piped too
            return None
        self.segments.append([])
        return len(op)

    def quoted(self, i: int) -> int | None:
        """A quoted string at ``i``; ``None`` if unterminated or expanding."""
        command, c = self.command, self.command[i]
        end = command.find(c, i + 1)
        if end < 0:
            return None
        inner = command[i + 1 : end]
        if c == '"' and any(ch in inner for ch in "$`\\!"):
            return None
        self.word.append(inner)
        self.started = True
        return end + 1 - i

    def plain(self, i: int) -> int:
        c = self.command[i]
        self.glob = self.glob or c in _GLOB
        self.word.append(c)
        self.started = True
        return 1
