"""Every command the shell classifier calls ``READ``, run for real, only reads.

Commands come from a grammar of shell constructs: programs on the read-only
list and off it, builtins, options allowed and risky (short, bundled, long,
``--long=value``, abbreviated), quoting (single, double, ``$'...'``, a word
quoted in part, backslashes), expansions (``$x``, ``${x}``, ``$(...)``,
backticks, ``$((...))``, arithmetic in an array subscript), redirections,
separators, assignments, subshells, groups, comments and globs, run from the
scratch tree or from directories whose files are named like risky options
(``--paginate``, ``--pre=touch``, ``-v PATH bin``, ``-delete``, ``-z``), where a
glob expands into those options. Most commands are drawn from the read-only
constructs, so that most verdicts are ``READ``; the rest from the whole
grammar.

Every ``READ`` command runs in the read-only sandbox of ``stress/sandbox.py``
(namespaces, every mount read-only, no capabilities, ``strace -f``). The
property: it tries no write (no ``EROFS``, no open for writing, no call that
changes a file or flushes a file system), starts no program but bash running
it and programs on the read-only list found on ``PATH``, and the scratch tree
is unchanged afterwards. Commands run in batches, half in each of two
sandboxes at once. The short profile runs at least 1,000 commands, the long
one (``STRESS=long``) at least 100,000.
"""

from __future__ import annotations

import functools
import gzip
import os
import shutil
from typing import TYPE_CHECKING, TypeVar

import attrs
import pytest
import trio
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from stress.conftest import stress_profile
from stress.sandbox import PATH, READ_ONLY_PROGRAMS, Sandbox, open_sandboxes, unavailable
from toolexec import SideEffects
from toolexec._tools._shell_classify import _FIND_BARE, _FIND_VALUED, _OPTIONS
from toolexec.tools import classify_shell_command

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path

    from stress.sandbox import Violation

# Slow (tests/README.md): commands run in a read-only sandbox.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        (reason := unavailable()) is not None, reason=f"no read-only sandbox: {reason}"
    ),
]

T = TypeVar("T")
LONG = stress_profile() == "stress-long"
BATCH = 40  # commands drawn per example, about 45% of them READ
MIN_RUN = 100_000 if LONG else 600  # distinct READ commands that must have run
EXAMPLES = 1_000 if LONG else 60  # per round; rounds run until MIN_RUN is reached
MAX_ROUNDS = 20 if LONG else 3

# -- the scratch tree -------------------------------------------------------------------

#: "hello\n" compressed by zstd: ``file -z`` runs ``zstd`` to look inside.
_ZSTD = bytes.fromhex("28b52ffd045831000068656c6c6f0a5388bd91")
_FAKE_PROGRAM = "#!/bin/sh\necho a program found through a changed PATH\n"

#: Directories whose file names a glob turns into risky options.
INJECTIONS = {
    "inject/diff": ("diff", ["--paginate", "a", "b"]),  # diff * is diff --paginate a b
    "inject/rg": ("rg", ["--pre=touch", "x.txt"]),  # rg x * is rg x --pre=touch x.txt
    "inject/file": ("file", ["-z", "y.zst"]),  # file * is file -z y.zst (runs zstd)
    "inject/find": ("find", ["-delete"]),  # find * is find -delete
    "inject/printf": ("printf", ["-v", "PATH"]),  # with bin/: printf *; ls is PATH=bin; ls
}
_DIRECTORIES = sorted(INJECTIONS)


