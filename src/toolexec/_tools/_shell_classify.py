"""Whether a shell command only reads: the shell tool's per-call classifier.

Theory of operation. A ``READ`` verdict routes a command with the reads,
which run alongside each other, and a host may take it as the call's side
effects in its own policy, so it must never be given to a command that
writes or runs a program. The classifier is an allow-list, never a
deny-list: a command is ``READ`` only when every part of it is known to be
harmless, and anything it does not know is ``EXECUTE``.

1. A small scanner splits the command into simple commands joined by ``;``,
   ``&&``, ``||`` or ``|``, made of plain words and quotes. Expansions
   (``$``, backticks), redirections, subshells, groups, background jobs,
   comments, backslashes and control characters (newlines included) make it
   refuse the whole command.
2. Every simple command's first word must name a program on the list below
   (an assignment such as ``A=1 ls``, a path such as ``/bin/ls``, a glob or
   a builtin not on the list is refused: ``printf -v``, ``read``, ``let``,
   ``declare``, ``[[`` and many more assign variables or evaluate
   arithmetic, and bash evaluates an array subscript such as
   ``a[$(cmd)]`` even from a quoted word).
3. Every option must be on that program's list, in the form getopt parses:
   short options one by one through a bundle (``-la``), an option's argument
   attached (``-n5``, ``--lines=5``) or in the next word (which must then
   not start with ``-``). A long option counts only when spelled out in
   full: getopt also takes any unambiguous prefix (``--outp`` for
   ``--output``), and a prefix is never on the list. ``find``'s expression
   is checked primary by primary, and ``printf`` takes no option at all.
4. An unquoted glob may expand to a file name that looks like an option, so
   globs are allowed only in the arguments of programs none of whose
   options write or run anything (``ls``, ``cat``, ``grep``, ...), and
   after the format of ``printf``.

The tables follow GNU coreutils, grep, diffutils and findutils, file 5 and
ripgrep 13 and 14. Pure: no I/O, no processes; the tables are built once.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import attrs

from .._core._types import SideEffects

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = ["classify_arguments", "classify_shell_command"]

#: A word of a simple command: its text after quote removal, and whether it holds an unquoted glob.
_Word = tuple[str, bool]

_SUMS = (
    "-bctzw --binary --check --tag --text --zero --ignore-missing --quiet --status --strict --warn"
)
_GREP = (
    "-EFGPiwxzsvVbnHhoqaIrRLlcTZU -e: -f: -m: -d: -D: -A: -B: -C: NUM"
    " --extended-regexp --fixed-strings --basic-regexp --perl-regexp --regexp= --file="
    " --ignore-case --no-ignore-case --word-regexp --line-regexp --null-data --no-messages"
    " --invert-match --max-count= --byte-offset --line-number --line-buffered --with-filename"
    " --no-filename --label= --only-matching --quiet --silent --binary-files= --text"
    " --directories= --devices= --recursive --dereference-recursive --include= --exclude="
    " --exclude-from= --exclude-dir= --files-without-match --files-with-matches --count"
    " --initial-tab --null --before-context= --after-context= --context= --group-separator="
    " --no-group-separator --color=? --colour=? --binary"
)
_HEAD_TAIL = "-c: -n: -qvz NUM --bytes= --lines= --quiet --silent --verbose --zero-terminated"

#: The read-only programs and, for each, every option it may be given.
#: ``-ab`` short options; ``-c:`` one with an argument (attached or the next
#: word); ``-w::`` one with an optional attached argument; ``--long`` one
#: without argument, ``--long=`` with one, ``--long=?`` with an optional
#: ``=ARG``; ``NUM`` ``-5`` (a count). ``--help`` and ``--version`` go
#: with every program.
_PROGRAMS = {
    "basename": "-az -s: --multiple --suffix= --zero",
    "cat": (
        "-AbeEnstTuv --show-all --number-nonblank --show-ends --number --squeeze-blank"
        " --show-tabs --show-nonprinting"
    ),
    "cmp": "-blsv -i: -n: --print-bytes --ignore-initial= --verbose --bytes= --quiet --silent",
    "cut": (
        "-b: -c: -d: -f: -nsz --bytes= --characters= --delimiter= --fields= --complement"
        " --only-delimited --output-delimiter= --zero-terminated"
    ),
    # Not -l/--paginate: it runs pr.
    "diff": (
        "-qscuenyptTrNiEZbwBadv -C: -U: -W: -F: -x: -X: -S: -I: -L: --normal --brief"
        " --report-identical-files --context=? --unified=? --ed --rcs --side-by-side --width="
        " --left-column --suppress-common-lines --show-c-function --show-function-line="
        " --label= --expand-tabs --initial-tab --tabsize= --suppress-blank-empty --recursive"
        " --no-dereference --new-file --unidirectional-new-file --ignore-file-name-case"
        " --no-ignore-file-name-case --exclude= --exclude-from= --starting-file= --from-file="
        " --to-file= --ignore-case --ignore-tab-expansion --ignore-trailing-space"
        " --ignore-space-change --ignore-all-space --ignore-blank-lines --ignore-matching-lines="
        " --text --strip-trailing-cr --minimal --horizon-lines= --speed-large-files --color=?"
    ),
    # Not --sync: it flushes every file system.
    "df": (
        "-ahHiklPTv -B: -t: -x: --all --block-size= --human-readable --si --inodes --local"
        " --no-sync --output=? --portability --total --type= --print-type --exclude-type="
    ),
    "dirname": "-z --zero",
    "du": (
        "-0abcDHhkLlmPSsx -B: -d: -t: -X: --null --all --apparent-size --block-size= --bytes"
        " --total --dereference-args --max-depth= --files0-from= --human-readable --inodes"
        " --dereference --count-links --no-dereference --separate-dirs --si --summarize"
        " --threshold= --time=? --time-style= --exclude-from= --exclude= --one-file-system"
    ),
    "egrep": _GREP,
    "fgrep": _GREP,
    # Not -z/-Z (run decompressors), -p (sets file times), -C (writes), -m, -S, -P, -s.
    "file": (
        "-bikLhNn0rv -e: -F: -f: --brief --mime --mime-type --mime-encoding --apple"
        " --extension --keep-going --dereference --no-dereference --no-pad --no-buffer"
        " --print0 --raw --exclude= --exclude-quiet= --separator= --files-from="
    ),
    "grep": _GREP,
    "head": _HEAD_TAIL,
    "id": "-aZgGnruz --context --group --groups --name --real --user --zero",
    "ls": (
        "-aAbBcCdDfFgGhHiklLmnNopqQrRsStuUvxXZ1 -I: -T: -w: --all --almost-all --author"
        " --escape --block-size= --ignore-backups --color=? --directory --dired --classify=?"
        " --file-type --format= --full-time --group-directories-first --no-group"
        " --human-readable --si --dereference-command-line"
        " --dereference-command-line-symlink-to-dir --hide= --hyperlink=? --indicator-style="
        " --inode --ignore= --kibibytes --dereference --numeric-uid-gid --literal"
        " --hide-control-chars --show-control-chars --quote-name --quoting-style= --reverse"
        " --recursive --size --sort= --time= --time-style= --tabsize= --width= --context --zero"
    ),
    "md5sum": _SUMS,
    "nl": (
        "-p -b: -d: -f: -h: -i: -l: -n: -s: -v: -w: --body-numbering= --section-delimiter="
        " --footer-numbering= --header-numbering= --line-increment= --join-blank-lines="
        " --number-format= --no-renumber --number-separator= --starting-line-number="
        " --number-width="
    ),
    "od": (
        "-abcdfilosxv -A: -j: -N: -S: -t: -w:: --address-radix= --endian= --skip-bytes="
        " --read-bytes= --strings=? --format= --output-duplicates --width=? --traditional"
    ),
    "pwd": "-LP",
    "readlink": (
        "-femnqsvz --canonicalize --canonicalize-existing --canonicalize-missing --no-newline"
        " --quiet --silent --verbose --zero"
    ),
    "realpath": (
        "-emLPqsz --canonicalize-existing --canonicalize-missing --logical --physical --quiet"
        " --relative-to= --relative-base= --strip --no-symlinks --zero"
    ),
    # Not --pre/--pre-glob, -z/--search-zip (run programs), --hostname-bin, --hyperlink-format.
    "rg": (
        "-bscFlLHhinxUINv0oPpqSauVw. -A: -B: -C: -E: -e: -f: -g: -j: -m: -M: -r: -t: -T:"
        " --after-context= --before-context= --context= --binary --block-buffered"
        " --byte-offset --case-sensitive --color= --colors= --column --count --count-matches"
        " --crlf --encoding= --engine= --file= --files --files-with-matches"
        " --files-without-match --fixed-strings --follow --glob= --glob-case-insensitive"
        " --heading --hidden --iglob= --ignore-case --ignore-file= --ignore-file-case-insensitive"
        " --include-zero --invert-match --json --line-buffered --line-number --line-regexp"
        " --max-columns= --max-columns-preview --max-count= --max-depth= --max-filesize= --mmap"
        " --multiline --multiline-dotall --no-config --no-filename --no-heading --no-ignore"
        " --no-ignore-dot --no-ignore-exclude --no-ignore-files --no-ignore-global"
        " --no-ignore-messages --no-ignore-parent --no-ignore-vcs --no-line-number"
        " --no-messages --no-mmap --no-require-git --no-unicode --null --null-data"
        " --one-file-system --only-matching --passthru --pcre2 --pretty --quiet --regexp="
        " --replace= --smart-case --sort= --sortr= --stats --text --threads= --trim --type="
        " --type-list --type-not= --unrestricted --vimgrep --with-filename --word-regexp"
    ),
    "sha1sum": _SUMS,
    "sha256sum": _SUMS,
    "sha512sum": _SUMS,
    "stat": "-Lft -c: --dereference --file-system --cached= --format= --printf= --terse",
    # Not the follow modes (-f, -F, --follow, --retry, --pid, -s): they wait for writers.
    "tail": _HEAD_TAIL,
    "tr": "-cCdst --complement --delete --squeeze-repeats --truncate-set1",
    "uname": (
        "-asnrvmpio --all --kernel-name --nodename --kernel-release --kernel-version --machine"
        " --processor --hardware-platform --operating-system"
    ),
    "wc": "-cmlLw --bytes --chars --lines --files0-from= --max-line-length --words --total=",
    "which": "-a",
    "whoami": "",
}
#: Programs with no option at all that writes or runs anything, so a glob
#: expanding to a file named like an option does no harm.
_GLOB_SAFE = frozenset(
    {
        "basename", "cat", "cmp", "cut", "dirname", "du", "egrep", "fgrep", "grep", "head",
        "id", "ls", "md5sum", "nl", "od", "pwd", "readlink", "realpath", "sha1sum",
        "sha256sum", "sha512sum", "stat", "tail", "tr", "uname", "wc", "which", "whoami",
    }
)  # fmt: skip
#: Bash builtins that never parse their arguments as anything but text.
_ANY_ARGUMENTS = frozenset({"echo", "true", "false"})

#: ``find``'s expression: primaries without an argument, and with one.
_FIND_BARE = frozenset(
    {
        "-print", "-print0", "-ls", "-prune", "-quit", "-true", "-false", "-empty",
        "-readable", "-writable", "-executable", "-nouser", "-nogroup", "-depth", "-mount",
        "-xdev", "-noleaf", "-daystart", "-follow", "-ignore_readdir_race",
        "-noignore_readdir_race", "-warn", "-nowarn", "-not", "-and", "-or", "-a", "-o",
        "!", "(", ")", ",",
    }
)  # fmt: skip
_FIND_VALUED = frozenset(
    {
        "-name", "-iname", "-path", "-ipath", "-wholename", "-iwholename", "-regex", "-iregex",
        "-lname", "-ilname", "-type", "-xtype", "-size", "-perm", "-user", "-group", "-uid",
        "-gid", "-links", "-inum", "-mtime", "-mmin", "-atime", "-amin", "-ctime", "-cmin",
        "-newer", "-anewer", "-cnewer", "-samefile", "-used", "-fstype", "-maxdepth",
        "-mindepth", "-regextype", "-printf",
    }
)  # fmt: skip
_FIND_NEWER_XY = re.compile(r"-newer[aBcm][aBcmt]")
_FIND_LEADING = frozenset({"-H", "-L", "-P", "--help", "--version"})

_UNSAFE_UNQUOTED = frozenset("$`\\<>(){}#!")
_GLOB = frozenset("*?[")
_DIGITS = frozenset("0123456789")


@attrs.frozen
class _Options:
    """The options one program may be given and still only read."""

    flags: frozenset[str]  # short options without an argument
    valued: frozenset[str]  # short options with an argument
    optional: frozenset[str]  # short options with an optional, attached argument
    longs: Mapping[str, str]  # long option -> "" (no argument), "=" (one), "?" (optional)
    counts: bool  # ``-5`` means a count
    glob_safe: bool

    @classmethod
    def parse(cls, name: str, spec: str) -> _Options:
        """Read one entry of ``_PROGRAMS``."""
        letters: dict[str, set[str]] = {"": set(), ":": set(), "::": set()}
        longs = {"--help": "", "--version": ""}
        for token in spec.split():
            if token.startswith("--"):
                option, eq, optional = token.partition("=")
                longs[option] = "?" if optional else eq
            elif token.startswith("-"):
                for letter, colons in re.findall(r"([^:])(:{0,2})", token[1:]):
                    letters[colons].add(letter)
        return cls(
            flags=frozenset(letters[""]),
            valued=frozenset(letters[":"]),
            optional=frozenset(letters["::"]),
            longs=longs,
            counts="NUM" in spec.split(),
            glob_safe=name in _GLOB_SAFE,
        )


_OPTIONS = {name: _Options.parse(name, spec) for name, spec in _PROGRAMS.items()}


def classify_arguments(arguments: Mapping[str, Any]) -> SideEffects:
    """Classify a ``shell`` call by its ``command`` argument."""
    return classify_shell_command(str(arguments.get("command", "")))


def classify_shell_command(command: str) -> SideEffects:
    """Return ``READ`` if ``command`` only reads, else ``EXECUTE``.

    An allow-list: ``READ`` only when the command is plain words and quotes
    joined by ``;``, ``&&``, ``||`` or ``|``, each command a program from a
    fixed read-only list (``ls``, ``cat``, ``grep``, ``find``, ...) given
    only options known not to write or run programs (so not ``find -exec``,
    ``rg --pre``, ``diff --paginate`` or ``printf -v``), long options spelled
    out in full. Variables, command substitution, redirection, subshells,
    background jobs, assignments, unknown programs and options, and globs
    that could expand to a risky option all give ``EXECUTE``.
    """
    segments = _scan(command)
    if not segments:
        return SideEffects.EXECUTE
    for words in segments:
        if not words or not _read_only_command(words):
            return SideEffects.EXECUTE
    return SideEffects.READ


def _read_only_command(words: list[_Word]) -> bool:
    (name, glob), args = words[0], words[1:]
    if glob:
        return False
    if name in _ANY_ARGUMENTS:
        return True
    if name == "printf":
        # bash's printf takes one option, before the format: -v NAME assigns.
        return not args or not (args[0][1] or args[0][0].startswith("-"))
    if name == "find":
        return _find_reads(args)
    options = _OPTIONS.get(name)
    return options is not None and _options_read(options, args)


def _options_read(options: _Options, args: Sequence[_Word]) -> bool:
    """Whether every option in ``args`` is on the list, parsed as getopt parses them."""
    if not options.glob_safe and any(glob for _, glob in args):
        return False
    i = 0
    while i < len(args):
        text, glob = args[i]
        i += 1
        if text == "--":
            return True
        if glob or len(text) < 2 or not text.startswith("-"):
            continue  # an operand (getopt permutes: options may follow it)
        long = text[1] == "-"
        takes_next = _long_option(options, text) if long else _short_options(options, text)
        if takes_next is None:
            return False
        if takes_next:
            if i == len(args) or args[i][0].startswith("-"):
                return False
            i += 1
    return True


def _long_option(options: _Options, text: str) -> bool | None:
    """``None``: not allowed; else whether its argument is the next word."""
    option, eq, _ = text.partition("=")
    kind = options.longs.get(option)
    if kind is None or (eq and not kind):
        return None
    return not eq and kind == "="


def _short_options(options: _Options, text: str) -> bool | None:
    """``None``: a letter is not allowed; else whether the last one's argument is the next word."""
    body = text[1:]
    if options.counts and set(body) <= _DIGITS:
        return False
    for i, letter in enumerate(body):
        if letter in options.valued:
            return i + 1 == len(body)
        if letter in options.optional:
            return False
        if letter not in options.flags:
            return None
    return False


def _find_reads(args: Sequence[_Word]) -> bool:
    """Whether ``find``'s options, starting points and expression all only read."""
    if any(glob for _, glob in args):
        return False
    words = [text for text, _ in args]
    i, n = 0, len(words)
    while i < n and words[i] in _FIND_LEADING:
        i += 1
    while i < n and not _find_expression_starts(words[i]):
        i += 1  # a starting point
    while i < n:
        primary = words[i]
        if primary in _FIND_VALUED or _FIND_NEWER_XY.fullmatch(primary):
            i += 2
        elif primary in _FIND_BARE:
            i += 1
        else:
            return False
    return True


def _find_expression_starts(word: str) -> bool:
    return (word.startswith("-") and word != "-") or word in ("!", "(", ")", ",")


def _scan(command: str) -> list[list[_Word]] | None:
    """Split into commands of words; ``None`` if not understood."""
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
        self.segments: list[list[_Word]] = [[]]
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