def _build_scratch(root: Path) -> None:
    files = {
        "a.txt": "alpha\nbeta\nfoo bar\n",
        "b.txt": "alpha\ngamma\n",
        "notes.md": "# notes\nfoo\n",
        "src/main.py": "import util\nprint('foo')\n",
        "src/util.py": "def foo():\n    return 1\n",
        "sums.md5": "0" * 32 + "  a.txt\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (root / "data.gz").write_bytes(gzip.compress(b"foo in a gzip file\n"))
    (root / "data.zst").write_bytes(_ZSTD)
    (root / "link").symlink_to("a.txt")
    for directory, (_, names) in INJECTIONS.items():
        (root / directory).mkdir(parents=True)
        for name in names:
            content = _ZSTD if name.endswith(".zst") else f"foo {name}\n".encode()
            (root / directory / name).write_bytes(content)
    for bin_dir in (root / "bin", root / "inject/printf/bin"):
        bin_dir.mkdir(exist_ok=True)
        for program in READ_ONLY_PROGRAMS:  # whatever runs next after PATH=bin runs from here
            (bin_dir / program).write_text(_FAKE_PROGRAM)
            (bin_dir / program).chmod(0o755)


def _snapshot(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every path under ``root`` with its mode, size and modification time."""
    seen = {}
    for directory, dirs, files in os.walk(root):
        for name in [".", *dirs, *files]:
            path = os.path.join(directory, name)
            st_ = os.lstat(path)
            seen[os.path.relpath(path, root)] = (st_.st_mode, st_.st_size, st_.st_mtime_ns)
    return seen


# -- the grammar --------------------------------------------------------------------------

_FILES = ["a.txt", "b.txt", "notes.md", "src/main.py", "data.gz", "data.zst", "link", "sums.md5"]
_OPERANDS = [
    *_FILES, "src", ".", "-", "missing", "/etc/hostname", "/dev/null", "~", "~/a.txt", "foo",
    "alpha", "a|b", "%s\\n", "PATH", "bin", "x=1", "",
]  # fmt: skip
_PATTERNS = ["foo", "alpha", "a|b", ".", "^b"]
#: Operands a program needs to do much: files to compare, look into or read.
_NEEDS = {
    "diff": (2, _FILES), "cmp": (2, _FILES), "file": (1, ["data.zst", "data.gz", "a.txt"]),
    "head": (1, _FILES), "tail": (1, _FILES), "cat": (1, _FILES), "od": (1, _FILES),
    "rg": (1, ["data.gz", "data.zst", ".", "src"]),
}  # fmt: skip
_EXACT = {"diff", "cmp"}  # extra operands make these fail before they do anything
_GLOBS = ["*", "*.txt", "-*", "?.txt", "[ab].txt", "src/*.py", "*.gz", "*.zst", "*/"]
_EXPANSIONS = [
    "$x", "${x}", "$(touch pwned)", "`touch pwned`", "$((1+2))", "$HOME", "$'\\x2d'v",
    "a[$(touch pwned)]", "$((a[$(touch pwned)]))", "${x:-$(touch pwned)}", "$PATH",
    '"$(touch pwned)"', '"`touch pwned`"', '"${x:-$(touch pwned)}"', '"$x"', "'$(touch pwned)'",
    "$'$(touch pwned)'", '"$((a[$(touch pwned)]))"', "$'-F'",
]  # fmt: skip
#: Option arguments: mostly numbers, which most options take, and some words.
_VALUES = ["1", "2", "3", "1", "2", "0", "a.txt", "*.txt", "never", "%p", "py", "src"]
_RISKY_VALUES = [*_VALUES, "-", "-1", "--pre=touch", "-exec"]
#: Arguments for find's primaries that make sense to them.
_FIND_VALUES = {
    "-type": ["f", "d", "l"], "-xtype": ["f", "d"], "-size": ["-1k", "+0", "1"],
    "-perm": ["-u+r", "644", "/u+x"], "-user": ["root", "0"], "-group": ["root"],
    "-maxdepth": ["1", "2"], "-mindepth": ["0", "1"], "-regextype": ["posix-extended"],
    "-printf": ["'%p\\n'", "%f"], "-regex": ["'.*py'"], "-iregex": ["'.*PY'"],
    "-newer": ["a.txt"], "-anewer": ["a.txt"], "-cnewer": ["a.txt"], "-samefile": ["a.txt"],
    "-newermt": ["2020-01-01"], "-fstype": ["ext4", "overlay"],
}  # fmt: skip
_ASSIGNMENTS = ["A=1", "PATH=bin", "a[$(touch pwned)]=1", "LC_ALL=C", "BASH_ENV=bin/ls"]
_REDIRECTIONS = [
    ">out", "> out", ">> out", "< a.txt", "2> err", "&> out", "<<< x", "2>&1", ">| out",
    "<> a.txt", "<(ls)", ">(cat)", "<< EOF",
]  # fmt: skip
_WRAPPERS = ["( {} )", "{{ {}; }}", "echo $({})", "! {}", "time {}", "{} &", "echo `{}`"]
_SAFE_SEPARATORS = ["; ", " && ", " || ", " | ", ";", "&&", "|"]
_RISKY_SEPARATORS = [" & ", "\n", " |& ", ";; ", " # ", "&", ";\n"]

#: Simple commands off the list: builtins that assign, evaluate or change the shell,
#: and programs that write or run others, each in a form that would do it.
_OFF_THE_LIST = [
    "read x", "declare x=1", "declare -a 'a[$(touch pwned)]'", "typeset x", "local x",
    "let 'a[$(touch pwned)]'", "let x=1", "export PATH=bin", "eval 'touch pwned'",
    "source bin/ls", ". bin/ls", "cd bin", "exec touch pwned", "command touch pwned",
    "builtin eval 'touch pwned'", "type ls", "hash -p bin/ls ls", "set -o", "shopt -s extglob",
    "alias ls=touch", "trap 'touch pwned' EXIT", "ulimit -n 64", "umask 0",
    "test -v 'a[$(touch pwned)]'", "[ -v 'a[$(touch pwned)]' ]", "[[ 'a[$(touch pwned)]' -eq 1 ]]",
    "unset 'a[$(touch pwned)]'", "mapfile x", "readarray x", "getopts a x", "wait",
    "enable -n echo", "coproc touch pwned", "time touch pwned", "! touch pwned",
    "(( a[$(touch pwned)] ))", "printf -v 'a[$(touch pwned)]' %s 1", "printf -v PATH %s bin",
    "touch pwned", "rm -f a.txt", "sort -o out a.txt", "sort -S 1 -m a.txt b.txt",
    "sh -c 'touch pwned'", "bash -c 'touch pwned'", "env touch pwned", "xargs touch",
    "tee out", "sed -i s/a/b/ a.txt", "awk 'BEGIN{system(\"touch pwned\")}'", "uniq a.txt out",
    "mkdir pwned", "cp a.txt out", "mv a.txt out", "ln -s a.txt pwned", "tac a.txt",
    "nice touch pwned", "timeout 5 touch pwned", "gzip -k a.txt", "pr a.txt", "/bin/ls",
    "./bin/ls", "bin/ls", "l? -l", "l* -l", "/usr/bin/cat a.txt", "gzip -dc data.gz",
]  # fmt: skip

#: Options that write or run programs, in the forms that reach them.
RISKY = {
    "rg": [
        ["--pre", "touch"], ["--pre=touch"], ["--pre-glob", "*"], ["-z"], ["--search-zip"],
        ["-zn"], ["-nz"], ["--hostname-bin=touch"], ["--pr", "touch"], ["-e", "--pre=touch"],
    ],
    "diff": [["-l"], ["--paginate"], ["-ul"], ["--pag"], ["--pagina"], ["-lu"]],
    "file": [
        ["-z"], ["-Z"], ["--uncompress"], ["-bz"], ["-p"], ["--preserve-date"],
        ["-C", "-m", "out"], ["-S"], ["--uncomp"], ["--uncompress-noreport"], ["-zb"],
    ],
    "df": [["--sync"], ["--sy"], ["--syn"]],
    "tail": [["-f"], ["-F"], ["--follow"], ["--pid=1"], ["-5f"], ["-s", "1"]],
    "find": [
        ["-exec", "touch", "pwned", "';'"], ["-execdir", "touch", "pwned", "';'"],
        ["-ok", "touch", "pwned", "';'"], ["-okdir", "touch", "pwned", "';'"], ["-delete"],
        ["-fprint", "out"], ["-fprint0", "out"], ["-fprintf", "out", "%p"], ["-fls", "out"],
        ["-D", "exec"], ["-ex'ec'", "touch", "pwned", "';'"], ["-O3"],
    ],
    "printf": [
        ["-v", "'a[$(touch pwned)]'", "%s", "1"], ["-v", "'a[$(touch pwned)]'", "x"],
        ["-v", "PATH", "%s", "bin"], ["-vPATH", "bin"], ["-v", "x", "1"], ["--", "%s"],
    ],
    "grep": [["--colo=never"], ["-e", "-x"], ["--exclude-d=x"], ["-X", "egrep"]],
    "ls": [["--al"], ["--colo=always"], ["-W"]],
    "sort": [["-o", "out"], ["--compress-program=touch"], ["-T", "."], ["-S", "1"]],
}  # fmt: skip
_PROGRAM_LIST = sorted(READ_ONLY_PROGRAMS)
_RISKY_PROGRAMS = sorted(READ_ONLY_PROGRAMS & RISKY.keys())  # drawn more often
_PRINTF_FORMATS = ["'%s\\n'", "%d", "%q", "x", "'%(%s)T'", "'%b'", "%%"]
_FIND_STARTS = [".", "src", "-", "missing", "~", "-L", "-H", "-P"]


_integers = functools.cache(st.integers)  # building a strategy costs more than drawing from it


class _Drawer:
    """``draw`` with the grammar's helpers; every choice shrinks toward the plain one."""

    def __init__(self, draw: Callable[[st.SearchStrategy[int]], int]) -> None:
        self._draw = draw

    def chance(self, percent: int) -> bool:
        return self.number(0, 99) >= 100 - percent

    def pick(self, items: Sequence[T]) -> T:
        return items[self.number(0, len(items) - 1)]

    def number(self, low: int, high: int) -> int:
        return self._draw(_integers(low, high))

    def quote(self, word: str, often: bool) -> str:
        """Shell text for ``word``, quoted in one of bash's ways (or not at all)."""
        if not self.chance(35 if often else 15):
            return word
        style = self.number(0, 5)
        if style == 0 or (style == 1 and '"' in word):
            return "'" + word + "'"
        if style == 1:
            return '"' + word + '"'
        if style == 2:
            return "$'" + word + "'"
        if style == 3 and len(word) > 1:
            k = self.number(1, len(word) - 1)
            return word[:k] + "'" + word[k:] + "'"
        if style == 4:
            return "\\" + word
        return "'" + word + "'" if "'" not in word else word


#: The constructs a command may draw from the whole grammar (each read-only otherwise).
FEATURES = [
    "options", "globs", "expansions", "quoting", "programs", "assignments", "redirections",
    "wrappers", "separators",
]  # fmt: skip


@attrs.frozen
class _Mode:
    """How one command is drawn."""

    risky: frozenset[str]  # which of FEATURES this command draws from the whole grammar
    target: str | None  # the program whose options the directory's file names spell


def _short_options(d: _Drawer, name: str, mode: _Mode) -> list[str]:
    options = _OPTIONS[name]
    flags, valued = sorted(options.flags), sorted(options.valued | options.optional)
    if flags and (not valued or d.chance(70)):
        bundle = "".join(d.pick(flags) for _ in range(d.number(1, 3)))
        return ["-" + bundle]
    if not valued:
        return ["-" + d.pick(["5", "1"])] if options.counts else []
    letter, value = d.pick(valued), d.pick(_RISKY_VALUES if "options" in mode.risky else _VALUES)
    prefix = "-" + (d.pick(flags) if flags and d.chance(30) else "")
    return [prefix + letter + value] if d.chance(40) else [prefix + letter, value]


def _long_option(d: _Drawer, name: str, mode: _Mode) -> list[str]:
    longs = _OPTIONS[name].longs
    option = d.pick(sorted(longs))
    kind, value = longs[option], d.pick(_RISKY_VALUES if "options" in mode.risky else _VALUES)
    if d.chance(15 if "options" in mode.risky else 2) and len(option) > 4:  # getopt would expand it
        option = option[: d.number(3, len(option) - 1)]
    if kind == "=" and d.chance(50):
        return [option, value]
    if kind or ("options" in mode.risky and d.chance(10)):
        return [f"{option}={value}"] if kind != "?" or d.chance(50) else [option]
    return [option]


def _option(d: _Drawer, name: str, mode: _Mode) -> list[str]:
    if name in RISKY and d.chance(40 if "options" in mode.risky else 15):
        return _risky(d, name)
    if name not in _OPTIONS:
        return [d.pick(["-l", "-a", "-v", "-n", "--help", "-x", "--", "-5"])]
    if d.chance(50):
        return _short_options(d, name, mode)
    return _long_option(d, name, mode)


def _risky(d: _Drawer, name: str) -> list[str]:
    return list(RISKY[name][d.number(0, len(RISKY[name]) - 1)])


def _glob(d: _Drawer, mode: _Mode) -> str:
    return "*" if mode.target and d.chance(60) else d.pick(_GLOBS)


def _operand(d: _Drawer, mode: _Mode) -> str:
    if d.chance(40 if mode.target or "globs" in mode.risky else 8):
        return _glob(d, mode)
    if "expansions" in mode.risky and d.chance(40):
        return d.pick(_EXPANSIONS)
    return d.pick(_OPERANDS)


def _arguments(d: _Drawer, name: str, mode: _Mode) -> list[str]:
    words = [d.pick(_PATTERNS)] if name in ("rg", "grep", "egrep", "fgrep") else []
    for _ in range(d.number(0, 4)):
        if d.chance(100 if name in _EXACT and not mode.risky else 60):
            words += _option(d, name, mode)
        else:
            words.append(_operand(d, mode))
        if d.chance(3):
            words.append("--")
    if mode.target == name:  # the glob alone, spelling options from the file names
        return [*words, "*"] if d.chance(60) else words
    count, files = _NEEDS.get(name, (0, _FILES))
    return words + [d.pick(files) for _ in range(count)]


def _find_arguments(d: _Drawer, mode: _Mode) -> list[str]:
    words = [d.pick(_FIND_STARTS) for _ in range(d.number(0, 2))]
    bare = [*sorted(_FIND_BARE - {"(", ")", "!"}), "'('", "')'", "'!'"]
    valued = [*sorted(_FIND_VALUED), "-newermt", "-neweraa"]
    if mode.target == "find" and d.chance(50):
        words.insert(0, "*")
    for _ in range(d.number(0, 4)):
        if d.chance(40 if "options" in mode.risky else 10):
            words += _risky(d, "find")
        elif d.chance(40):
            words.append(d.pick(bare))
        else:
            primary = d.pick(valued)
            words += [primary, d.pick(_FIND_VALUES.get(primary, ["'*.py'", "a.txt", "1"]))]
    if d.chance(30 if "globs" in mode.risky else 2):
        words.append(_glob(d, mode))
    return words


def _printf_arguments(d: _Drawer, mode: _Mode) -> list[str]:
    if d.chance(40 if "options" in mode.risky else 15):
        words = _risky(d, "printf")
    elif d.chance(60 if mode.target == "printf" else 10):
        words = [_glob(d, mode)]
    else:
        words = [d.pick(_PRINTF_FORMATS)]
    return words + [_operand(d, mode) for _ in range(d.number(0, 3))]


def _program(d: _Drawer, mode: _Mode, first: bool) -> tuple[str, list[str]]:
    if "programs" in mode.risky and d.chance(50):
        return d.pick(_OFF_THE_LIST), []
    if mode.target and first and d.chance(60):
        name = mode.target
    else:
        name = d.pick(_RISKY_PROGRAMS if d.chance(40) else _PROGRAM_LIST)
    if name == "find":
        return name, _find_arguments(d, mode)
    if name == "printf":
        return name, _printf_arguments(d, mode)
    return name, _arguments(d, name, mode)


def _simple_command(d: _Drawer, mode: _Mode, first: bool = False) -> str:
    name, arguments = _program(d, mode, first)
    words = [d.pick(_ASSIGNMENTS)] if "assignments" in mode.risky and d.chance(50) else []
    words += [d.quote(word, "quoting" in mode.risky) for word in [name, *arguments]]
    if "redirections" in mode.risky and d.chance(50):
        words.append(d.pick(_REDIRECTIONS))
    text = " ".join(words)
    if "wrappers" in mode.risky and d.chance(50):
        text = d.pick(_WRAPPERS).format(text)
    return text


@st.composite
def commands(draw: Callable[[st.SearchStrategy[int]], int]) -> tuple[str, str]:
    """A directory to run in and a command line from the grammar."""
    d = _Drawer(draw)
    directory = d.pick(_DIRECTORIES) if d.chance(15) else "."
    risky = set()
    if d.chance(35):  # one or two constructs from the whole grammar, the rest read-only
        risky = {d.pick(FEATURES) for _ in range(d.number(1, 2))}
    mode = _Mode(frozenset(risky), INJECTIONS.get(directory, (None,))[0])
    if d.chance(6):  # a builtin or program off the list, alone
        return directory, d.pick(_OFF_THE_LIST)
    text = _simple_command(d, mode, first=True)
    for _ in range(d.number(1 if mode.target == "printf" else 0, 2)):  # printf *; ls
        separators = (
            _RISKY_SEPARATORS if "separators" in mode.risky and d.chance(50) else _SAFE_SEPARATORS
        )
        text += d.pick(separators)
        text += _simple_command(d, mode)
    return directory, text


# -- the property -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("classifier")
    _build_scratch(root)
    return root


async def _run_halves(sandboxes: list[Sandbox], batch: list[tuple[str, str]]) -> list[Violation]:
    """Run the batch split across the sandboxes at once."""
    found: list[Violation] = []

    async def run(sandbox: Sandbox, part: list[tuple[str, str]]) -> None:
        if part:
            found.extend(await sandbox.run(part))

    async with trio.open_nursery() as nursery:
        for i, sandbox in enumerate(sandboxes):
            nursery.start_soon(run, sandbox, batch[i :: len(sandboxes)])
    return found


async def test_read_verdicts_neither_write_nor_run_other_programs(scratch: Path) -> None:
    before = _snapshot(scratch)
    seen: set[tuple[str, str]] = set()  # READ commands run and passed: each runs once
    generated = 0

    # No shrinking: the message names each command and what it did, and a
    # shrink step is a sandbox run.
    @settings(
        settings.get_profile(stress_profile()),
        max_examples=EXAMPLES,
        phases=[Phase.explicit, Phase.reuse, Phase.generate],
    )
    @given(batch=st.lists(commands(), min_size=BATCH, max_size=BATCH, unique=True))
    def check(batch: list[tuple[str, str]]) -> None:
        nonlocal generated
        generated += len(batch)
        reads = [
            (directory, command)
            for directory, command in batch
            if (directory, command) not in seen
            and classify_shell_command(command) is SideEffects.READ
        ]
        violations = trio.from_thread.run(_run_halves, sandboxes, reads)
        assert not violations, "classified READ, but:\n" + "\n".join(map(str, violations))
        assert _snapshot(scratch) == before, "the scratch tree changed"
        seen.update(reads)

    start = trio.current_time()
    async with open_sandboxes(scratch, 2) as sandboxes:
        for _ in range(MAX_ROUNDS):
            await trio.to_thread.run_sync(check)
            if len(seen) >= MIN_RUN:
                break
    elapsed = trio.current_time() - start
    print(f"\nclassifier property: {len(seen)} distinct READ commands run in the sandbox")
    print(f"  (of {generated} generated) in {elapsed:.0f} s")
    missing = sorted(p for p in READ_ONLY_PROGRAMS if shutil.which(p, path=PATH) is None)
    if missing:  # their commands ran, and failed as "command not found"
        print(f"  not on this machine, so never run for real: {', '.join(missing)}")
    assert len(seen) >= MIN_RUN


# -- the oracle sees what it must ------------------------------------------------------------

#: Commands that write or run a program off the list, each by a different route.
CAUGHT = [
    ("touch pwned", "utimensat"),
    ("printf -v 'a[$(touch pwned)]' %s 1", "runs /usr/bin/touch"),
    ("printf -v PATH %s bin; ls", "runs bin/ls"),
    ("rg -z foo data.gz", "runs /usr/bin/gzip"),
    ("diff -l a.txt b.txt", "runs /usr/bin/pr"),
    ("file -z data.zst", "zstd"),
    ("file -p a.txt", "EROFS"),
    ("df --sync .", "sync"),
    ("find . -fprint out", "O_CREAT"),
    ("sort -m --batch-size=2 a.txt b.txt a.txt", "O_CREAT"),
]


def _caught_cases() -> list[object]:
    """``CAUGHT`` as cases; one whose program this machine lacks skips, saying so."""
    cases: list[object] = []
    for command, expected in CAUGHT:
        program = command.split()[0]
        missing = program in READ_ONLY_PROGRAMS and shutil.which(program, path=PATH) is None
        reason = f"this machine has no {program} on {PATH}: the sandbox cannot run it"
        marks = [pytest.mark.skip(reason=reason)] if missing else []
        cases.append(pytest.param(command, expected, id=command, marks=marks))
    return cases


@pytest.mark.parametrize(("command", "expected"), _caught_cases())
async def test_the_sandbox_catches_writes_and_other_programs(
    scratch: Path, command: str, expected: str
) -> None:
    before = _snapshot(scratch)
    async with open_sandboxes(scratch, 1) as (sandbox,):
        violations = await sandbox.run([(".", command)])
    assert violations, f"{command!r} was not caught"
    assert any(expected in f"{v.what} {v.line}" for v in violations), violations
    assert _snapshot(scratch) == before


async def test_the_sandbox_stays_quiet_for_reads_and_catches_injected_globs(scratch: Path) -> None:
    before = _snapshot(scratch)
    async with open_sandboxes(scratch, 1) as (sandbox,):
        quiet = ["ls -la", "grep -rn foo .", "cat a.txt | wc -l", "find . -name '*.py'"]
        assert await sandbox.run([(".", c) for c in quiet]) == []
    for directory, command in [("inject/diff", "diff *"), ("inject/printf", "printf *; ls")]:
        async with open_sandboxes(scratch, 1) as (sandbox,):
            assert await sandbox.run([(directory, command)]), command
    assert _snapshot(scratch) == before
